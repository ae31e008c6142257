// The cost collector (issue "Ephemeral GPUs 4/4", "cost you can see"): what the rented machines
// cost now and have cost so far, per pool, class and provider, as Prometheus metrics, from the
// GPUNodeClaims alone (no provider call). It also exports claims by phase and the launch and
// registration latencies; the names are in src/gpu/README.md ("Metrics").
//
// Money follows the marketplaces' billing (sim/market bills the same way): a machine is billed at
// its status.price from the moment the provider accepted the create (status.billingStart, written
// by the claim controller with the create's answer, to the microsecond) until the provider
// reports it gone — which the operator learns when the claim controller lets the claim go (its
// finalizer waits for exactly that). A claim being deleted is still billed: its machine runs
// until then.
//
// Spend survives an operator restart: when a claim goes, its final spend is added to its pool's
// `status.spend[]` (per class and provider; machines already returned); live claims are
// recomputed from their billingStart. The exported total is persisted + live, so after a restart
// the counter resumes where it was. What is lost: a claim that goes in the few milliseconds
// between the claim controller removing its finalizer and this collector writing the pool status,
// if the operator dies right then (its spend is missing from the total, never counted twice).
//
// Only the leader exports and writes (a standby would count the same machines again).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/gpu/controller_deps.h"
#include "src/gpu/provider.h"

namespace hyperslice::kube::metrics {
class Registry;
}  // namespace hyperslice::kube::metrics

namespace hyperslice::gpu {

// client: required (pool status writes); events: unused; clock: waits only (money uses the wall
// clock).
struct CostControllerOptions : ControllerDeps {
  kube::metrics::Registry* registry = nullptr;  // nullptr: the manager's
  // How often the gauges and the spend counter are recomputed (a claim event also wakes it);
  // spend accrues between passes, so this is the resolution of the exported total while machines
  // run, not of what is persisted.
  Clock::Duration interval = std::chrono::seconds(5);
};

Status RegisterCostController(kube::Manager& mgr, CostControllerOptions options);

// Exposed for unit tests.
namespace cost {
// A claim's phase for hyperslice_gpu_nodeclaims: Launching (no machine yet), Launched,
// Registered, Initialized, Ready (Karpenter's conditions, the furthest one True), Deleting.
std::string Phase(const boost::json::object& claim);
// When billing of the claim's machine started: status.billingStart, else status.launchedAt
// (whole seconds, claims launched before billingStart existed); nullopt before a launch.
std::optional<std::chrono::system_clock::time_point> BillingStart(const boost::json::object& claim);
}  // namespace cost

}  // namespace hyperslice::gpu
