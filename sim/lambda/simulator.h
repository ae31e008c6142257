// The Lambda Cloud API simulator (`hyperslice sim lambda`): /api/v1 as Lambda's OpenAPI document
// 1.8.3 defines it, over the shared market core. See sim/lambda/README.md.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sim/market/simulator.h"

namespace hyperslice::sim::lambda {

// The market a fresh simulator sells: Lambda instance types (gpu_1x_a10, gpu_1x_a100_sxm4,
// gpu_8x_h100_sxm5, ...) at Lambda's list prices in Lambda regions. Listing ids are
// "<instance type>@<region>".
std::vector<market::Listing> DefaultListings();

// An RTX 4090 in `region` (id "gpu_1x_rtx4090@<region>"), which seed 002's pool asks for and
// Lambda does not sell today: what tests and `hyperslice dev --example gpu` add to the market.
market::Listing Rtx4090Listing(const std::string& region, market::MicroUsd price = 690000,
                               int capacity = 4);

// Starts the simulator; options.market.listings empty means DefaultListings().
Result<std::unique_ptr<market::MarketSimulator>> Start(market::ServerOptions options);

}  // namespace hyperslice::sim::lambda
