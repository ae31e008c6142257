// The disruption controller (issue "Ephemeral GPUs 4/4", first part): gives back a pool's machines
// that have been empty (WhenEmpty) or idle (WhenIdle) for the pool's `consolidateAfter`, within its
// disruption budgets, by deleting their GPUNodeClaims — the claim controller's finalizer then
// returns the machine to its provider and removes the Node (claim_controller.h). The rules are
// pure functions in disruption.h. One reconcile per pool; pod, claim and Node events wake the
// pool of the claim they concern.
//
// How long a machine has been empty is remembered in memory from the first reconcile that saw it
// empty: an operator restart starts the wait again (a machine is kept longer, never returned
// early). Events on the claim (`Disrupting`) and on the pool (`DisruptionBlocked` when a budget
// holds machines back).
#pragma once

#include <chrono>
#include <memory>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/gpu/controller_deps.h"

namespace hyperslice::gpu {

struct DisruptionControllerOptions : ControllerDeps {
  // Longest wait before a pool is looked at again while a machine waits for a budget.
  Clock::Duration budget_retry = std::chrono::seconds(5);
};

Status RegisterDisruptionController(kube::Manager& mgr, DisruptionControllerOptions options);

}  // namespace hyperslice::gpu
