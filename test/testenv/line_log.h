// Lines recorded by callbacks on other threads (event handlers, reflector sinks), waited for by
// count: a test asserts on what it saw, in order, without sleeping. Header-only: unit tests use it
// without linking hs_testenv.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace hyperslice::testenv {

class LineLog {
 public:
  void Push(std::string line) {
    std::lock_guard lock(mu_);
    lines_.push_back(std::move(line));
    cv_.notify_all();
  }
  std::vector<std::string> lines() {
    std::lock_guard lock(mu_);
    return lines_;
  }
  // True once at least `n` lines are there; false when `timeout` passes first.
  bool WaitFor(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return lines_.size() >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
};

}  // namespace hyperslice::testenv
