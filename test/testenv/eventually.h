// Waiting in tests: polls `cond` until it holds or `timeout` passes. The one helper for this (a
// test waits for the signal it asserts on, never for a fixed time). Header-only: unit tests use it
// without linking hs_testenv. The timeout only bounds how long a failing test waits (a negative
// check names its own, short, window); `poll` only bounds the latency of noticing.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace hyperslice::testenv {

inline bool Eventually(const std::function<bool()>& cond,
                       std::chrono::milliseconds timeout = std::chrono::seconds(60),
                       std::chrono::milliseconds poll = std::chrono::milliseconds(50)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace hyperslice::testenv
