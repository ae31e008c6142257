// What the GPU e2e tests check of a simulated provider's market (sim/market): whether its
// machines went back. Header-only, like tgp.h.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "sim/market/market.h"

namespace hyperslice::testenv {

// The machine went back to its market: terminated, or on its way (stopping).
inline bool Returned(sim::market::State s) {
  return s == sim::market::State::kTerminated || s == sim::market::State::kStopping;
}

// Every instance `market` ever rented went back (nothing left running at the provider); `where`
// names the provider in a failure.
inline void ExpectAllReturned(const sim::market::Market& market, const std::string& where = "") {
  for (const auto& i : market.List("")) {
    EXPECT_TRUE(Returned(i.state))
        << where << " " << i.id << " left " << sim::market::StateName(i.state);
  }
}

}  // namespace hyperslice::testenv
