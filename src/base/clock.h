// Time as a seam: code that waits or backs off takes a Clock so tests can drive time by hand
// (LevelDB's Env idea, narrowed to time).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace hyperslice {

class Clock {
 public:
  using Duration = std::chrono::steady_clock::duration;
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
  // Blocks on `cv` (with `lock` held on entry and exit) until `deadline` by this clock or a notify.
  // Returns true when the deadline has passed. A fake clock wakes such waits when it is advanced.
  virtual bool WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                         TimePoint deadline) = 0;
  // Wakes waiters that may now be due (used by FakeClock::Advance; a no-op for the real clock).
  virtual void Register(std::condition_variable*) {}
  virtual void Unregister(std::condition_variable*) {}
};

// Process-wide real clock (std::chrono::steady_clock).
Clock& RealClock();

// Wall time as a Clock moves it, for timestamps that are written (to a status, a Secret) and read
// back to decide (a backoff, an expiry): std::chrono::system_clock::now() on the real clock; on
// another (a test's FakeClock) the wall time at construction plus how far that clock has moved
// since, so a test advances both at once.
class WallClock {
 public:
  explicit WallClock(const Clock* clock = nullptr);  // nullptr: RealClock()
  std::chrono::system_clock::time_point Now() const;

 private:
  const Clock* clock_;  // nullptr when real
  std::chrono::system_clock::time_point wall_anchor_;
  Clock::TimePoint clock_anchor_;
};

}  // namespace hyperslice
