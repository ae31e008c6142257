// The GCE child controllers' requeue schedule (internal/requeue_schedule.h).
#include "src/tpu/internal/requeue_schedule.h"

#include <algorithm>
#include <random>
#include <utility>

namespace hyperslice::tpu::internal {

RequeueSchedule::RequeueSchedule(RequeueScheduleOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : RealClock()) {
  if (!options_.random) {
    auto rng = std::make_shared<std::mt19937_64>(std::random_device{}());
    options_.random = [rng] { return std::uniform_real_distribution<double>(0.0, 1.0)(*rng); };
  }
}

Clock::Duration RequeueSchedule::BackoffLocked(KeyState& s) {
  s.next_check.reset();
  const int n = s.attempts++;
  auto d = options_.backoff_initial;
  for (int i = 0; i < n && d < options_.backoff_max; ++i) d *= 2;
  return std::min(d, options_.backoff_max);
}

Clock::Duration RequeueSchedule::Backoff(const std::string& key) {
  std::lock_guard lock(mu_);
  return BackoffLocked(keys_[key]);
}

Clock::Duration RequeueSchedule::Failed(const std::string& key) {
  std::lock_guard lock(mu_);
  KeyState& s = keys_[key];
  const auto d = BackoffLocked(s);
  s.not_before = clock_.Now() + d;
  return d;
}

std::optional<Clock::Duration> RequeueSchedule::RetryGate(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = keys_.find(key);
  if (it == keys_.end() || !it->second.not_before) return std::nullopt;
  const auto now = clock_.Now();
  if (now >= *it->second.not_before) {
    it->second.not_before.reset();
    return std::nullopt;
  }
  return *it->second.not_before - now;
}

Clock::Duration RequeueSchedule::DriftCheck(const std::string& key) {
  std::lock_guard lock(mu_);
  KeyState& s = keys_[key];
  s.attempts = 0;
  s.not_before.reset();
  const double jitter = 0.8 + 0.4 * options_.random();
  const auto d =
      std::chrono::duration_cast<Clock::Duration>(options_.drift_check_interval * jitter);
  s.next_check = clock_.Now() + d;
  return std::max<Clock::Duration>(d, std::chrono::milliseconds(1));
}

std::optional<Clock::Duration> RequeueSchedule::UntilDriftCheck(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = keys_.find(key);
  if (it == keys_.end() || !it->second.next_check) return std::nullopt;
  const auto now = clock_.Now();
  if (now >= *it->second.next_check) return std::nullopt;
  return *it->second.next_check - now;
}

void RequeueSchedule::Forget(const std::string& key) {
  std::lock_guard lock(mu_);
  keys_.erase(key);
}

}  // namespace hyperslice::tpu::internal
