// The vast simulator: see simulator.cc for the API it serves.
#pragma once

#include <memory>
#include <vector>

#include "sim/market/simulator.h"

namespace hyperslice::sim::vast {

// The market a fresh simulator sells (provider-style ids, names, regions and prices).
std::vector<market::Listing> DefaultListings();

// Starts the simulator; options.market.listings empty means DefaultListings().
Result<std::unique_ptr<market::MarketSimulator>> Start(market::ServerOptions options);

}  // namespace hyperslice::sim::vast
