// The real GCE client (src/gce) on the GCE simulator's API endpoint, with a bearer token the
// simulator accepts (one of Options::static_tokens, or one issued by /control/tokens): one
// instead of a copy per test. Header-only; a test that includes it links hs_gce and hs_sim_gce.
#pragma once

#include <memory>
#include <string>

#include "sim/gce/simulator.h"
#include "src/base/result.h"
#include "src/gce/auth.h"
#include "src/gce/compute.h"

namespace hyperslice::testenv {

inline Result<std::unique_ptr<gce::Compute>> SimCompute(const sim::gce::Simulator& simulator,
                                                        const std::string& token) {
  gce::ComputeOptions co;
  co.endpoint = simulator.api_endpoint();
  co.tokens = gce::StaticTokenSource(token);
  return gce::Compute::Create(co);
}

}  // namespace hyperslice::testenv
