// TPU_WORKER_HOSTNAMES in a StatefulSet's pod template: gke-tpu-env-injector's /mutate for
// StatefulSets (seed 001), made idempotent. Upstream appends the variable to every container on
// each CREATE and UPDATE (a second entry per update); here a container that already has it keeps
// it, except that a value equal to what the previous spec gave (our own, or upstream's, earlier
// injection) follows a change of replicas or ordinals.
#include <string>
#include <vector>

#include "src/base/json.h"
#include "src/webhook/internal.h"

namespace hyperslice::webhook::internal {
namespace json = boost::json;
using jsonfield::ArrayField;
using jsonfield::IntField;
using jsonfield::ObjectField;
using jsonfield::StringField;
namespace {

constexpr std::string_view kHostnamesVar = "TPU_WORKER_HOSTNAMES";

// The hostnames a StatefulSet's pods get, "" when it has no name or service (no DNS names).
std::string HostnamesOf(const json::object* sts, HostnameStyle style) {
  std::string_view name = StringField(ObjectField(sts, "metadata"), "name");
  const json::object* spec = ObjectField(sts, "spec");
  std::string_view service = StringField(spec, "serviceName");
  if (name.empty() || service.empty()) return "";
  if (!style
           .Parse(
               ObjectField(ObjectField(ObjectField(spec, "template"), "metadata"), "annotations"))
           .empty()) {
    return "";
  }
  int64_t start = IntField(ObjectField(spec, "ordinals"), "start").value_or(0);
  int64_t replicas = IntField(spec, "replicas").value_or(1);
  std::string hosts;
  for (int64_t i = start; i < start + replicas; ++i) {
    if (!hosts.empty()) hosts += ',';
    AppendHostname(hosts, name, i, service, style);
  }
  return hosts;
}

}  // namespace

Decision MutateStatefulSet(const json::object& request, const AdmissionOptions& options) {
  Decision d;
  const json::object* kind = ObjectField(&request, "kind");
  std::string_view op = StringField(&request, "operation");
  if (StringField(kind, "group") != "apps" || StringField(kind, "kind") != "StatefulSet" ||
      (op != "CREATE" && op != "UPDATE") || !StringField(&request, "subResource").empty()) {
    return d;  // not a StatefulSet write: not ours
  }
  const json::object* sts = ObjectField(&request, "object");
  if (sts == nullptr)
    return Decision::Denied(400, "BadRequest", "AdmissionReview request.object is missing");
  const json::object* metadata = ObjectField(sts, "metadata");
  const json::object* tmpl = ObjectField(ObjectField(sts, "spec"), "template");
  const json::object* tmpl_metadata = ObjectField(tmpl, "metadata");

  // Upstream's configuration selects on the StatefulSet's own label; its pods carry the template's.
  Targets on_sts = TargetsOf(ObjectField(metadata, "labels"));
  Targets on_pods = TargetsOf(ObjectField(tmpl_metadata, "labels"));
  if (on_pods == Targets::kNone || on_sts == Targets::kNone) return d;
  bool all_containers = on_sts == Targets::kAll || on_pods == Targets::kAll;
  const json::array* containers = ArrayField(ObjectField(tmpl, "spec"), "containers");
  std::vector<size_t> targets;
  if (containers != nullptr) {
    for (size_t i = 0; i < containers->size(); ++i) {
      const json::object* c = (*containers)[i].if_object();
      if (c != nullptr && (all_containers || RequestsTpu(*c))) targets.push_back(i);
    }
  }
  if (targets.empty()) return d;

  HostnameStyle style;
  style.ns = std::string(StringField(&request, "namespace"));
  if (style.ns.empty()) style.ns = std::string(StringField(metadata, "namespace"));
  style.cluster_domain = options.cluster_domain;
  if (std::string bad = style.Parse(ObjectField(tmpl_metadata, "annotations")); !bad.empty()) {
    return Decision::Denied(400, "BadRequest", "spec.template: " + bad);
  }
  std::string hosts = HostnamesOf(sts, style);
  if (hosts.empty()) {
    std::string_view name = StringField(metadata, "name");
    d.warnings.push_back((name.empty()
                              ? std::string("a StatefulSet without metadata.name (generateName)")
                              : "StatefulSet " + std::string(name) +
                                    " has no serviceName, so its pods have no DNS names") +
                         "; " + std::string(kHostnamesVar) + " not set");
    return d;
  }
  // What the previous spec gave: a container holding exactly that was injected for it.
  std::string old_hosts =
      op == "UPDATE" ? HostnamesOf(ObjectField(&request, "oldObject"), style) : "";

  std::string& patch = d.patch;
  for (size_t i : targets) {
    const json::object& c = (*containers)[i].get_object();
    std::string base = "/spec/template/spec/containers/" + std::to_string(i) + "/env";
    const json::array* env = ArrayField(&c, "env");
    if (env == nullptr) {
      OpenPatchOp(patch, "add", base);
      patch += '[';
      AppendEnvVar(patch, kHostnamesVar, hosts);
      patch += "]}";
      continue;
    }
    bool present = false;
    for (size_t k = 0; k < env->size(); ++k) {
      const json::object* e = (*env)[k].if_object();
      if (StringField(e, "name") != kHostnamesVar) continue;
      present = true;
      const json::value* value = e->if_contains("value");
      if (!old_hosts.empty() && old_hosts != hosts && value != nullptr && value->is_string() &&
          value->get_string() == old_hosts && !e->contains("valueFrom")) {
        OpenPatchOp(patch, "replace", base + "/" + std::to_string(k) + "/value");
        AppendJsonString(patch, hosts);
        patch += '}';
      }
    }
    if (present) continue;  // the user's value (or an earlier injection) stays
    OpenPatchOp(patch, "add", base + "/-");
    AppendEnvVar(patch, kHostnamesVar, hosts);
    patch += '}';
  }
  if (!patch.empty()) patch += ']';
  return d;
}

}  // namespace hyperslice::webhook::internal
