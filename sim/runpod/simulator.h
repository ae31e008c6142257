// The RunPod simulator: RunPod's GraphQL API (POST /graphql, api.cc) over the shared marketplace
// core (sim/market), with the /control endpoint on a second port. See api.cc for the wire
// behaviour and simulator.cc for how listings map to RunPod GPU types and data centers.
#pragma once

#include <memory>
#include <vector>

#include "sim/market/simulator.h"

namespace hyperslice::sim::runpod {

// The market a fresh simulator sells: RunPod gpuTypeIds ("NVIDIA GeForce RTX 4090") in RunPod
// data centers ("US-CA-2", "EU-RO-1"), per-pod prices for 1, 2 or 8 GPUs, spot minimum bids.
std::vector<market::Listing> DefaultListings();

// Starts the simulator; options.market.listings empty means DefaultListings().
Result<std::unique_ptr<market::MarketSimulator>> Start(market::ServerOptions options);

}  // namespace hyperslice::sim::runpod
