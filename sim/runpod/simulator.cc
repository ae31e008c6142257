// Placeholder until the runpod wire API is written: serves nothing but the control endpoint.
#include "sim/runpod/simulator.h"

namespace hyperslice::sim::runpod {

std::vector<market::Listing> DefaultListings() { return {}; }

Result<std::unique_ptr<market::MarketSimulator>> Start(market::ServerOptions options) {
  if (options.market.listings.empty()) options.market.listings = DefaultListings();
  options.market.provider = "runpod";
  return market::StartMarketSimulator(
      std::move(options), [](market::Market&) { return std::unique_ptr<market::ProviderApi>(); });
}

}  // namespace hyperslice::sim::runpod
