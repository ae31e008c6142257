// A Clock whose time moves only when Advance() is called. Waiters blocked in WaitUntil() are woken
// on every Advance so they can re-check their deadlines. Thread-safe.
#pragma once

#include <atomic>
#include <set>

#include "src/base/clock.h"

namespace hyperslice {

class FakeClock final : public Clock {
 public:
  TimePoint Now() const override {
    std::lock_guard lock(mu_);
    return now_;
  }
  void Advance(Duration d) {
    std::set<std::condition_variable*> waiters;
    {
      std::lock_guard lock(mu_);
      now_ += d;
      waiters = cvs_;
    }
    for (auto* cv : waiters) cv->notify_all();
  }
  bool WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 TimePoint deadline) override {
    if (Now() >= deadline) return true;
    // Real time bounds the wait only so a missed notify cannot hang a test forever.
    cv.wait_for(lock, std::chrono::milliseconds(50));
    return Now() >= deadline;
  }
  void Register(std::condition_variable* cv) override {
    std::lock_guard lock(mu_);
    cvs_.insert(cv);
  }
  void Unregister(std::condition_variable* cv) override {
    std::lock_guard lock(mu_);
    cvs_.erase(cv);
  }

 private:
  mutable std::mutex mu_;
  TimePoint now_{std::chrono::hours(1000)};
  std::set<std::condition_variable*> cvs_;
};

}  // namespace hyperslice
