// Pods for sealed control nodes (issue 21 §4, src/runners/README.md "Workload policy"): the first
// of the three checks of a WorkloadPolicy, so a pod that would be refused later is refused at
// once, with the reason, in the client's answer.
//
// Which pods are for a sealed control node. A control node's Node carries the label and the
// NoSchedule taint runners.hyperslice.dev/control-node (value: the ControlNode's name), so a pod
// can land there only if
//   - its spec.nodeName is that Node (bound at create: no scheduler, no taint check), or
//   - it tolerates the taint; then its nodeSelector decides where: the control-node label (or
//     kubernetes.io/hostname) naming one control node pins it there, and without either it may
//     land on any control node — so it is checked against every sealed one.
// Node affinity is not read: a pod whose affinity alone keeps it off a sealed control node while
// it tolerates the taint is still checked against that node's policy (stricter, never looser).
#include <algorithm>

#include "src/base/json.h"
#include "src/runners/policy/policy.h"
#include "src/webhook/internal.h"

namespace hyperslice::webhook::internal {
namespace {

namespace json = boost::json;
using jsonfield::ArrayField;
using jsonfield::BoolField;
using jsonfield::ObjectField;
using jsonfield::StringField;

constexpr char kControlNodeKey[] = "runners.hyperslice.dev/control-node";

const kube::Resource& ControlNodes() {
  static const kube::Resource r{"runners.hyperslice.dev", "v1alpha1", "controlnodes", "ControlNode",
                                false};
  return r;
}
const kube::Resource& WorkloadPolicies() {
  static const kube::Resource r{"runners.hyperslice.dev", "v1alpha1", "workloadpolicies",
                                "WorkloadPolicy", false};
  return r;
}

bool ToleratesControlNodeTaint(const json::object& spec) {
  const json::array* tolerations = ArrayField(spec, "tolerations");
  if (tolerations == nullptr) return false;
  return std::any_of(tolerations->begin(), tolerations->end(), [](const json::value& t) {
    if (!t.is_object()) return false;
    const json::object& o = t.as_object();
    std::string_view key = StringField(o, "key");
    std::string_view op = StringField(o, "operator");
    std::string_view effect = StringField(o, "effect");
    const bool key_ok = key == kControlNodeKey || (key.empty() && op == "Exists");
    return key_ok && (effect.empty() || effect == "NoSchedule");
  });
}

// Whether the pod could reach any control node at all (answered without reading anything).
bool MayTargetControlNodes(const json::object& spec) {
  return !StringField(spec, "nodeName").empty() || ToleratesControlNodeTaint(spec);
}

struct SealedNode {
  std::string control_node;
  std::string node;
  std::string policy;
};

// The sealed control nodes `spec` may land on.
std::vector<SealedNode> SealedTargets(const json::object& spec, const std::vector<ObjectPtr>& cns) {
  std::vector<SealedNode> out;
  const std::string_view node_name = StringField(spec, "nodeName");
  const json::object* selector = ObjectField(spec, "nodeSelector");
  std::string_view pinned_cn = selector ? StringField(*selector, kControlNodeKey) : "";
  std::string_view pinned_host = selector ? StringField(*selector, "kubernetes.io/hostname") : "";
  const bool tolerates = ToleratesControlNodeTaint(spec);
  for (const ObjectPtr& cn : cns) {
    const json::object* cs = ObjectField(*cn, "spec");
    if (cs == nullptr || !BoolField(*cs, "sealed").value_or(false)) continue;
    SealedNode s;
    if (const json::object* meta = ObjectField(*cn, "metadata")) {
      s.control_node = StringField(*meta, "name");
    }
    s.node = StringField(*cs, "nodeName");
    if (s.node.empty()) s.node = s.control_node;
    s.policy = StringField(*cs, "workloadPolicy");
    bool lands = false;
    if (!node_name.empty()) {
      lands = node_name == s.node;
    } else if (tolerates) {
      lands = (pinned_cn.empty() || pinned_cn == s.control_node) &&
              (pinned_host.empty() || pinned_host == s.node);
    }
    if (lands) out.push_back(std::move(s));
  }
  return out;
}

runners::policy::SignatureSource& DefaultSignatures() {
  static const std::unique_ptr<runners::policy::SignatureSource> source =
      runners::policy::NewRegistrySignatureSource({});
  return *source;
}

}  // namespace

Decision ValidateSealedPod(const json::object& request, ObjectSource& source,
                           const AdmissionOptions& options, bool allow_live) {
  const json::object* pod = ObjectField(&request, "object");
  const json::object* spec = ObjectField(pod, "spec");
  if (spec == nullptr || !MayTargetControlNodes(*spec)) return {};
  // Signatures are read from registries: never on an I/O thread.
  if (!allow_live) {
    Decision d;
    d.needs_live = true;
    return d;
  }
  const std::string who = std::string(StringField(&request, "namespace")) + "/" +
                          std::string(StringField(ObjectField(pod, "metadata"), "name"));
  auto cns = source.List(ControlNodes(), ObjectSource::Mode::kCachedOnly);
  if (!cns.ok()) cns = source.List(ControlNodes(), ObjectSource::Mode::kLive);
  if (!cns.ok()) {
    // Without the runners API installed there is no sealed control node to protect.
    if (cns.error().code == Error::Code::kNotFound) return {};
    return Decision::Denied(
        503, "ControlNodesUnreadable",
        "pod " + who +
            " may land on a control node, whose seal cannot be checked: " + cns.error().message);
  }
  runners::policy::SignatureSource& signatures =
      options.signatures ? *options.signatures : DefaultSignatures();
  const runners::policy::Workload workload = runners::policy::WorkloadFromPod(*pod);
  for (const SealedNode& s : SealedTargets(*spec, *cns)) {
    auto obj = source.Get(WorkloadPolicies(), "", s.policy, ObjectSource::Mode::kLive);
    if (!obj.ok()) {
      return Decision::Denied(503, "WorkloadPolicyUnavailable",
                              "pod " + who + " is for sealed control node " + s.control_node +
                                  ", whose WorkloadPolicy " + s.policy +
                                  " cannot be read: " + obj.error().message);
    }
    auto policy = runners::policy::ParseWorkloadPolicy(**obj);
    if (!policy.ok()) {
      return Decision::Denied(503, "WorkloadPolicyInvalid",
                              "pod " + who + ": " + policy.error().message);
    }
    Status st = runners::policy::Check(*policy, workload, signatures);
    if (!st.ok() && st.error().code == Error::Code::kForbidden) {
      return Decision::Denied(403, st.error().reason,
                              "pod " + who + " is refused by sealed control node " +
                                  s.control_node + ": " + st.error().message);
    }
    if (!st.ok()) {
      return Decision::Denied(503, "SignaturesUnreadable",
                              "pod " + who + " for sealed control node " + s.control_node +
                                  ": its images' signatures cannot be read: " + st.error().message);
    }
  }
  return {};
}

}  // namespace hyperslice::webhook::internal
