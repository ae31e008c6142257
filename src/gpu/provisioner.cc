#include "src/gpu/provisioner.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/gpu/api.h"
#include "src/gpu/claim_controller.h"
#include "src/gpu/class_providers.h"
#include "src/gpu/internal/claim.h"
#include "src/gpu/internal/loop_runnable.h"
#include "src/gpu/internal/registration.h"
#include "src/gpu/planner.h"
#include "src/kube/client.h"
#include "src/kube/events.h"
#include "src/kube/informer.h"
#include "src/kube/manager.h"
#include "src/kube/object_helpers.h"
#include "src/kube/quantity.h"
#include "src/kube/resource.h"

namespace hyperslice::gpu {
namespace {

namespace bj = boost::json;
using internal::Meta;
using jsonfield::ArrayField;
using jsonfield::IntField;
using jsonfield::ObjectAt;
using jsonfield::ObjectField;
using jsonfield::StringField;
using kube::ObjectPtr;

using internal::NominatedPods;

// A pod the scheduler gave up on for now (PodScheduled False, Unschedulable) that wants GPUs.
bool UnschedulableGpuPod(const kube::Object& pod) {
  if (kube::IsDeleting(pod)) return false;
  const bj::object* spec = ObjectField(pod, "spec");
  if (spec == nullptr || !StringField(*spec, "nodeName").empty()) return false;
  const bj::object* status = ObjectField(pod, "status");
  const bj::array* conds = status ? ArrayField(*status, "conditions") : nullptr;
  bool unschedulable = false;
  if (conds != nullptr) {
    for (const bj::value& c : *conds) {
      const bj::object* co = c.if_object();
      if (co && StringField(*co, "type") == "PodScheduled" &&
          StringField(*co, "status") == "False" && StringField(*co, "reason") == "Unschedulable") {
        unschedulable = true;
      }
    }
  }
  if (!unschedulable) return false;
  // Any container (or init container) asking for nvidia.com/gpu.
  for (const char* list : {"containers", "initContainers"}) {
    const bj::array* cs = ArrayField(*spec, list);
    if (cs == nullptr) continue;
    for (const bj::value& c : *cs) {
      const bj::object* co = c.if_object();
      if (co == nullptr) continue;
      for (const char* kind : {"resources.requests", "resources.limits"}) {
        const bj::object* r = ObjectAt(*co, kind);
        if (r != nullptr && r->contains(kResourceGpu)) return true;
      }
    }
  }
  return false;
}

std::string RandomSuffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  std::string s;
  for (int i = 0; i < 5; ++i) s += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return s;
}

class Provisioner final : public internal::LoopRunnable {
 public:
  struct Informers {
    std::shared_ptr<kube::SharedInformer> pods, pools, classes, claims;
  };

  Provisioner(ProvisionerOptions o, Informers inf)
      : o_(std::move(o)), clock_(o_.ClockOrReal()), inf_(std::move(inf)) {}
  ~Provisioner() override { Stop(std::chrono::milliseconds(0)); }

  std::string Name() const override { return "gpu-provisioner"; }
  void SetLeaderGate(std::function<bool()> gate) override { gate_ = std::move(gate); }

  // A pod changed: start or extend the batch when it is a pending GPU pod.
  void Trigger() {
    std::lock_guard lock(mu_);
    auto now = clock_.Now();
    if (!batch_open_) {
      batch_open_ = true;
      batch_started_ = now;
    }
    last_trigger_ = now;
    cv_.notify_all();
  }

 private:
  bool Synced() const {
    return inf_.pods->HasSynced() && inf_.claims->HasSynced() && inf_.pools->HasSynced() &&
           inf_.classes->HasSynced();
  }

  void Loop() override {
    std::unique_lock lock(mu_);
    clock_.Register(&cv_);
    auto next_status = clock_.Now();
    while (!stop_) {
      auto now = clock_.Now();
      Clock::TimePoint wake = next_status;
      if (batch_open_) {
        auto close = std::min(last_trigger_ + o_.batch_idle, batch_started_ + o_.batch_max);
        if (now >= close && !Synced()) {
          // Planning before every cache has listed would miss the claims still launching (right
          // after a restart) and rent a second machine for their pods: try again shortly.
          last_trigger_ = batch_started_ = now;
          clock_.WaitUntil(cv_, lock, now + o_.batch_idle);
          continue;
        }
        if (now >= close) {
          batch_open_ = false;
          lock.unlock();
          if (!gate_ || gate_()) Provision();
          lock.lock();
          next_status = clock_.Now() + o_.status_interval;
          continue;
        }
        wake = std::min(wake, close);
      }
      if (now >= next_status) {
        lock.unlock();
        if ((!gate_ || gate_()) && Synced()) Provision();
        lock.lock();
        next_status = clock_.Now() + o_.status_interval;
        continue;
      }
      clock_.WaitUntil(cv_, lock, wake);
    }
    clock_.Unregister(&cv_);
  }

  // One batch: plan machines for the pending GPU pods not yet nominated, create their claims,
  // refresh pool statuses.
  void Provision() {
    auto now = clock_.Now();
    std::vector<ObjectPtr> claims = inf_.claims->store().List();
    std::map<std::string, const kube::Object*> live;  // name -> claim
    for (const ObjectPtr& c : claims) {
      if (!kube::IsDeleting(*c)) live[Meta(*c, "name")] = c.get();
      created_.erase(Meta(*c, "name"));  // the cache has it now
    }
    for (auto it = created_pending_.begin(); it != created_pending_.end();) {
      it = created_.count(it->first) ? std::next(it) : created_pending_.erase(it);
    }
    // Claims this process created that the cache has not shown yet still hold their pods.
    for (auto it = created_.begin(); it != created_.end();) {
      if (now - it->second > std::chrono::minutes(1)) {
        it = created_.erase(it);
      } else {
        live.emplace(it->first, nullptr);
        ++it;
      }
    }
    // Nominations recorded on the claims (this process may have just started). A Ready claim's
    // too: its pod may not be bound yet (the scheduler retries on its own backoff), and planning
    // it again would rent a second machine that stays idle. Such a nomination gets the grace
    // below from now, as if the claim had just turned Ready.
    for (const auto& [name, c] : live) {
      if (c == nullptr || !read_back_.insert(name).second) continue;  // once per claim
      const bool ready = kube::IsConditionTrue(*c, "Ready");
      for (std::string& uid : NominatedPods(*c)) {
        Nomination n{.claim = name};
        if (ready) n.ready_seen = now;
        nominated_.emplace(std::move(uid), std::move(n));
      }
    }
    std::vector<ObjectPtr> pending_pods;
    std::map<std::string, const kube::Object*> pending_by_uid;
    for (const ObjectPtr& p : inf_.pods->store().List()) {
      if (!UnschedulableGpuPod(*p)) continue;
      pending_pods.push_back(p);
      pending_by_uid[Meta(*p, "uid")] = p.get();
    }
    // Nominations end when the claim is gone, when the claim has been Ready for longer than the
    // grace, or when the pool's machines cannot hold the pod any more (below).
    for (auto it = nominated_.begin(); it != nominated_.end();) {
      auto c = live.find(it->second.claim);
      bool drop = c == live.end();
      if (!drop && c->second != nullptr && kube::IsConditionTrue(*c->second, "Ready")) {
        if (!it->second.ready_seen) it->second.ready_seen = now;
        drop = now - *it->second.ready_seen > o_.nomination_grace;
      }
      it = drop ? nominated_.erase(it) : std::next(it);
    }
    ReleaseStrandedNominations(live, pending_by_uid);
    for (auto it = read_back_.begin(); it != read_back_.end();)
      it = live.count(*it) ? std::next(it) : read_back_.erase(it);

    std::vector<PendingPod> pods;
    std::vector<ObjectPtr> pod_objs;
    for (const ObjectPtr& p : pending_pods) {
      if (nominated_.count(Meta(*p, "uid"))) continue;
      auto pending = PendingPodFrom(*p);
      if (!pending.ok()) {
        if (o_.events) {
          o_.events->Event(*p, kube::EventType::kWarning, "NoMachine", pending.error().message);
        }
        continue;
      }
      pods.push_back(std::move(*pending));
      pod_objs.push_back(p);
    }

    // Pools, their classes, budgets left after live claims.
    std::vector<PoolView> pools;
    std::vector<ObjectPtr> pool_objs;
    std::map<std::string, Budget> class_budgets;
    std::map<std::string, std::pair<int, MicroUsd>> used_by_pool, used_by_class;
    for (const auto& [name, c] : live) {
      if (c == nullptr) continue;  // counted below, from what was created
      auto& p = used_by_pool[internal::PoolKeyOf(*c)];
      ++p.first;
      p.second += internal::ClaimHourlyCost(*c);
      auto& k = used_by_class[internal::ClassNameOf(*c)];
      ++k.first;
      k.second += internal::ClaimHourlyCost(*c);
    }
    for (const auto& [name, c] : created_pending_) {
      if (!created_.count(name)) continue;
      auto& p = used_by_pool[c.pool];
      ++p.first;
      p.second += c.price;
      auto& k = used_by_class[c.class_name];
      ++k.first;
      k.second += c.price;
    }
    std::map<std::string, std::string> pool_not_ready;  // pool key -> why
    std::vector<Offer> offers;
    std::set<std::string> offered_providers;
    for (const ObjectPtr& pool : inf_.pools->store().List()) {
      if (kube::IsDeleting(*pool)) continue;
      std::string key = Meta(*pool, "namespace") + "/" + Meta(*pool, "name");
      const bj::object* ref = ObjectAt(*pool, "spec.nodeClassRef");
      std::string class_name = ref ? std::string(StringField(*ref, "name")) : "";
      ObjectPtr cls = inf_.classes->store().Get(class_name);
      pool_objs.push_back(pool);
      if (!cls || kube::IsDeleting(*cls)) {
        pool_not_ready[key] = "GPUNodeClass " + class_name + " not found";
        continue;
      }
      if (!kube::IsConditionTrue(*cls, "Ready")) {
        pool_not_ready[key] = "GPUNodeClass " + class_name + " is not Ready";
        continue;
      }
      auto view = MakeView(*pool, *cls, key, class_name, used_by_pool[key]);
      if (!view.ok()) {
        pool_not_ready[key] = view.error().message;
        continue;
      }
      pools.push_back(std::move(*view));
      if (!class_budgets.count(class_name)) {
        class_budgets[class_name] =
            BudgetOf(ObjectAt(*cls, "spec.limits"), used_by_class[class_name]);
      }
      for (const auto& [provider, state] : o_.cache->ForClass(class_name)) {
        if (!state->credentials_valid || !offered_providers.insert(provider).second) continue;
        offers.insert(offers.end(), state->offers.begin(), state->offers.end());
      }
    }

    std::map<std::string, std::vector<std::string>> limited;  // pool key -> pending pods held
    if (!pods.empty() && !pools.empty()) {
      OfferCatalog catalog(std::move(offers));
      Plan plan = MakePlan(pods, pools, class_budgets, catalog, [this](const Offer& offer) {
        return o_.unavailable->IsUnavailable(offer);
      });
      for (const PlannedMachine& m : plan.machines) {
        CreateClaim(m, pools[m.pool], pods, pod_objs);
      }
      for (const auto& [i, why] : plan.unplaced) {
        if (o_.events) {
          o_.events->Event(*pod_objs[i], kube::EventType::kWarning, "NoMachine",
                           "no GPU machine can be rented for this pod: " + why);
        }
        if (why.find("limit") != std::string::npos) {
          for (const PoolView& pv : pools) {
            if (why.find(pv.key) != std::string::npos ||
                why.find("GPUNodeClass " + pv.class_name + " ") != std::string::npos) {
              limited[pv.key].push_back(pods[i].key + ": " + why);
            }
          }
        }
      }
    } else if (!pods.empty()) {
      for (const ObjectPtr& p : pod_objs) {
        if (o_.events) {
          o_.events->Event(*p, kube::EventType::kWarning, "NoMachine",
                           "no GPU machine can be rented for this pod: no usable GPUNodePool");
        }
      }
    }
    UpdatePoolStatuses(pool_objs, pool_not_ready, limited);
  }

  // The scheduler does not know nominations: it may bind a pod onto the machine rented for
  // another. Mostly that other pod then gets the machine rented for the first (the count still
  // matches: it keeps waiting). But when a pool's machines, launching or new, no longer have room
  // for all the pending pods nominated to them (a pod the planner left out, or one bound directly,
  // took one), the pods whose own machine is taken are released here: they are planned again now,
  // and a limit that holds them back shows in LimitsReached, rather than after the grace.
  void ReleaseStrandedNominations(
      const std::map<std::string, const kube::Object*>& live,
      const std::map<std::string, const kube::Object*>& pending_by_uid) {
    // Pending pods by the (cached) claim they wait for.
    std::map<std::string, std::vector<std::pair<std::string, const kube::Object*>>> waiting;
    for (const auto& [uid, n] : nominated_) {
      auto pod = pending_by_uid.find(uid);
      auto c = live.find(n.claim);
      if (pod == pending_by_uid.end() || c == live.end() || c->second == nullptr) continue;
      waiting[n.claim].emplace_back(uid, pod->second);
    }
    std::map<std::string, std::optional<NodeRoom>> rooms;  // node -> its room, read once a pass
    // Pods whose claim's Node has no room left for them, by pool: (uid, GPUs).
    std::map<std::string, std::vector<std::pair<std::string, int64_t>>> stranded;
    std::set<std::string> bound;  // pending in the cache, bound to their claim's Node already
    for (const auto& [name, pods] : waiting) {
      const kube::Object& claim = *live.at(name);
      std::string node = NodeNameOf(claim);
      if (node.empty()) continue;
      const std::optional<NodeRoom>& room = RoomOf(node, rooms);
      if (!room) continue;
      int64_t left = room->free_gpus;
      for (const auto& [uid, pod] : pods) {
        if (room->pod_uids.count(uid)) {
          bound.insert(uid);
          continue;
        }
        int64_t gpus = GpusOf(*pod);
        if (gpus <= left) {
          left -= gpus;
          continue;
        }
        stranded[internal::PoolKeyOf(claim)].emplace_back(uid, gpus);
      }
    }
    if (stranded.empty()) return;
    // In those pools: the GPUs the pending nominated pods wait for, against the room the machines
    // have: launching ones what they were planned for, ones registered within the grace what their
    // Node has left (older ones the scheduler has filled, or their room does not suit these pods).
    auto wall = std::chrono::system_clock::now();
    for (const auto& [pool, pods] : stranded) {
      int64_t demand = 0, room = 0;
      for (const auto& [name, c] : live) {
        if (c == nullptr || internal::PoolKeyOf(*c) != pool) continue;
        auto w = waiting.find(name);
        if (w != waiting.end()) {
          for (const auto& [uid, pod] : w->second) demand += bound.count(uid) ? 0 : GpusOf(*pod);
        }
        std::string node = NodeNameOf(*c);
        if (node.empty()) {
          room += PlannedGpus(*c);
          continue;
        }
        const bj::object* status = ObjectField(*c, "status");
        auto registered = kube::ParseTime(status ? StringField(*status, "registeredAt") : "");
        bool recent = registered && wall - *registered < o_.nomination_grace;
        if (!recent && w == waiting.end()) continue;
        const std::optional<NodeRoom>& r = RoomOf(node, rooms);
        room += r ? std::max<int64_t>(0, r->free_gpus) : PlannedGpus(*c);
      }
      for (const auto& [uid, gpus] : pods) {
        if (demand <= room) break;
        auto n = nominated_.find(uid);
        const kube::Object& pod = *pending_by_uid.at(uid);
        std::string key = Meta(pod, "namespace") + "/" + Meta(pod, "name");
        // The cache may lag the scheduler: only a pod still unbound is planned again.
        auto fresh =
            o_.client->Get(kube::resources::Pods(), Meta(pod, "namespace"), Meta(pod, "name"));
        const bj::object* spec = fresh.ok() ? ObjectField(*fresh, "spec") : nullptr;
        if (spec == nullptr || !StringField(*spec, "nodeName").empty()) continue;
        log::Info(
            "gpu provisioner: the machine nominated for a pod went to another; planning it "
            "again",
            {{"pod", key}, {"claim", n->second.claim}, {"pool", pool}});
        nominated_.erase(n);
        demand -= gpus;
      }
    }
  }

  // GPUs a Node has left (allocatable less the requests of the pods bound to it), and which pods
  // are bound to it.
  struct NodeRoom {
    int64_t free_gpus = 0;
    std::set<std::string> pod_uids;
  };

  static std::string NodeNameOf(const kube::Object& claim) {
    const bj::object* status = ObjectField(claim, "status");
    return status ? std::string(StringField(*status, "nodeName")) : std::string();
  }

  static int64_t GpusOf(const kube::Object& pod) {
    auto p = PendingPodFrom(pod);
    return p.ok() ? p->gpus : 0;
  }

  // What a claim was planned for (spec.resources.requests).
  static int64_t PlannedGpus(const kube::Object& claim) {
    const bj::object* requests = ObjectAt(claim, "spec.resources.requests");
    auto q = kube::Quantity::Parse(requests ? StringField(*requests, kResourceGpu) : "");
    return q.ok() ? q->Value() : 0;
  }

  // nullopt while it cannot be told: the Node unread, no GPU allocatable yet.
  const std::optional<NodeRoom>& RoomOf(const std::string& node,
                                        std::map<std::string, std::optional<NodeRoom>>& rooms) {
    auto [room, fresh] = rooms.try_emplace(node);
    if (fresh) room->second = ReadRoom(node);
    return room->second;
  }

  std::optional<NodeRoom> ReadRoom(const std::string& node) {
    auto n = o_.client->Get(kube::resources::Nodes(), "", node);
    if (!n.ok()) return std::nullopt;
    const bj::object* alloc = ObjectAt(*n, "status.allocatable");
    auto gpus = kube::Quantity::Parse(alloc ? StringField(*alloc, kResourceGpu) : "");
    if (!gpus.ok() || gpus->Value() <= 0) return std::nullopt;
    NodeRoom room;
    room.free_gpus = gpus->Value();
    kube::ListOptions lo;
    lo.field_selector = "spec.nodeName=" + node;
    auto pods = o_.client->ListAll(kube::resources::Pods(), "", lo);
    if (!pods.ok()) return std::nullopt;
    for (const kube::Object& p : pods->items) {
      room.pod_uids.insert(Meta(p, "uid"));
      const bj::object* st = ObjectField(p, "status");
      std::string_view phase = st ? StringField(*st, "phase") : std::string_view();
      if (phase != "Succeeded" && phase != "Failed") room.free_gpus -= GpusOf(p);
    }
    return room;
  }

  static Budget BudgetOf(const bj::object* limits, const std::pair<int, MicroUsd>& used) {
    Budget b;
    if (limits == nullptr) return b;
    if (auto n = IntField(*limits, "maxNodes")) b.nodes_left = static_cast<int>(*n) - used.first;
    if (auto c = internal::PriceField(limits, "maxHourlyCost"))
      b.hourly_cost_left = *c - used.second;
    return b;
  }

  Result<PoolView> MakeView(const kube::Object& pool, const kube::Object& cls,
                            const std::string& key, const std::string& class_name,
                            const std::pair<int, MicroUsd>& used) {
    PoolView v;
    v.key = key;
    v.class_name = class_name;
    v.weight = static_cast<int>(IntField(*ObjectField(pool, "spec"), "weight").value_or(10));
    if (const bj::object* l = ObjectAt(pool, "spec.template.metadata.labels")) {
      for (const auto& [k, val] : *l) {
        if (val.is_string()) v.labels[std::string(k)] = std::string(val.get_string());
      }
    }
    v.labels[kLabelNodePool] = Meta(pool, "name");
    v.labels[kLabelProvisioned] = "true";
    if (const bj::object* spec = ObjectAt(pool, "spec.template.spec")) {
      auto reqs = kube::RequirementsFrom(spec->if_contains("requirements"));
      if (!reqs.ok()) return reqs.error();
      v.requirements = std::move(*reqs);
      v.taints = kube::TaintsFrom(spec->if_contains("taints"));
    }
    OfferRequirements& base = v.base;
    ApplyInstanceRequirements(cls, base);
    for (const auto& [provider, state] : o_.cache->ForClass(class_name)) {
      if (!state->credentials_valid) continue;
      base.providers.insert(provider);
      base.provider_priority[provider] = state->priority;
    }
    if (base.providers.empty()) {
      return Error::Make(Error::Code::kUnavailable,
                         "GPUNodeClass " + class_name + " has no provider with valid credentials");
    }
    if (auto p = internal::PriceField(ObjectField(pool, "spec"), "maxHourlyPrice"))
      base.max_price = *p;
    v.budget = BudgetOf(ObjectAt(pool, "spec.limits"), used);
    return v;
  }

  void CreateClaim(const PlannedMachine& m, const PoolView& pool,
                   const std::vector<PendingPod>& pods, const std::vector<ObjectPtr>& pod_objs) {
    const Offer& offer = *m.choice.offer;
    auto slash = pool.key.find('/');
    std::string ns = pool.key.substr(0, slash), pool_name = pool.key.substr(slash + 1);
    OfferRequirements req = m.req;
    req.min_gpu_count = std::max(req.min_gpu_count, m.gpus_used);
    req.min_vcpus = std::max(req.min_vcpus, static_cast<int>((m.cpu_milli_used + 999) / 1000));
    req.min_memory_gib = std::max(
        req.min_memory_gib, static_cast<double>(m.memory_bytes_used) / (1024.0 * 1024 * 1024));
    // Never pay more than planned: the budgets were spent at this price.
    req.max_price = req.max_price ? std::min(*req.max_price, m.choice.price) : m.choice.price;
    if (!m.choice.spot) req.spot_allowed = false;

    bj::array requirements{
        bj::object{
            {"key", kLabelGpuType}, {"operator", "In"}, {"values", bj::array{offer.gpu_type}}},
        bj::object{{"key", kLabelRegion}, {"operator", "In"}, {"values", bj::array{offer.region}}}};
    bj::object requests{{kResourceGpu, std::to_string(m.gpus_used)}};
    if (m.cpu_milli_used > 0) requests["cpu"] = std::to_string(m.cpu_milli_used) + "m";
    if (m.memory_bytes_used > 0) requests["memory"] = std::to_string(m.memory_bytes_used);
    bj::object spec{
        {"nodeClassRef",
         bj::object{{"group", "tgp.io"}, {"kind", "GPUNodeClass"}, {"name", pool.class_name}}},
        {"poolRef", bj::object{{"namespace", ns}, {"name", pool_name}}},
        {"requirements", std::move(requirements)},
        {"resources", bj::object{{"requests", std::move(requests)}}}};
    bj::array taints;
    for (const kube::Taint& t : pool.taints) {
      taints.push_back(bj::object{{"key", t.key}, {"value", t.value}, {"effect", t.effect}});
    }
    if (!taints.empty()) spec["taints"] = std::move(taints);
    std::string name = pool_name + "-" + RandomSuffix();
    bj::array nominated;
    for (size_t i : m.pods) nominated.emplace_back(Meta(*pod_objs[i], "uid"));
    bj::object claim{
        {"apiVersion", "tgp.io/v1"},
        {"kind", "GPUNodeClaim"},
        {"metadata",
         bj::object{
             {"name", name},
             {"labels", bj::object{{kLabelNodePool, pool_name}, {kLabelPoolNamespace, ns}}},
             {"annotations", bj::object{{kAnnotationRequirements,
                                         bj::serialize(internal::RequirementsToJson(req))},
                                        {kAnnotationPlannedOffer, offer.provider + "/" + offer.id +
                                                                      "@" + offer.provider_region},
                                        {kAnnotationPlannedPrice, FormatUsd(m.choice.price)},
                                        {kAnnotationNominatedPods, bj::serialize(nominated)}}}}},
        {"spec", std::move(spec)}};
    auto created = o_.client->Create(GPUNodeClaims(), "", claim);
    std::string what = offer.gpu_type + " on " + offer.provider + " " + offer.region + " at $" +
                       FormatUsd(m.choice.price) + "/h" + (m.choice.spot ? " (spot)" : "");
    if (!created.ok()) {
      log::Warn("gpu provisioner: creating a claim failed",
                {{"pool", pool.key}, {"error", created.error().message}});
      return;  // the pods stay pending and are planned again in the next batch
    }
    created_[name] = clock_.Now();
    created_pending_[name] = Created{pool.key, pool.class_name, m.choice.price};
    log::Info("gpu provisioner: claim created", {{"claim", name},
                                                 {"pool", pool.key},
                                                 {"offer", what},
                                                 {"pods", static_cast<int64_t>(m.pods.size())}});
    for (size_t i : m.pods) {
      nominated_[Meta(*pod_objs[i], "uid")] = Nomination{.claim = name};
      if (o_.events) {
        std::string msg = "launching GPUNodeClaim " + name;
        msg += " for this pod: ";
        msg += what;
        o_.events->Event(*pod_objs[i], kube::EventType::kNormal, "Nominated", msg);
      }
    }
    (void)pods;
  }

  void UpdatePoolStatuses(const std::vector<ObjectPtr>& pools,
                          const std::map<std::string, std::string>& not_ready,
                          const std::map<std::string, std::vector<std::string>>& limited) {
    std::map<std::string, std::pair<int, MicroUsd>> usage;
    for (const ObjectPtr& c : inf_.claims->store().List()) {
      if (kube::IsDeleting(*c)) continue;
      auto& u = usage[internal::PoolKeyOf(*c)];
      ++u.first;
      u.second += internal::ClaimHourlyCost(*c);
    }
    for (const ObjectPtr& pool : pools) {
      std::string key = Meta(*pool, "namespace") + "/" + Meta(*pool, "name");
      kube::Object desired = *pool;
      bj::object& status = desired["status"].is_object() ? desired["status"].get_object()
                                                         : desired["status"].emplace_object();
      auto u = usage[key];
      status["nodes"] = u.first;
      status["hourlyCost"] = FormatUsd(u.second);
      status["observedGeneration"] = kube::Generation(*pool);
      auto wall = std::chrono::system_clock::now();
      auto nr = not_ready.find(key);
      kube::SetCondition(desired,
                         {.type = "Ready",
                          .status = nr == not_ready.end() ? "True" : "False",
                          .reason = nr == not_ready.end() ? "NodeClassReady" : "NodeClassNotReady",
                          .message = nr == not_ready.end() ? "machines can be rented" : nr->second,
                          .observed_generation = kube::Generation(*pool)},
                         wall);
      auto lim = limited.find(key);
      std::string msg;
      if (lim != limited.end()) {
        msg = std::to_string(lim->second.size()) + " pending pod(s) wait: " + lim->second.front();
      }
      kube::SetCondition(desired,
                         {.type = "LimitsReached",
                          .status = lim != limited.end() ? "True" : "False",
                          .reason = lim != limited.end() ? "LimitsReached" : "WithinLimits",
                          .message = lim != limited.end() ? msg : "no pending pod is held back",
                          .observed_generation = kube::Generation(*pool)},
                         wall);
      const bj::value* before = pool->if_contains("status");
      if (before != nullptr && *before == desired["status"]) continue;
      auto written = o_.client->Update(GPUNodePools(), Meta(*pool, "namespace"), desired, "status");
      if (!written.ok() && written.error().code != Error::Code::kConflict) {
        log::Warn("gpu provisioner: pool status",
                  {{"pool", key}, {"error", written.error().message}});
      }
    }
  }

  struct Nomination {
    std::string claim;
    std::optional<Clock::TimePoint> ready_seen;
  };

  ProvisionerOptions o_;
  Clock& clock_;
  Informers inf_;
  std::function<bool()> gate_;
  bool batch_open_ = false;  // guarded by mu_, as the batch times
  Clock::TimePoint batch_started_, last_trigger_;
  std::map<std::string, Nomination> nominated_;  // pod uid -> claim (provisioner thread only)
  // Claims whose tgp.io/nominated-pods annotation was read back (provisioner thread only).
  std::set<std::string> read_back_;
  // Claims created here that the informer has not delivered yet (provisioner thread only).
  struct Created {
    std::string pool, class_name;
    MicroUsd price = 0;
  };
  std::map<std::string, Clock::TimePoint> created_;
  std::map<std::string, Created> created_pending_;
};

}  // namespace

Status RegisterProvisioner(kube::Manager& mgr, ProvisionerOptions options) {
  HS_RETURN_IF_ERROR(internal::RequireInformers(mgr));
  if (!options.client || !options.cache || !options.unavailable) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "gpu provisioner: client, cache and unavailable are required");
  }
  Provisioner::Informers inf;
  // Only pods no node holds: the cache stays small on a busy cluster.
  kube::InformerOptions pod_options;
  pod_options.field_selector = "spec.nodeName=";
  inf.pods = mgr.informers()->For(kube::resources::Pods(), &pod_options);
  inf.pools = mgr.informers()->For(GPUNodePools());
  inf.classes = mgr.informers()->For(GPUNodeClasses());
  inf.claims = mgr.informers()->For(GPUNodeClaims());
  auto p = std::make_shared<Provisioner>(std::move(options), inf);
  std::weak_ptr<Provisioner> weak = p;
  auto on_pod = [weak](const ObjectPtr& pod) {
    auto s = weak.lock();
    if (s && pod && UnschedulableGpuPod(*pod)) s->Trigger();
  };
  inf.pods->AddEventHandler(
      {.on_add = on_pod,
       .on_update = [on_pod](const ObjectPtr&, const ObjectPtr& cur) { on_pod(cur); },
       .on_delete = nullptr});
  // A claim that goes (deleted to replan, timed out, returned) frees its pods for the next batch.
  inf.claims->AddEventHandler(
      {.on_add = nullptr, .on_update = nullptr, .on_delete = [weak](const ObjectPtr&, bool) {
         if (auto s = weak.lock()) s->Trigger();
       }});
  mgr.Add(p);
  return OkStatus();
}

}  // namespace hyperslice::gpu
