// The TPUNodeGroup controller: applies the group's three children (ResourcePolicy and
// InstanceTemplate first, the ManagedInstanceGroup once both are Ready), turns the children's
// and the Nodes' state into the group's conditions and nodeSummary, labels and taints the
// slice's Nodes, drives the pull-model bootstrap, keeps the device-plugin DaemonSet wanted while
// a group exists, and runs the ordered teardown behind kNodeGroupFinalizer.
//
// Level-based and idempotent: every reconcile reads the group, its children and the Nodes from
// the informer caches (the group through our own last write, kube::MutationCache), makes the next
// step and reports. It is woken by the group, by its children (owner references) and by Nodes
// (spec.providerID → the MIG child listing that VM, or the tpu-node-group label); no periodic poll
// decides readiness.
//
// Thread-safety: Reconcile may run on several workers at once (never twice for one key).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "src/base/result.h"
#include "src/kube/controller.h"
#include "src/kube/events.h"
#include "src/kube/informer.h"
#include "src/kube/mutation_cache.h"
#include "src/tpu/internal/bootstrap.h"
#include "src/tpu/internal/nodegroup_spec.h"
#include "src/tpu/operator.h"

namespace hyperslice::tpu::internal {

// Index names on the shared informers.
inline constexpr char kNodeProviderIdIndex[] = "spec.providerID";          // Nodes
inline constexpr char kMigInstanceProviderIdIndex[] = "status.instances";  // MIG children
inline constexpr char kGroupNodeLabelIndex[] = "nodeGroupLabel";           // TPUNodeGroups
// Nodes by "label:<tpu-node-group label>" and "base:<project>/<zone>/<instance name up to its
// last '-'>" (a MIG names its VMs <baseInstanceName>-<suffix>): a group finds its Nodes without
// scanning them all.
inline constexpr char kNodeGroupGuessIndex[] = "nodeGroupGuess";  // Nodes

struct NodeGroupInformers {
  std::shared_ptr<kube::SharedInformer> groups, policies, templates, migs, nodes;
};

class NodeGroupReconciler {
 public:
  NodeGroupReconciler(OperatorOptions options, NodeGroupInformers informers,
                      std::shared_ptr<kube::EventRecorder> events);
  Result<kube::ReconcileResult> Reconcile(const std::string& key);

  // Adds the indexes the reconciler and the Node mapping need (before the informers start).
  static Status AddIndexes(const NodeGroupInformers& informers);
  // The group keys a Node concerns (through its providerID or its tpu-node-group label).
  static std::vector<std::string> GroupsOfNode(const NodeGroupInformers& informers,
                                               const kube::Object& node);

 private:
  struct Ctx;
  Result<kube::ReconcileResult> ReconcileLive(Ctx& ctx);
  Result<kube::ReconcileResult> ReconcileDeletion(Ctx& ctx);

  // Server-side apply of one child (controller owner reference to the group); skipped when the
  // cached child already has this spec and owner.
  Status ApplyChild(Ctx& ctx, const kube::Resource& r, const boost::json::object& spec);
  // Sets a condition on the status being built; records an Event when it changed.
  void SetCondition(Ctx& ctx, const std::string& type, bool status, const std::string& reason,
                    const std::string& message);
  Status WriteStatus(Ctx& ctx);
  // Labels and taint on a matched Node (a patch only when something is missing).
  Status EnsureNodeLabels(Ctx& ctx, const kube::Object& node);
  // The group's Nodes: providerID of a MIG instance, the node-group label, or an instance name
  // from the group's baseInstanceName in its project/zone.
  std::vector<kube::ObjectPtr> GroupNodes(Ctx& ctx) const;
  void EnsureDevicePlugin(const std::string& exclude_key);
  Result<std::string> CaHash();
  Bootstrapper* BootstrapperOrNull();

  OperatorOptions options_;
  NodeGroupInformers informers_;
  // The groups as the informer has them, through our own writes (finalizer, status).
  kube::MutationCache groups_;
  std::shared_ptr<kube::EventRecorder> events_;

  std::mutex mu_;
  std::optional<bool> device_plugin_applied_;  // last need successfully applied
  std::string ca_hash_;
  std::unique_ptr<Bootstrapper> bootstrapper_;
  // "<group uid>/<child kind>" whose absence a live GET confirmed during the group's teardown
  // (the cache alone could miss a child applied just before the deletion); dropped with the
  // group's finalizer.
  std::set<std::string> gone_confirmed_;
};

// Adds the TPUNodeGroup controller (and its informers and Node mapping) to `mgr`.
// options.cluster_id must be set.
Status RegisterNodeGroupController(kube::Manager& mgr, const OperatorOptions& options);

}  // namespace hyperslice::tpu::internal
