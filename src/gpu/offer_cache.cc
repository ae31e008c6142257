#include "src/gpu/offer_cache.h"

#include <algorithm>

namespace hyperslice::gpu {

void OfferCache::Put(const std::string& class_name, std::shared_ptr<const ProviderState> state) {
  std::lock_guard lock(mu_);
  std::string provider = state->provider;
  states_[{class_name, provider}] = std::move(state);
}

std::shared_ptr<const ProviderState> OfferCache::Get(const std::string& class_name,
                                                     const std::string& provider) const {
  std::lock_guard lock(mu_);
  auto it = states_.find({class_name, provider});
  return it == states_.end() ? nullptr : it->second;
}

std::map<std::string, std::shared_ptr<const ProviderState>> OfferCache::ForClass(
    const std::string& class_name) const {
  std::lock_guard lock(mu_);
  std::map<std::string, std::shared_ptr<const ProviderState>> out;
  for (auto it = states_.lower_bound({class_name, ""});
       it != states_.end() && it->first.first == class_name; ++it) {
    out.emplace(it->first.second, it->second);
  }
  return out;
}

void OfferCache::Retain(const std::string& class_name, const std::vector<std::string>& keep) {
  std::lock_guard lock(mu_);
  for (auto it = states_.lower_bound({class_name, ""});
       it != states_.end() && it->first.first == class_name;) {
    if (std::find(keep.begin(), keep.end(), it->first.second) == keep.end()) {
      it = states_.erase(it);
    } else {
      ++it;
    }
  }
}

void OfferCache::DropClass(const std::string& class_name) { Retain(class_name, {}); }

}  // namespace hyperslice::gpu
