// The disruption controller (disruption_controller.h).
#include "src/gpu/disruption_controller.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/gpu/api.h"
#include "src/gpu/claim_controller.h"
#include "src/gpu/disruption.h"
#include "src/gpu/internal/claim.h"
#include "src/gpu/internal/registration.h"
#include "src/gpu/planner.h"
#include "src/kube/client.h"
#include "src/kube/controller.h"
#include "src/kube/events.h"
#include "src/kube/informer.h"
#include "src/kube/manager.h"
#include "src/kube/metrics.h"
#include "src/kube/object_helpers.h"

namespace hyperslice::gpu {
namespace {

namespace bj = boost::json;
using internal::Annotation;
using internal::Label;
using internal::Meta;
using jsonfield::ObjectField;
using jsonfield::StringField;
using kube::ObjectPtr;

constexpr char kClaimsByPool[] = "tgp.io/disruption-claims-by-pool";
constexpr char kClaimsByNode[] = "tgp.io/disruption-claims-by-node";
constexpr char kPodsByNode[] = "tgp.io/disruption-pods-by-node";
constexpr char kPodsByUid[] = "tgp.io/disruption-pods-by-uid";

// "<namespace>/<name>" of the claim's pool, from the labels the provisioner writes.
std::string PoolKey(const bj::object& claim) {
  std::string name = Label(claim, kLabelNodePool);
  if (name.empty()) return "";
  return Label(claim, kLabelPoolNamespace) + "/" + name;
}

std::string NodeNameOf(const bj::object& claim) {
  const bj::object* status = ObjectField(claim, "status");
  return status != nullptr ? std::string(StringField(*status, "nodeName")) : std::string();
}

std::string Seconds(std::chrono::seconds s) { return std::to_string(s.count()) + "s"; }

// A replacement's name: the pool's prefix and a suffix from the expired claim's uid, the same on
// every reconcile (a second create is refused as AlreadyExists instead of renting twice).
std::string ReplacementName(const bj::object& old) {
  std::string name = Meta(old, "name");
  std::string prefix = name.substr(0, name.rfind('-'));
  std::string uid = Meta(old, "uid");
  uint64_t h = 14695981039346656037ULL;  // FNV-1a: stable across builds and restarts
  for (char ch : uid) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ULL;
  static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  std::string suffix;
  for (int i = 0; i < 5; ++i) {
    suffix += kAlphabet[h % (sizeof kAlphabet - 1)];
    h /= sizeof kAlphabet - 1;
  }
  return prefix + "-" + suffix;
}

class DisruptionReconciler {
 public:
  struct Informers {
    std::shared_ptr<kube::SharedInformer> pools, claims, pods, nodes;
  };

  DisruptionReconciler(DisruptionControllerOptions o, Informers inf)
      : o_(std::move(o)), inf_(std::move(inf)) {}

  Clock& clock() const { return o_.ClockOrReal(); }

  Result<kube::ReconcileResult> Reconcile(const std::string& key) {
    kube::ReconcileResult result;
    ObjectPtr pool = inf_.pools->store().Get(key);
    if (!pool) return result;
    auto spec = ParseDisruption(*pool);
    if (!spec.ok()) {
      Event(*pool, kube::EventType::kWarning, "InvalidDisruption", spec.error().message);
      return result;
    }
    auto claims = inf_.claims->store().ByIndex(kClaimsByPool, key);
    if (!claims.ok()) return claims.error();

    const auto now = clock().Now();
    const auto wall = std::chrono::system_clock::now();
    int disrupting = 0;
    std::vector<Candidate> due;
    Clock::Duration next = Clock::Duration::max();
    auto wake_in = [&next](Clock::Duration d) { next = std::min(next, std::max(d, kMinWait)); };
    std::lock_guard lock(mu_);
    std::set<std::string> seen;
    std::map<std::string, ObjectPtr> by_name;
    for (const ObjectPtr& claim : *claims) by_name[Meta(*claim, "name")] = claim;
    for (const ObjectPtr& claim : *claims) {
      std::string uid = Meta(*claim, "uid");
      seen.insert(uid);
      if (kube::IsDeleting(*claim)) {
        requested_.erase(uid);
        ++disrupting;
        continue;
      }
      // Deleted by an earlier reconcile, but the cache has not shown it yet: still being returned
      // (not a candidate again, and it counts against the budget).
      if (requested_.count(uid) != 0) {
        ++disrupting;
        continue;
      }
      std::string node_name = NodeNameOf(*claim);
      if (node_name.empty() || !kube::IsConditionTrue(*claim, "Ready")) {
        since_.erase(uid);
        continue;
      }
      // A new machine whose pods are not bound yet is not empty, it is about to be used (the
      // scheduler binds them once the claim is Ready): Karpenter does not consolidate a node
      // with pods nominated to it either.
      if (WaitsForNominatedPods(*claim)) {
        since_.erase(uid);
        continue;
      }
      // A replacement whose expired machine is still there is not idle, it is waiting for the
      // pods the drain will send it.
      if (auto r = by_name.find(Annotation(*claim, kAnnotationReplaces));
          r != by_name.end() && !kube::IsDeleting(*r->second)) {
        since_.erase(uid);
        continue;
      }
      ObjectPtr node = inf_.nodes->store().Get(node_name);
      std::vector<ObjectPtr> pods;
      if (auto on_node = inf_.pods->store().ByIndex(kPodsByNode, node_name); on_node.ok())
        pods = *on_node;
      std::vector<const bj::object*> views;
      views.reserve(pods.size());
      for (const auto& p : pods) views.push_back(p.get());
      // Expiry first: it is not voluntary consolidation (do-not-disrupt does not keep an expired
      // machine; the drain waits for such pods up to terminationGracePeriod, as Karpenter does).
      if (auto created = kube::ParseTime(Meta(*claim, "creationTimestamp")); created) {
        if (Expired(*spec, *created, wall)) {
          due.push_back(
              {claim, now, "expired", node_name,
               !Consolidatable(ConsolidationPolicy::kWhenEmpty, bj::object{}, nullptr, views)
                    .empty()});
          since_.erase(uid);
          continue;
        }
        if (spec->expire_after)
          wake_in(
              std::chrono::duration_cast<Clock::Duration>(*created + *spec->expire_after - wall));
      }
      std::string why = Consolidatable(spec->policy, *claim, node.get(), views);
      if (why.empty() || !spec->consolidate_after) {
        since_.erase(uid);
        continue;
      }
      auto [it, inserted] = since_.emplace(uid, now);
      auto when = it->second + *spec->consolidate_after;
      if (now >= when) {
        due.push_back({claim, it->second, why, node_name, true});
      } else {
        wake_in(when - now);
      }
    }
    // Forget claims of this pool that are gone.
    for (const auto& uid : seen) pool_of_[uid] = key;
    for (auto it = pool_of_.begin(); it != pool_of_.end();) {
      if (it->second == key && seen.count(it->first) == 0) {
        since_.erase(it->first);
        requested_.erase(it->first);
        it = pool_of_.erase(it);
      } else {
        ++it;
      }
    }
    // Expired machines first, then the longest empty/idle.
    std::stable_sort(due.begin(), due.end(), [](const Candidate& a, const Candidate& b) {
      if ((a.why == "expired") != (b.why == "expired")) return a.why == "expired";
      return a.since < b.since;
    });
    const int pool_size = static_cast<int>(claims->size());
    int started = 0, held = 0;
    std::string held_why;
    for (const Candidate& c : due) {
      int allowed = DisruptionsAllowed(spec->budgets, c.why, wall, pool_size, disrupting + started);
      if (allowed <= 0) {
        ++held;
        held_why = "the disruption budget for " + c.why + " machines allows " +
                   std::to_string(disrupting + started) + " being returned at once";
        continue;
      }
      if (c.why == "expired" && !c.empty && spec->expire_policy == ExpirePolicy::kReplace) {
        auto replacement = EnsureReplacement(*pool, *c.claim, by_name);
        if (!replacement.ok()) return replacement.error();
        if (!replacement->empty()) {
          ++held;
          held_why = *replacement;
          continue;
        }
      }
      HS_RETURN_IF_ERROR(Disrupt(key, *spec, c, now));
      ++started;
    }
    if (held > 0) {
      Event(*pool, kube::EventType::kNormal, "DisruptionBlocked",
            std::to_string(held) + " machine(s) due to be returned wait: " + held_why);
      wake_in(o_.budget_retry);
    }
    if (next != Clock::Duration::max()) result.requeue_after = next;
    return result;
  }

 private:
  struct Candidate {
    ObjectPtr claim;
    Clock::TimePoint since;
    std::string why, node;
    bool empty = true;  // no pod that counts runs on its Node
  };
  static constexpr Clock::Duration kMinWait = std::chrono::milliseconds(100);

  bool WaitsForNominatedPods(const bj::object& claim) const {
    for (const std::string& pod_uid : internal::NominatedPods(claim)) {
      auto pods = inf_.pods->store().ByIndex(kPodsByUid, pod_uid);
      if (!pods.ok()) continue;
      for (const ObjectPtr& pod : *pods) {
        const bj::object* spec = ObjectField(*pod, "spec");
        const bj::object* status = ObjectField(*pod, "status");
        std::string_view phase = status ? StringField(*status, "phase") : "";
        if (!kube::IsDeleting(*pod) && phase != "Succeeded" && phase != "Failed" &&
            (spec == nullptr || StringField(*spec, "nodeName").empty()))
          return true;
      }
    }
    return false;
  }

  // Deletes the claim (its finalizer drains the Node and returns the machine), counts it and says
  // why.
  Status Disrupt(const std::string& pool, const DisruptionSpec& spec, const Candidate& c,
                 Clock::TimePoint now) {
    std::string name = Meta(*c.claim, "name");
    kube::DeleteOptions d;
    d.precondition_uid = Meta(*c.claim, "uid");
    Status st = o_.client->Delete(GPUNodeClaims(), "", name, d);
    if (!st.ok() && st.error().code != Error::Code::kNotFound) return st.error();
    requested_.insert(d.precondition_uid.value_or(""));
    since_.erase(Meta(*c.claim, "uid"));
    // Karpenter's name and labels, so its dashboards read ours.
    kube::metrics::Registry::Default()
        .GetCounter("karpenter_nodeclaims_disrupted_total",
                    "GPU machines given back by the disruption controller, by pool and reason "
                    "(empty, idle, expired).",
                    {{"nodepool", pool}, {"reason", c.why}})
        .Inc();
    std::string msg = "returning the machine of node " + c.node + ": ";
    if (c.why == "expired") {
      msg += "older than expireAfter " + Seconds(*spec.expire_after) + " (pool " + pool + ")";
    } else {
      auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - c.since);
      msg += c.why + " for " + Seconds(waited) + " (pool " + pool + ", consolidateAfter " +
             Seconds(*spec.consolidate_after) + ")";
    }
    log::Info("gpu disruption: returning a machine",
              {{"claim", name}, {"node", c.node}, {"pool", pool}, {"reason", c.why}});
    Event(*c.claim, kube::EventType::kNormal, "Disrupting", msg);
    return OkStatus();
  }

  // An expired machine that runs pods is replaced before it is drained: a claim like it (same
  // pool, requirements and planned offer) named after it, so a second reconcile finds it rather
  // than renting another. Returns "" once the replacement is Ready (drain now), else why the
  // expired machine waits. The replacement must fit the pool's maxNodes and maxHourlyCost.
  Result<std::string> EnsureReplacement(const kube::Object& pool, const kube::Object& old,
                                        const std::map<std::string, ObjectPtr>& claims) {
    std::string old_name = Meta(old, "name");
    for (const auto& [name, c] : claims) {
      if (Annotation(*c, kAnnotationReplaces) != old_name || kube::IsDeleting(*c)) continue;
      if (kube::IsConditionTrue(*c, "Ready")) return std::string();
      std::string why = "replacement ";
      why += name;
      why += " for expired " + old_name + " is not Ready yet";
      return why;
    }
    const bj::object* limits = jsonfield::ObjectAt(pool, "spec.limits");
    if (limits != nullptr) {
      int live = 0;
      MicroUsd cost = 0;
      for (const auto& [name, c] : claims) {
        if (kube::IsDeleting(*c)) continue;
        ++live;
        cost += internal::ClaimHourlyCost(*c);
      }
      if (auto max = jsonfield::IntField(*limits, "maxNodes"); max && live + 1 > *max)
        return "replacing expired " + old_name + " would exceed the pool's maxNodes " +
               std::to_string(*max);
      auto max_cost = internal::PriceField(limits, "maxHourlyCost");
      if (max_cost && cost + internal::ClaimHourlyCost(old) > *max_cost)
        return "replacing expired " + old_name + " would exceed the pool's maxHourlyCost " +
               FormatUsd(*max_cost);
    }
    bj::object meta{{"name", ReplacementName(old)}};
    if (const bj::object* l = jsonfield::ObjectAt(old, "metadata.labels")) meta["labels"] = *l;
    bj::object annotations{{kAnnotationReplaces, old_name}};
    for (const char* a :
         {kAnnotationRequirements, kAnnotationPlannedOffer, kAnnotationPlannedPrice})
      if (std::string v = Annotation(old, a); !v.empty()) annotations[a] = v;
    meta["annotations"] = std::move(annotations);
    bj::object claim{{"apiVersion", "tgp.io/v1"},
                     {"kind", "GPUNodeClaim"},
                     {"metadata", std::move(meta)},
                     {"spec", old.contains("spec") ? old.at("spec") : bj::object{}}};
    auto created = o_.client->Create(GPUNodeClaims(), "", claim);
    if (!created.ok() && created.error().code != Error::Code::kAlreadyExists)
      return created.error();
    if (created.ok()) {
      Event(old, kube::EventType::kNormal, "Replacing",
            "expired: launching replacement " + Meta(*created, "name") +
                " before draining this machine");
    }
    return "replacement for expired " + old_name + " is launching";
  }

  void Event(const bj::object& o, kube::EventType type, const std::string& reason,
             const std::string& msg) {
    if (o_.events) o_.events->Event(o, type, reason, msg);
  }

  DisruptionControllerOptions o_;
  Informers inf_;
  std::mutex mu_;
  std::map<std::string, Clock::TimePoint> since_;  // claim uid -> first seen empty/idle
  std::map<std::string, std::string> pool_of_;     // claim uid -> pool key
  std::set<std::string> requested_;  // claim uids deleted here, not yet deleting in the cache
};

}  // namespace

Status RegisterDisruptionController(kube::Manager& mgr, DisruptionControllerOptions options) {
  HS_RETURN_IF_ERROR(internal::RequireInformers(mgr));
  if (!options.client)
    return Error::Make(Error::Code::kInvalidArgument, "disruption controller: client is required");
  DisruptionReconciler::Informers inf;
  inf.pools = mgr.informers()->For(GPUNodePools());
  inf.claims = mgr.informers()->For(GPUNodeClaims());
  inf.pods = mgr.informers()->For(kube::resources::Pods());
  inf.nodes = mgr.informers()->For(kube::resources::Nodes());
  HS_RETURN_IF_ERROR(inf.claims->AddIndex(kClaimsByPool, [](const kube::Object& c) {
    std::string key = PoolKey(c);
    return key.empty() ? std::vector<std::string>{} : std::vector<std::string>{key};
  }));
  HS_RETURN_IF_ERROR(inf.claims->AddIndex(kClaimsByNode, kube::FieldIndexFunc("status.nodeName")));
  HS_RETURN_IF_ERROR(inf.pods->AddIndex(kPodsByNode, kube::FieldIndexFunc("spec.nodeName")));
  HS_RETURN_IF_ERROR(inf.pods->AddIndex(kPodsByUid, kube::FieldIndexFunc("metadata.uid")));

  kube::ControllerOptions co;
  co.name = "gpu-disruption";
  co.max_concurrent_reconciles = 1;
  co.clock = options.clock;
  auto reconciler = std::make_shared<DisruptionReconciler>(std::move(options), inf);
  auto controller = std::make_shared<kube::Controller>(
      std::move(co), [reconciler](const std::string& key) { return reconciler->Reconcile(key); });
  controller->Watch(*inf.pools);
  std::weak_ptr<kube::Controller> weak = controller;
  auto claims = inf.claims;
  // A claim's changes wake its pool; a pod's or a Node's wake the pools of the Node's claims.
  auto by_claim = [weak](const ObjectPtr& claim) {
    auto c = weak.lock();
    if (!c || !claim) return;
    if (std::string key = PoolKey(*claim); !key.empty()) c->Enqueue(key);
  };
  auto by_node_name = [weak, claims](const std::string& node) {
    auto c = weak.lock();
    if (!c || node.empty()) return;
    auto owners = claims->store().ByIndex(kClaimsByNode, node);
    if (!owners.ok()) return;
    for (const ObjectPtr& claim : *owners)
      if (std::string key = PoolKey(*claim); !key.empty()) c->Enqueue(key);
  };
  auto by_pod = [by_node_name](const ObjectPtr& pod) {
    if (!pod) return;
    const bj::object* spec = ObjectField(*pod, "spec");
    by_node_name(spec != nullptr ? std::string(StringField(*spec, "nodeName")) : "");
  };
  auto by_node = [by_node_name](const ObjectPtr& node) {
    if (node) by_node_name(Meta(*node, "name"));
  };
  inf.claims->AddEventHandler(kube::OnEachObject(by_claim));
  inf.pods->AddEventHandler({.on_add = by_pod,
                             .on_update =
                                 [by_pod](const ObjectPtr& old, const ObjectPtr& cur) {
                                   by_pod(old);
                                   by_pod(cur);
                                 },
                             .on_delete = [by_pod](const ObjectPtr& last, bool) { by_pod(last); }});
  inf.nodes->AddEventHandler(kube::OnEachObject(by_node));
  mgr.Add(controller);
  return OkStatus();
}

}  // namespace hyperslice::gpu
