#include "src/runners/controlnode/api.h"

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/kube/quantity.h"
#include "src/kube/store.h"

namespace hyperslice::runners::controlnode {
namespace {

namespace json = boost::json;
using jsonfield::ArrayField;
using jsonfield::BoolField;
using jsonfield::IntField;
using jsonfield::ObjectField;
using jsonfield::StringField;

Error Invalid(const std::string& msg) { return Error::Make(Error::Code::kInvalidArgument, msg); }

std::map<std::string, std::string> StringMap(const json::object* o) {
  std::map<std::string, std::string> out;
  if (o == nullptr) return out;
  for (const auto& [k, v] : *o) {
    if (v.is_string()) out[std::string(k)] = std::string(v.as_string());
  }
  return out;
}

bool ValidHostPort(const std::string& a) {
  auto colon = a.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == a.size()) return false;
  for (size_t i = colon + 1; i < a.size(); ++i) {
    if (a[i] < '0' || a[i] > '9') return false;
  }
  int port = std::stoi(a.substr(colon + 1));
  return port > 0 && port < 65536;
}

}  // namespace

const kube::Resource& ControlNodes() {
  static const kube::Resource r{kGroup, "v1alpha1", "controlnodes", "ControlNode", false};
  return r;
}
const kube::Resource& Runners() {
  static const kube::Resource r{kGroup, "v1alpha1", "runners", "Runner", false};
  return r;
}

const kube::Resource& WorkloadPolicies() {
  static const kube::Resource r{kGroup, "v1alpha1", "workloadpolicies", "WorkloadPolicy", false};
  return r;
}

const kube::Resource& AttestationPolicies() {
  static const kube::Resource r{kGroup, "v1alpha1", "attestationpolicies", "AttestationPolicy",
                                false};
  return r;
}

Result<ResourceList> ParseResources(const json::object* obj, const std::string& field) {
  ResourceList out;
  if (obj == nullptr) return out;
  for (const auto& [k, v] : *obj) {
    std::string text;
    if (v.is_string()) {
      text = std::string(v.as_string());
    } else if (v.is_int64()) {
      text = std::to_string(v.as_int64());
    } else {
      return Invalid(field + "." + std::string(k) + ": not a quantity");
    }
    auto q = kube::Quantity::Parse(text);
    if (!q.ok()) return Invalid(field + "." + std::string(k) + ": " + q.error().message);
    out[std::string(k)] = q->MilliValue();
  }
  return out;
}

std::string FormatQuantity(const std::string& /*resource*/, int64_t milli) {
  if (milli % 1000 == 0) return std::to_string(milli / 1000);
  return std::to_string(milli) + "m";
}

Result<ControlNodeSpec> ParseControlNode(const kube::Object& obj) {
  ControlNodeSpec s;
  s.name = std::string(kube::MetaString(obj, "name"));
  if (const json::object* meta = ObjectField(obj, "metadata")) {
    s.generation = IntField(*meta, "generation").value_or(0);
  }
  const json::object* spec = ObjectField(obj, "spec");
  static const json::object kEmpty;
  if (spec == nullptr) spec = &kEmpty;
  s.node_name = std::string(StringField(*spec, "nodeName"));
  if (s.node_name.empty()) s.node_name = s.name;
  if (const json::object* sel = ObjectField(*spec, "runnerSelector")) {
    s.match_labels = StringMap(ObjectField(*sel, "matchLabels"));
    if (const json::array* exprs = ArrayField(*sel, "matchExpressions")) {
      json::value v = *exprs;
      auto reqs = kube::RequirementsFrom(&v);
      if (!reqs.ok()) return Invalid("spec.runnerSelector: " + reqs.error().message);
      s.match_expressions = *reqs;
    }
  }
  if (auto a = StringField(*spec, "address"); !a.empty()) s.address = std::string(a);
  if (auto p = IntField(*spec, "kubeletPort")) {
    if (*p < 1 || *p > 65535) return Invalid("spec.kubeletPort: out of range");
    s.kubelet_port = static_cast<int>(*p);
  }
  s.labels = StringMap(ObjectField(*spec, "labels"));
  if (const json::array* t = ArrayField(*spec, "taints")) {
    json::value v = *t;
    s.taints = kube::TaintsFrom(&v);
  }
  if (const json::object* cp = ObjectField(*spec, "capacityPolicy")) {
    HS_ASSIGN_OR_RETURN(
        s.reserved, ParseResources(ObjectField(*cp, "reserved"), "spec.capacityPolicy.reserved"));
    if (auto m = IntField(*cp, "maxPodsPerRunner")) s.max_pods_per_runner = static_cast<int>(*m);
  }
  s.sealed = BoolField(*spec, "sealed").value_or(false);
  s.workload_policy = std::string(StringField(*spec, "workloadPolicy"));
  // The CRD's CEL rule says the same; a spec written past it must not run unchecked.
  if (s.sealed && s.workload_policy.empty()) {
    return Invalid("spec.workloadPolicy: a sealed control node needs a WorkloadPolicy");
  }
  s.attestation_policy = std::string(StringField(*spec, "attestationPolicy"));
  return s;
}

bool Selects(const ControlNodeSpec& cn, const std::map<std::string, std::string>& labels) {
  for (const auto& [k, v] : cn.match_labels) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  kube::Labels l(labels.begin(), labels.end());
  return kube::MatchesAll(cn.match_expressions, l);
}

Result<RunnerSpec> ParseRunner(const kube::Object& obj) {
  RunnerSpec s;
  s.name = std::string(kube::MetaString(obj, "name"));
  if (const json::object* meta = ObjectField(obj, "metadata")) {
    s.generation = IntField(*meta, "generation").value_or(0);
    s.labels = StringMap(ObjectField(*meta, "labels"));
  }
  const json::object* spec = ObjectField(obj, "spec");
  if (spec == nullptr) return Invalid("spec is required");
  s.control_node = std::string(StringField(*spec, "controlNode"));
  if (s.control_node.empty()) return Invalid("spec.controlNode is required");
  const json::object* gce = ObjectField(*spec, "gce");
  const json::object* host = ObjectField(*spec, "host");
  const json::object* market = ObjectField(*spec, "marketplace");
  int n = (gce != nullptr) + (host != nullptr) + (market != nullptr);
  if (n != 1) return Invalid("exactly one of spec.gce, spec.host, spec.marketplace is required");
  if (host != nullptr) {
    s.placement = RunnerSpec::Placement::kHost;
    s.host_address = std::string(StringField(*host, "address"));
    if (!ValidHostPort(s.host_address)) {
      return Invalid("spec.host.address: want host:port, got \"" + s.host_address + "\"");
    }
  } else if (gce != nullptr) {
    s.placement = RunnerSpec::Placement::kGce;
    for (const char* f : {"project", "zone", "machineType"}) {
      if (StringField(*gce, f).empty())
        return Invalid(std::string("spec.gce.") + f + " is required");
    }
    s.zone = std::string(StringField(*gce, "zone"));
    s.gce.project = std::string(StringField(*gce, "project"));
    s.gce.zone = s.zone;
    s.gce.machine_type = std::string(StringField(*gce, "machineType"));
    s.gce.accelerator_type = std::string(StringField(*gce, "acceleratorType"));
    s.gce.accelerator_count = IntField(*gce, "acceleratorCount").value_or(0);
    s.region = std::string(StringField(*gce, "region"));
    if (!s.region.empty() && s.zone.rfind(s.region + "-", 0) != 0) {
      return Invalid("spec.gce.zone " + s.zone + " is not in spec.gce.region " + s.region);
    }
    if (s.region.empty()) {
      auto dash = s.zone.rfind('-');
      if (dash != std::string::npos) s.region = s.zone.substr(0, dash);
    }
    auto count = IntField(*gce, "acceleratorCount").value_or(0);
    if (count < 0) return Invalid("spec.gce.acceleratorCount: must not be negative");
    if (count > 0 && StringField(*gce, "acceleratorType").empty()) {
      return Invalid("spec.gce.acceleratorType is required with acceleratorCount");
    }
  } else {
    s.placement = RunnerSpec::Placement::kMarketplace;
    auto& m = s.market;
    m.gpu_node_class = std::string(StringField(*market, "gpuNodeClass"));
    if (m.gpu_node_class.empty()) return Invalid("spec.marketplace.gpuNodeClass is required");
    m.gpu_type = std::string(StringField(*market, "gpuType"));
    m.gpu_count = static_cast<int>(IntField(*market, "gpuCount").value_or(1));
    if (m.gpu_count < 1) return Invalid("spec.marketplace.gpuCount: must be at least 1");
    if (const json::array* regions = ArrayField(*market, "regions")) {
      for (const auto& r : *regions) {
        if (r.is_string()) m.regions.emplace_back(r.get_string());
      }
    }
    m.max_hourly_price = std::string(StringField(*market, "maxHourlyPrice"));
    m.spot = BoolField(*market, "spot").value_or(false);
  }
  if (auto r = StringField(*spec, "region"); !r.empty()) s.region = std::string(r);
  if (auto z = StringField(*spec, "zone"); !z.empty()) s.zone = std::string(z);
  if (const json::object* sl = ObjectField(*spec, "slice")) {
    s.slice = std::string(StringField(*sl, "name"));
    s.slice_index = static_cast<int>(IntField(*sl, "index").value_or(0));
    if (s.slice.empty()) return Invalid("spec.slice.name is required with spec.slice");
  }
  if (const json::object* p = ObjectField(*spec, "policy")) {
    s.allow_host_network = BoolField(*p, "allowHostNetwork").value_or(false);
    s.require_digest = BoolField(*p, "requireDigest").value_or(true);
  }
  s.sealed = BoolField(*spec, "sealed").value_or(false);
  s.attestation_policy = std::string(StringField(*spec, "attestationPolicy"));
  return s;
}

Result<AttestationPolicySpec> ParseAttestationPolicy(const kube::Object& obj) {
  AttestationPolicySpec s;
  s.name = std::string(kube::MetaString(obj, "name"));
  if (const json::object* meta = ObjectField(obj, "metadata")) {
    s.generation = IntField(*meta, "generation").value_or(0);
  }
  const json::object* spec = ObjectField(obj, "spec");
  if (spec == nullptr) return Invalid("spec is required");
  s.ek_ca_pem = std::string(StringField(*spec, "ekCACertificates"));
  if (s.ek_ca_pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return Invalid("spec.ekCACertificates: no PEM certificate");
  }
  if (const json::array* refs = ArrayField(*spec, "referenceValues")) {
    for (const json::value& v : *refs) {
      if (!v.is_object()) return Invalid("spec.referenceValues: entries must be objects");
      std::string name(StringField(v.as_object(), "name"));
      if (name.empty()) return Invalid("spec.referenceValues: name is required");
      const json::array* digests = ArrayField(v.as_object(), "digests");
      if (digests == nullptr || digests->empty()) {
        return Invalid("spec.referenceValues[" + name + "].digests: at least one is required");
      }
      for (const json::value& d : *digests) {
        const bool hex64 =
            d.is_string() && d.as_string().size() == 64 &&
            d.as_string().find_first_not_of("0123456789abcdef") == json::string::npos;
        if (!hex64) {
          return Invalid("spec.referenceValues[" + name + "].digests: want 64 lowercase hex");
        }
        s.reference_values[name].emplace_back(d.as_string());
      }
    }
  }
  if (const json::array* req = ArrayField(*spec, "requiredMeasurements")) {
    for (const json::value& v : *req) {
      if (v.is_string()) s.required.emplace_back(v.as_string());
    }
  } else {
    s.required = {"agent/binary", "agent/config"};
  }
  if (auto r = IntField(*spec, "reattestIntervalSeconds")) {
    if (*r < 1) return Invalid("spec.reattestIntervalSeconds: must be positive");
    s.reattest_interval = std::chrono::seconds(*r);
  }
  if (auto t = IntField(*spec, "tokenLifetimeSeconds")) {
    if (*t < 10 || *t > 3600) return Invalid("spec.tokenLifetimeSeconds: 10 to 3600");
    s.token_lifetime = std::chrono::seconds(*t);
  }
  return s;
}

}  // namespace hyperslice::runners::controlnode
