// OfferCache: what the GPUNodeClass controller last learned from each provider of each class —
// the provider client, whether its credentials work, and its offers — shared with the
// provisioner, which chooses among these offers and re-checks the price live at launch.
//
// Entries are immutable snapshots (std::shared_ptr<const ProviderState>): a reader keeps a
// consistent view while the controller publishes the next one. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/base/clock.h"
#include "src/gpu/provider.h"

namespace hyperslice::gpu {

struct ProviderState {
  std::string provider;              // kRunPod, ...
  int priority = 100;                // providers[].priority; unset counts as 100
  std::vector<std::string> regions;  // providers[].regions (empty: any)
  std::shared_ptr<Provider> client;  // built from the class's credentialsRef and endpoint
  bool credentials_valid = false;
  std::string error;  // last check or refresh error (never a secret)
  std::optional<Clock::TimePoint> checked, refreshed;
  std::vector<Offer> offers;  // as of `refreshed`
  // Offers left out of `offers` because no machine of theirs could join (container-only offers
  // while linked runners are not built), and why.
  int skipped_offers = 0;
  std::string skipped_reason;
  // Whether container-only offers are left out (ClassControllerOptions::skip_container_offers):
  // whoever lists this provider's offers again (the claim's live check before a launch) leaves
  // out the same ones.
  bool skips_container_offers = false;
};

class OfferCache {
 public:
  // Replaces the state of (class, provider).
  void Put(const std::string& class_name, std::shared_ptr<const ProviderState> state);
  std::shared_ptr<const ProviderState> Get(const std::string& class_name,
                                           const std::string& provider) const;
  // Every provider state of a class, by provider name.
  std::map<std::string, std::shared_ptr<const ProviderState>> ForClass(
      const std::string& class_name) const;
  // Forgets providers of a class not in `keep` (removed or disabled), or the whole class.
  void Retain(const std::string& class_name, const std::vector<std::string>& keep);
  void DropClass(const std::string& class_name);

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const ProviderState>> states_;
};

}  // namespace hyperslice::gpu
