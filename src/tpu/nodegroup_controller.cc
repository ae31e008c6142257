// The TPUNodeGroup controller (internal/nodegroup_controller.h). A reconcile reads like the
// group's lifecycle:
//   finalizer → parse the spec (InvalidSpec stops here) → ResourcePolicy and InstanceTemplate →
//   ManagedInstanceGroup once both are Ready → VMs → Nodes (labels, taint, readiness) →
//   bootstrap → conditions and nodeSummary;
//   on deletion: cordon → MIG → template → policy (each waited for) → Nodes and token Secrets →
//   device-plugin need → finalizer removed.
#include "src/tpu/internal/nodegroup_controller.h"

#include <algorithm>
#include <utility>

#include <boost/json.hpp>

#include "src/base/log.h"
#include "src/kube/config.h"
#include "src/kube/manager.h"
#include "src/kube/object_helpers.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/device_plugin.h"
#include "src/tpu/internal/gce_child.h"

namespace hyperslice::tpu::internal {
namespace {

namespace json = boost::json;
using kube::Object;
using kube::ObjectPtr;

constexpr char kKindGroup[] = "TPUNodeGroup";

// Reasons of the group's own conditions.
constexpr char kReasonInvalidSpec[] = "InvalidSpec";
constexpr char kReasonNotRequired[] = "NotRequired";
constexpr char kReasonUserTemplate[] = "UserProvided";
constexpr char kReasonChildPending[] = "Creating";
constexpr char kReasonWaitingPrereqs[] = "WaitingForPrerequisites";
constexpr char kReasonWaitingInstances[] = "WaitingForInstances";
constexpr char kReasonNodesNotJoined[] = "NodesNotJoined";
constexpr char kReasonNodeNotReady[] = "NodeNotReady";
constexpr char kReasonChipsUnavailable[] = "TPUChipsUnavailable";
constexpr char kReasonNodesReady[] = "NodesReady";
constexpr char kReasonSliceReady[] = "SliceReady";
constexpr char kReasonDeleting[] = "Deleting";
constexpr char kReasonApplyFailed[] = "ApplyFailed";

// Reasons that describe progress, not trouble: their False conditions are Normal events.
bool IsProgressReason(const std::string& r) {
  static const std::set<std::string> kProgress = {
      kReasonChildPending, kReasonWaitingPrereqs, kReasonWaitingInstances, kReasonNodesNotJoined,
      kReasonDeleting,     "InstancesNotRunning", kReasonNodeNotReady,     "Reconciling"};
  return kProgress.count(r) > 0;
}

bool NotImplemented(const Error& e) { return e.reason == "NotImplemented"; }

const json::array* ArrayAt(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v != nullptr && v->is_array() ? &v->as_array() : nullptr;
}

// The Ready condition of a child, when it describes the child's current generation.
struct ChildState {
  bool exists = false;
  bool ready = false;
  std::string reason, message;
};
ChildState StateOf(const ObjectPtr& child, const std::string& what) {
  ChildState s;
  if (!child) {
    s.reason = kReasonChildPending;
    s.message = what + " not created yet";
    return s;
  }
  s.exists = true;
  auto c = kube::FindCondition(*child, kCondReady);
  if (!c) {
    s.reason = kReasonChildPending;
    s.message = what + " is being created";
    return s;
  }
  if (c->observed_generation < kube::Generation(*child)) {
    s.reason = "Reconciling";
    s.message = what + " is being reconciled";
    return s;
  }
  s.ready = c->status == "True";
  s.reason = c->reason.empty() ? (s.ready ? "Ready" : "NotReady") : c->reason;
  s.message = c->message;
  return s;
}

bool NodeIsReady(const Object& node) {
  auto c = kube::FindCondition(node, "Ready");
  return c && c->status == "True";
}

// A Ready Node whose device plugin reports fewer healthy chips (allocatable google.com/tpu) than
// its machine type has: the slice cannot run a workload over its whole topology, so the slice is
// not Ready. Which chip is known to the kubelet and the device plugin (its log names it), not to
// the API. A Node without google.com/tpu (no device plugin registered yet) is not judged here.
std::optional<std::string> ChipShortfall(const Object& node, int chips_per_host) {
  const auto* status = ObjectAt(node, "status");
  const auto* alloc = status ? ObjectAt(*status, "allocatable") : nullptr;
  if (alloc == nullptr || chips_per_host <= 0) return std::nullopt;
  std::string have = StringAt(*alloc, kTpuResourceName);
  if (have.empty()) return std::nullopt;
  long n = std::strtol(have.c_str(), nullptr, 10);
  if (n >= chips_per_host) return std::nullopt;
  return "node " + std::string(kube::MetaString(node, "name")) + " has " + std::to_string(n) +
         " of " + std::to_string(chips_per_host) +
         " TPU chips allocatable (the device plugin reports " + std::to_string(chips_per_host - n) +
         " unhealthy or missing)";
}

std::string NodeNotReadyWhy(const Object& node) {
  auto c = kube::FindCondition(node, "Ready");
  if (!c) return "has no Ready condition";
  std::string why = "Ready=" + c->status;
  if (!c->reason.empty()) why += " (" + c->reason + ")";
  if (!c->message.empty()) why += ": " + c->message;
  return why;
}

// What the operator reads of a Node, and nothing else: a kubelet's Node carries images, nodeInfo,
// addresses, volumes and annotations (several KiB, most of it churning) that, cached for
// thousands of Nodes, would dominate the operator's memory.
void TrimNode(Object& node) {
  Object out;
  if (const auto* meta = ObjectAt(node, "metadata")) {
    json::object m;
    for (const char* k : {"name", "uid", "resourceVersion", "labels", "deletionTimestamp"}) {
      if (const auto* v = meta->if_contains(k)) m[k] = *v;
    }
    out["metadata"] = std::move(m);
  }
  if (const auto* spec = ObjectAt(node, "spec")) {
    json::object sp;
    for (const char* k : {"providerID", "unschedulable", "taints"}) {
      if (const auto* v = spec->if_contains(k)) sp[k] = *v;
    }
    out["spec"] = std::move(sp);
  }
  if (const auto* status = ObjectAt(node, "status")) {
    json::array conditions;
    if (const auto* list = ArrayAt(*status, "conditions")) {
      for (const auto& c : *list) {
        if (!c.is_object() || StringAt(c.as_object(), "type") != "Ready") continue;
        json::object ready = c.as_object();
        ready.erase("lastHeartbeatTime");  // changes on every heartbeat; never read
        conditions.push_back(std::move(ready));
      }
    }
    json::object trimmed{{"conditions", std::move(conditions)}};
    // google.com/tpu only: whether the device plugin reports every chip healthy.
    for (const char* k : {"capacity", "allocatable"}) {
      const auto* res = ObjectAt(*status, k);
      if (res == nullptr) continue;
      if (const auto* v = res->if_contains(kTpuResourceName))
        trimmed[k] = json::object{{kTpuResourceName, *v}};
    }
    out["status"] = std::move(trimmed);
  }
  node = std::move(out);
}

std::string NodeName(const Object& node) { return std::string(kube::MetaString(node, "name")); }

std::string JoinNames(const std::vector<std::string>& v, size_t max = 5) {
  std::string out;
  for (size_t i = 0; i < v.size() && i < max; ++i) {
    if (!out.empty()) out += ", ";
    out += v[i];
  }
  if (v.size() > max) out += " and " + std::to_string(v.size() - max) + " more";
  return out;
}

}  // namespace

struct NodeGroupReconciler::Ctx {
  std::string key, ns, name;
  Object group;
  json::object status;  // being built
  json::object written;
  int64_t generation = 0;
  std::optional<NodeGroupSpec> spec;
  std::string label_value;  // NodeGroupLabelValue(ns, name)
};

NodeGroupReconciler::NodeGroupReconciler(OperatorOptions options, NodeGroupInformers informers,
                                         std::shared_ptr<kube::EventRecorder> events)
    : options_(std::move(options)),
      informers_(std::move(informers)),
      groups_(&informers_.groups->store()),
      events_(std::move(events)) {}

Status NodeGroupReconciler::AddIndexes(const NodeGroupInformers& inf) {
  if (!inf.nodes->store().HasIndex(kNodeProviderIdIndex)) {
    HS_RETURN_IF_ERROR(
        inf.nodes->AddIndex(kNodeProviderIdIndex, kube::FieldIndexFunc("spec.providerID")));
  }
  if (!inf.nodes->store().HasIndex(kNodeGroupGuessIndex)) {
    HS_RETURN_IF_ERROR(inf.nodes->AddIndex(kNodeGroupGuessIndex, [](const Object& n) {
      std::vector<std::string> out;
      const auto* meta = ObjectAt(n, "metadata");
      const auto* labels = meta ? ObjectAt(*meta, "labels") : nullptr;
      if (std::string v = labels ? StringAt(*labels, kLabelNodeGroup) : ""; !v.empty()) {
        out.push_back("label:" + v);
      }
      const auto* spec = ObjectAt(n, "spec");
      auto ref = ParseProviderId(spec ? StringAt(*spec, "providerID") : "");
      if (ref.ok()) {
        if (size_t dash = ref->name.rfind('-'); dash != std::string::npos && dash > 0) {
          out.push_back("base:" + ref->project + "/" + ref->zone + "/" + ref->name.substr(0, dash));
        }
      }
      return out;
    }));
  }
  if (!inf.migs->store().HasIndex(kMigInstanceProviderIdIndex)) {
    HS_RETURN_IF_ERROR(inf.migs->AddIndex(kMigInstanceProviderIdIndex, [](const Object& mig) {
      std::vector<std::string> out;
      const auto* st = ObjectAt(mig, "status");
      const auto* list = st ? ArrayAt(*st, "instances") : nullptr;
      if (list == nullptr) return out;
      for (const auto& i : *list) {
        if (!i.is_object()) continue;
        std::string id = StringAt(i.as_object(), "providerID");
        if (!id.empty()) out.push_back(std::move(id));
      }
      return out;
    }));
  }
  if (!inf.groups->store().HasIndex(kGroupNodeLabelIndex)) {
    HS_RETURN_IF_ERROR(inf.groups->AddIndex(kGroupNodeLabelIndex, [](const Object& g) {
      return std::vector<std::string>{
          NodeGroupLabelValue(kube::MetaString(g, "namespace"), kube::MetaString(g, "name"))};
    }));
  }
  return OkStatus();
}

std::vector<std::string> NodeGroupReconciler::GroupsOfNode(const NodeGroupInformers& inf,
                                                           const Object& node) {
  std::set<std::string> keys;
  const auto* spec = ObjectAt(node, "spec");
  std::string provider_id = spec ? StringAt(*spec, "providerID") : "";
  if (!provider_id.empty()) {
    // Each child is named like its group, so the MIG child's key is the group's key.
    if (auto migs = inf.migs->store().IndexKeys(kMigInstanceProviderIdIndex, provider_id);
        migs.ok()) {
      keys.insert(migs->begin(), migs->end());
    }
  }
  if (const auto* meta = ObjectAt(node, "metadata")) {
    if (const auto* labels = ObjectAt(*meta, "labels")) {
      std::string value = StringAt(*labels, kLabelNodeGroup);
      if (!value.empty()) {
        if (auto groups = inf.groups->store().IndexKeys(kGroupNodeLabelIndex, value); groups.ok()) {
          keys.insert(groups->begin(), groups->end());
        }
      }
    }
  }
  return {keys.begin(), keys.end()};
}

// --- helpers -------------------------------------------------------------------------------

void NodeGroupReconciler::SetCondition(Ctx& ctx, const std::string& type, bool status,
                                       const std::string& reason, const std::string& message) {
  Object holder{{"status", ctx.status}};
  auto before = kube::FindCondition(holder, type);
  kube::Condition c;
  c.type = type;
  c.status = status ? "True" : "False";
  c.reason = reason;
  c.message = message.empty() ? reason : message;
  c.observed_generation = ctx.generation;
  kube::SetCondition(holder, c);
  ctx.status = holder.at("status").as_object();
  bool changed = !before || before->status != c.status || before->reason != c.reason ||
                 before->message != c.message;
  if (!changed) return;
  // Losing readiness is a warning whatever the reason; so is any reason that is not progress.
  const bool lost = before && before->status == "True" && !status;
  const bool warning = lost || (!status && !IsProgressReason(reason));
  // Events for what a user acts on: the Ready condition turning True or False, and a warning's
  // first appearance (per reason). The steps in between (reasons while creating, progress counts
  // in messages, the other conditions' normal progress) are in status, in the log and in the
  // children's own Events.
  const bool status_changed = !before || before->status != c.status;
  const bool new_warning = warning && (status_changed || before->reason != c.reason);
  if (events_ && ((type == kCondReady && status_changed) || new_warning)) {
    events_->Event(ctx.group, warning ? kube::EventType::kWarning : kube::EventType::kNormal,
                   reason, type + "=" + c.status + ": " + c.message);
  }
  log::Write(warning ? log::Level::kWarn : log::Level::kInfo, "tpunodegroup condition",
             {{"group", ctx.key},
              {"type", type},
              {"status", c.status},
              {"reason", reason},
              {"message", c.message}});
}

Status NodeGroupReconciler::WriteStatus(Ctx& ctx) {
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

Status NodeGroupReconciler::ApplyChild(Ctx& ctx, const kube::Resource& r,
                                       const json::object& spec) {
  const auto& gmeta = ctx.group.at("metadata").as_object();
  const std::string uid = StringAt(gmeta, "uid");
  if (ObjectPtr cached = (&r == &ResourcePolicies()    ? informers_.policies
                          : &r == &InstanceTemplates() ? informers_.templates
                                                       : informers_.migs)
                             ->store()
                             .Get(kube::ObjectKey(ctx.ns, ctx.name))) {
    std::vector<std::string> diff;
    const auto* have = cached->if_contains("spec");
    JsonDifferences(spec, have ? *have : json::value(nullptr), "spec", diff);
    auto owner = kube::ControllerUid(*cached);
    if (diff.empty() && owner && *owner == uid) return OkStatus();
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
  auto applied =
      options_.client->Patch(r, ctx.ns, ctx.name, kube::PatchType::kApply, json::serialize(body),
                             {.field_manager = kParentFieldManager, .force = true});
  if (!applied.ok()) return applied.error();
  return OkStatus();
}

std::vector<ObjectPtr> NodeGroupReconciler::GroupNodes(Ctx& ctx) const {
  std::map<std::string, ObjectPtr> found;
  if (ObjectPtr mig = informers_.migs->store().Get(kube::ObjectKey(ctx.ns, ctx.name))) {
    const auto* st = ObjectAt(*mig, "status");
    if (const auto* list = st ? ArrayAt(*st, "instances") : nullptr) {
      for (const auto& i : *list) {
        if (!i.is_object()) continue;
        auto nodes = informers_.nodes->store().ByIndex(kNodeProviderIdIndex,
                                                       StringAt(i.as_object(), "providerID"));
        if (!nodes.ok()) continue;
        for (auto& n : *nodes) found[NodeName(*n)] = n;
      }
    }
  }
  std::vector<std::string> guesses = {"label:" + ctx.label_value};
  if (ctx.spec) {
    guesses.push_back("base:" + ctx.spec->project + "/" + ctx.spec->zone + "/" +
                      BaseInstanceName(*ctx.spec));
  }
  for (const std::string& g : guesses) {
    auto nodes = informers_.nodes->store().ByIndex(kNodeGroupGuessIndex, g);
    if (!nodes.ok()) continue;
    for (auto& n : *nodes) found[NodeName(*n)] = n;
  }
  std::vector<ObjectPtr> out;
  out.reserve(found.size());
  for (auto& [_, n] : found) out.push_back(n);
  return out;
}

Status NodeGroupReconciler::EnsureNodeLabels(Ctx& ctx, const Object& node) {
  const auto labels_want = NodeLabels(*ctx.spec);
  const auto* meta = ObjectAt(node, "metadata");
  const auto* labels = meta ? ObjectAt(*meta, "labels") : nullptr;
  json::object label_patch;
  for (const auto& [k, v] : labels_want) {
    if (labels == nullptr || StringAt(*labels, k) != v) label_patch[k] = v;
  }
  const auto* spec = ObjectAt(node, "spec");
  const json::array* taints = spec ? ArrayAt(*spec, "taints") : nullptr;
  bool has_taint = false;
  if (taints != nullptr) {
    for (const auto& t : *taints) {
      if (t.is_object() && StringAt(t.as_object(), "key") == kTaintKey &&
          StringAt(t.as_object(), "effect") == kTaintEffect) {
        has_taint = true;
      }
    }
  }
  if (label_patch.empty() && has_taint) return OkStatus();
  json::object patch;
  json::object meta_patch;
  if (!label_patch.empty()) meta_patch["labels"] = std::move(label_patch);
  if (!has_taint) {
    // Only the taint list needs the version guard (labels merge key by key).
    meta_patch["resourceVersion"] = std::string(kube::ResourceVersionOf(node));
  }
  patch["metadata"] = std::move(meta_patch);
  if (!has_taint) {
    // A merge patch replaces the whole list: keep the others, guarded by resourceVersion.
    json::array all = taints ? *taints : json::array{};
    all.push_back(
        json::object{{"key", kTaintKey}, {"value", kTaintValue}, {"effect", kTaintEffect}});
    patch["spec"] = json::object{{"taints", std::move(all)}};
  }
  auto r = options_.client->Patch(kube::resources::Nodes(), "", NodeName(node),
                                  kube::PatchType::kMerge, json::serialize(patch));
  if (!r.ok()) return r.error();
  log::Info("node labelled", {{"group", ctx.key}, {"node", NodeName(node)}});
  return OkStatus();
}

void NodeGroupReconciler::EnsureDevicePlugin(const std::string& exclude_key) {
  // Any one live group will do: stop at the first (this runs on every reconcile; a full scan
  // of a thousand groups each time was quadratic in the number of groups).
  const bool needed = informers_.groups->store().AnyOf([&](const Object& g) {
    const auto* meta = ObjectAt(g, "metadata");
    if (meta == nullptr || meta->contains("deletionTimestamp")) return false;
    return exclude_key.empty() || kube::ObjectKey(g) != exclude_key;
  });
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (device_plugin_applied_ && *device_plugin_applied_ == needed) return;
  }
  Status s = EnsureDevicePluginDaemonSet(*options_.client, options_.device_plugin_namespace,
                                         options_.device_plugin_image, needed);
  if (!s.ok()) {
    if (!NotImplemented(s.error())) {
      log::Warn("device-plugin DaemonSet", {{"needed", needed}, {"error", s.error().message}});
    }
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  device_plugin_applied_ = needed;
}

Result<std::string> NodeGroupReconciler::CaHash() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ca_hash_.empty()) return ca_hash_;
  }
  std::string pem = options_.cluster_ca_pem;
  if (pem.empty()) {
    auto info = options_.client->Get(kube::resources::ConfigMaps(), "kube-public", "cluster-info");
    if (info.ok()) {
      const auto* data = ObjectAt(*info, "data");
      std::string kubeconfig = data ? StringAt(*data, "kubeconfig") : "";
      if (!kubeconfig.empty()) {
        auto cfg = kube::ParseKubeconfig(kubeconfig, "/");
        if (cfg.ok()) pem = cfg->tls.ca_pem;
      }
    }
  }
  if (pem.empty()) pem = options_.client->config().tls.ca_pem;
  if (pem.empty()) {
    return Error::Make(Error::Code::kNotFound,
                       "no cluster CA: pass --cluster-ca-file, or publish kube-public/cluster-info",
                       "NoClusterCA");
  }
  HS_ASSIGN_OR_RETURN(std::string hash, CaCertHash(pem));
  std::lock_guard<std::mutex> lock(mu_);
  ca_hash_ = hash;
  return hash;
}

Bootstrapper* NodeGroupReconciler::BootstrapperOrNull() {
  std::lock_guard<std::mutex> lock(mu_);
  return bootstrapper_.get();
}

// --- reconcile ------------------------------------------------------------------------------

Result<kube::ReconcileResult> NodeGroupReconciler::Reconcile(const std::string& key) {
  Ctx ctx;
  ctx.key = key;
  std::tie(ctx.ns, ctx.name) = kube::Controller::SplitKey(key);
  ctx.label_value = NodeGroupLabelValue(ctx.ns, ctx.name);
  kube::ObjectPtr cached = groups_.Get(key);
  if (!cached) {
    EnsureDevicePlugin(key);
    return kube::ReconcileResult{};
  }
  ctx.group = kube::DeepCopy(*cached);
  ctx.generation = kube::Generation(ctx.group);
  if (const auto* s = ObjectAt(ctx.group, "status")) ctx.status = *s;
  ctx.written = ctx.status;
  if (auto parsed = ParseNodeGroup(ctx.group); parsed.ok()) ctx.spec = std::move(parsed).value();
  if (ctx.group.at("metadata").as_object().contains("deletionTimestamp")) {
    return ReconcileDeletion(ctx);
  }
  return ReconcileLive(ctx);
}

Result<kube::ReconcileResult> NodeGroupReconciler::ReconcileLive(Ctx& ctx) {
  // 1. The finalizer first: nothing is created that the teardown could not find.
  if (!kube::HasFinalizer(ctx.group, kNodeGroupFinalizer)) {
    Object obj = ctx.group;
    kube::AddFinalizer(obj, kNodeGroupFinalizer);
    HS_ASSIGN_OR_RETURN(ctx.group, options_.client->Update(TPUNodeGroups(), ctx.ns, obj));
    groups_.Mutated(ctx.group);
  }
  EnsureDevicePlugin("");

  // 2. The spec. An invalid one creates nothing; the user's edit wakes us.
  auto parsed = ParseNodeGroup(ctx.group);
  if (!parsed.ok()) {
    std::string msg = parsed.error().message;
    SetCondition(ctx, kCondReady, false, kReasonInvalidSpec, msg);
    for (const char* t : {kCondResourcePolicyReady, kCondInstanceTemplateReady,
                          kCondManagedInstanceGroupReady, kCondNodesReady}) {
      SetCondition(ctx, t, false, kReasonInvalidSpec, "the spec is invalid; see Ready");
    }
    HS_RETURN_IF_ERROR(WriteStatus(ctx));
    return kube::ReconcileResult{};
  }
  const NodeGroupSpec& s = *ctx.spec;
  const std::string key = kube::ObjectKey(ctx.ns, ctx.name);
  std::vector<std::string> errors;

  // 3. Prerequisites of the MIG: the workload policy and the instance template.
  ChildState policy;
  if (s.NeedsResourcePolicy()) {
    if (Status st = ApplyChild(ctx, ResourcePolicies(), ResourcePolicySpec(s)); !st.ok()) {
      errors.push_back("ResourcePolicy: " + st.error().message);
    }
    policy = StateOf(informers_.policies->store().Get(key),
                     "ResourcePolicy " + ctx.name + " (resourcePolicy " + PolicyGceName(s) + ")");
  } else {
    policy = {false, true, kReasonNotRequired,
              "a single-host slice (" + s.topology + ") needs no workload policy"};
  }
  SetCondition(ctx, kCondResourcePolicyReady, policy.ready, policy.reason, policy.message);

  ChildState tmpl;
  if (s.OwnsInstanceTemplate()) {
    auto spec = InstanceTemplateSpec(s, options_.cluster_id);
    if (!spec.ok()) {
      errors.push_back("InstanceTemplate: " + spec.error().message);
    } else if (Status st = ApplyChild(ctx, InstanceTemplates(), *spec); !st.ok()) {
      errors.push_back("InstanceTemplate: " + st.error().message);
    }
    tmpl =
        StateOf(informers_.templates->store().Get(key),
                "InstanceTemplate " + ctx.name + " (instanceTemplate " + TemplateGceName(s) + ")");
  } else {
    tmpl = {false, true, kReasonUserTemplate,
            "using spec.instanceTemplateURI " + s.instance_template_uri};
  }
  SetCondition(ctx, kCondInstanceTemplateReady, tmpl.ready, tmpl.reason, tmpl.message);

  // 4. The MIG, once it can be created in one go (or already exists: keep it applied).
  ObjectPtr mig_obj = informers_.migs->store().Get(key);
  ChildState mig;
  if ((policy.ready && tmpl.ready) || mig_obj) {
    if (Status st = ApplyChild(ctx, ManagedInstanceGroups(), ManagedInstanceGroupSpec(s));
        !st.ok()) {
      errors.push_back("ManagedInstanceGroup: " + st.error().message);
    }
    mig = StateOf(mig_obj, "ManagedInstanceGroup " + ctx.name + " (instanceGroupManager " +
                               MigGceName(s) + ")");
  } else {
    std::vector<std::string> waiting;
    if (!policy.ready) waiting.push_back("ResourcePolicy");
    if (!tmpl.ready) waiting.push_back("InstanceTemplate");
    mig = {false, false, kReasonWaitingPrereqs,
           "waiting for " + JoinNames(waiting) + " to be Ready before creating the MIG"};
  }
  SetCondition(ctx, kCondManagedInstanceGroupReady, mig.ready, mig.reason, mig.message);

  // 5. VMs and their Nodes.
  std::vector<InstanceState> instances;
  int running = 0, failed = 0;
  if (mig_obj) {
    const auto* st = ObjectAt(*mig_obj, "status");
    if (const auto* list = st ? ArrayAt(*st, "instances") : nullptr) {
      for (const auto& v : *list) {
        if (!v.is_object()) continue;
        const auto& i = v.as_object();
        InstanceState is{s.project, StringAt(i, "zone"), StringAt(i, "name"),
                         StringAt(i, "instanceStatus"), StringAt(i, "providerID")};
        if (is.zone.empty()) is.zone = s.zone;
        if (is.provider_id.empty()) is.provider_id = ProviderId(is.project, is.zone, is.name);
        if (is.instance_status == "RUNNING") ++running;
        static const std::set<std::string> kFailed = {"STOPPING", "STOPPED", "TERMINATED",
                                                      "SUSPENDING", "SUSPENDED"};
        if (kFailed.count(is.instance_status) > 0 || i.contains("lastAttempt")) ++failed;
        instances.push_back(std::move(is));
      }
    }
  }
  std::set<std::string> joined;
  std::vector<std::string> not_joined, not_ready, chips_missing;
  bool retry = false;
  int ready_nodes = 0;
  for (const auto& is : instances) {
    auto nodes = informers_.nodes->store().ByIndex(kNodeProviderIdIndex, is.provider_id);
    if (!nodes.ok() || nodes->empty()) {
      not_joined.push_back(is.name);
      continue;
    }
    const Object& node = *nodes->front();
    joined.insert(is.provider_id);
    if (Status st = EnsureNodeLabels(ctx, node); !st.ok()) {
      if (st.error().code == Error::Code::kConflict) {
        retry = true;  // the kubelet wrote the Node meanwhile: its update event wakes us too
      } else {
        errors.push_back("labelling node " + NodeName(node) + ": " + st.error().message);
      }
    }
    if (!NodeIsReady(node)) {
      not_ready.push_back("node " + NodeName(node) + " " + NodeNotReadyWhy(node));
    } else if (auto shortfall = ChipShortfall(node, s.slice.machine_type.chips_per_host)) {
      chips_missing.push_back(*shortfall);
    } else {
      ++ready_nodes;
    }
  }

  // 6. Bootstrap: tokens and join values for RUNNING VMs whose Node has not joined.
  kube::ReconcileResult result;
  if (s.BootstrapEnabled() && !instances.empty()) {
    auto hash = CaHash();
    if (!hash.ok()) {
      errors.push_back("bootstrap: " + hash.error().message);
    } else {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!bootstrapper_) {
          BootstrapOptions bo;
          bo.ca_hash = *hash;
          bo.clock = options_.clock;
          bootstrapper_ = std::make_unique<Bootstrapper>(options_.client, options_.compute, bo);
        }
      }
      auto report = BootstrapperOrNull()->Reconcile(ctx.group, instances, joined);
      if (!report.ok()) {
        if (!NotImplemented(report.error())) {
          errors.push_back("bootstrap: " + report.error().message);
        }
      } else if (!report->waiting.empty()) {
        // A token expires after an hour: look again before it must be replaced. A join wakes
        // us at once through the Node's events.
        result.requeue_after = std::chrono::minutes(10);
      }
    }
  }

  // 7. Conditions and summary.
  const int desired = s.node_count;
  const bool all_vms = mig.ready && static_cast<int>(instances.size()) == desired;
  if (!mig.ready && instances.empty()) {
    SetCondition(ctx, kCondNodesReady, false, kReasonWaitingInstances,
                 "0 of " + std::to_string(desired) + " VMs exist; see ManagedInstanceGroupReady");
  } else if (!not_ready.empty()) {
    SetCondition(ctx, kCondNodesReady, false, kReasonNodeNotReady, JoinNames(not_ready));
  } else if (!chips_missing.empty()) {
    SetCondition(ctx, kCondNodesReady, false, kReasonChipsUnavailable, JoinNames(chips_missing));
  } else if (!not_joined.empty()) {
    SetCondition(ctx, kCondNodesReady, false, kReasonNodesNotJoined,
                 std::to_string(not_joined.size()) + " of " + std::to_string(desired) +
                     " VMs have no Node yet: " + JoinNames(not_joined));
  } else if (!all_vms) {
    SetCondition(ctx, kCondNodesReady, false, kReasonWaitingInstances,
                 std::to_string(ready_nodes) + " of " + std::to_string(desired) +
                     " Nodes Ready; the MIG is not Ready (" + mig.reason + ")");
  } else {
    SetCondition(ctx, kCondNodesReady, true, kReasonNodesReady,
                 "all " + std::to_string(desired) + " Nodes of the slice are Ready");
  }
  auto nodes_cond = kube::FindCondition(Object{{"status", ctx.status}}, kCondNodesReady);
  const bool nodes_ready = nodes_cond && nodes_cond->status == "True";

  if (!errors.empty()) {
    SetCondition(ctx, kCondReady, false, kReasonApplyFailed, JoinNames(errors, 3));
  } else if (nodes_ready && policy.ready && tmpl.ready && mig.ready) {
    SetCondition(ctx, kCondReady, true, kReasonSliceReady,
                 "slice " + s.topology + " of " + std::to_string(desired) + " x " +
                     s.slice.machine_type.name + " is Ready");
  } else if (!policy.ready) {
    SetCondition(ctx, kCondReady, false, policy.reason, "ResourcePolicy: " + policy.message);
  } else if (!tmpl.ready) {
    SetCondition(ctx, kCondReady, false, tmpl.reason, "InstanceTemplate: " + tmpl.message);
  } else if (!not_ready.empty()) {
    // A lost or unhealthy host names itself, whatever the MIG is doing about it.
    SetCondition(ctx, kCondReady, false, kReasonNodeNotReady, JoinNames(not_ready));
  } else if (!chips_missing.empty()) {
    SetCondition(ctx, kCondReady, false, kReasonChipsUnavailable, JoinNames(chips_missing));
  } else if (!mig.ready) {
    SetCondition(ctx, kCondReady, false, mig.reason, "ManagedInstanceGroup: " + mig.message);
  } else {
    SetCondition(ctx, kCondReady, false, nodes_cond->reason, nodes_cond->message);
  }

  json::object summary{{"desired", desired},
                       {"running", running},
                       {"joined", static_cast<int64_t>(joined.size())},
                       {"ready", ready_nodes},
                       {"failed", failed}};
  ctx.status["nodeSummary"] = std::move(summary);
  HS_RETURN_IF_ERROR(WriteStatus(ctx));
  if (!errors.empty()) {
    return Error::Make(Error::Code::kUnavailable, JoinNames(errors, 3), kReasonApplyFailed);
  }
  if (retry) result.requeue = true;
  return result;
}

Result<kube::ReconcileResult> NodeGroupReconciler::ReconcileDeletion(Ctx& ctx) {
  if (!kube::HasFinalizer(ctx.group, kNodeGroupFinalizer)) return kube::ReconcileResult{};
  SetCondition(ctx, kCondReady, false, kReasonDeleting, "tearing the slice down");

  // 1. Cordon: no new Pods on a slice that is going away.
  std::vector<ObjectPtr> nodes = GroupNodes(ctx);
  for (const ObjectPtr& n : nodes) {
    const auto* spec = ObjectAt(*n, "spec");
    const auto* u = spec ? spec->if_contains("unschedulable") : nullptr;
    if (u != nullptr && u->is_bool() && u->as_bool()) continue;
    auto r = options_.client->Patch(kube::resources::Nodes(), "", NodeName(*n),
                                    kube::PatchType::kMerge, R"({"spec":{"unschedulable":true}})");
    if (!r.ok() && r.error().code != Error::Code::kNotFound) return r.error();
    if (r.ok()) log::Info("node cordoned", {{"group", ctx.key}, {"node", NodeName(*n)}});
  }

  // 2. GCE resources through their children, MIG → template → policy, each gone before the
  // next is deleted (a template in use by a MIG cannot be deleted).
  struct Step {
    const kube::Resource* r;
    const char* what;
  };
  for (const Step& step : {Step{&ManagedInstanceGroups(), "ManagedInstanceGroup"},
                           Step{&InstanceTemplates(), "InstanceTemplate"},
                           Step{&ResourcePolicies(), "ResourcePolicy"}}) {
    // The informer's copy while the child exists (no GET per reconcile while its deletion runs);
    // only "gone" is confirmed live, since the next step must not start before it is.
    const auto& inf = step.r == &ResourcePolicies()    ? informers_.policies
                      : step.r == &InstanceTemplates() ? informers_.templates
                                                       : informers_.migs;
    const std::string uid = StringAt(ctx.group.at("metadata").as_object(), "uid");
    const std::string gone_key = uid + "/" + step.r->kind;
    Result<Object> child = Error::Make(Error::Code::kNotFound, "not cached");
    if (ObjectPtr cached = inf->store().Get(kube::ObjectKey(ctx.ns, ctx.name))) {
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
    auto owner = kube::ControllerUid(*child);
    if (owner && *owner != uid) continue;  // another group's child of the same name
    const auto& meta = child->at("metadata").as_object();
    if (!meta.contains("deletionTimestamp")) {
      Status del = options_.client->Delete(
          *step.r, ctx.ns, ctx.name,
          {.propagation_policy = "Background", .precondition_uid = StringAt(meta, "uid")});
      if (!del.ok() && del.error().code != Error::Code::kNotFound) return del.error();
      SetCondition(ctx, kCondReady, false, kReasonDeleting,
                   std::string("deleting ") + step.what + " " + ctx.name);
    } else {
      auto c = kube::FindCondition(*child, kCondReady);
      SetCondition(ctx, kCondReady, false, kReasonDeleting,
                   std::string("waiting for ") + step.what + " " + ctx.name + " to be deleted" +
                       (c && !c->message.empty() ? " (" + c->message + ")" : ""));
    }
    HS_RETURN_IF_ERROR(WriteStatus(ctx));
    // The child's delete event wakes us; the delay is only a backstop.
    return kube::ReconcileResult{.requeue_after = std::chrono::seconds(30)};
  }

  // 3. The slice's Nodes and bootstrap token Secrets.
  for (const ObjectPtr& n : GroupNodes(ctx)) {
    Status del = options_.client->Delete(kube::resources::Nodes(), "", NodeName(*n));
    if (!del.ok() && del.error().code != Error::Code::kNotFound) return del.error();
    log::Info("node deleted", {{"group", ctx.key}, {"node", NodeName(*n)}});
  }
  {
    BootstrapOptions bo;
    bo.clock = options_.clock;
    Bootstrapper cleaner(options_.client, options_.compute, bo);
    Status cleaned = cleaner.Cleanup(ctx.group);
    if (!cleaned.ok() && !NotImplemented(cleaned.error())) return cleaned.error();
  }

  // 4. The device plugin is wanted only while some group lives.
  EnsureDevicePlugin(ctx.key);

  // 5. Let the group go.
  Object obj = ctx.group;
  kube::RemoveFinalizer(obj, kNodeGroupFinalizer);
  auto updated = options_.client->Update(TPUNodeGroups(), ctx.ns, obj);
  if (!updated.ok() && updated.error().code != Error::Code::kNotFound) return updated.error();
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string uid = StringAt(ctx.group.at("metadata").as_object(), "uid");
    for (const auto* r : {&ManagedInstanceGroups(), &InstanceTemplates(), &ResourcePolicies()}) {
      gone_confirmed_.erase(uid + "/" + r->kind);
    }
  }
  if (events_) {
    events_->Event(ctx.group, kube::EventType::kNormal, "Deleted",
                   "GCE resources, Nodes and bootstrap tokens removed");
  }
  log::Info("tpunodegroup deleted", {{"group", ctx.key}});
  return kube::ReconcileResult{};
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
  HS_RETURN_IF_ERROR(NodeGroupReconciler::AddIndexes(inf));

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
    for (const auto& key : NodeGroupReconciler::GroupsOfNode(inf, *node)) c->Enqueue(key);
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
  return OkStatus();
}

}  // namespace hyperslice::tpu::internal
