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
using internal::Meta;
using jsonfield::ObjectField;
using jsonfield::StringField;
using kube::ObjectPtr;

constexpr char kClaimsByPool[] = "tgp.io/disruption-claims-by-pool";
constexpr char kClaimsByNode[] = "tgp.io/disruption-claims-by-node";
constexpr char kPodsByNode[] = "tgp.io/disruption-pods-by-node";

std::string Label(const bj::object& o, std::string_view key) {
  const bj::object* m = ObjectField(o, "metadata");
  const bj::object* l = m != nullptr ? ObjectField(*m, "labels") : nullptr;
  return l != nullptr ? std::string(StringField(*l, key)) : std::string();
}

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

class DisruptionReconciler {
 public:
  struct Informers {
    std::shared_ptr<kube::SharedInformer> pools, claims, pods, nodes;
  };

  DisruptionReconciler(DisruptionControllerOptions o, Informers inf)
      : o_(std::move(o)), inf_(std::move(inf)) {}

  Clock& clock() const { return o_.clock != nullptr ? *o_.clock : RealClock(); }

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
    int disrupting = 0;
    struct Candidate {
      ObjectPtr claim;
      Clock::TimePoint since;
      std::string why, node;
    };
    std::vector<Candidate> due;
    Clock::Duration next = Clock::Duration::max();
    std::lock_guard lock(mu_);
    std::set<std::string> seen;
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
      ObjectPtr node = inf_.nodes->store().Get(node_name);
      std::vector<ObjectPtr> pods;
      if (auto on_node = inf_.pods->store().ByIndex(kPodsByNode, node_name); on_node.ok())
        pods = *on_node;
      std::vector<const bj::object*> views;
      views.reserve(pods.size());
      for (const auto& p : pods) views.push_back(p.get());
      std::string why = Consolidatable(spec->policy, *claim, node.get(), views);
      if (why.empty() || !spec->consolidate_after) {
        since_.erase(uid);
        continue;
      }
      auto [it, inserted] = since_.emplace(uid, now);
      auto when = it->second + *spec->consolidate_after;
      if (now >= when) {
        due.push_back({claim, it->second, why, node_name});
      } else {
        next = std::min(next, when - now);
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
    std::sort(due.begin(), due.end(),
              [](const Candidate& a, const Candidate& b) { return a.since < b.since; });
    int allowed = DisruptionsAllowed(spec->budgets, static_cast<int>(claims->size()), disrupting);
    int started = 0;
    for (const Candidate& c : due) {
      if (started >= allowed) break;
      std::string name = Meta(*c.claim, "name");
      kube::DeleteOptions d;
      d.precondition_uid = Meta(*c.claim, "uid");
      Status st = o_.client->Delete(GPUNodeClaims(), "", name, d);
      if (!st.ok() && st.error().code != Error::Code::kNotFound) return st.error();
      requested_.insert(d.precondition_uid.value_or(""));
      since_.erase(Meta(*c.claim, "uid"));
      ++started;
      // Karpenter's name and labels, so its dashboards read ours.
      kube::metrics::Registry::Default()
          .GetCounter("karpenter_nodeclaims_disrupted_total",
                      "GPU machines given back by the disruption controller, by pool and reason "
                      "(empty, idle).",
                      {{"nodepool", key}, {"reason", c.why}})
          .Inc();
      auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - c.since);
      std::string msg = "returning the machine of node " + c.node + ": " + c.why + " for " +
                        Seconds(waited) + " (pool " + key + ", consolidateAfter " +
                        Seconds(*spec->consolidate_after) + ")";
      log::Info("gpu disruption: returning a machine",
                {{"claim", name}, {"node", c.node}, {"pool", key}, {"reason", c.why}});
      Event(*c.claim, kube::EventType::kNormal, "Disrupting", msg);
    }
    int held = static_cast<int>(due.size()) - started;
    if (held > 0) {
      Event(*pool, kube::EventType::kNormal, "DisruptionBlocked",
            std::to_string(held) + " machine(s) " +
                (spec->policy == ConsolidationPolicy::kWhenEmpty ? "empty" : "idle") +
                " past consolidateAfter wait: the disruption budget allows " +
                std::to_string(allowed + disrupting) + " at once and " +
                std::to_string(disrupting + started) + " are being returned");
      next = std::min(next, o_.budget_retry);
    }
    if (next != Clock::Duration::max()) result.requeue_after = next;
    return result;
  }

 private:
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
  if (mgr.informers() == nullptr)
    return Error::Make(Error::Code::kInvalidArgument, "the manager has no informer factory");
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
  inf.claims->AddEventHandler(
      {.on_add = by_claim,
       .on_update = [by_claim](const ObjectPtr&, const ObjectPtr& cur) { by_claim(cur); },
       .on_delete = [by_claim](const ObjectPtr& last, bool) { by_claim(last); }});
  inf.pods->AddEventHandler({.on_add = by_pod,
                             .on_update =
                                 [by_pod](const ObjectPtr& old, const ObjectPtr& cur) {
                                   by_pod(old);
                                   by_pod(cur);
                                 },
                             .on_delete = [by_pod](const ObjectPtr& last, bool) { by_pod(last); }});
  inf.nodes->AddEventHandler(
      {.on_add = by_node,
       .on_update = [by_node](const ObjectPtr&, const ObjectPtr& cur) { by_node(cur); },
       .on_delete = [by_node](const ObjectPtr& last, bool) { by_node(last); }});
  mgr.Add(controller);
  return OkStatus();
}

}  // namespace hyperslice::gpu
