// UnavailableOffers: offers whose launch just failed for capacity, left out of every choice for a
// while (Karpenter's insufficient-capacity cache): a stockout rarely clears in seconds, and trying
// the same offer again only delays the next one. Thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include "src/base/clock.h"
#include "src/gpu/provider.h"

namespace hyperslice::gpu {

class UnavailableOffers {
 public:
  explicit UnavailableOffers(Clock::Duration ttl = std::chrono::minutes(3),
                             Clock* clock = &RealClock())
      : ttl_(ttl), clock_(*clock) {}

  // Keyed by provider, offer id and region: some providers (Lambda) sell one instance type id in
  // many regions, and a stockout is one region's.
  void Mark(const Offer& offer) {
    std::lock_guard lock(mu_);
    until_[Key(offer)] = clock_.Now() + ttl_;
  }
  bool IsUnavailable(const Offer& offer) const {
    std::lock_guard lock(mu_);
    auto it = until_.find(Key(offer));
    if (it == until_.end()) return false;
    if (clock_.Now() >= it->second) {
      until_.erase(it);
      return false;
    }
    return true;
  }
  Clock::Duration ttl() const { return ttl_; }

 private:
  static std::string Key(const Offer& o) {
    return o.provider + "/" + o.id + "@" + o.provider_region;
  }
  const Clock::Duration ttl_;
  Clock& clock_;
  mutable std::mutex mu_;
  mutable std::map<std::string, Clock::TimePoint> until_;
};

}  // namespace hyperslice::gpu
