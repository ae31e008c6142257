// The phases of one TPUNodeGroup reconcile, run in order by NodeGroupReconciler
// (nodegroup_controller.cc), one file each:
//
//   nodegroup_children.cc   provision the children: ResourcePolicy and InstanceTemplate, then the
//                           ManagedInstanceGroup once both are Ready (server-side apply)
//   nodegroup_nodes.cc      registration: the MIG's VMs, their Nodes (labels, taint), which have
//                           joined and which are Ready with every chip
//   nodegroup_bootstrap.cc  bootstrap: join tokens for RUNNING VMs whose Node has not joined
//   nodegroup_readiness.cc  readiness: a pure function from what the phases found to the
//                           NodesReady and Ready conditions and the nodeSummary
//   nodegroup_teardown.cc   deletion: cordon → MIG → template → policy → Nodes and tokens
//
// Phases change the GroupCtx (the status being built, the errors met); the runner writes the
// status once per reconcile. The device-plugin DaemonSet has its own controller
// (device_plugin_controller.cc).
// Thread-safety: one instance of each phase serves every worker; a GroupCtx belongs to one
// reconcile.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <functional>

#include <boost/json/object.hpp>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/kube/controller.h"
#include "src/kube/events.h"
#include "src/kube/informer.h"
#include "src/kube/manager.h"
#include "src/kube/resource.h"
#include "src/kube/store.h"
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

// One reconcile's view of a group.
struct GroupCtx {
  std::string key, ns, name;
  kube::Object group;
  boost::json::object status;   // being built
  boost::json::object written;  // as last read or written
  int64_t generation = 0;
  std::optional<NodeGroupSpec> spec;
  std::string spec_error;   // why `spec` is empty
  std::string label_value;  // NodeGroupLabelValue(ns, name)
  // What failed in this reconcile (an apply, a Node patch, the bootstrap): Ready=False
  // ApplyFailed and the reconcile returns an error (retried with backoff).
  std::vector<std::string> errors;
  std::string Uid() const;
};

// Sets a condition on the status being built; records an Event when a user would act on it
// (Ready turning True or False, a warning's first appearance) and logs every change.
void SetGroupCondition(GroupCtx& ctx, kube::EventRecorder* events, const std::string& type,
                       bool status, const std::string& reason, const std::string& message);

// "a, b, c and 2 more".
std::string JoinNames(const std::vector<std::string>& v, size_t max = 5);

// --- provision children (nodegroup_children.cc) --------------------------------------------------

// The Ready condition of a child, when it describes the child's current generation.
struct ChildState {
  bool exists = false;
  bool ready = false;
  std::string reason, message;
};
struct ChildrenState {
  ChildState policy, tmpl, mig;
  kube::ObjectPtr mig_obj;  // the MIG child as cached, when it exists
};

// The phase's decisions, pure (no client, no cache):
// A child's state from its Ready condition (`what` names it in the messages): not created, being
// created, being reconciled (a condition older than its generation), or the condition's own.
ChildState ChildStateOf(const kube::ObjectPtr& child, const std::string& what);
// Whether the cached child already has `spec` and is controlled by the group `uid` (no apply).
bool ChildUpToDate(const kube::Object& cached, const boost::json::object& spec,
                   const std::string& uid);
// The MIG's WaitingForPrerequisites state while it does not exist and either prerequisite is not
// Ready; nullopt when it is to be applied (created in one go, or kept applied once it exists).
std::optional<ChildState> MigWaiting(const ChildState& policy, const ChildState& tmpl,
                                     bool mig_exists);

class GroupChildren {
 public:
  GroupChildren(std::shared_ptr<kube::Client> client, NodeGroupInformers informers,
                std::string cluster_id);
  // Applies the children that are due (each skipped when the cached child already has its spec
  // and owner) and reads their state; apply failures go to ctx.errors.
  ChildrenState Provision(GroupCtx& ctx) const;

 private:
  Status Apply(const GroupCtx& ctx, const kube::Resource& r, const boost::json::object& spec) const;
  std::shared_ptr<kube::Client> client_;
  NodeGroupInformers informers_;
  std::string cluster_id_;
};

// --- nodes and registration (nodegroup_nodes.cc) -------------------------------------------------

// The MIG child's VMs (zone and provider id filled from the spec when absent) and how many are
// RUNNING or failed (stopping, stopped, suspended, or with a lastAttempt error). Pure.
struct MigInstances {
  std::vector<InstanceState> instances;
  int running = 0, failed = 0;
};
MigInstances InstancesOfMig(const NodeGroupSpec& spec, const kube::ObjectPtr& mig);

// What a slice Node counts as: Ready with every chip, not Ready (why: its Ready condition), or
// Ready with fewer allocatable google.com/tpu than its machine type has (why names the shortfall;
// a Node without google.com/tpu yet is not judged on chips). Pure.
struct NodeVerdict {
  enum class Kind { kReady, kNotReady, kChipsMissing } kind = Kind::kReady;
  std::string why;
};
NodeVerdict JudgeNode(const kube::Object& node, int chips_per_host);

// The merge patch that gives `node` the group's labels and NoSchedule taint (the taint list
// guarded by the Node's resourceVersion, the other taints kept); nullopt when it has both. Pure.
std::optional<boost::json::object> NodeLabelPatch(const NodeGroupSpec& spec,
                                                  const kube::Object& node);

struct NodesObservation {
  std::vector<InstanceState> instances;  // the MIG child's VMs
  int running = 0, failed = 0, ready = 0;
  std::set<std::string> joined;  // provider ids of VMs with a Node
  std::vector<std::string> not_joined, not_ready, chips_missing;
  bool retry = false;  // a Node changed under our patch: look again
};

class GroupNodes {
 public:
  GroupNodes(std::shared_ptr<kube::Client> client, NodeGroupInformers informers);
  // The VMs of `mig` and their Nodes; labels and taints the Nodes that lack them.
  NodesObservation Observe(GroupCtx& ctx, const kube::ObjectPtr& mig) const;
  // Every Node of the group: providerID of a MIG instance, the node-group label, or an instance
  // name from the group's baseInstanceName in its project/zone.
  std::vector<kube::ObjectPtr> All(const GroupCtx& ctx) const;

  // Adds the indexes the phases and the Node mapping need (before the informers start).
  static Status AddIndexes(const NodeGroupInformers& informers);
  // The group keys a Node concerns (through its providerID or its tpu-node-group label).
  static std::vector<std::string> GroupsOfNode(const NodeGroupInformers& informers,
                                               const kube::Object& node);

 private:
  // Labels and taint on a matched Node (a patch only when something is missing).
  Status EnsureLabels(const GroupCtx& ctx, const kube::Object& node) const;
  std::shared_ptr<kube::Client> client_;
  NodeGroupInformers informers_;
};

// What the operator keeps of a Node in its cache (an informer transform).
void TrimNode(kube::Object& node);
std::string NodeName(const kube::Object& node);

// --- bootstrap (nodegroup_bootstrap.cc) ----------------------------------------------------------

// The CA whose hash joining VMs verify: `flag_pem` (--cluster-ca-file), else the CA of the
// kubeconfig in kube-public/cluster-info (`cluster_info`, nullptr when it could not be read),
// else `client_pem` (the operator's own trust). "" when none has one. Pure.
std::string ChooseClusterCa(const std::string& flag_pem, const kube::Object* cluster_info,
                            const std::string& client_pem);
// When the group looks again after a bootstrap pass: while a VM waits for its join, before its
// token (an hour) must be replaced; nullopt when nothing waits (a join wakes the group at once
// through its Node's events). Pure.
std::optional<Clock::Duration> BootstrapRecheck(const BootstrapReport& report);

class GroupBootstrap {
 public:
  explicit GroupBootstrap(OperatorOptions options);
  // Tokens and join values for RUNNING VMs whose Node has not joined. Returns when to look again
  // (a token expires) while some VM waits; failures go to ctx.errors.
  std::optional<Clock::Duration> Run(GroupCtx& ctx, const NodesObservation& nodes);
  // Deletes the group's token Secrets (teardown).
  Status Cleanup(const kube::Object& group) const;

 private:
  Result<std::string> CaHash();
  OperatorOptions options_;
  std::mutex mu_;
  std::string ca_hash_;
  std::shared_ptr<Bootstrapper> bootstrapper_;  // built on first use, with the CA hash
};

// --- readiness (nodegroup_readiness.cc) ----------------------------------------------------------

struct ConditionValue {
  std::string type;
  bool status = false;
  std::string reason, message;
};
struct Readiness {
  ConditionValue nodes_ready, ready;
  boost::json::object node_summary;
};
// The group's NodesReady and Ready conditions and its nodeSummary from what the phases found.
// Pure: no I/O, no clock.
Readiness AssessReadiness(const NodeGroupSpec& spec, const ChildrenState& children,
                          const NodesObservation& nodes, const std::vector<std::string>& errors);
// Every condition of a group whose spec is invalid.
std::vector<ConditionValue> InvalidSpecConditions(const std::string& message);

// --- teardown (nodegroup_teardown.cc) ------------------------------------------------------------

// The teardown's decisions, pure:
// Whether a Node still needs cordoning (spec.unschedulable not true).
bool NeedsCordon(const kube::Object& node);
// What one child (MIG, template or policy) needs: nothing (gone, or another group's child of the
// same name), a delete, or a wait while its deletion runs (message: the group's Ready message).
struct ChildTeardown {
  enum class Action { kNone, kDelete, kWait } action = Action::kNone;
  std::string message;
};
ChildTeardown TeardownChild(const kube::Object* child, const std::string& group_uid,
                            const std::string& what, const std::string& name);

class GroupTeardown {
 public:
  GroupTeardown(OperatorOptions options, NodeGroupInformers informers, const GroupNodes& nodes,
                GroupBootstrap& bootstrap, std::shared_ptr<kube::EventRecorder> events);
  // One step of the ordered teardown. `write_status` writes ctx.status (once, before a wait).
  // Ends with the finalizer removed.
  Result<kube::ReconcileResult> Run(GroupCtx& ctx,
                                    const std::function<Status(GroupCtx&)>& write_status);

 private:
  OperatorOptions options_;
  NodeGroupInformers informers_;
  const GroupNodes& nodes_;
  GroupBootstrap& bootstrap_;
  std::shared_ptr<kube::EventRecorder> events_;
  std::mutex mu_;
  // "<group uid>/<child kind>" whose absence a live GET confirmed during the group's teardown
  // (the cache alone could miss a child applied just before the deletion); dropped with the
  // group's finalizer.
  std::set<std::string> gone_confirmed_;
};

// --- the device-plugin DaemonSet (device_plugin_controller.cc) -----------------------------------

// A controller of one key: the DaemonSet is applied while any TPUNodeGroup lives (not being
// deleted) and deleted when none does; woken by every group event.
Status RegisterDevicePluginController(kube::Manager& mgr, const OperatorOptions& options,
                                      const std::shared_ptr<kube::SharedInformer>& groups);

}  // namespace hyperslice::tpu::internal
