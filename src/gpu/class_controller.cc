#include "src/gpu/class_controller.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/gpu/api.h"
#include "src/gpu/class_providers.h"
#include "src/gpu/credentials.h"
#include "src/gpu/internal/claim.h"
#include "src/gpu/internal/registration.h"
#include "src/gpu/talos.h"
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
using jsonfield::ObjectField;
using jsonfield::StringField;
using kube::ObjectPtr;

using ProviderSpec = ClassProvider;

std::string PoolClassName(const kube::Object& pool) {
  const bj::object* ref = jsonfield::ObjectAt(pool, "spec.nodeClassRef");
  return ref != nullptr ? std::string(StringField(*ref, "name")) : std::string();
}

constexpr char kPoolsByClass[] = "spec.nodeClassRef.name";

// Claims and their hourly cost per class, kept from the claim informer's events. Every claim event
// reconciles its class, so summing a scan of every claim there made N claims cost N²; with the
// totals a class's status costs the same with 10 claims or 10,000. Counts every cached claim (as
// the scan did), deleting ones too: their machines are still billed until returned.
class ClaimTotals {
 public:
  void Set(const kube::Object& claim) {
    std::string name(kube::MetaString(claim, "name"));
    Entry next{internal::ClassNameOf(claim), internal::ClaimHourlyCost(claim)};
    std::lock_guard lock(mu_);
    if (auto it = by_claim_.find(name); it != by_claim_.end()) Subtract(it->second);
    auto& t = by_class_[next.class_name];
    ++t.first;
    t.second += next.cost;
    by_claim_[name] = std::move(next);
  }
  void Remove(const kube::Object& claim) {
    std::lock_guard lock(mu_);
    auto it = by_claim_.find(std::string(kube::MetaString(claim, "name")));
    if (it == by_claim_.end()) return;
    Subtract(it->second);
    by_claim_.erase(it);
  }
  // (claims, hourly cost) of a class.
  std::pair<int64_t, MicroUsd> Of(const std::string& class_name) const {
    std::lock_guard lock(mu_);
    auto it = by_class_.find(class_name);
    return it == by_class_.end() ? std::pair<int64_t, MicroUsd>{0, 0} : it->second;
  }

 private:
  struct Entry {
    std::string class_name;
    MicroUsd cost = 0;
  };
  void Subtract(const Entry& e) {
    auto it = by_class_.find(e.class_name);
    if (it == by_class_.end()) return;
    --it->second.first;
    it->second.second -= e.cost;
    if (it->second.first <= 0) by_class_.erase(it);
  }
  mutable std::mutex mu_;
  std::map<std::string, Entry> by_claim_;                         // claim name ->
  std::map<std::string, std::pair<int64_t, MicroUsd>> by_class_;  // class name ->
};

class ClassReconciler {
 public:
  ClassReconciler(ClassControllerOptions options, std::shared_ptr<kube::SharedInformer> classes,
                  std::shared_ptr<kube::SharedInformer> pools,
                  std::shared_ptr<kube::SharedInformer> claims, kube::metrics::Registry& registry,
                  std::shared_ptr<const ClaimTotals> totals)
      : o_(std::move(options)),
        clock_(o_.ClockOrReal()),
        classes_(std::move(classes)),
        pools_(std::move(pools)),
        claims_(std::move(claims)),
        registry_(registry),
        totals_(std::move(totals)) {
    if (!o_.factory) o_.factory = [](const ProviderConfig& c) { return NewProvider(c); };
  }

  Result<kube::ReconcileResult> Reconcile(const std::string& name) {
    ObjectPtr cached = classes_->store().Get(name);
    if (!cached) {
      o_.cache->DropClass(name);
      ForgetClients(name, {});
      {
        std::lock_guard lock(mu_);
        machine_configs_.erase(name);
      }
      return kube::ReconcileResult{};
    }
    kube::Object cls = *cached;
    if (kube::IsDeleting(cls)) return Finalize(name, cls);
    if (!kube::HasFinalizer(cls, kClassFinalizer)) {
      kube::AddFinalizer(cls, kClassFinalizer);
      auto updated = o_.client->Update(GPUNodeClasses(), "", cls);
      if (!updated.ok()) return updated.error();
      cls = std::move(*updated);
    }

    const bj::object* spec = ObjectField(cls, "spec");
    std::vector<ProviderSpec> providers =
        spec ? ReadClassProviders(*spec) : std::vector<ProviderSpec>{};
    int64_t generation = kube::Generation(cls);
    Clock::TimePoint now = clock_.Now();
    Clock::Duration next = o_.offer_refresh_interval;
    bj::array provider_status;
    std::vector<std::string> enabled_names, invalid;
    int valid = 0;
    int usable = 0;  // valid, and able to boot the class's machines
    kube::Condition machine_config = MachineConfigOf(name, spec, generation);
    bool config_valid = machine_config.status != "False";
    for (const ProviderSpec& p : providers) {
      if (!p.enabled) continue;
      enabled_names.push_back(p.name);
      auto state = Refresh(name, p, generation, now, cls);
      if (state->credentials_valid) {
        ++valid;
        if (config_valid || o_.talos_providers.count(p.name) == 0) ++usable;
      } else {
        invalid.push_back(p.name + ": " + state->error);
      }
      provider_status.push_back(StatusOf(*state));
      if (state->checked) {
        next = std::min(next, *state->checked + o_.credentials_check_interval - now);
      }
      if (state->refreshed) {
        next = std::min(next, *state->refreshed + o_.offer_refresh_interval - now);
      }
    }
    o_.cache->Retain(name, enabled_names);
    ForgetClients(name, enabled_names);

    // Status: computed whole, written only when it differs from what is stored.
    kube::Object desired = cls;
    bj::object& status = desired["status"].emplace_object();
    if (const bj::object* old = ObjectField(cls, "status")) status = *old;
    status["observedGeneration"] = generation;
    status["providers"] = std::move(provider_status);
    status["providersReady"] = std::to_string(valid) + "/" + std::to_string(enabled_names.size());
    // Machines rented through this class now, and what they cost per hour.
    auto [active, hourly] = totals_->Of(name);
    status["activeNodes"] = active;
    status["hourlyCost"] = FormatUsd(hourly);
    kube::Condition providers_ready{
        .type = "ProvidersReady",
        .status = invalid.empty() ? "True" : "False",
        .reason = invalid.empty() ? "CredentialsValid" : "CredentialsInvalid",
        .message =
            invalid.empty() ? "every enabled provider's credentials work" : Join(invalid, "; "),
        .observed_generation = generation};
    if (enabled_names.empty()) {
      providers_ready.status = "False";
      providers_ready.reason = "NoProviderEnabled";
      providers_ready.message = "no provider is enabled";
    }
    kube::Condition ready{.type = "Ready",
                          .status = usable > 0 ? "True" : "False",
                          .reason = usable > 0 ? "ProvidersReady" : providers_ready.reason,
                          .message = usable > 0 ? std::to_string(usable) + " of " +
                                                      std::to_string(enabled_names.size()) +
                                                      " providers usable"
                                                : providers_ready.message,
                          .observed_generation = generation};
    if (usable == 0 && valid > 0) {
      ready.reason = "MachineConfigInvalid";
      ready.message =
          "every usable provider boots Talos and the machine config template is "
          "invalid: " +
          machine_config.message;
    }
    auto wall = std::chrono::system_clock::now();
    kube::SetCondition(desired, providers_ready, wall);
    kube::SetCondition(desired, machine_config, wall);
    kube::SetCondition(desired, ready, wall);
    if (!SameStatus(cls, desired)) {
      auto written = o_.client->Update(GPUNodeClasses(), "", desired, "status");
      if (!written.ok()) return written.error();
    }
    return kube::ReconcileResult{
        .requeue_after = std::max<Clock::Duration>(next, std::chrono::milliseconds(100))};
  }

  std::vector<ObjectPtr> ClaimsOf(const std::string& class_name) const {
    std::vector<ObjectPtr> out;
    for (const ObjectPtr& claim : claims_->store().List()) {
      if (internal::ClassNameOf(*claim) == class_name) out.push_back(claim);
    }
    return out;
  }

  static Status AddIndexes(kube::SharedInformer& pools) {
    return pools.AddIndex(kPoolsByClass, [](const kube::Object& pool) {
      std::string name = PoolClassName(pool);
      return name.empty() ? std::vector<std::string>{} : std::vector<std::string>{name};
    });
  }

 private:
  struct Client {
    std::string fingerprint;
    std::shared_ptr<Provider> provider;
    int64_t generation = -1;
  };

  static std::string Join(const std::vector<std::string>& parts, const char* sep) {
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : sep) + p;
    return out;
  }

  // The MachineConfigValid condition of a class, checked once per generation (the template is
  // in the spec, so only a spec change can change the verdict).
  kube::Condition MachineConfigOf(const std::string& cls_name, const bj::object* spec,
                                  int64_t generation) {
    {
      std::lock_guard lock(mu_);
      auto it = machine_configs_.find(cls_name);
      if (it != machine_configs_.end() && it->second.observed_generation == generation) {
        return it->second;
      }
    }
    kube::Condition c{.type = "MachineConfigValid", .observed_generation = generation};
    const bj::object* talos = spec != nullptr ? ObjectField(*spec, "talosConfig") : nullptr;
    std::string_view tmpl =
        talos != nullptr ? StringField(*talos, "machineConfigTemplate") : std::string_view();
    if (!tmpl.empty()) {
      auto refusals = CheckTalosTemplate(tmpl);
      if (!refusals.ok()) {
        c.status = "False";
        c.reason = "TemplateInvalid";
        c.message = "machineConfigTemplate does not render: " + refusals.error().message;
      } else if (!refusals->empty()) {
        c.status = "False";
        c.reason = "TemplateInvalid";
        c.message = "Talos would refuse machineConfigTemplate: " + Join(*refusals, "; ");
      } else {
        c.status = "True";
        c.reason = "TemplateValid";
        c.message = "machineConfigTemplate renders to a config Talos accepts";
      }
    } else if (talos != nullptr && ObjectField(*talos, "machineConfigSecretRef") != nullptr) {
      c.status = "Unknown";
      c.reason = "TemplateInSecret";
      c.message = "the template in machineConfigSecretRef is not checked before a launch yet";
    } else {
      c.status = "True";
      c.reason = "DefaultTemplate";
      c.message = "no machineConfigTemplate: the default worker template is used";
    }
    // A template full of mistakes must not make the status too big to write.
    constexpr size_t kMaxMessage = 4096;
    if (c.message.size() > kMaxMessage) c.message = c.message.substr(0, kMaxMessage - 3) + "...";
    std::lock_guard lock(mu_);
    machine_configs_[cls_name] = c;
    return c;
  }

  static bool SameStatus(const kube::Object& a, const kube::Object& b) {
    const bj::value* sa = a.if_contains("status");
    const bj::value* sb = b.if_contains("status");
    if (sa == nullptr || sb == nullptr) return sa == sb;
    return *sa == *sb;
  }

  // Deletion waits while a pool references the class; the Ready condition names the pools.
  Result<kube::ReconcileResult> Finalize(const std::string& name, const kube::Object& cls) {
    auto users = pools_->store().ByIndex(kPoolsByClass, name);
    if (!users.ok()) return users.error();
    // Claims hold the class too: their machines are returned through its providers.
    std::vector<ObjectPtr> claims = ClaimsOf(name);
    if (!users->empty() || !claims.empty()) {
      std::vector<std::string> names;
      for (const auto& pool : *users) {
        names.push_back("GPUNodePool " + std::string(kube::MetaString(*pool, "namespace")) + "/" +
                        std::string(kube::MetaString(*pool, "name")));
      }
      for (const auto& claim : claims) {
        names.push_back("GPUNodeClaim " + std::string(kube::MetaString(*claim, "name")));
      }
      std::sort(names.begin(), names.end());
      kube::Object desired = cls;
      kube::SetCondition(
          desired,
          {.type = "Ready",
           .status = "False",
           .reason = "InUse",
           .message = "deletion waits until nothing uses this class: " + Join(names, ", "),
           .observed_generation = kube::Generation(cls)},
          std::chrono::system_clock::now());
      if (!SameStatus(cls, desired)) {
        auto written = o_.client->Update(GPUNodeClasses(), "", desired, "status");
        if (!written.ok()) return written.error();
        if (o_.events) {
          o_.events->Event(cls, kube::EventType::kWarning, "InUse",
                           "deletion waits for " + Join(names, ", "));
        }
      }
      return kube::ReconcileResult{};  // a pool's deletion or change enqueues the class again
    }
    o_.cache->DropClass(name);
    ForgetClients(name, {});
    if (kube::HasFinalizer(cls, kClassFinalizer)) {
      auto patched = o_.client->Patch(GPUNodeClasses(), "", name, kube::PatchType::kJson,
                                      kube::RemoveFinalizerPatch(cls, kClassFinalizer));
      if (!patched.ok() && patched.error().code != Error::Code::kNotFound) return patched.error();
    }
    log::Info("gpunodeclass released", {{"class", name}});
    return kube::ReconcileResult{};
  }

  // Checks credentials and refreshes offers of one provider when due; publishes the new state.
  std::shared_ptr<const ProviderState> Refresh(const std::string& cls_name, const ProviderSpec& p,
                                               int64_t generation, Clock::TimePoint now,
                                               const kube::Object& cls) {
    std::shared_ptr<const ProviderState> prev = o_.cache->Get(cls_name, p.name);
    auto next = std::make_shared<ProviderState>(prev ? *prev : ProviderState{});
    next->provider = p.name;
    next->priority = p.priority;
    next->regions = p.regions;

    bool rebuilt = false;
    {
      std::lock_guard lock(mu_);
      Client& c = clients_[{cls_name, p.name}];
      if (!c.provider || c.fingerprint != p.Fingerprint()) {
        ProviderConfig config;
        config.name = p.name;
        config.endpoint = p.endpoint;
        if (auto q = o_.provider_qps.find(p.name); q != o_.provider_qps.end()) {
          config.requests_per_second = q->second;
          config.burst = std::max(1, static_cast<int>(q->second));
        }
        if (config.endpoint.empty()) {
          if (auto it = o_.default_endpoints.find(p.name); it != o_.default_endpoints.end()) {
            config.endpoint = it->second;
          }
        }
        if (o_.clock != nullptr) config.clock = o_.clock;
        config.metrics = &registry_;
        config.credentials = SecretCredential(o_.client, p.credentials, o_.credentials_namespace,
                                              std::chrono::seconds(60), &o_.ClockOrReal());
        auto built = o_.factory(config);
        if (!built.ok()) {
          next->client.reset();
          next->credentials_valid = false;
          next->error = built.error().message;
          next->checked = now;
          c = Client{};
          o_.cache->Put(cls_name, next);
          return next;
        }
        c.provider = std::shared_ptr<Provider>(std::move(*built));
        c.fingerprint = p.Fingerprint();
        rebuilt = true;
      }
      if (c.generation != generation) rebuilt = true;  // the spec changed: check again now
      c.generation = generation;
      next->client = c.provider;
    }

    bool was_valid = prev && prev->credentials_valid;
    if (rebuilt || !next->checked || now - *next->checked >= o_.credentials_check_interval) {
      Status st = next->client->CheckCredentials();
      next->checked = now;
      next->credentials_valid = st.ok();
      next->error = st.ok() ? "" : st.error().message;
      if (!st.ok()) next->offers.clear();  // offers of an account we cannot use are not offers
      if (o_.events && (!prev || was_valid != next->credentials_valid)) {
        if (st.ok()) {
          if (prev) {
            o_.events->Event(cls, kube::EventType::kNormal, "CredentialsValid",
                             p.name + ": credentials accepted");
          }
        } else {
          o_.events->Event(cls, kube::EventType::kWarning, "CredentialsInvalid",
                           p.name + ": " + st.error().message);
        }
      }
      if (!st.ok()) {
        log::Warn("gpu provider credentials check failed",
                  {{"class", cls_name}, {"provider", p.name}, {"error", st.error().message}});
      }
    }
    if (next->credentials_valid &&
        (rebuilt || !next->refreshed || now - *next->refreshed >= o_.offer_refresh_interval)) {
      auto offers = next->client->ListOffers();
      if (offers.ok()) {
        next->offers = std::move(*offers);
        next->skipped_offers = 0;
        next->skipped_reason.clear();
        next->skips_container_offers = o_.skip_container_offers;
        if (o_.skip_container_offers) {
          auto end = std::remove_if(next->offers.begin(), next->offers.end(),
                                    [](const Offer& x) { return x.boot == BootKind::kContainer; });
          next->skipped_offers = static_cast<int>(next->offers.end() - end);
          next->offers.erase(end, next->offers.end());
          if (next->skipped_offers > 0) {
            next->skipped_reason =
                "container-only offers: a machine that runs only a container joins as a linked "
                "runner, which is not built yet";
          }
        }
        next->refreshed = now;
        next->error.clear();
        registry_
            .GetGauge("hyperslice_gpu_offers", "Offers in the operator's cache",
                      {{"class", cls_name}, {"provider", p.name}})
            .Set(static_cast<double>(next->offers.size()));
        registry_
            .GetGauge("hyperslice_gpu_offer_cache_refresh_timestamp_seconds",
                      "When the offer cache was last refreshed (Unix seconds); age = time() - it",
                      {{"class", cls_name}, {"provider", p.name}})
            .Set(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                     .count());
      } else {
        // Keep the last offers (their age shows in the status) and say why they are old.
        next->error = "refreshing offers: " + offers.error().message;
        next->refreshed = next->refreshed.value_or(now);
        if (KindOf(offers.error()) == ErrorKind::kUnauthorized) {
          next->credentials_valid = false;
          next->offers.clear();
        }
      }
    }
    o_.cache->Put(cls_name, next);
    return next;
  }

  bj::object StatusOf(const ProviderState& s) const {
    bj::object o;
    o["name"] = s.provider;
    o["credentialsValid"] = s.credentials_valid;
    if (s.checked) o["lastCheck"] = kube::FormatTime(ToWall(*s.checked));
    if (!s.error.empty()) o["error"] = s.error;
    o["offerCount"] = static_cast<int64_t>(s.offers.size());
    if (s.skipped_offers > 0) {
      o["skippedOffers"] = static_cast<int64_t>(s.skipped_offers);
      o["skippedReason"] = s.skipped_reason;
    }
    if (s.refreshed) o["lastRefresh"] = kube::FormatTime(ToWall(*s.refreshed));
    std::set<std::string> unknown;
    for (const Offer& offer : s.offers) {
      if (!offer.gpu_type_known) unknown.insert("gpu:" + offer.provider_gpu_name);
      if (!offer.region_known) unknown.insert("region:" + offer.provider_region);
    }
    if (!unknown.empty()) {
      bj::array names;
      for (const auto& n : unknown) names.emplace_back(n);
      o["unknownNames"] = std::move(names);
    }
    return o;
  }

  // The steady clock's time point as wall time (status timestamps are RFC 3339).
  std::chrono::system_clock::time_point ToWall(Clock::TimePoint t) const {
    return std::chrono::system_clock::now() -
           std::chrono::duration_cast<std::chrono::system_clock::duration>(clock_.Now() - t);
  }

  void ForgetClients(const std::string& cls_name, const std::vector<std::string>& keep) {
    std::lock_guard lock(mu_);
    for (auto it = clients_.lower_bound({cls_name, ""});
         it != clients_.end() && it->first.first == cls_name;) {
      if (std::find(keep.begin(), keep.end(), it->first.second) == keep.end()) {
        it = clients_.erase(it);
      } else {
        ++it;
      }
    }
  }

  ClassControllerOptions o_;
  Clock& clock_;
  std::shared_ptr<kube::SharedInformer> classes_, pools_, claims_;
  kube::metrics::Registry& registry_;
  std::shared_ptr<const ClaimTotals> totals_;
  std::mutex mu_;
  std::map<std::pair<std::string, std::string>, Client> clients_;
  std::map<std::string, kube::Condition> machine_configs_;  // class name -> last verdict
};

}  // namespace

Status RegisterClassController(kube::Manager& mgr, ClassControllerOptions options) {
  HS_RETURN_IF_ERROR(internal::RequireInformers(mgr));
  if (!options.client || !options.cache) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "gpunodeclass controller: client and cache "
                       "are required");
  }
  auto classes = mgr.informers()->For(GPUNodeClasses());
  auto pools = mgr.informers()->For(GPUNodePools());
  auto claims = mgr.informers()->For(GPUNodeClaims());
  HS_RETURN_IF_ERROR(ClassReconciler::AddIndexes(*pools));
  kube::metrics::Registry& registry =
      options.registry != nullptr ? *options.registry : mgr.registry();
  kube::ControllerOptions co;
  co.name = "gpunodeclass";
  co.max_concurrent_reconciles = std::max(1, options.workers);
  co.clock = options.clock;
  co.registry = &registry;
  auto totals = std::make_shared<ClaimTotals>();
  auto reconciler = std::make_shared<ClassReconciler>(std::move(options), classes, pools, claims,
                                                      registry, totals);
  auto controller = std::make_shared<kube::Controller>(
      std::move(co), [reconciler](const std::string& key) { return reconciler->Reconcile(key); });
  controller->Watch(*classes);
  // A pool added, moved to another class or deleted changes whether a class may go.
  std::weak_ptr<kube::Controller> weak = controller;
  auto enqueue = [weak](const ObjectPtr& pool) {
    auto c = weak.lock();
    if (!c || !pool) return;
    std::string name = PoolClassName(*pool);
    if (!name.empty()) c->Enqueue(name);
  };
  pools->AddEventHandler({.on_add = enqueue,
                          .on_update =
                              [enqueue](const ObjectPtr& old, const ObjectPtr& cur) {
                                enqueue(cur);
                                if (old) enqueue(old);
                              },
                          .on_delete = [enqueue](const ObjectPtr& last, bool) { enqueue(last); }});
  // A claim launched, priced or gone changes the class's nodes and cost (and may free it).
  // The totals change first, so the reconcile the event causes sees them.
  auto enqueue_claim = [weak](const ObjectPtr& claim) {
    auto c = weak.lock();
    if (!c || !claim) return;
    std::string name = internal::ClassNameOf(*claim);
    if (!name.empty()) c->Enqueue(name);
  };
  claims->AddEventHandler({.on_add =
                               [totals, enqueue_claim](const ObjectPtr& cur) {
                                 if (cur) totals->Set(*cur);
                                 enqueue_claim(cur);
                               },
                           .on_update =
                               [totals, enqueue_claim](const ObjectPtr& old, const ObjectPtr& cur) {
                                 if (cur) totals->Set(*cur);
                                 enqueue_claim(cur);
                                 // A claim moved to another class (not in practice: the ref is
                                 // set once) changes the old class too.
                                 if (old && cur &&
                                     internal::ClassNameOf(*old) != internal::ClassNameOf(*cur)) {
                                   enqueue_claim(old);
                                 }
                               },
                           .on_delete =
                               [totals, enqueue_claim](const ObjectPtr& last, bool) {
                                 if (last) totals->Remove(*last);
                                 enqueue_claim(last);
                               }});
  mgr.Add(controller);
  return OkStatus();
}

}  // namespace hyperslice::gpu
