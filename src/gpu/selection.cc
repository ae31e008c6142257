#include "src/gpu/selection.h"

#include <algorithm>
#include <sstream>

namespace hyperslice::gpu {

namespace {

uint32_t Intern(std::map<std::string, uint32_t>& ids, const std::string& s) {
  auto [it, inserted] = ids.emplace(s, static_cast<uint32_t>(ids.size()));
  return it->second;
}

// Flags for `ids`: allowed when `in` is empty or names it, and `out` does not.
std::vector<char> Allowed(const std::map<std::string, uint32_t>& ids,
                          const std::set<std::string>& in, const std::set<std::string>& out,
                          bool* impossible) {
  std::vector<char> ok(ids.size(), in.empty() ? 1 : 0);
  bool any = in.empty();
  for (const auto& name : in) {
    auto it = ids.find(name);
    if (it != ids.end()) {
      ok[it->second] = 1;
      any = true;
    }
  }
  for (const auto& name : out) {
    auto it = ids.find(name);
    if (it != ids.end()) ok[it->second] = 0;
  }
  if (!any) *impossible = true;
  return ok;
}

}  // namespace

OfferCatalog::OfferCatalog(std::vector<Offer> offers) : offers_(std::move(offers)) {
  rows_.reserve(offers_.size());
  for (const auto& o : offers_) {
    Row r;
    r.gpu_type = Intern(gpu_ids_, o.gpu_type);
    r.region = Intern(region_ids_, o.region);
    r.provider = Intern(provider_ids_, o.provider);
    r.gpu_count = o.gpu_count;
    r.vcpus = o.vcpus;
    r.gpu_memory_gib = static_cast<float>(o.gpu_memory_gib);
    r.memory_gib = static_cast<float>(o.memory_gib);
    r.on_demand = o.on_demand_price.value_or(-1);
    r.spot = o.spot_price.value_or(-1);
    r.available = o.available;
    rows_.push_back(r);
  }
}

OfferCatalog::Compiled OfferCatalog::Compile(const OfferRequirements& req) const {
  Compiled c;
  c.req = &req;
  c.gpu_ok = Allowed(gpu_ids_, req.gpu_types, req.excluded_gpu_types, &c.impossible);
  c.region_ok = Allowed(region_ids_, req.regions, req.excluded_regions, &c.impossible);
  c.provider_ok = Allowed(provider_ids_, req.providers, {}, &c.impossible);
  c.priority.assign(provider_ids_.size(), 0);
  for (const auto& [name, id] : provider_ids_) {
    auto it = req.provider_priority.find(name);
    if (it != req.provider_priority.end()) c.priority[id] = it->second;
  }
  return c;
}

bool OfferCatalog::Better(size_t a, MicroUsd pa, size_t b, MicroUsd pb, const Compiled& c) const {
  if (pa != pb) return pa < pb;
  const Row& ra = rows_[a];
  const Row& rb = rows_[b];
  if (c.priority[ra.provider] != c.priority[rb.provider]) {
    return c.priority[ra.provider] < c.priority[rb.provider];
  }
  // -1 (the provider does not say) ranks below any known count.
  if (ra.available != rb.available) return ra.available > rb.available;
  const Offer& oa = offers_[a];
  const Offer& ob = offers_[b];
  if (oa.provider != ob.provider) return oa.provider < ob.provider;
  return oa.id < ob.id;
}

std::string OfferCatalog::Explain(const OfferRequirements& req) const {
  auto join = [](const std::set<std::string>& s) {
    std::string out;
    for (const auto& x : s) out += (out.empty() ? "" : "|") + x;
    return out;
  };
  // Apply the requirements one at a time; the first that leaves nothing is the answer.
  std::vector<size_t> left(rows_.size());
  for (size_t i = 0; i < left.size(); ++i) left[i] = i;
  if (left.empty()) return "no offers are known (no provider has listed any yet)";
  struct Step {
    std::string what;
    std::function<bool(const Offer&)> keep;
  };
  std::vector<Step> steps;
  if (!req.providers.empty()) {
    steps.push_back({"from providers " + join(req.providers),
                     [&](const Offer& o) { return req.providers.count(o.provider) > 0; }});
  }
  if (!req.gpu_types.empty() || !req.excluded_gpu_types.empty()) {
    steps.push_back({"of GPU type " + (req.gpu_types.empty() ? "any" : join(req.gpu_types)),
                     [&](const Offer& o) {
                       return (req.gpu_types.empty() || req.gpu_types.count(o.gpu_type)) &&
                              !req.excluded_gpu_types.count(o.gpu_type);
                     }});
  }
  if (!req.regions.empty() || !req.excluded_regions.empty()) {
    steps.push_back(
        {"in " + (req.regions.empty() ? "any region" : join(req.regions)), [&](const Offer& o) {
           return (req.regions.empty() || req.regions.count(o.region)) &&
                  !req.excluded_regions.count(o.region);
         }});
  }
  steps.push_back({"with at least " + std::to_string(req.min_gpu_count) + " GPU(s)",
                   [&](const Offer& o) { return o.gpu_count >= req.min_gpu_count; }});
  if (req.min_gpu_memory_gib > 0 || req.min_vcpus > 0 || req.min_memory_gib > 0) {
    std::ostringstream w;
    w << "with " << req.min_gpu_memory_gib << " GiB GPU memory, " << req.min_vcpus << " vCPUs and "
      << req.min_memory_gib << " GiB memory";
    steps.push_back({w.str(), [&](const Offer& o) {
                       return o.gpu_memory_gib >= req.min_gpu_memory_gib &&
                              o.vcpus >= req.min_vcpus && o.memory_gib >= req.min_memory_gib;
                     }});
  }
  steps.push_back(
      {req.spot_allowed ? (req.on_demand_allowed ? "on demand or spot" : "as spot") : "on demand",
       [&](const Offer& o) {
         return (req.on_demand_allowed && o.on_demand_price) || (req.spot_allowed && o.spot_price);
       }});
  steps.push_back({"available now", [](const Offer& o) { return o.available != 0; }});
  std::string so_far = "no offer";
  for (const auto& step : steps) {
    std::vector<size_t> kept;
    for (size_t i : left) {
      if (step.keep(offers_[i])) kept.push_back(i);
    }
    if (kept.empty()) return so_far + " " + step.what;
    so_far += " " + step.what;
    left.swap(kept);
  }
  if (req.max_price) {
    MicroUsd cheapest = -1;
    for (size_t i : left) {
      const Offer& o = offers_[i];
      for (const auto& p : {req.on_demand_allowed ? o.on_demand_price : std::nullopt,
                            req.spot_allowed ? o.spot_price : std::nullopt}) {
        if (p && (cheapest < 0 || *p < cheapest)) cheapest = *p;
      }
    }
    if (cheapest > *req.max_price) {
      return so_far + " at or under $" + FormatUsd(*req.max_price) + "/h (the cheapest is $" +
             FormatUsd(cheapest) + "/h)";
    }
  }
  return so_far + " is left after the unavailable-offers cache";
}

}  // namespace hyperslice::gpu
