#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/gpu/internal/claim.h"

#include "src/gpu/claim_controller.h"
#include "src/kube/store.h"

namespace hyperslice::gpu::internal {
namespace {

namespace bj = boost::json;

bj::array ToArray(const std::set<std::string>& s) {
  bj::array a;
  for (const auto& v : s) a.emplace_back(v);
  return a;
}

bool ReadSet(const bj::object& o, std::string_view key, std::set<std::string>& out) {
  const bj::value* v = o.if_contains(key);
  if (v == nullptr) return true;
  if (!v->is_array()) return false;
  for (const bj::value& e : v->get_array()) {
    if (!e.is_string()) return false;
    out.emplace(e.get_string());
  }
  return true;
}

}  // namespace

bj::object RequirementsToJson(const OfferRequirements& r) {
  bj::object o;
  if (!r.gpu_types.empty()) o["gpuTypes"] = ToArray(r.gpu_types);
  if (!r.excluded_gpu_types.empty()) o["excludedGpuTypes"] = ToArray(r.excluded_gpu_types);
  o["minGpuCount"] = r.min_gpu_count;
  if (r.min_gpu_memory_gib > 0) o["minGpuMemoryGiB"] = r.min_gpu_memory_gib;
  if (r.min_vcpus > 0) o["minVCPU"] = r.min_vcpus;
  if (r.min_memory_gib > 0) o["minMemoryGiB"] = r.min_memory_gib;
  if (!r.regions.empty()) o["regions"] = ToArray(r.regions);
  if (!r.excluded_regions.empty()) o["excludedRegions"] = ToArray(r.excluded_regions);
  if (!r.providers.empty()) o["providers"] = ToArray(r.providers);
  o["spotAllowed"] = r.spot_allowed;
  o["onDemandAllowed"] = r.on_demand_allowed;
  if (r.max_price) o["maxPrice"] = FormatUsd(*r.max_price);
  if (!r.provider_priority.empty()) {
    bj::object p;
    for (const auto& [name, prio] : r.provider_priority) p[name] = prio;
    o["providerPriority"] = std::move(p);
  }
  return o;
}

Result<OfferRequirements> RequirementsFromJson(std::string_view text) {
  boost::system::error_code ec;
  bj::value v = bj::parse(text, ec);
  auto bad = [](const std::string& what) {
    return Error::Make(Error::Code::kInvalidArgument, "offer requirements: " + what);
  };
  if (ec || !v.is_object()) return bad("not a JSON object");
  const bj::object& o = v.get_object();
  OfferRequirements r;
  if (!ReadSet(o, "gpuTypes", r.gpu_types) ||
      !ReadSet(o, "excludedGpuTypes", r.excluded_gpu_types) || !ReadSet(o, "regions", r.regions) ||
      !ReadSet(o, "excludedRegions", r.excluded_regions) || !ReadSet(o, "providers", r.providers)) {
    return bad("a name list is not a list of strings");
  }
  r.min_gpu_count = static_cast<int>(jsonfield::IntField(o, "minGpuCount").value_or(1));
  r.min_gpu_memory_gib = jsonfield::NumberField(o, "minGpuMemoryGiB").value_or(0);
  r.min_vcpus = static_cast<int>(jsonfield::IntField(o, "minVCPU").value_or(0));
  r.min_memory_gib = jsonfield::NumberField(o, "minMemoryGiB").value_or(0);
  r.spot_allowed = jsonfield::BoolField(o, "spotAllowed").value_or(false);
  r.on_demand_allowed = jsonfield::BoolField(o, "onDemandAllowed").value_or(true);
  if (std::string_view p = jsonfield::StringField(o, "maxPrice"); !p.empty()) {
    auto price = ParseUsd(p);
    if (!price.ok()) return bad("maxPrice: " + price.error().message);
    r.max_price = *price;
  }
  if (const bj::object* prio = jsonfield::ObjectField(o, "providerPriority")) {
    for (const auto& [name, value] : *prio) {
      if (!value.is_int64())
        return bad("providerPriority." + std::string(name) + " not an integer");
      r.provider_priority[std::string(name)] = static_cast<int>(value.get_int64());
    }
  }
  if (r.min_gpu_count < 1) return bad("minGpuCount below 1");
  return r;
}

std::string PoolKeyOf(const bj::object& claim) {
  const bj::object* ref = jsonfield::ObjectAt(claim, "spec.poolRef");
  if (ref == nullptr) return {};
  return std::string(jsonfield::StringField(*ref, "namespace")) + "/" +
         std::string(jsonfield::StringField(*ref, "name"));
}

std::string ClassNameOf(const bj::object& claim) {
  const bj::object* ref = jsonfield::ObjectAt(claim, "spec.nodeClassRef");
  return ref != nullptr ? std::string(jsonfield::StringField(*ref, "name")) : std::string();
}

std::string Meta(const bj::object& o, std::string_view field) {
  return std::string(kube::MetaString(o, field));
}

std::string Label(const bj::object& o, std::string_view key) {
  return std::string(jsonfield::StringField(jsonfield::ObjectAt(o, "metadata.labels"), key));
}

std::string Annotation(const bj::object& o, std::string_view key) {
  return std::string(jsonfield::StringField(jsonfield::ObjectAt(o, "metadata.annotations"), key));
}

std::optional<MicroUsd> PriceField(const bj::object* o, std::string_view key) {
  if (o == nullptr) return std::nullopt;
  std::string_view s = jsonfield::StringField(*o, key);
  if (s.empty()) return std::nullopt;
  auto p = ParseUsd(s);
  return p.ok() ? std::optional<MicroUsd>(*p) : std::nullopt;
}

MicroUsd ClaimHourlyCost(const bj::object& claim) {
  if (auto p = PriceField(jsonfield::ObjectField(claim, "status"), "price")) return *p;
  // The planned price (tgp.io/planned-price, claim_controller.h) while launching.
  if (auto p =
          PriceField(jsonfield::ObjectAt(claim, "metadata.annotations"), "tgp.io/planned-price")) {
    return *p;
  }
  return 0;
}

std::vector<std::string> NominatedPods(const boost::json::object& claim) {
  std::vector<std::string> out;
  std::string text = Annotation(claim, kAnnotationNominatedPods);
  if (text.empty()) return out;
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text, ec);
  if (ec || !v.is_array()) return out;
  for (const boost::json::value& uid : v.get_array()) {
    if (uid.is_string()) out.emplace_back(uid.get_string());
  }
  return out;
}

}  // namespace hyperslice::gpu::internal
