// Polls a condition (real time) for tests that wait on background threads. Never used to assert
// a duration: it only bounds how long a test waits before failing.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace hyperslice::kube::testing {

inline bool WaitFor(const std::function<bool()>& pred,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Gives a background thread time to act on something it must NOT act on yet; a negative check
// can pass spuriously only when the machine is slower than this, never fail spuriously.
inline void Settle() { std::this_thread::sleep_for(std::chrono::milliseconds(120)); }

}  // namespace hyperslice::kube::testing
