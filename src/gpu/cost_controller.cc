// The cost collector (cost_controller.h).
#include "src/gpu/cost_controller.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/gpu/api.h"
#include "src/gpu/internal/claim.h"
#include "src/gpu/internal/loop_runnable.h"
#include "src/gpu/internal/registration.h"
#include "src/kube/client.h"
#include "src/kube/informer.h"
#include "src/kube/manager.h"
#include "src/kube/metrics.h"
#include "src/kube/object_helpers.h"

namespace hyperslice::gpu {

namespace cost {

namespace bj = boost::json;
using jsonfield::ObjectField;
using jsonfield::StringField;

std::optional<std::chrono::system_clock::time_point> BillingStart(const bj::object& claim) {
  const bj::object* status = ObjectField(claim, "status");
  if (status == nullptr) return std::nullopt;
  if (auto t = kube::ParseTime(StringField(*status, "billingStart"))) return t;
  return kube::ParseTime(StringField(*status, "launchedAt"));
}

std::string Phase(const bj::object& claim) {
  if (kube::IsDeleting(claim)) return "Deleting";
  for (const char* c : {"Ready", "Initialized", "Registered", "Launched"}) {
    if (kube::IsConditionTrue(claim, c)) return c;
  }
  const bj::object* status = ObjectField(claim, "status");
  if (status != nullptr && !StringField(*status, "instanceID").empty()) return "Launched";
  return "Launching";
}

}  // namespace cost

namespace {

namespace bj = boost::json;
using internal::Meta;
using jsonfield::ObjectField;
using jsonfield::StringField;
using kube::ObjectPtr;
using SysTime = std::chrono::system_clock::time_point;

constexpr char kSpendField[] = "spend";
constexpr char kSpendClaimsField[] = "spendClaims";
constexpr size_t kSpendClaimsKept = 64;
const char* const kPhases[] = {"Launching",   "Launched", "Registered",
                               "Initialized", "Ready",    "Deleting"};

// (pool "<ns>/<name>", class, provider): the labels of the money metrics.
using Key = std::tuple<std::string, std::string, std::string>;

Key KeyOf(const bj::object& claim) {
  const bj::object* status = ObjectField(claim, "status");
  return {internal::PoolKeyOf(claim), internal::ClassNameOf(claim),
          status != nullptr ? std::string(StringField(*status, "provider")) : std::string()};
}

double Seconds(std::chrono::system_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// USD billed for the claim's machine from its billing start until `end`; 0 before a launch.
double SpendUntil(const bj::object& claim, SysTime end) {
  auto start = cost::BillingStart(claim);
  auto price = internal::PriceField(ObjectField(claim, "status"), "price");
  if (!start || !price || end <= *start) return 0;
  return static_cast<double>(*price) / 1e6 * Seconds(end - *start) / 3600.0;
}

// The spend a pool's status records for machines already returned, per (class, provider).
std::map<std::pair<std::string, std::string>, double> PersistedSpend(const bj::object& pool) {
  std::map<std::pair<std::string, std::string>, double> out;
  const bj::object* status = ObjectField(pool, "status");
  const bj::array* items =
      status != nullptr ? jsonfield::ArrayField(*status, kSpendField) : nullptr;
  if (items == nullptr) return out;
  for (const bj::value& v : *items) {
    const bj::object* e = v.if_object();
    if (e == nullptr) continue;
    auto usd = internal::PriceField(e, "usd");
    if (!usd) continue;
    out[{std::string(StringField(*e, "nodeClass")), std::string(StringField(*e, "provider"))}] +=
        static_cast<double>(*usd) / 1e6;
  }
  return out;
}

class CostCollector final : public internal::LoopRunnable {
 public:
  CostCollector(CostControllerOptions o, kube::metrics::Registry& registry,
                std::shared_ptr<kube::SharedInformer> claims,
                std::shared_ptr<kube::SharedInformer> pools)
      : o_(std::move(o)),
        clock_(o_.ClockOrReal()),
        registry_(registry),
        claims_(std::move(claims)),
        pools_(std::move(pools)) {}
  ~CostCollector() override { Stop(std::chrono::milliseconds(0)); }

  std::string Name() const override { return "gpu-cost"; }
  void SetLeaderGate(std::function<bool()> gate) override {
    std::lock_guard lock(mu_);
    gate_ = std::move(gate);
  }
  Status Start() override {
    {
      std::lock_guard lock(mu_);
      started_ = true;
    }
    return LoopRunnable::Start();
  }

  // ---- claim events (informer dispatch thread) ----
  void OnAdd(const ObjectPtr& claim) {
    if (!claim || !Leading()) return;
    // Claims of the first list existed before this process: their creation was not seen now.
    if (!claims_->HasSynced()) return;
    std::lock_guard lock(mu_);
    first_seen_[Meta(*claim, "uid")] = std::chrono::system_clock::now();
    registry_
        .GetCounter("karpenter_nodeclaims_created_total",
                    "GPUNodeClaims created by the provisioner, by pool and reason (Karpenter's "
                    "name).",
                    {{"nodepool", internal::PoolKeyOf(*claim)}, {"reason", "provisioning"}})
        .Inc();
    Wake(lock);
  }

  void OnUpdate(const ObjectPtr& old, const ObjectPtr& cur) {
    if (!old || !cur || !Leading()) return;
    auto now = std::chrono::system_clock::now();
    std::string uid = Meta(*cur, "uid");
    auto [pool, cls, provider] = KeyOf(*cur);
    std::lock_guard lock(mu_);
    auto started = cost::BillingStart(*cur);
    if (started && !cost::BillingStart(*old)) {
      // Launch latency: from the claim's creation as this process saw it (creationTimestamp has
      // whole seconds only) to the provider's accepted create.
      if (auto it = first_seen_.find(uid); it != first_seen_.end()) {
        registry_
            .GetHistogram("hyperslice_gpu_nodeclaim_launch_duration_seconds",
                          "From a GPUNodeClaim's creation to the provider accepting its create.",
                          {{"nodepool", pool}, {"provider", provider}},
                          kube::metrics::ExponentialBuckets(0.05, 2, 14))
            .Observe(std::max(0.0, Seconds(*started - it->second)));
      }
    }
    if (started && kube::IsConditionTrue(*cur, "Registered") &&
        !kube::IsConditionTrue(*old, "Registered")) {
      registry_
          .GetHistogram("hyperslice_gpu_nodeclaim_registration_duration_seconds",
                        "From the provider accepting a GPUNodeClaim's create to its Node "
                        "registered (labels synced, registration taint removed).",
                        {{"nodepool", pool}, {"provider", provider}},
                        kube::metrics::ExponentialBuckets(0.25, 2, 14))
          .Observe(std::max(0.0, Seconds(now - *started)));
    }
    if (Phase(*old) != Phase(*cur)) Wake(lock);
  }

  void OnDelete(const ObjectPtr& last) {
    if (!last) return;
    // The claim controller lets a claim go once the provider reports its machine gone: billing
    // ended now (to within the claim controller's poll of the provider).
    auto now = std::chrono::system_clock::now();
    std::string uid = Meta(*last, "uid");
    std::lock_guard lock(mu_);
    first_seen_.erase(uid);
    if (!LeadingLocked()) return;
    Key key = KeyOf(*last);
    double usd = SpendUntil(*last, now);
    registry_
        .GetCounter("karpenter_nodeclaims_terminated_total",
                    "GPUNodeClaims whose machine was returned and that are gone, by pool "
                    "(Karpenter's name).",
                    {{"nodepool", std::get<0>(key)}})
        .Inc();
    // A claim is counted once even if its deletion is delivered again (a relist's tombstone).
    // Bounded: a repeated deletion comes right after the first, never days later.
    if (folded_.size() > 10000) folded_.clear();
    if (usd > 0 && folded_.insert(uid).second) {
      completed_[key] += usd;
      pending_.push_back({key, usd, Meta(*last, "name"), uid});
      log::Info("gpu cost: machine returned", {{"claim", Meta(*last, "name")},
                                               {"pool", std::get<0>(key)},
                                               {"provider", std::get<2>(key)},
                                               {"usd", std::to_string(usd)}});
    }
    Wake(lock);
  }

 private:
  struct Fold {
    Key key;
    double usd = 0;
    std::string claim, uid;
  };

  static std::string Phase(const bj::object& claim) { return cost::Phase(claim); }

  bool Leading() {
    std::lock_guard lock(mu_);
    return LeadingLocked();
  }
  // The manager starts this runnable once the process leads (at once without leader election,
  // then without a gate); a standby's informers deliver events too, which it must not count.
  bool LeadingLocked() const { return started_ && (!gate_ || gate_()); }
  void Wake(std::lock_guard<std::mutex>&) {
    woken_ = true;
    cv_.notify_all();
  }

  void Loop() override {
    std::unique_lock lock(mu_);
    clock_.Register(&cv_);
    while (!stop_) {
      if (!woken_) clock_.WaitUntil(cv_, lock, clock_.Now() + o_.interval);
      woken_ = false;
      if (stop_) break;
      if (!LeadingLocked() || !claims_->HasSynced() || !pools_->HasSynced()) continue;
      lock.unlock();
      Pass();
      lock.lock();
    }
    clock_.Unregister(&cv_);
  }

  // One recomputation: persisted spend loaded once, returned machines written, metrics set.
  void Pass() {
    if (!loaded_) {
      std::lock_guard lock(mu_);
      for (const ObjectPtr& pool : pools_->store().List()) {
        std::string pool_key = Meta(*pool, "namespace") + "/" + Meta(*pool, "name");
        for (const auto& [cp, usd] : PersistedSpend(*pool))
          completed_[{pool_key, cp.first, cp.second}] += usd;
      }
      loaded_ = true;
    }
    WritePending();

    // Held while the claims are listed: a claim's deletion (OnDelete moves its spend to
    // completed_) must not land between the listing and the sum, or that machine would be
    // counted twice — and a counter cannot take it back.
    std::lock_guard lock(mu_);
    auto now = std::chrono::system_clock::now();
    std::map<Key, double> hourly, live;
    std::map<std::pair<std::string, std::string>, int> phases;  // (pool, phase) -> claims
    for (const ObjectPtr& claim : claims_->store().List()) {
      Key key = KeyOf(*claim);
      ++phases[{std::get<0>(key), Phase(*claim)}];
      // A machine bills from its launch until the provider reports it gone, deleting or not.
      if (!cost::BillingStart(*claim)) continue;
      auto price = internal::PriceField(ObjectField(*claim, "status"), "price");
      if (price) hourly[key] += static_cast<double>(*price) / 1e6;
      live[key] += SpendUntil(*claim, now);
    }

    for (const auto& [k, v] : hourly) exported_.insert(k);
    for (const auto& [k, v] : live) exported_.insert(k);
    for (const auto& [k, v] : completed_) exported_.insert(k);
    for (const Key& k : exported_) {
      kube::metrics::Labels labels{{"nodepool", std::get<0>(k)},
                                   {"nodeclass", std::get<1>(k)},
                                   {"provider", std::get<2>(k)}};
      registry_
          .GetGauge("hyperslice_gpu_hourly_cost_usd",
                    "US dollars per hour of the GPU machines rented now (launched until the "
                    "provider reports them gone).",
                    labels)
          .Set(hourly.count(k) ? hourly[k] : 0.0);
      auto& spend = registry_.GetCounter(
          "hyperslice_gpu_spend_usd_total",
          "US dollars spent on GPU machines: price x time from the accepted create until the "
          "provider reports the machine gone; machines returned (persisted in the pool's "
          "status.spend) plus machines running.",
          labels);
      double target = (completed_.count(k) ? completed_[k] : 0.0) + (live.count(k) ? live[k] : 0.0);
      // A counter only grows: a machine's final spend is at least what was exported for it while
      // it ran (its end is later than the pass that accrued it).
      if (target > spend.Value()) spend.Inc(target - spend.Value());
    }
    for (const auto& [pp, n] : phases) phase_pools_.insert(pp.first);
    for (const std::string& pool : phase_pools_) {
      for (const char* phase : kPhases) {
        auto it = phases.find({pool, phase});
        registry_
            .GetGauge("hyperslice_gpu_nodeclaims",
                      "GPUNodeClaims by pool and phase (Launching, Launched, Registered, "
                      "Initialized, Ready, Deleting).",
                      {{"nodepool", pool}, {"phase", phase}})
            .Set(it != phases.end() ? it->second : 0);
      }
    }
  }

  // Adds the spend of returned machines to their pools' status.spend, read fresh from the API and
  // written against that version (the provisioner writes the same status).
  void WritePending() {
    std::vector<Fold> todo;
    {
      std::lock_guard lock(mu_);
      todo.swap(pending_);
    }
    std::map<std::string, std::vector<Fold>> by_pool;
    for (Fold& f : todo) by_pool[std::get<0>(f.key)].push_back(std::move(f));
    std::vector<Fold> retry;
    for (auto& [pool_key, folds] : by_pool) {
      auto slash = pool_key.find('/');
      std::string ns = pool_key.substr(0, slash);
      std::string name = slash == std::string::npos ? std::string() : pool_key.substr(slash + 1);
      Status st = name.empty() ? OkStatus() : AddToPool(ns, name, folds);
      if (!st.ok()) {
        log::Warn("gpu cost: pool status not written; retrying",
                  {{"pool", pool_key}, {"error", st.error().message}});
        retry.insert(retry.end(), folds.begin(), folds.end());
      }
    }
    std::lock_guard lock(mu_);
    pending_.insert(pending_.begin(), retry.begin(), retry.end());
  }

  Status AddToPool(const std::string& ns, const std::string& name, const std::vector<Fold>& folds) {
    for (int attempt = 0;; ++attempt) {
      auto pool = o_.client->Get(GPUNodePools(), ns, name);
      if (!pool.ok() && pool.error().code == Error::Code::kNotFound) {
        // The pool is gone, and its status with it: the money stays in the exported total
        // until the operator restarts.
        return OkStatus();
      }
      if (!pool.ok()) return pool.error();
      auto totals = PersistedSpend(*pool);
      // The last claims added, so a retry after a write whose answer was lost (it may have been
      // stored) does not add them twice.
      std::vector<std::string> recent;
      if (const bj::object* st = ObjectField(*pool, "status")) {
        if (const bj::array* a = jsonfield::ArrayField(*st, kSpendClaimsField)) {
          for (const bj::value& v : *a) {
            if (v.is_string()) recent.emplace_back(v.get_string());
          }
        }
      }
      for (const Fold& f : folds) {
        if (std::find(recent.begin(), recent.end(), f.uid) != recent.end()) continue;
        totals[{std::get<1>(f.key), std::get<2>(f.key)}] += f.usd;
        recent.push_back(f.uid);
      }
      if (recent.size() > kSpendClaimsKept) {
        recent.erase(recent.begin(), recent.end() - static_cast<std::ptrdiff_t>(kSpendClaimsKept));
      }
      bj::array items;
      for (const auto& [cp, usd] : totals) {
        items.push_back(
            bj::object{{"nodeClass", cp.first},
                       {"provider", cp.second},
                       {"usd", FormatUsd(static_cast<MicroUsd>(std::llround(usd * 1e6)))}});
      }
      bj::object& status = (*pool)["status"].is_object() ? (*pool)["status"].get_object()
                                                         : (*pool)["status"].emplace_object();
      status[kSpendField] = std::move(items);
      bj::array uids;
      for (auto& u : recent) uids.emplace_back(u);
      status[kSpendClaimsField] = std::move(uids);
      auto written = o_.client->Update(GPUNodePools(), ns, *pool, "status");
      if (written.ok()) return OkStatus();
      if (written.error().code != Error::Code::kConflict || attempt >= 4) return written.error();
    }
  }

  CostControllerOptions o_;
  Clock& clock_;
  kube::metrics::Registry& registry_;
  std::shared_ptr<kube::SharedInformer> claims_, pools_;
  bool woken_ = false, started_ = false;  // guarded by mu_
  std::function<bool()> gate_;
  bool loaded_ = false;  // completed_ holds the pools' persisted spend (Pass thread only)
  std::map<Key, double> completed_;            // USD of returned machines
  std::vector<Fold> pending_;                  // returned, not yet in the pool's status
  std::set<std::string> folded_;               // claim uids whose spend is in completed_
  std::map<std::string, SysTime> first_seen_;  // claim uid -> its add event (created live)
  std::set<Key> exported_;                     // series set at least once (reset to 0, kept)
  std::set<std::string> phase_pools_;          // pools with a phase series
};

}  // namespace

Status RegisterCostController(kube::Manager& mgr, CostControllerOptions options) {
  HS_RETURN_IF_ERROR(internal::RequireInformers(mgr));
  if (!options.client)
    return Error::Make(Error::Code::kInvalidArgument, "cost controller: client is required");
  kube::metrics::Registry& registry =
      options.registry != nullptr ? *options.registry : mgr.registry();
  auto claims = mgr.informers()->For(GPUNodeClaims());
  auto pools = mgr.informers()->For(GPUNodePools());
  auto collector = std::make_shared<CostCollector>(std::move(options), registry, claims, pools);
  std::weak_ptr<CostCollector> weak = collector;
  claims->AddEventHandler({.on_add =
                               [weak](const ObjectPtr& c) {
                                 if (auto s = weak.lock()) s->OnAdd(c);
                               },
                           .on_update =
                               [weak](const ObjectPtr& old, const ObjectPtr& cur) {
                                 if (auto s = weak.lock()) s->OnUpdate(old, cur);
                               },
                           .on_delete =
                               [weak](const ObjectPtr& last, bool) {
                                 if (auto s = weak.lock()) s->OnDelete(last);
                               }});
  mgr.Add(collector);
  return OkStatus();
}

}  // namespace hyperslice::gpu
