#include "src/gpu/planner.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <set>

namespace hyperslice::gpu {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
const std::set<std::string> kAllProviders = {kRunPod, kLambda, kPaperspace, kVast};

enum class KeyKind { kGpuType, kRegion, kProvider, kSpot, kCapacityType, kStatic };

KeyKind KindOfKey(const std::string& key) {
  if (key == kLabelGpuType) return KeyKind::kGpuType;
  if (key == kLabelRegion || key == "topology.kubernetes.io/region") return KeyKind::kRegion;
  if (key == kLabelProvider) return KeyKind::kProvider;
  if (key == kLabelSpot) return KeyKind::kSpot;
  if (key == "karpenter.sh/capacity-type") return KeyKind::kCapacityType;
  return KeyKind::kStatic;
}

std::string Describe(const kube::Requirement& r) {
  std::string v;
  for (const auto& x : r.values) v += (v.empty() ? "" : ",") + x;
  return r.key + " " + r.op + (v.empty() ? "" : " [" + v + "]");
}

// allowed := allowed ∩ values (an empty `allowed` means "any" before the first In).
bool NarrowSet(std::set<std::string>& allowed, const std::vector<std::string>& values) {
  std::set<std::string> in(values.begin(), values.end());
  if (allowed.empty()) {
    allowed = std::move(in);
  } else {
    std::set<std::string> both;
    std::set_intersection(allowed.begin(), allowed.end(), in.begin(), in.end(),
                          std::inserter(both, both.end()));
    allowed = std::move(both);
  }
  return !allowed.empty();
}

bool Fits(const OfferRequirements& r, const Offer& o) {
  auto in = [](const std::set<std::string>& s, const std::string& v) {
    return s.empty() || s.count(v) > 0;
  };
  return in(r.gpu_types, o.gpu_type) && !r.excluded_gpu_types.count(o.gpu_type) &&
         in(r.regions, o.region) && !r.excluded_regions.count(o.region) &&
         in(r.providers, o.provider) && o.gpu_count >= r.min_gpu_count &&
         o.gpu_memory_gib >= r.min_gpu_memory_gib && o.vcpus >= r.min_vcpus &&
         o.memory_gib >= r.min_memory_gib && o.available != 0;
}

bool SameRequirements(const OfferRequirements& a, const OfferRequirements& b) {
  return a.gpu_types == b.gpu_types && a.excluded_gpu_types == b.excluded_gpu_types &&
         a.regions == b.regions && a.excluded_regions == b.excluded_regions &&
         a.providers == b.providers && a.spot_allowed == b.spot_allowed &&
         a.on_demand_allowed == b.on_demand_allowed && a.max_price == b.max_price &&
         a.min_gpu_memory_gib == b.min_gpu_memory_gib;
}

// One way a pod could land on a pool: the offer requirements of that way.
struct Candidate {
  size_t pool;
  OfferRequirements req;
};

}  // namespace

std::optional<Choice> Satisfies(const Offer& offer, const OfferRequirements& req) {
  if (!Fits(req, offer)) return std::nullopt;
  Choice c;
  c.offer = &offer;
  MicroUsd best = -1;
  if (req.on_demand_allowed && offer.on_demand_price) {
    best = *offer.on_demand_price;
    c.spot = false;
  }
  if (req.spot_allowed && offer.spot_price && (best < 0 || *offer.spot_price < best)) {
    best = *offer.spot_price;
    c.spot = true;
  }
  if (best < 0 || (req.max_price && best > *req.max_price)) return std::nullopt;
  c.price = best;
  return c;
}

std::optional<OfferRequirements> Narrow(const OfferRequirements& base,
                                        const std::vector<kube::Requirement>& reqs,
                                        const kube::Labels& static_labels, std::string* why) {
  OfferRequirements r = base;
  auto fail = [&](std::string reason) -> std::optional<OfferRequirements> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  for (const auto& q : reqs) {
    KeyKind kind = KindOfKey(q.key);
    if (kind == KeyKind::kStatic) {
      if (!kube::Matches(q, static_labels)) {
        return fail("requires " + Describe(q) + ", which its machines' labels do not satisfy");
      }
      continue;
    }
    if (q.op == "Exists") continue;  // every machine carries these labels
    if (q.op == "DoesNotExist" || q.op == "Gt" || q.op == "Lt") {
      return fail("requires " + Describe(q) + ", which no machine can satisfy");
    }
    bool in = q.op == "In";
    if (kind == KeyKind::kSpot || kind == KeyKind::kCapacityType) {
      const char* yes = kind == KeyKind::kSpot ? "true" : "spot";
      const char* no = kind == KeyKind::kSpot ? "false" : "on-demand";
      bool want_spot = std::find(q.values.begin(), q.values.end(), yes) != q.values.end();
      bool want_od = std::find(q.values.begin(), q.values.end(), no) != q.values.end();
      if (in) {
        r.spot_allowed = r.spot_allowed && want_spot;
        r.on_demand_allowed = r.on_demand_allowed && want_od;
      } else {
        if (want_spot) r.spot_allowed = false;
        if (want_od) r.on_demand_allowed = false;
      }
      if (!r.spot_allowed && !r.on_demand_allowed) {
        return fail("requires " + Describe(q) +
                    (base.spot_allowed ? "" : " (spot is not allowed)"));
      }
      continue;
    }
    std::set<std::string>* allowed = nullptr;
    std::set<std::string>* excluded = nullptr;
    if (kind == KeyKind::kGpuType) {
      allowed = &r.gpu_types;
      excluded = &r.excluded_gpu_types;
    } else if (kind == KeyKind::kRegion) {
      allowed = &r.regions;
      excluded = &r.excluded_regions;
    } else {
      allowed = &r.providers;
    }
    if (in) {
      if (!NarrowSet(*allowed, q.values)) {
        return fail("requires " + Describe(q) + ", which conflicts with its other requirements");
      }
    } else if (excluded) {
      excluded->insert(q.values.begin(), q.values.end());
    } else {  // providers NotIn
      if (allowed->empty()) *allowed = kAllProviders;
      for (const auto& v : q.values) allowed->erase(v);
      if (allowed->empty()) return fail("requires " + Describe(q) + ", which leaves no provider");
    }
  }
  return r;
}

Result<PendingPod> PendingPodFrom(const boost::json::object& pod) {
  PendingPod p;
  std::string ns, name;
  if (const auto* md = pod.if_contains("metadata"); md && md->is_object()) {
    if (const auto* v = md->get_object().if_contains("namespace"); v && v->is_string()) {
      ns = std::string(v->get_string());
    }
    if (const auto* v = md->get_object().if_contains("name"); v && v->is_string()) {
      name = std::string(v->get_string());
    }
  }
  p.key = ns + "/" + name;
  auto placement = kube::PlacementOf(pod);
  if (!placement.ok()) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "pod " + p.key + ": " + placement.error().message);
  }
  p.placement = std::move(*placement);
  const auto& req = p.placement.requests;
  if (auto it = req.find(kResourceGpu); it != req.end()) {
    p.gpus = static_cast<int>(std::min<int64_t>(it->second.Value(), 1 << 20));
  }
  if (auto it = req.find("cpu"); it != req.end()) p.cpu_milli = it->second.MilliValue();
  if (auto it = req.find("memory"); it != req.end()) p.memory_bytes = it->second.Value();
  return p;
}

OfferRequirements Intersect(const OfferRequirements& a, const OfferRequirements& b) {
  auto names = [](const std::set<std::string>& x, const std::set<std::string>& y) {
    if (x.empty()) return y;
    if (y.empty()) return x;
    std::set<std::string> out;
    std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::inserter(out, out.begin()));
    // Both constrained and nothing in common: keep an impossible marker rather than "any".
    if (out.empty()) out.insert("");
    return out;
  };
  auto both = [](const std::set<std::string>& x, const std::set<std::string>& y) {
    std::set<std::string> out = x;
    out.insert(y.begin(), y.end());
    return out;
  };
  OfferRequirements r;
  r.gpu_types = names(a.gpu_types, b.gpu_types);
  r.excluded_gpu_types = both(a.excluded_gpu_types, b.excluded_gpu_types);
  r.min_gpu_count = std::max(a.min_gpu_count, b.min_gpu_count);
  r.min_gpu_memory_gib = std::max(a.min_gpu_memory_gib, b.min_gpu_memory_gib);
  r.min_vcpus = std::max(a.min_vcpus, b.min_vcpus);
  r.min_memory_gib = std::max(a.min_memory_gib, b.min_memory_gib);
  r.regions = names(a.regions, b.regions);
  r.excluded_regions = both(a.excluded_regions, b.excluded_regions);
  r.providers = names(a.providers, b.providers);
  r.spot_allowed = a.spot_allowed && b.spot_allowed;
  r.on_demand_allowed = a.on_demand_allowed && b.on_demand_allowed;
  if (a.max_price && b.max_price) {
    r.max_price = std::min(*a.max_price, *b.max_price);
  } else {
    r.max_price = a.max_price ? a.max_price : b.max_price;
  }
  r.provider_priority = a.provider_priority;
  r.provider_priority.insert(b.provider_priority.begin(), b.provider_priority.end());
  return r;
}

Plan MakePlan(const std::vector<PendingPod>& pods, const std::vector<PoolView>& pools_in,
              const std::map<std::string, Budget>& class_budgets_in, const OfferCatalog& offers,
              const OfferSkip& skip) {
  Plan plan;
  std::vector<PoolView> pools = pools_in;  // budgets are spent as machines are planned
  std::map<std::string, Budget> class_budgets = class_budgets_in;
  // Pool order: weight, then key (stable between runs).
  std::vector<size_t> pool_order(pools.size());
  std::iota(pool_order.begin(), pool_order.end(), 0);
  std::sort(pool_order.begin(), pool_order.end(), [&](size_t a, size_t b) {
    if (pools[a].weight != pools[b].weight) return pools[a].weight > pools[b].weight;
    return pools[a].key < pools[b].key;
  });
  std::set<int> gpu_counts;
  for (const auto& o : offers.offers()) gpu_counts.insert(o.gpu_count);

  // Every way each pod could land on each pool.
  std::vector<std::vector<Candidate>> candidates(pods.size());
  std::vector<std::string> first_reason(pods.size());
  for (size_t i = 0; i < pods.size(); ++i) {
    const PendingPod& pod = pods[i];
    if (pod.gpus <= 0) {
      first_reason[i] = "it asks for no nvidia.com/gpu";
      continue;
    }
    std::vector<kube::Requirement> own;
    for (const auto& [k, v] : pod.placement.node_selector) own.push_back({k, "In", {v}});
    std::vector<std::vector<kube::Requirement>> terms = pod.placement.required_terms;
    if (terms.empty()) terms.emplace_back();
    for (size_t pi : pool_order) {
      const PoolView& pool = pools[pi];
      auto untolerated = kube::Untolerated(pod.placement.tolerations, pool.taints);
      if (!untolerated.empty()) {
        if (first_reason[i].empty()) {
          const auto& t = untolerated.front();
          first_reason[i] = "it does not tolerate pool " + pool.key + "'s taint " + t.key +
                            (t.value.empty() ? "" : "=" + t.value) + ":" + t.effect;
        }
        continue;
      }
      for (const auto& term : terms) {
        std::vector<kube::Requirement> all = pool.requirements;
        all.insert(all.end(), own.begin(), own.end());
        all.insert(all.end(), term.begin(), term.end());
        std::string why;
        auto r = Narrow(pool.base, all, pool.labels, &why);
        if (!r) {
          if (first_reason[i].empty()) first_reason[i] = "on pool " + pool.key + " it " + why;
          continue;
        }
        r->min_gpu_count = std::max(r->min_gpu_count, pod.gpus);
        r->min_vcpus = std::max(r->min_vcpus, static_cast<int>((pod.cpu_milli + 999) / 1000));
        r->min_memory_gib =
            std::max(r->min_memory_gib, static_cast<double>(pod.memory_bytes) / kGiB);
        candidates[i].push_back({pi, std::move(*r)});
      }
    }
  }

  std::vector<size_t> order(pods.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (pods[a].gpus != pods[b].gpus) return pods[a].gpus > pods[b].gpus;
    return pods[a].key < pods[b].key;
  });
  std::vector<char> placed(pods.size(), 0);

  for (size_t oi = 0; oi < order.size(); ++oi) {
    size_t i = order[oi];
    const PendingPod& pod = pods[i];
    if (candidates[i].empty()) {
      plan.unplaced[i] = first_reason[i].empty() ? "no GPUNodePool matches it" : first_reason[i];
      continue;
    }
    // Share a machine already planned in this batch.
    bool shared = false;
    for (auto& m : plan.machines) {
      const Offer& o = *m.choice.offer;
      if (m.gpus_used + pod.gpus > o.gpu_count ||
          m.cpu_milli_used + pod.cpu_milli > static_cast<int64_t>(o.vcpus) * 1000 ||
          static_cast<double>(m.memory_bytes_used + pod.memory_bytes) > o.memory_gib * kGiB) {
        continue;
      }
      for (const auto& c : candidates[i]) {
        if (c.pool != m.pool) continue;
        OfferRequirements r = c.req;
        r.min_vcpus = 0;
        r.min_memory_gib = 0;
        auto fit = Satisfies(o, r);
        if (!fit) continue;
        if ((m.choice.spot && !r.spot_allowed) || (!m.choice.spot && !r.on_demand_allowed)) {
          continue;
        }
        shared = true;
        m.req = Intersect(m.req, c.req);
        break;
      }
      if (shared) {
        m.pods.push_back(i);
        m.gpus_used += pod.gpus;
        m.cpu_milli_used += pod.cpu_milli;
        m.memory_bytes_used += pod.memory_bytes;
        break;
      }
    }
    if (shared) {
      placed[i] = 1;
      continue;
    }
    // A new machine: the first pool (by weight) that has room and an offer.
    std::string reason;
    std::optional<Candidate> best_c;
    std::optional<Choice> best;
    double best_score = 0;
    size_t decided_pool = pools.size();
    for (const auto& c : candidates[i]) {
      if (decided_pool != pools.size() && c.pool != decided_pool) break;  // weight order
      PoolView& pool = pools[c.pool];
      Budget* cls = nullptr;
      if (auto it = class_budgets.find(pool.class_name); it != class_budgets.end()) {
        cls = &it->second;
      }
      auto full = [&](const Budget& b, const std::string& what) {
        if (b.nodes_left && *b.nodes_left <= 0) {
          if (reason.empty()) reason = what + " has reached its node limit";
          return true;
        }
        if (b.hourly_cost_left && *b.hourly_cost_left <= 0) {
          if (reason.empty()) reason = what + " has reached its hourly cost limit";
          return true;
        }
        return false;
      };
      if (full(pool.budget, "pool " + pool.key) ||
          (cls && full(*cls, "GPUNodeClass " + pool.class_name))) {
        continue;
      }
      OfferRequirements r = c.req;
      for (const Budget* b :
           {static_cast<const Budget*>(&pool.budget), static_cast<const Budget*>(cls)}) {
        if (b && b->hourly_cost_left) {
          r.max_price =
              r.max_price ? std::min(*r.max_price, *b->hourly_cost_left) : *b->hourly_cost_left;
        }
      }
      // GPUs the rest of the batch could put on this machine (same pool, same requirements).
      int demand = pod.gpus;
      for (size_t oj = oi + 1; oj < order.size(); ++oj) {
        size_t j = order[oj];
        if (placed[j]) continue;
        for (const auto& cj : candidates[j]) {
          if (cj.pool == c.pool && SameRequirements(cj.req, c.req)) {
            demand += pods[j].gpus;
            break;
          }
        }
      }
      for (int count : gpu_counts) {
        if (count < pod.gpus) continue;
        OfferRequirements rc = r;
        rc.min_gpu_count = count;
        auto choice = skip ? offers.Select(rc, skip) : offers.Select(rc);
        if (!choice) continue;
        int used = std::min(choice->offer->gpu_count, demand);
        double score = static_cast<double>(choice->price) / std::max(1, used);
        if (!best || score < best_score || (score == best_score && choice->price < best->price)) {
          best = choice;
          best_score = score;
          best_c = c;
        }
      }
      if (best) {
        decided_pool = c.pool;
      } else if (reason.empty()) {
        // Did a cost budget, not the market, rule the offers out? Then say which limit.
        OfferRequirements uncapped = c.req;
        uncapped.min_gpu_count = std::max(uncapped.min_gpu_count, pod.gpus);
        auto without_budget = skip ? offers.Select(uncapped, skip) : offers.Select(uncapped);
        if (without_budget && r.max_price && without_budget->price > *r.max_price &&
            (!c.req.max_price || without_budget->price <= *c.req.max_price)) {
          bool pool_tighter = pool.budget.hourly_cost_left &&
                              (!cls || !cls->hourly_cost_left ||
                               *pool.budget.hourly_cost_left <= *cls->hourly_cost_left);
          reason = (pool_tighter ? "pool " + pool.key : "GPUNodeClass " + pool.class_name) +
                   " has reached its hourly cost limit: $" + FormatUsd(*r.max_price) +
                   "/h left, the cheapest fitting offer costs $" +
                   FormatUsd(without_budget->price) + "/h";
        } else {
          reason = "on pool " + pool.key + ": " + offers.Explain(r);
        }
      }
    }
    if (!best) {
      plan.unplaced[i] = reason.empty() ? "no offer fits" : reason;
      continue;
    }
    PoolView& pool = pools[best_c->pool];
    auto spend = [&](Budget& b) {
      if (b.nodes_left) --*b.nodes_left;
      if (b.hourly_cost_left) *b.hourly_cost_left -= best->price;
    };
    spend(pool.budget);
    if (auto it = class_budgets.find(pool.class_name); it != class_budgets.end()) {
      spend(it->second);
    }
    PlannedMachine m;
    m.pool = best_c->pool;
    m.choice = *best;
    m.req = best_c->req;
    m.pods.push_back(i);
    m.gpus_used = pod.gpus;
    m.cpu_milli_used = pod.cpu_milli;
    m.memory_bytes_used = pod.memory_bytes;
    plan.machines.push_back(std::move(m));
    placed[i] = 1;
  }
  return plan;
}

}  // namespace hyperslice::gpu
