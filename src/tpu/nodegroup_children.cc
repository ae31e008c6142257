// Provision the children (internal/nodegroup_phases.h): the ResourcePolicy and the
// InstanceTemplate first, the ManagedInstanceGroup once both are Ready (so the MIG is created in
// one go), each by server-side apply with a controller owner reference to the group.
#include <utility>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/json_diff.h"
#include "src/tpu/internal/nodegroup_phases.h"
#include "src/tpu/internal/reasons.h"

namespace hyperslice::tpu::internal {

namespace {

namespace json = boost::json;
using kube::ObjectPtr;

constexpr char kKindGroup[] = "TPUNodeGroup";

}  // namespace

ChildState ChildStateOf(const ObjectPtr& child, const std::string& what) {
  ChildState s;
  if (!child) {
    s.reason = reason::kCreating;
    s.message = what + " not created yet";
    return s;
  }
  s.exists = true;
  auto c = kube::FindCondition(*child, kCondReady);
  if (!c) {
    s.reason = reason::kCreating;
    s.message = what + " is being created";
    return s;
  }
  if (c->observed_generation < kube::Generation(*child)) {
    s.reason = reason::kReconciling;
    s.message = what + " is being reconciled";
    return s;
  }
  s.ready = c->status == "True";
  s.reason = c->reason.empty() ? (s.ready ? "Ready" : "NotReady") : c->reason;
  s.message = c->message;
  return s;
}

bool ChildUpToDate(const kube::Object& cached, const json::object& spec, const std::string& uid) {
  std::vector<std::string> diff;
  const auto* have = cached.if_contains("spec");
  JsonDifferences(spec, have ? *have : json::value(nullptr), "spec", diff);
  auto owner = kube::ControllerUid(cached);
  return diff.empty() && owner && *owner == uid;
}

std::optional<ChildState> MigWaiting(const ChildState& policy, const ChildState& tmpl,
                                     bool mig_exists) {
  if ((policy.ready && tmpl.ready) || mig_exists) return std::nullopt;
  std::vector<std::string> waiting;
  if (!policy.ready) waiting.push_back("ResourcePolicy");
  if (!tmpl.ready) waiting.push_back("InstanceTemplate");
  return ChildState{false, false, reason::kWaitingForPrerequisites,
                    "waiting for " + JoinNames(waiting) + " to be Ready before creating the MIG"};
}

GroupChildren::GroupChildren(std::shared_ptr<kube::Client> client, NodeGroupInformers informers,
                             std::string cluster_id)
    : client_(std::move(client)),
      informers_(std::move(informers)),
      cluster_id_(std::move(cluster_id)) {}

Status GroupChildren::Apply(const GroupCtx& ctx, const kube::Resource& r,
                            const json::object& spec) const {
  const std::string uid = ctx.Uid();
  if (ObjectPtr cached = (&r == &ResourcePolicies()    ? informers_.policies
                          : &r == &InstanceTemplates() ? informers_.templates
                                                       : informers_.migs)
                             ->store()
                             .Get(kube::ObjectKey(ctx.ns, ctx.name))) {
    if (ChildUpToDate(*cached, spec, uid)) return OkStatus();
  }
  json::object body{
      {"apiVersion", kApiVersion},
      {"kind", r.kind},
      {"metadata",
       json::object{{"name", ctx.name},
                    {"namespace", ctx.ns},
                    {"labels", json::object{{kLabelNodeGroup, ctx.label_value}}},
                    {"ownerReferences", json::array{json::object{{"apiVersion", kApiVersion},
                                                                 {"kind", kKindGroup},
                                                                 {"name", ctx.name},
                                                                 {"uid", uid},
                                                                 {"controller", true},
                                                                 {"blockOwnerDeletion", true}}}}}},
      {"spec", spec}};
  auto applied = client_->Patch(r, ctx.ns, ctx.name, kube::PatchType::kApply, json::serialize(body),
                                {.field_manager = kParentFieldManager, .force = true});
  if (!applied.ok()) return applied.error();
  return OkStatus();
}

ChildrenState GroupChildren::Provision(GroupCtx& ctx) const {
  const NodeGroupSpec& s = *ctx.spec;
  const std::string key = kube::ObjectKey(ctx.ns, ctx.name);
  ChildrenState out;

  // Prerequisites of the MIG: the workload policy and the instance template.
  if (s.NeedsResourcePolicy()) {
    if (Status st = Apply(ctx, ResourcePolicies(), ResourcePolicySpec(s)); !st.ok()) {
      ctx.errors.push_back("ResourcePolicy: " + st.error().message);
    }
    out.policy =
        ChildStateOf(informers_.policies->store().Get(key),
                     "ResourcePolicy " + ctx.name + " (resourcePolicy " + PolicyGceName(s) + ")");
  } else {
    out.policy = {false, true, reason::kNotRequired,
                  "a single-host slice (" + s.topology + ") needs no workload policy"};
  }

  if (s.OwnsInstanceTemplate()) {
    auto spec = InstanceTemplateSpec(s, cluster_id_);
    if (!spec.ok()) {
      ctx.errors.push_back("InstanceTemplate: " + spec.error().message);
    } else if (Status st = Apply(ctx, InstanceTemplates(), *spec); !st.ok()) {
      ctx.errors.push_back("InstanceTemplate: " + st.error().message);
    }
    out.tmpl = ChildStateOf(
        informers_.templates->store().Get(key),
        "InstanceTemplate " + ctx.name + " (instanceTemplate " + TemplateGceName(s) + ")");
  } else {
    out.tmpl = {false, true, reason::kUserProvided,
                "using spec.instanceTemplateURI " + s.instance_template_uri};
  }

  // The MIG, once it can be created in one go (or already exists: keep it applied).
  out.mig_obj = informers_.migs->store().Get(key);
  if (auto waiting = MigWaiting(out.policy, out.tmpl, out.mig_obj != nullptr)) {
    out.mig = *std::move(waiting);
  } else {
    if (Status st = Apply(ctx, ManagedInstanceGroups(), ManagedInstanceGroupSpec(s)); !st.ok()) {
      ctx.errors.push_back("ManagedInstanceGroup: " + st.error().message);
    }
    out.mig = ChildStateOf(out.mig_obj, "ManagedInstanceGroup " + ctx.name +
                                            " (instanceGroupManager " + MigGceName(s) + ")");
  }
  return out;
}

}  // namespace hyperslice::tpu::internal
