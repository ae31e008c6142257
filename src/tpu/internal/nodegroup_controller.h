// The TPUNodeGroup controller: a phase runner (internal/nodegroup_phases.h). A reconcile reads
// the group, its children and the Nodes from the informer caches (the group through our own last
// write, kube::MutationCache) and runs
//   finalizer → spec (InvalidSpec stops here) → provision children → nodes and registration →
//   bootstrap → readiness → one status write;
// or, on deletion, the ordered teardown behind kNodeGroupFinalizer.
//
// Level-based and idempotent. It is woken by the group, by its children (owner references) and by
// Nodes (spec.providerID → the MIG child listing that VM, or the tpu-node-group label); no
// periodic poll decides readiness.
//
// Thread-safety: Reconcile may run on several workers at once (never twice for one key).
#pragma once

#include <memory>
#include <string>

#include "src/base/result.h"
#include "src/kube/controller.h"
#include "src/kube/events.h"
#include "src/kube/manager.h"
#include "src/kube/mutation_cache.h"
#include "src/tpu/internal/nodegroup_phases.h"
#include "src/tpu/operator.h"

namespace hyperslice::tpu::internal {

class NodeGroupReconciler {
 public:
  NodeGroupReconciler(OperatorOptions options, NodeGroupInformers informers,
                      std::shared_ptr<kube::EventRecorder> events);
  Result<kube::ReconcileResult> Reconcile(const std::string& key);

 private:
  Result<kube::ReconcileResult> ReconcileLive(GroupCtx& ctx);
  Status WriteStatus(GroupCtx& ctx);
  void SetCondition(GroupCtx& ctx, const ConditionValue& c);

  OperatorOptions options_;
  NodeGroupInformers informers_;
  // The groups as the informer has them, through our own writes (finalizer, status).
  kube::MutationCache groups_;
  std::shared_ptr<kube::EventRecorder> events_;
  GroupChildren children_;
  GroupNodes nodes_;
  GroupBootstrap bootstrap_;
  GroupTeardown teardown_;
};

// Adds the TPUNodeGroup controller (its informers, indexes and Node mapping) and the
// device-plugin controller to `mgr`. options.cluster_id must be set.
Status RegisterNodeGroupController(kube::Manager& mgr, const OperatorOptions& options);

}  // namespace hyperslice::tpu::internal
