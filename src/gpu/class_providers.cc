#include "src/gpu/class_providers.h"

#include <boost/json.hpp>

#include "src/base/json.h"

namespace hyperslice::gpu {

namespace bj = boost::json;
using jsonfield::ArrayField;
using jsonfield::BoolField;
using jsonfield::IntField;
using jsonfield::ObjectField;
using jsonfield::StringField;

std::vector<ClassProvider> ReadClassProviders(const bj::object& spec) {
  std::vector<ClassProvider> out;
  const bj::array* providers = ArrayField(spec, "providers");
  if (providers == nullptr) return out;
  for (const bj::value& v : *providers) {
    const bj::object* p = v.if_object();
    if (p == nullptr) continue;
    ClassProvider s;
    s.name = std::string(StringField(*p, "name"));
    s.enabled = BoolField(*p, "enabled").value_or(true);
    s.priority = static_cast<int>(IntField(*p, "priority").value_or(100));
    s.endpoint = std::string(StringField(*p, "endpoint"));
    if (const bj::array* regions = ArrayField(*p, "regions")) {
      for (const bj::value& r : *regions) {
        if (r.is_string()) s.regions.emplace_back(r.get_string());
      }
    }
    if (const bj::object* ref = ObjectField(*p, "credentialsRef")) {
      s.credentials.ns = std::string(StringField(*ref, "namespace"));
      s.credentials.name = std::string(StringField(*ref, "name"));
      s.credentials.key = std::string(StringField(*ref, "key"));
    }
    out.push_back(std::move(s));
  }
  return out;
}

void ApplyInstanceRequirements(const bj::object& cls, OfferRequirements& base) {
  const bj::object* ir = jsonfield::ObjectAt(cls, "spec.instanceRequirements");
  if (ir == nullptr) return;
  if (const bj::array* g = ArrayField(*ir, "gpuTypes")) {
    for (const bj::value& t : *g) {
      if (t.is_string()) base.gpu_types.emplace(t.get_string());
    }
  }
  if (const bj::array* r = ArrayField(*ir, "regions")) {
    for (const bj::value& t : *r) {
      if (t.is_string()) base.regions.emplace(t.get_string());
    }
  }
  base.spot_allowed = BoolField(*ir, "spotAllowed").value_or(false);
  base.min_vcpus = static_cast<int>(IntField(*ir, "minVCPU").value_or(0));
  base.min_memory_gib = static_cast<double>(IntField(*ir, "minMemoryGiB").value_or(0));
  base.min_gpu_memory_gib = static_cast<double>(IntField(*ir, "minGPUMemoryGiB").value_or(0));
}

}  // namespace hyperslice::gpu
