// Placeholder until the lambda wire API is written: serves nothing but the control endpoint.
#include "sim/lambda/simulator.h"

namespace hyperslice::sim::lambda {

std::vector<market::Listing> DefaultListings() { return {}; }

Result<std::unique_ptr<market::MarketSimulator>> Start(market::ServerOptions options) {
  if (options.market.listings.empty()) options.market.listings = DefaultListings();
  options.market.provider = "lambda";
  return market::StartMarketSimulator(
      std::move(options), [](market::Market&) { return std::unique_ptr<market::ProviderApi>(); });
}

}  // namespace hyperslice::sim::lambda
