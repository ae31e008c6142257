// The vast simulator: see simulator.cc for the API it serves.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sim/market/simulator.h"

namespace hyperslice::sim::vast {

// The market a fresh simulator sells (provider-style ids, names, regions and prices).
std::vector<market::Listing> DefaultListings();

// One RTX 4090 ask (1 GPU, 24 GB, 16 vCPUs, 64 GB, "California, US", $0.35/h, bid $0.18/h, one
// machine): a container ask, or with `vm` one on a machine that runs VMs (vms_enabled).
market::Listing Rtx4090Listing(const std::string& id, bool vm, market::MicroUsd price = 350000);

// Starts the simulator; options.market.listings empty means DefaultListings().
Result<std::unique_ptr<market::MarketSimulator>> Start(market::ServerOptions options);

}  // namespace hyperslice::sim::vast
