// What the GPU provider decoders' fuzz targets (test/fuzz/gpu_*_fuzz.cc) check with: a broken
// property stops the fuzzer on the input that broke it, and the same input decoded twice gives
// the same offers.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "src/gpu/provider.h"

namespace hyperslice::gpu::fuzz {

// Aborts with `what` (the property broken) unless `ok`: libFuzzer keeps the input as a crash.
inline void Check(bool ok, const char* target, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "%s fuzz: %s\n", target, what);
  std::abort();
}

// Two decodings of one answer hold the same offers, in the same order.
inline bool SameOffers(const std::vector<Offer>& a, const std::vector<Offer>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].id != b[i].id || a[i].gpu_type != b[i].gpu_type ||
        a[i].on_demand_price != b[i].on_demand_price || a[i].spot_price != b[i].spot_price) {
      return false;
    }
  }
  return true;
}

}  // namespace hyperslice::gpu::fuzz
