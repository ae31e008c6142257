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

}  // namespace hyperslice
