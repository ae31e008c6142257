// When a GCE child controller looks at one child again: the per-key state that was three maps in
// the reconciler (attempt count, failure gate, next drift check), as one unit on a Clock.
//
// - Backoff: something is not done yet (an operation, instances, a stockout): initial, doubled
//   per consecutive call up to max.
// - Failed: a Backoff after which GCE is left alone until it has passed (RetryGate), even when an
//   event, such as the controller's own status write, wakes the key sooner.
// - DriftCheck: the key is settled (Ready, or in a state only a human changes); its next look is
//   the drift interval with ±20% jitter (so a thousand children do not check at one instant).
//   Resets the backoff and the gate; UntilDriftCheck tells a key woken early how long to sleep.
// - Forget: the key is gone.
// Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "src/base/clock.h"

namespace hyperslice::tpu::internal {

struct RequeueScheduleOptions {
  Clock::Duration backoff_initial = std::chrono::seconds(2);
  Clock::Duration backoff_max = std::chrono::seconds(60);
  Clock::Duration drift_check_interval = std::chrono::minutes(10);
  Clock* clock = nullptr;  // nullptr = RealClock()
  // Uniform in [0, 1), for the drift jitter. Default: a randomly seeded mt19937_64.
  std::function<double()> random;
};

class RequeueSchedule {
 public:
  explicit RequeueSchedule(RequeueScheduleOptions options);

  Clock::Duration Backoff(const std::string& key);
  Clock::Duration Failed(const std::string& key);
  // Time left before a failed key may call GCE again; nullopt when it may now.
  std::optional<Clock::Duration> RetryGate(const std::string& key);
  Clock::Duration DriftCheck(const std::string& key);
  // Time left before the key's scheduled drift check; nullopt when none is scheduled (a backoff
  // cancels it) or it is due.
  std::optional<Clock::Duration> UntilDriftCheck(const std::string& key);
  void Forget(const std::string& key);

 private:
  struct KeyState {
    int attempts = 0;                            // consecutive Backoffs
    std::optional<Clock::TimePoint> not_before;  // set by Failed
    std::optional<Clock::TimePoint> next_check;  // set by DriftCheck
  };
  Clock::Duration BackoffLocked(KeyState& s);

  RequeueScheduleOptions options_;
  Clock& clock_;
  std::mutex mu_;
  std::map<std::string, KeyState> keys_;
};

}  // namespace hyperslice::tpu::internal
