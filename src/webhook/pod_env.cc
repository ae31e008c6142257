// TPU env injection into Pods (ARCHITECTURE.md §6): worker identity from the owning StatefulSet or
// Indexed Job, slice shape from the TPUNodeGroup the Pod selects.
#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/base/json.h"
#include "src/kube/resource.h"
#include "src/tpu/topology.h"
#include "src/webhook/internal.h"

namespace hyperslice::webhook::internal {
namespace json = boost::json;
using jsonfield::ArrayField;
using jsonfield::IntField;
using jsonfield::ObjectField;
using jsonfield::StringField;
namespace {

constexpr std::string_view kPodIndexLabel = "apps.kubernetes.io/pod-index";
constexpr std::string_view kJobIndexKey = "batch.kubernetes.io/job-completion-index";

struct EnvVar {
  std::string name;
  std::string value;
};

// The controller ownerReference (controller: true), if any.
struct Owner {
  std::string api_version, kind, name, uid;
};
std::optional<Owner> ControllerOf(const json::object* metadata) {
  const json::array* refs = ArrayField(metadata, "ownerReferences");
  if (refs == nullptr) return std::nullopt;
  for (const json::value& v : *refs) {
    const json::object* ref = v.if_object();
    if (ref == nullptr) continue;
    const json::value* controller = ref->if_contains("controller");
    if (controller == nullptr || !controller->is_bool() || !controller->get_bool()) continue;
    return Owner{std::string(StringField(ref, "apiVersion")), std::string(StringField(ref, "kind")),
                 std::string(StringField(ref, "name")), std::string(StringField(ref, "uid"))};
  }
  return std::nullopt;
}

std::string_view UidOf(const json::object& obj) {
  return StringField(ObjectField(&obj, "metadata"), "uid");
}

// The outcome of reading an object the decision depends on.
struct Read {
  ObjectPtr obj;            // set when read (even when `accept` refused it)
  bool needs_live = false;  // only the cache was allowed and it could not answer
  bool accepted = false;
  std::optional<Error> error;  // could not be read (kNotFound included)
};

// Reads from the cache first; falls back to a live read when the cached copy is missing or does not
// satisfy `accept` (stale: another UID, fewer replicas than the Pod's ordinal).
Read ReadFresh(ObjectSource& source, const kube::Resource& r, const std::string& ns,
               const std::string& name, bool allow_live,
               const std::function<bool(const json::object&)>& accept) {
  Read out;
  Result<ObjectPtr> cached = source.Get(r, ns, name, ObjectSource::Mode::kCachedOnly);
  if (cached.ok() && accept(**cached)) {
    out.obj = *cached;
    out.accepted = true;
    return out;
  }
  if (!allow_live) {
    out.needs_live = true;
    return out;
  }
  Result<ObjectPtr> live = source.Get(r, ns, name, ObjectSource::Mode::kLive);
  if (!live.ok()) {
    out.error = live.error();
    return out;
  }
  out.obj = *live;
  out.accepted = accept(**live);
  return out;
}

class PodMutation {
 public:
  PodMutation(const json::object& request, ObjectSource& source, const AdmissionOptions& options,
              bool allow_live)
      : request_(request), source_(source), options_(options), allow_live_(allow_live) {}

  Decision Run();

 private:
  // Applies --owner-unreadable: a denial, or an unchanged allow with the message as a warning.
  Decision Unreadable(int code, std::string reason, const std::string& message);
  // Each returns false when the decision is already made (in `decision_`).
  bool AddStatefulSetVars(const Owner& owner);
  bool AddJobVars(const Owner& owner);
  bool AddTopologyVars(const std::string& selected);
  // False when the read of the owner `what` did not answer (a live read is needed, or it failed):
  // the decision says so.
  bool OwnerAnswered(const Read& read, const std::string& what);
  std::string SelectedNodeGroup() const;

  const json::object& request_;
  ObjectSource& source_;
  const AdmissionOptions& options_;
  bool allow_live_;

  const json::object* pod_ = nullptr;
  const json::object* metadata_ = nullptr;
  std::string ns_;
  std::string pod_name_;
  HostnameStyle style_;
  std::vector<EnvVar> vars_;
  std::vector<std::string> warnings_;
  Decision decision_;
};

bool PodMutation::OwnerAnswered(const Read& read, const std::string& what) {
  if (read.needs_live) {
    decision_.needs_live = true;
    return false;
  }
  if (read.error) {
    bool not_found = read.error->code == Error::Code::kNotFound;
    decision_ = Unreadable(not_found ? 404 : 503, not_found ? "NotFound" : "ServiceUnavailable",
                           "cannot read the owner " + what + ": " + read.error->message);
    return false;
  }
  return true;
}

Decision PodMutation::Unreadable(int code, std::string reason, const std::string& message) {
  Decision d;
  if (options_.owner_unreadable == OwnerUnreadable::kDeny) {
    d.allowed = false;
    d.code = code;
    d.reason = std::move(reason);
    d.message = "hyperslice TPU env injection: " + message;
  } else {
    d.warnings.push_back("hyperslice TPU env injection skipped: " + message);
  }
  return d;
}

bool PodMutation::AddStatefulSetVars(const Owner& owner) {
  std::optional<int64_t> ordinal;
  std::string_view index_label = StringField(ObjectField(metadata_, "labels"), kPodIndexLabel);
  if (!index_label.empty()) {
    ordinal = ParseNonNegative(index_label);
  } else if (pod_name_.size() > owner.name.size() + 1 &&
             pod_name_.compare(0, owner.name.size() + 1, owner.name + "-") == 0) {
    ordinal = ParseNonNegative(std::string_view(pod_name_).substr(owner.name.size() + 1));
  }
  if (!ordinal) {
    decision_ = Unreadable(400, "BadRequest",
                           "pod " + pod_name_ + " of StatefulSet " + owner.name +
                               " has no ordinal: neither the label " + std::string(kPodIndexLabel) +
                               " nor a numeric name suffix");
    return false;
  }
  auto range = [](const json::object& sts) {
    const json::object* spec = ObjectField(&sts, "spec");
    int64_t start = IntField(ObjectField(spec, "ordinals"), "start").value_or(0);
    int64_t replicas = IntField(spec, "replicas").value_or(1);
    return std::pair<int64_t, int64_t>(start, replicas);
  };
  Read read = ReadFresh(source_, kube::resources::StatefulSets(), ns_, owner.name, allow_live_,
                        [&](const json::object& sts) {
                          auto [start, replicas] = range(sts);
                          return UidOf(sts) == owner.uid && *ordinal >= start &&
                                 *ordinal < start + replicas;
                        });
  std::string what = "StatefulSet " + ns_ + "/" + owner.name;
  if (!OwnerAnswered(read, what)) return false;
  if (!read.accepted) {
    if (UidOf(*read.obj) != owner.uid) {
      decision_ = Unreadable(409, "Conflict",
                             what + " has UID " + std::string(UidOf(*read.obj)) +
                                 ", not the pod's owner UID " + owner.uid +
                                 " (it was deleted and re-created)");
    } else {
      auto [start, replicas] = range(*read.obj);
      decision_ = Unreadable(409, "Conflict",
                             "pod ordinal " + std::to_string(*ordinal) + " is outside " + what +
                                 "'s ordinals " + std::to_string(start) + ".." +
                                 std::to_string(start + replicas - 1) + " (replicas " +
                                 std::to_string(replicas) + ")");
    }
    return false;
  }
  auto [start, replicas] = range(*read.obj);
  std::string service(StringField(ObjectField(read.obj.get(), "spec"), "serviceName"));
  // Seed 001's order: the hostnames (upstream puts them in the StatefulSet's template), then the
  // worker id (upstream adds it to the pod).
  if (service.empty()) {
    warnings_.push_back(what + " has no serviceName, so its pods have no DNS names; " +
                        "TPU_WORKER_HOSTNAMES not set");
  } else {
    std::string hosts;
    for (int64_t i = start; i < start + replicas; ++i) {
      if (!hosts.empty()) hosts += ',';
      AppendHostname(hosts, owner.name, i, service, style_);
    }
    vars_.push_back({"TPU_WORKER_HOSTNAMES", std::move(hosts)});
  }
  vars_.push_back({"TPU_WORKER_ID", std::to_string(*ordinal - start)});
  return true;
}

bool PodMutation::AddJobVars(const Owner& owner) {
  std::string_view index_text = StringField(ObjectField(metadata_, "annotations"), kJobIndexKey);
  if (index_text.empty()) index_text = StringField(ObjectField(metadata_, "labels"), kJobIndexKey);
  if (index_text.empty()) return true;  // not an Indexed Job: no worker identity to give
  std::optional<int64_t> index = ParseNonNegative(index_text);
  std::string what = "Job " + ns_ + "/" + owner.name;
  if (!index) {
    decision_ = Unreadable(400, "BadRequest",
                           "pod " + pod_name_ + " of " + what + " has a non-numeric " +
                               std::string(kJobIndexKey) + " \"" + std::string(index_text) + "\"");
    return false;
  }
  Read read = ReadFresh(source_, kube::resources::Jobs(), ns_, owner.name, allow_live_,
                        [&](const json::object& job) { return UidOf(job) == owner.uid; });
  if (!OwnerAnswered(read, what)) return false;
  if (!read.accepted) {
    decision_ = Unreadable(409, "Conflict",
                           what + " has UID " + std::string(UidOf(*read.obj)) +
                               ", not the pod's owner UID " + owner.uid +
                               " (it was deleted and re-created)");
    return false;
  }
  const json::object* spec = ObjectField(read.obj.get(), "spec");
  int64_t completions = IntField(spec, "completions").value_or(-1);
  if (completions <= 0 || *index >= completions) {
    decision_ = Unreadable(409, "Conflict",
                           "pod completion index " + std::to_string(*index) + " is outside " +
                               what + "'s completions (" + std::to_string(completions) + ")");
    return false;
  }
  std::string subdomain(
      StringField(ObjectField(ObjectField(spec, "template"), "spec"), "subdomain"));
  // The same order as for StatefulSets: hostnames, then the worker id.
  if (subdomain.empty()) {
    warnings_.push_back(what + " sets no spec.template.spec.subdomain, so its pods have no DNS " +
                        "names; TPU_WORKER_HOSTNAMES not set");
  } else {
    std::string hosts;
    for (int64_t i = 0; i < completions; ++i) {
      if (!hosts.empty()) hosts += ',';
      AppendHostname(hosts, owner.name, i, subdomain, style_);
    }
    vars_.push_back({"TPU_WORKER_HOSTNAMES", std::move(hosts)});
  }
  vars_.push_back({"TPU_WORKER_ID", std::to_string(*index)});
  return true;
}

// The value of cloud.google.com/tpu-node-group the Pod requires: nodeSelector, else a required
// node affinity term `In [value]` (every term must agree, or the group is ambiguous: "").
std::string PodMutation::SelectedNodeGroup() const {
  const json::object* spec = ObjectField(pod_, "spec");
  std::string_view v = StringField(ObjectField(spec, "nodeSelector"), kNodeGroupLabel);
  if (!v.empty()) return std::string(v);
  const json::array* terms =
      ArrayField(ObjectField(ObjectField(ObjectField(spec, "affinity"), "nodeAffinity"),
                             "requiredDuringSchedulingIgnoredDuringExecution"),
                 "nodeSelectorTerms");
  if (terms == nullptr) return "";
  std::string found;
  for (const json::value& t : *terms) {
    std::string in_term;
    const json::array* exprs = ArrayField(t.if_object(), "matchExpressions");
    if (exprs == nullptr) return "";
    for (const json::value& e : *exprs) {
      const json::object* expr = e.if_object();
      if (StringField(expr, "key") != kNodeGroupLabel || StringField(expr, "operator") != "In")
        continue;
      const json::array* values = ArrayField(expr, "values");
      if (values != nullptr && values->size() == 1 && (*values)[0].is_string()) {
        in_term = std::string((*values)[0].get_string());
      }
    }
    if (in_term.empty() || (!found.empty() && found != in_term)) return "";
    found = in_term;
  }
  return found;
}

bool PodMutation::AddTopologyVars(const std::string& selected) {
  // "<ns>-<name>" is ambiguous when either part has dashes: the Pod's own namespace first, then
  // every other split.
  std::vector<std::pair<std::string, std::string>> candidates;
  if (selected.size() > ns_.size() + 1 && selected.compare(0, ns_.size() + 1, ns_ + "-") == 0) {
    candidates.emplace_back(ns_, selected.substr(ns_.size() + 1));
  }
  for (size_t p = selected.find('-'); p != std::string::npos; p = selected.find('-', p + 1)) {
    std::pair<std::string, std::string> c(selected.substr(0, p), selected.substr(p + 1));
    if (!c.first.empty() && !c.second.empty() && (candidates.empty() || c != candidates[0])) {
      candidates.push_back(std::move(c));
    }
  }
  ObjectPtr group;
  std::string group_id;
  for (const auto& [gns, gname] : candidates) {
    Read read = ReadFresh(source_, TPUNodeGroups(), gns, gname, allow_live_,
                          [](const json::object&) { return true; });
    if (read.needs_live) {
      decision_.needs_live = true;
      return false;
    }
    if (read.error) {
      if (read.error->code == Error::Code::kNotFound) continue;
      std::string what = "cannot read TPUNodeGroup ";
      what.append(gns).append("/").append(gname).append(": ").append(read.error->message);
      decision_ = Unreadable(503, "ServiceUnavailable", what);
      return false;
    }
    group = read.obj;
    group_id = gns;
    group_id.append("/").append(gname);
    break;
  }
  if (!group) {
    decision_ = Unreadable(404, "NotFound",
                           "the pod selects " + std::string(kNodeGroupLabel) + "=" + selected +
                               " but no TPUNodeGroup <namespace>/<name> matches it; create the "
                               "group first or fix the selector");
    return false;
  }
  const json::object* spec = ObjectField(group.get(), "spec");
  std::string topology(StringField(spec, "topology"));
  std::string machine(StringField(ObjectField(spec, "instanceConfig"), "machineType"));
  Result<tpu::Slice> slice =
      machine.empty()
          ? tpu::InferSlice(topology, static_cast<int>(IntField(spec, "nodeCount").value_or(0)))
          : tpu::MakeSlice(machine, topology);
  if (!slice.ok()) {
    decision_ =
        Unreadable(409, "Conflict",
                   "TPUNodeGroup " + group_id + " has no usable shape: " + slice.error().message);
    return false;
  }
  vars_.push_back({"TPU_TOPOLOGY", slice->TopologyEnv()});
  vars_.push_back({"TPU_ACCELERATOR_TYPE", slice->AcceleratorTypeEnv()});
  vars_.push_back({"TPU_CHIPS_PER_HOST_BOUNDS", slice->ChipsPerHostBoundsEnv()});
  vars_.push_back({"TPU_HOST_BOUNDS", slice->HostBoundsEnv()});
  return true;
}

Decision PodMutation::Run() {
  if (StringField(&request_, "operation") != "CREATE" ||
      StringField(ObjectField(&request_, "kind"), "kind") != "Pod" ||
      !StringField(ObjectField(&request_, "kind"), "group").empty() ||
      !StringField(&request_, "subResource").empty()) {
    return std::move(decision_);  // not a Pod create: not ours
  }
  pod_ = ObjectField(&request_, "object");
  if (pod_ == nullptr) {
    decision_.allowed = false;
    decision_.code = 400;
    decision_.reason = "BadRequest";
    decision_.message = "AdmissionReview request.object is missing";
    return std::move(decision_);
  }
  metadata_ = ObjectField(pod_, "metadata");
  Targets which = TargetsOf(ObjectField(metadata_, "labels"));
  if (which == Targets::kNone) return std::move(decision_);
  bool all_containers = which == Targets::kAll;

  const json::array* containers = ArrayField(ObjectField(pod_, "spec"), "containers");
  std::vector<size_t> targets;
  if (containers != nullptr) {
    for (size_t i = 0; i < containers->size(); ++i) {
      const json::object* c = (*containers)[i].if_object();
      if (c != nullptr && (all_containers || RequestsTpu(*c))) targets.push_back(i);
    }
  }
  if (targets.empty()) return std::move(decision_);  // nothing opted in: admitted unchanged

  ns_ = std::string(StringField(&request_, "namespace"));
  if (ns_.empty()) ns_ = std::string(StringField(metadata_, "namespace"));
  pod_name_ = std::string(StringField(metadata_, "name"));
  if (pod_name_.empty()) pod_name_ = std::string(StringField(&request_, "name"));
  style_.ns = ns_;
  style_.cluster_domain = options_.cluster_domain;
  if (std::string bad = style_.Parse(ObjectField(metadata_, "annotations")); !bad.empty()) {
    decision_.allowed = false;
    decision_.code = 400;
    decision_.reason = "BadRequest";
    decision_.message = std::move(bad);
    return std::move(decision_);
  }

  vars_.reserve(6);  // hostnames, worker id, four topology variables (in this order)
  if (std::optional<Owner> owner = ControllerOf(metadata_)) {
    if (owner->kind == "StatefulSet" && owner->api_version == "apps/v1") {
      if (!AddStatefulSetVars(*owner)) return std::move(decision_);
    } else if (owner->kind == "Job" && owner->api_version == "batch/v1") {
      if (!AddJobVars(*owner)) return std::move(decision_);
    }
  }
  if (std::string selected = SelectedNodeGroup(); !selected.empty()) {
    if (!AddTopologyVars(selected)) return std::move(decision_);
  }
  decision_.warnings = std::move(warnings_);
  if (vars_.empty()) return std::move(decision_);

  // The JSONPatch text, written directly (see Decision::patch).
  std::string& patch = decision_.patch;
  size_t var_bytes = 0;
  for (const EnvVar& v : vars_) var_bytes += v.name.size() + v.value.size() + 64;
  patch.reserve(targets.size() * (var_bytes + 64) + 2);
  auto open_add = [&patch](std::string_view path) { OpenPatchOp(patch, "add", path); };
  auto env_var = [&patch](const EnvVar& v) { AppendEnvVar(patch, v.name, v.value); };
  for (size_t i : targets) {
    const json::object& c = (*containers)[i].get_object();
    const json::array* env = ArrayField(&c, "env");
    // Values from envFrom (ConfigMaps, Secrets) are not in the request and an `env` entry wins
    // over them in the kubelet: say so instead of overriding the user silently.
    const json::array* env_from = ArrayField(&c, "envFrom");
    auto warn_env_from = [&](size_t patch_before) {
      if (env_from == nullptr || env_from->empty() || patch.size() == patch_before) return;
      decision_.warnings.push_back(
          "container " + std::string(StringField(&c, "name")) +
          " uses envFrom; the injected TPU_* variables take precedence over any of the same name "
          "from envFrom: set them under env to keep your own values");
    };
    size_t patch_before = patch.size();
    std::string base = "/spec/containers/" + std::to_string(i) + "/env";
    if (env == nullptr) {
      // No env list: one operation adding the whole list.
      open_add(base);
      patch += '[';
      for (size_t k = 0; k < vars_.size(); ++k) {
        if (k > 0) patch += ',';
        env_var(vars_[k]);
      }
      patch += "]}";
      warn_env_from(patch_before);
      continue;
    }
    // The names the container sets, looked up once (not once per injected variable).
    std::vector<std::string_view> names;
    names.reserve(env->size());
    for (const json::value& e : *env) names.push_back(StringField(e.if_object(), "name"));
    base += "/-";
    for (const EnvVar& v : vars_) {
      // The user's value wins.
      if (std::find(names.begin(), names.end(), v.name) != names.end()) continue;
      open_add(base);
      env_var(v);
      patch += '}';
    }
    warn_env_from(patch_before);
  }
  if (!patch.empty()) patch += ']';
  return std::move(decision_);
}

}  // namespace

Decision MutatePod(const json::object& request, ObjectSource& source,
                   const AdmissionOptions& options, bool allow_live) {
  return PodMutation(request, source, options, allow_live).Run();
}

}  // namespace hyperslice::webhook::internal
