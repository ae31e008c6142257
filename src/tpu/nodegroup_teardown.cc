// Teardown (internal/nodegroup_phases.h), behind kNodeGroupFinalizer, one step per reconcile:
//   cordon the Nodes → delete the MIG, the template, the policy through their children, each
//   gone before the next (a template in use by a MIG cannot be deleted) → delete the Nodes and
//   the bootstrap token Secrets → remove the finalizer.
#include <chrono>
#include <utility>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/nodegroup_phases.h"
#include "src/tpu/internal/reasons.h"

namespace hyperslice::tpu::internal {

using jsonfield::ObjectField;

using kube::Object;
using kube::ObjectPtr;

bool NeedsCordon(const Object& node) {
  const auto* spec = ObjectField(node, "spec");
  const auto* u = spec ? spec->if_contains("unschedulable") : nullptr;
  return !(u != nullptr && u->is_bool() && u->as_bool());
}

ChildTeardown TeardownChild(const Object* child, const std::string& group_uid,
                            const std::string& what, const std::string& name) {
  if (child == nullptr) return {};
  auto owner = kube::ControllerUid(*child);
  if (owner && *owner != group_uid) return {};  // another group's child of the same name
  const auto* meta = ObjectField(*child, "metadata");
  if (meta == nullptr || !meta->contains("deletionTimestamp")) {
    return {ChildTeardown::Action::kDelete, "deleting " + what + " " + name};
  }
  auto c = kube::FindCondition(*child, kCondReady);
  return {ChildTeardown::Action::kWait,
          "waiting for " + what + " " + name + " to be deleted" +
              (c && !c->message.empty() ? " (" + c->message + ")" : "")};
}

GroupTeardown::GroupTeardown(OperatorOptions options, NodeGroupInformers informers,
                             const GroupNodes& nodes, GroupBootstrap& bootstrap,
                             std::shared_ptr<kube::EventRecorder> events)
    : options_(std::move(options)),
      informers_(std::move(informers)),
      nodes_(nodes),
      bootstrap_(bootstrap),
      events_(std::move(events)) {}

Result<kube::ReconcileResult> GroupTeardown::Run(
    GroupCtx& ctx, const std::function<Status(GroupCtx&)>& write_status) {
  if (!kube::HasFinalizer(ctx.group, kNodeGroupFinalizer)) return kube::ReconcileResult{};
  SetGroupCondition(ctx, events_.get(), kCondReady, false, reason::kDeleting,
                    "tearing the slice down");

  // 1. Cordon: no new Pods on a slice that is going away.
  for (const ObjectPtr& n : nodes_.All(ctx)) {
    if (!NeedsCordon(*n)) continue;
    auto r = options_.client->Patch(kube::resources::Nodes(), "", NodeName(*n),
                                    kube::PatchType::kMerge, R"({"spec":{"unschedulable":true}})");
    if (!r.ok() && r.error().code != Error::Code::kNotFound) return r.error();
    if (r.ok()) log::Info("node cordoned", {{"group", ctx.key}, {"node", NodeName(*n)}});
  }

  // 2. GCE resources through their children, MIG → template → policy, each gone before the
  // next is deleted.
  struct Step {
    const kube::Resource* r;
    const char* what;
    const std::shared_ptr<kube::SharedInformer>* informer;
  };
  const std::string uid = ctx.Uid();
  for (const Step& step : {Step{&ManagedInstanceGroups(), "ManagedInstanceGroup", &informers_.migs},
                           Step{&InstanceTemplates(), "InstanceTemplate", &informers_.templates},
                           Step{&ResourcePolicies(), "ResourcePolicy", &informers_.policies}}) {
    // The informer's copy while the child exists (no GET per reconcile while its deletion runs);
    // only "gone" is confirmed live, since the next step must not start before it is.
    const std::string gone_key = uid + "/" + step.r->kind;
    Result<Object> child = Error::Make(Error::Code::kNotFound, "not cached");
    if (ObjectPtr cached = (*step.informer)->store().Get(kube::ObjectKey(ctx.ns, ctx.name))) {
      child = kube::DeepCopy(*cached);
    } else {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (gone_confirmed_.count(gone_key) > 0) continue;
      }
      child = options_.client->Get(*step.r, ctx.ns, ctx.name);
    }
    if (!child.ok()) {
      if (child.error().code != Error::Code::kNotFound) return child.error();
      std::lock_guard<std::mutex> lock(mu_);
      gone_confirmed_.insert(gone_key);
      continue;
    }
    ChildTeardown next = TeardownChild(&*child, uid, step.what, ctx.name);
    if (next.action == ChildTeardown::Action::kNone) continue;
    if (next.action == ChildTeardown::Action::kDelete) {
      Status del = options_.client->Delete(
          *step.r, ctx.ns, ctx.name,
          {.propagation_policy = "Background",
           .precondition_uid = std::string(kube::MetaString(*child, "uid"))});
      if (!del.ok() && del.error().code != Error::Code::kNotFound) return del.error();
    }
    SetGroupCondition(ctx, events_.get(), kCondReady, false, reason::kDeleting, next.message);
    HS_RETURN_IF_ERROR(write_status(ctx));
    // The child's delete event wakes us; the delay is only a backstop.
    return kube::ReconcileResult{.requeue_after = std::chrono::seconds(30)};
  }

  // 3. The slice's Nodes and bootstrap token Secrets.
  for (const ObjectPtr& n : nodes_.All(ctx)) {
    Status del = options_.client->Delete(kube::resources::Nodes(), "", NodeName(*n));
    if (!del.ok() && del.error().code != Error::Code::kNotFound) return del.error();
    log::Info("node deleted", {{"group", ctx.key}, {"node", NodeName(*n)}});
  }
  HS_RETURN_IF_ERROR(bootstrap_.Cleanup(ctx.group));

  // 4. Let the group go. (The device plugin's controller sees the deletion on its own.)
  Object obj = ctx.group;
  kube::RemoveFinalizer(obj, kNodeGroupFinalizer);
  auto updated = options_.client->Update(TPUNodeGroups(), ctx.ns, obj);
  if (!updated.ok() && updated.error().code != Error::Code::kNotFound) return updated.error();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto* r : {&ManagedInstanceGroups(), &InstanceTemplates(), &ResourcePolicies()}) {
      gone_confirmed_.erase(uid + "/" + r->kind);
    }
  }
  if (events_) {
    events_->Event(ctx.group, kube::EventType::kNormal, reason::kDeleted,
                   "GCE resources, Nodes and bootstrap tokens removed");
  }
  log::Info("tpunodegroup deleted", {{"group", ctx.key}});
  return kube::ReconcileResult{};
}

}  // namespace hyperslice::tpu::internal
