// The TPUNodeGroup controller's phase runner (internal/nodegroup_controller.h).
#include "src/tpu/internal/nodegroup_controller.h"

#include <algorithm>
#include <utility>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/reasons.h"

namespace hyperslice::tpu::internal {

using jsonfield::ObjectField;

namespace {

namespace json = boost::json;
using kube::Object;
using kube::ObjectPtr;

constexpr char kKindGroup[] = "TPUNodeGroup";

}  // namespace

NodeGroupReconciler::NodeGroupReconciler(OperatorOptions options, NodeGroupInformers informers,
                                         std::shared_ptr<kube::EventRecorder> events)
    : options_(std::move(options)),
      informers_(std::move(informers)),
      groups_(&informers_.groups->store()),
      events_(std::move(events)),
      children_(options_.client, informers_, options_.cluster_id),
      nodes_(options_.client, informers_),
      bootstrap_(options_),
      teardown_(options_, informers_, nodes_, bootstrap_, events_) {}

void NodeGroupReconciler::SetCondition(GroupCtx& ctx, const ConditionValue& c) {
  SetGroupCondition(ctx, events_.get(), c.type, c.status, c.reason, c.message);
}

Status NodeGroupReconciler::WriteStatus(GroupCtx& ctx) {
  ctx.status["observedGeneration"] = ctx.generation;
  if (ctx.status == ctx.written) return OkStatus();
  json::object patch{{"status", ctx.status}};
  auto r = options_.client->Patch(TPUNodeGroups(), ctx.ns, ctx.name, kube::PatchType::kMerge,
                                  json::serialize(patch), {.subresource = "status"});
  if (!r.ok()) return r.error();
  groups_.Mutated(std::move(r).value());
  ctx.written = ctx.status;
  return OkStatus();
}

Result<kube::ReconcileResult> NodeGroupReconciler::Reconcile(const std::string& key) {
  GroupCtx ctx;
  ctx.key = key;
  std::tie(ctx.ns, ctx.name) = kube::Controller::SplitKey(key);
  ctx.label_value = NodeGroupLabelValue(ctx.ns, ctx.name);
  kube::ObjectPtr cached = groups_.Get(key);
  if (!cached) return kube::ReconcileResult{};
  ctx.group = kube::DeepCopy(*cached);
  ctx.generation = kube::Generation(ctx.group);
  if (const auto* s = ObjectField(ctx.group, "status")) ctx.status = *s;
  ctx.written = ctx.status;
  if (auto parsed = ParseNodeGroup(ctx.group); parsed.ok()) {
    ctx.spec = std::move(parsed).value();
  } else {
    ctx.spec_error = parsed.error().message;
  }
  if (ctx.group.at("metadata").as_object().contains("deletionTimestamp")) {
    return teardown_.Run(ctx, [this](GroupCtx& c) { return WriteStatus(c); });
  }
  return ReconcileLive(ctx);
}

Result<kube::ReconcileResult> NodeGroupReconciler::ReconcileLive(GroupCtx& ctx) {
  // The finalizer first: nothing is created that the teardown could not find.
  if (!kube::HasFinalizer(ctx.group, kNodeGroupFinalizer)) {
    Object obj = ctx.group;
    kube::AddFinalizer(obj, kNodeGroupFinalizer);
    HS_ASSIGN_OR_RETURN(ctx.group, options_.client->Update(TPUNodeGroups(), ctx.ns, obj));
    groups_.Mutated(ctx.group);
  }
  // An invalid spec creates nothing; the user's edit wakes us.
  if (!ctx.spec) {
    for (const ConditionValue& c : InvalidSpecConditions(ctx.spec_error)) SetCondition(ctx, c);
    HS_RETURN_IF_ERROR(WriteStatus(ctx));
    return kube::ReconcileResult{};
  }

  const ChildrenState children = children_.Provision(ctx);
  SetCondition(ctx, {kCondResourcePolicyReady, children.policy.ready, children.policy.reason,
                     children.policy.message});
  SetCondition(ctx, {kCondInstanceTemplateReady, children.tmpl.ready, children.tmpl.reason,
                     children.tmpl.message});
  SetCondition(ctx, {kCondManagedInstanceGroupReady, children.mig.ready, children.mig.reason,
                     children.mig.message});

  const NodesObservation nodes = nodes_.Observe(ctx, children.mig_obj);

  kube::ReconcileResult result;
  if (auto after = bootstrap_.Run(ctx, nodes)) result.requeue_after = *after;

  const Readiness readiness = AssessReadiness(*ctx.spec, children, nodes, ctx.errors);
  SetCondition(ctx, readiness.nodes_ready);
  SetCondition(ctx, readiness.ready);
  ctx.status["nodeSummary"] = readiness.node_summary;
  HS_RETURN_IF_ERROR(WriteStatus(ctx));
  if (!ctx.errors.empty()) {
    return Error::Make(Error::Code::kUnavailable, JoinNames(ctx.errors, 3), reason::kApplyFailed);
  }
  if (nodes.retry) result.requeue = true;
  return result;
}

// --- registration ---------------------------------------------------------------------------

Status RegisterNodeGroupController(kube::Manager& mgr, const OperatorOptions& options) {
  if (mgr.informers() == nullptr) {
    return Error::Make(Error::Code::kInvalidArgument, "the manager has no informer factory");
  }
  NodeGroupInformers inf;
  inf.groups = mgr.informers()->For(TPUNodeGroups());
  inf.policies = mgr.informers()->For(ResourcePolicies());
  inf.templates = mgr.informers()->For(InstanceTemplates());
  inf.migs = mgr.informers()->For(ManagedInstanceGroups());
  kube::InformerOptions node_options;
  node_options.transform = TrimNode;
  inf.nodes = mgr.informers()->For(kube::resources::Nodes(), &node_options);
  HS_RETURN_IF_ERROR(GroupNodes::AddIndexes(inf));

  kube::EventRecorderOptions eo;
  eo.component = "hyperslice-tpunodegroup";
  eo.clock = options.clock;
  auto events = std::make_shared<kube::EventRecorder>(options.client, eo);
  auto reconciler = std::make_shared<NodeGroupReconciler>(options, inf, events);

  kube::ControllerOptions co;
  co.name = "tpunodegroup";
  co.max_concurrent_reconciles = std::max(1, options.workers);
  co.clock = options.clock;
  auto controller = std::make_shared<kube::Controller>(
      std::move(co), [reconciler](const std::string& key) { return reconciler->Reconcile(key); });
  controller->Watch(*inf.groups);
  controller->WatchOwned(*inf.policies, kKindGroup);
  controller->WatchOwned(*inf.templates, kKindGroup);
  controller->WatchOwned(*inf.migs, kKindGroup);

  // Nodes → their group (through the MIG child listing the VM, or the node-group label).
  std::weak_ptr<kube::Controller> weak = controller;
  auto enqueue = [weak, inf](const ObjectPtr& node) {
    auto c = weak.lock();
    if (!c || !node) return;
    for (const auto& key : GroupNodes::GroupsOfNode(inf, *node)) c->Enqueue(key);
  };
  inf.nodes->AddEventHandler(
      {.on_add = enqueue,
       .on_update =
           [enqueue](const ObjectPtr& old, const ObjectPtr& cur) {
             if (old == cur) return;  // a relist of an unchanged Node
             enqueue(cur);
             if (old) enqueue(old);  // a label removed still names its old group
           },
       .on_delete = [enqueue](const ObjectPtr& last, bool) { enqueue(last); }});
  mgr.Add(controller);
  return RegisterDevicePluginController(mgr, options, inf.groups);
}

}  // namespace hyperslice::tpu::internal
