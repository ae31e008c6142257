#include "src/base/clock.h"

namespace hyperslice {
namespace {

class SteadyClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  bool WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 TimePoint deadline) override {
    return cv.wait_until(lock, deadline) == std::cv_status::timeout ||
           std::chrono::steady_clock::now() >= deadline;
  }
};

}  // namespace

Clock& RealClock() {
  static SteadyClock clock;
  return clock;
}

WallClock::WallClock(const Clock* clock)
    : clock_(clock == &RealClock() ? nullptr : clock),
      wall_anchor_(std::chrono::system_clock::now()),
      clock_anchor_(clock_ != nullptr ? clock_->Now() : Clock::TimePoint()) {}

std::chrono::system_clock::time_point WallClock::Now() const {
  if (clock_ == nullptr) return std::chrono::system_clock::now();
  return wall_anchor_ + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            clock_->Now() - clock_anchor_);
}

}  // namespace hyperslice
