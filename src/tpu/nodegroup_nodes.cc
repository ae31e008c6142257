// Nodes and registration (internal/nodegroup_phases.h): the MIG child's VMs, the Nodes they
// registered as (found through indexes on the Node informer, never a scan), the labels and taint
// every slice Node carries, and which Nodes are Ready with every TPU chip.
#include <cstdlib>
#include <map>
#include <utility>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/nodegroup_phases.h"

namespace hyperslice::tpu::internal {

using jsonfield::ObjectField;
using jsonfield::StringValue;

namespace {

namespace json = boost::json;
using kube::Object;
using kube::ObjectPtr;

const json::array* ArrayAt(const json::object& o, std::string_view key) {
  return jsonfield::ArrayField(o, key);
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
  const auto* status = ObjectField(node, "status");
  const auto* alloc = status ? ObjectField(*status, "allocatable") : nullptr;
  if (alloc == nullptr || chips_per_host <= 0) return std::nullopt;
  std::string have = StringValue(*alloc, kTpuResourceName);
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

}  // namespace

std::string NodeName(const Object& node) { return std::string(kube::MetaString(node, "name")); }

// What the operator reads of a Node, and nothing else: a kubelet's Node carries images, nodeInfo,
// addresses, volumes and annotations (several KiB, most of it churning) that, cached for
// thousands of Nodes, would dominate the operator's memory.
void TrimNode(Object& node) {
  Object out;
  if (const auto* meta = ObjectField(node, "metadata")) {
    json::object m;
    for (const char* k : {"name", "uid", "resourceVersion", "labels", "deletionTimestamp"}) {
      if (const auto* v = meta->if_contains(k)) m[k] = *v;
    }
    out["metadata"] = std::move(m);
  }
  if (const auto* spec = ObjectField(node, "spec")) {
    json::object sp;
    for (const char* k : {"providerID", "unschedulable", "taints"}) {
      if (const auto* v = spec->if_contains(k)) sp[k] = *v;
    }
    out["spec"] = std::move(sp);
  }
  if (const auto* status = ObjectField(node, "status")) {
    json::array conditions;
    if (const auto* list = ArrayAt(*status, "conditions")) {
      for (const auto& c : *list) {
        if (!c.is_object() || StringValue(c.as_object(), "type") != "Ready") continue;
        json::object ready = c.as_object();
        ready.erase("lastHeartbeatTime");  // changes on every heartbeat; never read
        conditions.push_back(std::move(ready));
      }
    }
    json::object trimmed{{"conditions", std::move(conditions)}};
    // google.com/tpu only: whether the device plugin reports every chip healthy.
    for (const char* k : {"capacity", "allocatable"}) {
      const auto* res = ObjectField(*status, k);
      if (res == nullptr) continue;
      if (const auto* v = res->if_contains(kTpuResourceName))
        trimmed[k] = json::object{{kTpuResourceName, *v}};
    }
    out["status"] = std::move(trimmed);
  }
  node = std::move(out);
}

GroupNodes::GroupNodes(std::shared_ptr<kube::Client> client, NodeGroupInformers informers)
    : client_(std::move(client)), informers_(std::move(informers)) {}

Status GroupNodes::AddIndexes(const NodeGroupInformers& inf) {
  if (!inf.nodes->store().HasIndex(kNodeProviderIdIndex)) {
    HS_RETURN_IF_ERROR(
        inf.nodes->AddIndex(kNodeProviderIdIndex, kube::FieldIndexFunc("spec.providerID")));
  }
  if (!inf.nodes->store().HasIndex(kNodeGroupGuessIndex)) {
    HS_RETURN_IF_ERROR(inf.nodes->AddIndex(kNodeGroupGuessIndex, [](const Object& n) {
      std::vector<std::string> out;
      const auto* meta = ObjectField(n, "metadata");
      const auto* labels = meta ? ObjectField(*meta, "labels") : nullptr;
      if (std::string v = labels ? StringValue(*labels, kLabelNodeGroup) : ""; !v.empty()) {
        out.push_back("label:" + v);
      }
      const auto* spec = ObjectField(n, "spec");
      auto ref = ParseProviderId(spec ? StringValue(*spec, "providerID") : "");
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
      const auto* st = ObjectField(mig, "status");
      const auto* list = st ? ArrayAt(*st, "instances") : nullptr;
      if (list == nullptr) return out;
      for (const auto& i : *list) {
        if (!i.is_object()) continue;
        std::string id = StringValue(i.as_object(), "providerID");
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

std::vector<std::string> GroupNodes::GroupsOfNode(const NodeGroupInformers& inf,
                                                  const Object& node) {
  std::set<std::string> keys;
  const auto* spec = ObjectField(node, "spec");
  std::string provider_id = spec ? StringValue(*spec, "providerID") : "";
  if (!provider_id.empty()) {
    // Each child is named like its group, so the MIG child's key is the group's key.
    if (auto migs = inf.migs->store().IndexKeys(kMigInstanceProviderIdIndex, provider_id);
        migs.ok()) {
      keys.insert(migs->begin(), migs->end());
    }
  }
  if (const auto* meta = ObjectField(node, "metadata")) {
    if (const auto* labels = ObjectField(*meta, "labels")) {
      std::string value = StringValue(*labels, kLabelNodeGroup);
      if (!value.empty()) {
        if (auto groups = inf.groups->store().IndexKeys(kGroupNodeLabelIndex, value); groups.ok()) {
          keys.insert(groups->begin(), groups->end());
        }
      }
    }
  }
  return {keys.begin(), keys.end()};
}

MigInstances InstancesOfMig(const NodeGroupSpec& s, const ObjectPtr& mig) {
  MigInstances out;
  const auto* st = mig ? ObjectField(*mig, "status") : nullptr;
  const auto* list = st ? ArrayAt(*st, "instances") : nullptr;
  if (list == nullptr) return out;
  static const std::set<std::string> kFailed = {"STOPPING", "STOPPED", "TERMINATED", "SUSPENDING",
                                                "SUSPENDED"};
  for (const auto& v : *list) {
    if (!v.is_object()) continue;
    const auto& i = v.as_object();
    InstanceState is{s.project, StringValue(i, "zone"), StringValue(i, "name"),
                     StringValue(i, "instanceStatus"), StringValue(i, "providerID")};
    if (is.zone.empty()) is.zone = s.zone;
    if (is.provider_id.empty()) is.provider_id = ProviderId(is.project, is.zone, is.name);
    if (is.instance_status == "RUNNING") ++out.running;
    if (kFailed.count(is.instance_status) > 0 || i.contains("lastAttempt")) ++out.failed;
    out.instances.push_back(std::move(is));
  }
  return out;
}

NodeVerdict JudgeNode(const Object& node, int chips_per_host) {
  if (!NodeIsReady(node)) {
    return {NodeVerdict::Kind::kNotReady, "node " + NodeName(node) + " " + NodeNotReadyWhy(node)};
  }
  if (auto shortfall = ChipShortfall(node, chips_per_host)) {
    return {NodeVerdict::Kind::kChipsMissing, *shortfall};
  }
  return {};
}

NodesObservation GroupNodes::Observe(GroupCtx& ctx, const ObjectPtr& mig) const {
  const NodeGroupSpec& s = *ctx.spec;
  NodesObservation out;
  MigInstances vms = InstancesOfMig(s, mig);
  out.instances = std::move(vms.instances);
  out.running = vms.running;
  out.failed = vms.failed;
  for (const auto& is : out.instances) {
    auto nodes = informers_.nodes->store().ByIndex(kNodeProviderIdIndex, is.provider_id);
    if (!nodes.ok() || nodes->empty()) {
      out.not_joined.push_back(is.name);
      continue;
    }
    const Object& node = *nodes->front();
    out.joined.insert(is.provider_id);
    if (Status st = EnsureLabels(ctx, node); !st.ok()) {
      if (st.error().code == Error::Code::kConflict) {
        out.retry = true;  // the kubelet wrote the Node meanwhile: its update event wakes us too
      } else {
        ctx.errors.push_back("labelling node " + NodeName(node) + ": " + st.error().message);
      }
    }
    NodeVerdict verdict = JudgeNode(node, s.slice.machine_type.chips_per_host);
    switch (verdict.kind) {
      case NodeVerdict::Kind::kNotReady:
        out.not_ready.push_back(std::move(verdict.why));
        break;
      case NodeVerdict::Kind::kChipsMissing:
        out.chips_missing.push_back(std::move(verdict.why));
        break;
      case NodeVerdict::Kind::kReady:
        ++out.ready;
        break;
    }
  }
  return out;
}

std::vector<ObjectPtr> GroupNodes::All(const GroupCtx& ctx) const {
  std::map<std::string, ObjectPtr> found;
  if (ObjectPtr mig = informers_.migs->store().Get(kube::ObjectKey(ctx.ns, ctx.name))) {
    const auto* st = ObjectField(*mig, "status");
    if (const auto* list = st ? ArrayAt(*st, "instances") : nullptr) {
      for (const auto& i : *list) {
        if (!i.is_object()) continue;
        auto nodes = informers_.nodes->store().ByIndex(kNodeProviderIdIndex,
                                                       StringValue(i.as_object(), "providerID"));
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

std::optional<json::object> NodeLabelPatch(const NodeGroupSpec& spec, const Object& node) {
  const auto labels_want = NodeLabels(spec);
  const auto* meta = ObjectField(node, "metadata");
  const auto* labels = meta ? ObjectField(*meta, "labels") : nullptr;
  json::object label_patch;
  for (const auto& [k, v] : labels_want) {
    if (labels == nullptr || StringValue(*labels, k) != v) label_patch[k] = v;
  }
  const auto* node_spec = ObjectField(node, "spec");
  const json::array* taints = node_spec ? ArrayAt(*node_spec, "taints") : nullptr;
  bool has_taint = false;
  if (taints != nullptr) {
    for (const auto& t : *taints) {
      if (t.is_object() && StringValue(t.as_object(), "key") == kTaintKey &&
          StringValue(t.as_object(), "effect") == kTaintEffect) {
        has_taint = true;
      }
    }
  }
  if (label_patch.empty() && has_taint) return std::nullopt;
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
  return patch;
}

Status GroupNodes::EnsureLabels(const GroupCtx& ctx, const Object& node) const {
  auto patch = NodeLabelPatch(*ctx.spec, node);
  if (!patch) return OkStatus();
  auto r = client_->Patch(kube::resources::Nodes(), "", NodeName(node), kube::PatchType::kMerge,
                          json::serialize(*patch));
  if (!r.ok()) return r.error();
  log::Info("node labelled", {{"group", ctx.key}, {"node", NodeName(node)}});
  return OkStatus();
}

}  // namespace hyperslice::tpu::internal
