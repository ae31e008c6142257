// Gives a background thread time to act on something it must NOT act on yet (a delayed item on
// the fake clock, a drain that must wait); a negative check can pass spuriously only when the
// machine is slower than this, never fail spuriously. Waiting for something that must happen uses
// testenv::Eventually (test/testenv/eventually.h).
#pragma once

#include <chrono>
#include <thread>

namespace hyperslice::kube::testing {

inline void Settle() { std::this_thread::sleep_for(std::chrono::milliseconds(120)); }

}  // namespace hyperslice::kube::testing
