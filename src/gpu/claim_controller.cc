// The GPUNodeClaim controller: a small phase runner (launch, registration, initialization) plus
// termination and the garbage collector; see claim_controller.h for the lifecycle.
#include "src/gpu/claim_controller.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/gpu/api.h"
#include "src/gpu/cost_controller.h"
#include "src/gpu/disruption.h"
#include "src/gpu/drain.h"
#include "src/gpu/internal/claim.h"
#include "src/gpu/internal/loop_runnable.h"
#include "src/gpu/internal/registration.h"
#include "src/gpu/planner.h"
#include "src/gpu/tailnet_credentials.h"
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
using internal::Meta;
using jsonfield::ArrayField;
using jsonfield::ObjectAt;
using jsonfield::ObjectField;
using jsonfield::StringField;
using kube::ObjectPtr;

// Our own index name: in `hyperslice operator` the Nodes informer is shared with the TPU
// controllers, which index spec.providerID under that name already.
constexpr char kNodesByProviderId[] = "tgp.io/node-by-provider-id";
// Claims by status.providerID: a Node's event finds its claim without scanning every claim (the
// scan made registering N machines cost N² with many claims).
constexpr char kClaimsByProviderId[] = "tgp.io/claim-by-provider-id";
// How soon a failed termination step is tried again (the machine is billed meanwhile).
constexpr auto kTerminationRetry = std::chrono::seconds(3);
// Pods by spec.nodeName: what a drain moves, and what is left of a returned machine.
constexpr char kPodsByNode[] = "tgp.io/claim-pods-by-node";

// The Node as the apiserver has it. The shared Nodes informer may be trimmed (the TPU controllers
// cache only labels, providerID, taints and the Ready condition: no allocatable, no annotations),
// so what is written back with a PUT, and allocatable, come from a fresh read.
Result<kube::Object> FullNode(kube::Client& client, const kube::Object& cached) {
  return client.Get(kube::resources::Nodes(), "", std::string(kube::MetaString(cached, "name")));
}

// Seconds since an RFC 3339 timestamp ("2026-11-25T04:13:15Z"), by the wall clock.
std::optional<std::chrono::seconds> Age(std::string_view rfc3339) {
  auto t = kube::ParseTime(rfc3339);
  if (!t) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now() - *t);
}

// A label value from a provider's free text ("NVIDIA GeForce RTX 4090" ->
// "NVIDIA-GeForce-RTX-4090").
std::string LabelValue(std::string_view s) {
  std::string out;
  for (char c : s) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    out += ok ? c : '-';
  }
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.front()))) out.erase(0, 1);
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.back()))) out.pop_back();
  return out.substr(0, 63);
}

class ClaimReconciler {
 public:
  struct Informers {
    std::shared_ptr<kube::SharedInformer> claims, pools, classes, nodes, pods;
  };

  ClaimReconciler(ClaimControllerOptions o, Informers inf)
      : o_(std::move(o)), clock_(o_.ClockOrReal()), inf_(std::move(inf)) {}

  static Status AddIndexes(const Informers& inf) {
    HS_RETURN_IF_ERROR(
        inf.claims->AddIndex(kClaimsByProviderId, kube::FieldIndexFunc("status.providerID")));
    HS_RETURN_IF_ERROR(inf.pods->AddIndex(kPodsByNode, kube::FieldIndexFunc("spec.nodeName")));
    return inf.nodes->AddIndex(kNodesByProviderId, [](const kube::Object& node) {
      const bj::object* spec = ObjectField(node, "spec");
      std::string id = spec ? std::string(StringField(*spec, "providerID")) : std::string();
      return id.empty() ? std::vector<std::string>{} : std::vector<std::string>{id};
    });
  }

  Result<kube::ReconcileResult> Reconcile(const std::string& name) {
    ObjectPtr cached = inf_.claims->store().Get(name);
    if (!cached) return kube::ReconcileResult{};
    Ctx ctx{.name = name, .claim = *cached};
    ctx.status = ctx.claim.contains("status") && ctx.claim["status"].is_object()
                     ? ctx.claim["status"].get_object()
                     : bj::object{};
    ctx.written = ctx.status;
    if (kube::IsDeleting(ctx.claim)) {
      // A machine being returned is billed until it is gone: while its provider fails, retry
      // every few seconds instead of the queue's exponential backoff (which reaches minutes
      // after a provider outage of a minute, and 1000 s after a longer one).
      auto terminated = Terminate(ctx);
      if (terminated.ok()) return terminated;
      log::Warn("gpunodeclaim termination failed; retrying",
                {{"claim", name}, {"error", terminated.error().message}});
      return kube::ReconcileResult{.requeue_after = kTerminationRetry};
    }
    if (!kube::HasFinalizer(ctx.claim, kClaimFinalizer)) {
      kube::AddFinalizer(ctx.claim, kClaimFinalizer);
      auto updated = o_.client->Update(GPUNodeClaims(), "", ctx.claim);
      if (!updated.ok()) return updated.error();
      ctx.claim = *updated;
    }
    // Someone deleted the claim's Node: return the machine gracefully (the Node waits on our
    // finalizer until the claim's termination has drained it and returned the machine).
    if (std::string node(StringField(ctx.status, "nodeName")); !node.empty()) {
      if (ObjectPtr n = inf_.nodes->store().Get(node); n && kube::IsDeleting(*n)) {
        Event(ctx, kube::EventType::kNormal, "NodeDeleted",
              "Node " + node + " is being deleted: returning its machine");
        kube::DeleteOptions d;
        d.precondition_uid = Meta(ctx.claim, "uid");
        Status del = o_.client->Delete(GPUNodeClaims(), "", name, d);
        if (!del.ok() && del.error().code != Error::Code::kNotFound) return del.error();
        return kube::ReconcileResult{};
      }
    }
    kube::ReconcileResult result;
    Status st = OkStatus();
    if (StringField(ctx.status, "instanceID").empty()) {
      auto r = Launch(ctx);
      if (!r.ok())
        st = r.error();
      else
        result = *r;
    } else if (!kube::IsConditionTrue(ctx.claim, "Registered") || !Registered(ctx)) {
      auto r = Register(ctx);
      if (!r.ok())
        st = r.error();
      else
        result = *r;
    }
    if (st.ok() && Registered(ctx) && !Initialized(ctx)) {
      auto r = Initialize(ctx);
      if (!r.ok())
        st = r.error();
      else
        result = *r;
    }
    if (st.ok() && Registered(ctx)) {
      auto r = RecordTailnetDevice(ctx);
      if (!r.ok()) {
        st = r.error();
      } else if (r->requeue_after.count() > 0 && result.requeue_after.count() == 0) {
        result = *r;
      }
    }
    if (Status w = WriteStatus(ctx); !w.ok()) return w.error();
    if (ctx.delete_claim) {
      Status d = o_.client->Delete(GPUNodeClaims(), "", name);
      if (!d.ok() && d.error().code != Error::Code::kNotFound) return d.error();
    }
    if (!st.ok()) return st.error();
    return result;
  }

  // The garbage collector's pass: instances tagged with this cluster that no claim owns.
  void CollectGarbage() {
    std::set<std::string> uids;
    for (const ObjectPtr& c : inf_.claims->store().List()) uids.insert(Meta(*c, "uid"));
    std::map<std::string, std::shared_ptr<Provider>> clients;  // one client per provider name
    for (const ObjectPtr& cls : inf_.classes->store().List()) {
      for (const auto& [provider, state] : o_.cache->ForClass(Meta(*cls, "name"))) {
        if (state->client && state->credentials_valid) clients.emplace(provider, state->client);
      }
    }
    auto now = clock_.Now();
    std::set<std::string> seen;
    std::map<std::string, std::set<std::string>> running;  // provider -> its live instance ids
    for (const auto& [provider, client] : clients) {
      auto listed = client->List({{kTagCluster, o_.cluster_id}});
      if (!listed.ok()) {
        log::Warn("gpu gc: listing instances failed",
                  {{"provider", provider}, {"error", listed.error().message}});
        continue;
      }
      std::set<std::string>& live = running[provider];
      for (const Instance& i : *listed) {
        if (i.state == InstanceState::kTerminated) continue;
        live.insert(i.id);
        auto uid = i.tags.find(kTagClaimUid);
        if (uid != i.tags.end() && uids.count(uid->second) != 0) continue;
        std::string key = provider + "/" + i.id;
        seen.insert(key);
        std::lock_guard lock(mu_);
        auto [it, inserted] = orphan_since_.emplace(key, now);
        if (inserted || now - it->second < o_.gc_grace) continue;
        Status d = client->Delete(i.id);
        log::Info("gpu gc: deleted an instance no claim owns",
                  {{"provider", provider}, {"instance", i.id}, {"name", i.name}, {"ok", d.ok()}});
        if (d.ok()) ++collected_;
      }
    }
    {
      std::lock_guard lock(mu_);
      for (auto it = orphan_since_.begin(); it != orphan_since_.end();) {
        it = seen.count(it->first) ? std::next(it) : orphan_since_.erase(it);
      }
    }
    ReleaseClaimsOfGoneMachines(running, now);
    ReleaseOrphanedNodes();
    if (o_.tailnet) CollectTailnetGarbage();
  }

  // Tailnet devices no claim owns (tailnet_credentials.h says which devices count as ours).
  void CollectTailnetGarbage() {
    std::set<std::string> claims;
    for (const ObjectPtr& c : inf_.claims->store().List()) claims.insert(Meta(*c, "name"));
    std::map<std::string, std::set<std::string>> pools;  // class -> its pools' names
    for (const ObjectPtr& p : inf_.pools->store().List()) {
      const bj::object* ref = ObjectAt(*p, "spec.nodeClassRef");
      if (ref != nullptr) pools[std::string(StringField(*ref, "name"))].insert(Meta(*p, "name"));
    }
    o_.tailnet->CollectGarbage(inf_.classes->store().List(), claims, pools, o_.gc_grace);
  }

  // A Node being deleted that still carries our finalizer but has no claim (its claim went while
  // the operator was down, or the finalizer was added by hand) would never go: the finalizer
  // comes off. Only Nodes already being deleted are looked at.
  void ReleaseOrphanedNodes() {
    for (const ObjectPtr& n : inf_.nodes->store().List()) {
      if (!kube::IsDeleting(*n)) continue;
      const bj::object* spec = ObjectField(*n, "spec");
      std::string id = spec ? std::string(StringField(*spec, "providerID")) : std::string();
      auto owners = inf_.claims->store().ByIndex(kClaimsByProviderId, id);
      if (id.empty() || (owners.ok() && !owners->empty())) continue;
      auto full = FullNode(*o_.client, *n);
      if (!full.ok()) continue;
      std::string patch = kube::RemoveFinalizerPatch(*full, kClaimFinalizer);
      if (patch.empty()) continue;
      (void)o_.client->Patch(kube::resources::Nodes(), "", Meta(*n, "name"), kube::PatchType::kJson,
                             patch);
      log::Info("gpu gc: released a deleted Node no claim owns", {{"node", Meta(*n, "name")}});
    }
  }

  // The other direction: a launched claim whose machine the provider no longer runs (a spot
  // machine reclaimed, or one deleted outside hyperslice) is deleted, with a Warning, so its
  // Node goes and its pods get a new machine. Only providers listed in this pass are judged, and
  // a machine must be missing for gc_grace (a list may lag a create).
  void ReleaseClaimsOfGoneMachines(const std::map<std::string, std::set<std::string>>& running,
                                   Clock::TimePoint now) {
    std::set<std::string> missing;
    for (const ObjectPtr& c : inf_.claims->store().List()) {
      if (kube::IsDeleting(*c)) continue;
      const bj::object* status = ObjectField(*c, "status");
      if (status == nullptr) continue;
      std::string provider(StringField(*status, "provider"));
      std::string id(StringField(*status, "instanceID"));
      auto live = running.find(provider);
      if (id.empty() || live == running.end() || live->second.count(id) != 0) continue;
      std::string uid = Meta(*c, "uid");
      missing.insert(uid);
      {
        std::lock_guard lock(mu_);
        auto [it, inserted] = gone_since_.emplace(uid, now);
        if (inserted || now - it->second < o_.gc_grace) continue;
      }
      std::string name = Meta(*c, "name");
      std::string msg = provider;
      msg += " no longer runs instance ";
      msg += id;
      msg +=
          " (a spot machine reclaimed, or deleted outside hyperslice); deleting the claim so "
          "its Node goes and its pods get a new machine";
      log::Warn("gpunodeclaim machine gone",
                {{"claim", name}, {"provider", provider}, {"instance", id}});
      if (o_.events) o_.events->Event(*c, kube::EventType::kWarning, "MachineGone", msg);
      kube::DeleteOptions d;
      d.precondition_uid = uid;
      (void)o_.client->Delete(GPUNodeClaims(), "", name, d);
    }
    std::lock_guard lock(mu_);
    for (auto it = gone_since_.begin(); it != gone_since_.end();)
      it = missing.count(it->first) ? std::next(it) : gone_since_.erase(it);
  }

 private:
  struct Ctx {
    std::string name;
    kube::Object claim;
    bj::object status;   // desired
    bj::object written;  // as stored
    bool delete_claim = false;
  };

  void Event(const Ctx& ctx, kube::EventType type, const std::string& reason,
             const std::string& message) {
    if (o_.events) o_.events->Event(ctx.claim, type, reason, message);
  }

  void SetCondition(Ctx& ctx, const std::string& type, bool ok, const std::string& reason,
                    const std::string& message) {
    kube::Object holder{{"status", ctx.status}};
    kube::SetCondition(holder,
                       {.type = type,
                        .status = ok ? "True" : "False",
                        .reason = reason,
                        .message = message,
                        .observed_generation = kube::Generation(ctx.claim)},
                       std::chrono::system_clock::now());
    ctx.status = holder["status"].as_object();
  }
  static bool ConditionTrue(const bj::object& status, const std::string& type) {
    kube::Object holder{{"status", status}};
    return kube::IsConditionTrue(holder, type);
  }
  bool Registered(const Ctx& ctx) const { return ConditionTrue(ctx.status, "Registered"); }
  bool Initialized(const Ctx& ctx) const { return ConditionTrue(ctx.status, "Initialized"); }

  Status WriteStatus(Ctx& ctx) {
    if (ctx.status == ctx.written) return OkStatus();
    ctx.status["observedGeneration"] = kube::Generation(ctx.claim);
    kube::Object obj = ctx.claim;
    obj["status"] = ctx.status;
    auto written = o_.client->Update(GPUNodeClaims(), "", obj, "status");
    if (!written.ok()) return written.error();
    ctx.claim = *written;
    ctx.written = ctx.status;
    return OkStatus();
  }

  std::shared_ptr<const ProviderState> ProviderFor(const Ctx& ctx, const std::string& provider) {
    return o_.cache->Get(internal::ClassNameOf(ctx.claim), provider);
  }

  std::map<std::string, std::string> Tags(const Ctx& ctx) const {
    return {{kTagCluster, o_.cluster_id},
            {kTagClaim, ctx.name},
            {kTagClaimUid, Meta(ctx.claim, "uid")},
            {kLabelNodePool,
             ObjectAt(ctx.claim, "spec.poolRef")
                 ? std::string(StringField(*ObjectAt(ctx.claim, "spec.poolRef"), "name"))
                 : std::string()}};
  }

  void Adopt(Ctx& ctx, const Instance& i, const std::string& offer_id, bool spot,
             std::optional<MicroUsd> price) {
    ctx.status["provider"] = i.provider;
    ctx.status["instanceID"] = i.id;
    ctx.status["providerID"] = i.ProviderId();
    ctx.status["offerID"] = offer_id.empty() ? i.offer_id : offer_id;
    ctx.status["gpuType"] = i.gpu_type;
    ctx.status["gpuCount"] = i.gpu_count;
    ctx.status["region"] = i.region;
    if (auto p = i.price ? i.price : price) ctx.status["price"] = FormatUsd(*p);
    ctx.status["spot"] = i.spot || spot;
    auto now = std::chrono::system_clock::now();
    ctx.status["launchedAt"] = kube::FormatTime(now);
    // The cost collector bills from here (cost_controller.h): launchedAt has whole seconds only.
    ctx.status["billingStart"] = kube::FormatMicroTime(now);
    ctx.status.erase("createAttempt");
  }

  // ---- launch ----
  Result<kube::ReconcileResult> Launch(Ctx& ctx) {
    auto age = Age(Meta(ctx.claim, "creationTimestamp"));
    const bj::object* attempt = ObjectField(ctx.status, "createAttempt");
    if (attempt != nullptr) {
      // A create was sent and its outcome is unknown (lost answer, or we crashed): look before
      // creating again.
      std::string provider(StringField(*attempt, "provider"));
      auto state = ProviderFor(ctx, provider);
      if (!state || !state->client) {
        return Error::Make(Error::Code::kUnavailable,
                           "provider " + provider + " of the pending create is not ready");
      }
      auto listed = state->client->List({{kTagClaimUid, Meta(ctx.claim, "uid")}});
      if (!listed.ok()) return listed.error();
      for (const Instance& i : *listed) {
        if (i.state == InstanceState::kTerminated) continue;
        // Found after a lost answer: it has been billed since about when the create was sent.
        std::string sent(StringField(*attempt, "sentAt"));
        Adopt(ctx, i, std::string(StringField(*attempt, "offerID")), false, std::nullopt);
        if (kube::ParseTime(sent)) ctx.status["billingStart"] = sent;
        SetCondition(ctx, "Launched", true, "Launched",
                     "found " + i.id + " on " + provider + " by the claim's tag");
        Event(ctx, kube::EventType::kNormal, "Launched",
              "found instance " + i.id + " on " + provider +
                  " created by an earlier attempt whose answer was lost");
        return kube::ReconcileResult{.requeue_after = std::chrono::seconds(1)};
      }
      auto sent = Age(StringField(*attempt, "sentAt"));
      if (sent && *sent < o_.ambiguous_settle) {
        return kube::ReconcileResult{.requeue_after = o_.ambiguous_settle - *sent};
      }
      ctx.status.erase("createAttempt");  // proven absent: it may be sent again
    }
    if (age && *age > o_.launch_timeout) {
      std::string why =
          "not launched within " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::seconds>(o_.launch_timeout).count()) +
          " s";
      auto launched = kube::FindCondition(kube::Object{{"status", ctx.status}}, "Launched");
      if (launched) why += ": " + launched->message;
      SetCondition(ctx, "Launched", false, "LaunchTimeout", why);
      Event(ctx, kube::EventType::kWarning, "LaunchTimeout", why + "; deleting the claim");
      ctx.delete_claim = true;
      return kube::ReconcileResult{};
    }

    auto reqs = internal::RequirementsFromJson(Annotation(ctx.claim, kAnnotationRequirements));
    if (!reqs.ok()) {
      SetCondition(ctx, "Launched", false, "InvalidRequirements", reqs.error().message);
      return kube::ReconcileResult{.requeue_after = std::chrono::seconds(30)};
    }
    // Offers of the class's usable providers; the planned offer's provider asked again now.
    std::string class_name = internal::ClassNameOf(ctx.claim);
    auto states = o_.cache->ForClass(class_name);
    std::string planned = Annotation(ctx.claim, kAnnotationPlannedOffer);
    std::string live_provider = planned.substr(0, planned.find('/'));
    std::vector<Offer> offers;
    for (const auto& [provider, state] : states) {
      if (!state->client || !state->credentials_valid) continue;
      if (provider == live_provider) {
        auto live = state->client->ListOffers();
        if (live.ok()) {
          // The offers the class controller would keep: a container-only offer cheaper than the
          // planned one must not be bought instead of it.
          for (auto& offer : *live) {
            if (state->skips_container_offers && offer.boot == BootKind::kContainer) continue;
            offers.push_back(std::move(offer));
          }
          continue;
        }
        log::Warn("gpu launch: live offer check failed; using the cache",
                  {{"claim", ctx.name}, {"provider", provider}, {"error", live.error().message}});
      }
      offers.insert(offers.end(), state->offers.begin(), state->offers.end());
    }
    OfferCatalog catalog(std::move(offers));
    auto choice = catalog.Select(
        *reqs, [this](const Offer& offer) { return o_.unavailable->IsUnavailable(offer); });
    if (!choice) {
      // Nothing meets the plan any more (offers gone or dearer than planned): the claim goes and
      // the provisioner plans again with today's offers and budgets (Karpenter deletes a
      // NodeClaim after an insufficient-capacity error for the same reason).
      std::string why = "no offer fits the plan any more: " + catalog.Explain(*reqs);
      SetCondition(ctx, "Launched", false, "NoOfferFits", why);
      Event(ctx, kube::EventType::kWarning, "NoOfferFits", why + "; deleting the claim to replan");
      ctx.delete_claim = true;
      return kube::ReconcileResult{};
    }
    const Offer& offer = *choice->offer;
    auto state = states.at(offer.provider);

    LaunchRequest req;
    req.offer = &offer;
    req.name = ctx.name;
    req.claim_uid = Meta(ctx.claim, "uid");
    req.tags = Tags(ctx);
    req.spot = choice->spot;
    if (choice->spot) req.bid = choice->price;
    auto node_class = inf_.classes->store().Get(class_name);
    BootContext boot{.claim = &ctx.claim, .node_class = node_class.get(), .offer = &offer};
    if (o_.tailnet && TailnetCredentials::Wanted(node_class.get())) {
      // A key per launch attempt, spent at the machine's first join and expiring with the launch
      // timeout: one minted for an attempt that failed is useless to anyone after that.
      auto key = o_.tailnet->Mint(
          *node_class, std::chrono::duration_cast<std::chrono::seconds>(o_.launch_timeout));
      if (!key.ok()) {
        std::string why = "minting the machine's tailnet auth key: " + key.error().message;
        SetCondition(ctx, "Launched", false, "TailnetKeyFailed", why);
        Event(ctx, kube::EventType::kWarning, "LaunchFailed", why);
        return kube::ReconcileResult{.requeue_after = std::chrono::seconds(10)};
      }
      if (*key) {
        boot.tailnet_auth_key = (*key)->key;
        boot.tailnet_login_server = (*key)->login_server;
        ctx.status["tailnetKeyID"] = (*key)->id;
      }
    }
    auto payload = o_.payload ? o_.payload(boot) : DefaultPayload(boot);
    if (!payload.ok()) {
      SetCondition(ctx, "Launched", false, "InvalidBootPayload", payload.error().message);
      Event(ctx, kube::EventType::kWarning, "LaunchFailed", payload.error().message);
      return kube::ReconcileResult{.requeue_after = std::chrono::seconds(30)};
    }
    req.payload = std::move(*payload);
    if (!req.payload.join_method.empty()) ctx.status["joinMethod"] = req.payload.join_method;

    // The attempt is on record before the create leaves: whatever happens next (lost answer,
    // crash), the next reconcile lists by tag first.
    ctx.status["createAttempt"] =
        bj::object{{"provider", offer.provider},
                   {"offerID", offer.id},
                   {"sentAt", kube::FormatTime(std::chrono::system_clock::now())}};
    HS_RETURN_IF_ERROR(WriteStatus(ctx));

    auto created = state->client->Create(req);
    std::string what = offer.gpu_type + " on " + offer.provider + " " + offer.region + " at $" +
                       FormatUsd(choice->price) + "/h" + (choice->spot ? " (spot)" : "");
    if (created.ok()) {
      Adopt(ctx, *created, offer.id, choice->spot, choice->price);
      if (created->gpu_type.empty()) ctx.status["gpuType"] = offer.gpu_type;
      if (created->gpu_count == 0) ctx.status["gpuCount"] = offer.gpu_count;
      if (created->region.empty()) ctx.status["region"] = offer.region;
      ctx.status["price"] = FormatUsd(choice->price);
      SetCondition(ctx, "Launched", true, "Launched", "launched " + what);
      Event(ctx, kube::EventType::kNormal, "Launched", "launched " + what);
      return kube::ReconcileResult{.requeue_after = std::chrono::seconds(2)};
    }
    const Error& err = created.error();
    switch (KindOf(err)) {
      case ErrorKind::kAmbiguous:
        SetCondition(ctx, "Launched", false, "AmbiguousLaunch",
                     "the create of " + what + " got no answer; listing by tag before any retry");
        Event(ctx, kube::EventType::kWarning, "AmbiguousLaunch",
              "no answer to the create of " + what + ": " + err.message);
        return kube::ReconcileResult{.requeue_after = std::chrono::seconds(1)};
      case ErrorKind::kCapacity:
        ctx.status.erase("createAttempt");
        o_.unavailable->Mark(offer);
        SetCondition(ctx, "Launched", false, "OfferUnavailable",
                     "offer gone (" + what + "): " + err.message);
        Event(ctx, kube::EventType::kWarning, "OfferUnavailable",
              "offer gone, trying next: " + what + ": " + err.message);
        return kube::ReconcileResult{.requeue_after = std::chrono::milliseconds(10)};
      case ErrorKind::kRateLimited:
        ctx.status.erase("createAttempt");
        return kube::ReconcileResult{.requeue_after =
                                         err.retry_after.value_or(std::chrono::seconds(5))};
      default:
        ctx.status.erase("createAttempt");
        SetCondition(ctx, "Launched", false,
                     std::string(err.reason.empty() ? "LaunchFailed" : err.reason),
                     "launching " + what + ": " + err.message);
        Event(ctx, kube::EventType::kWarning, "LaunchFailed",
              "launching " + what + ": " + err.message);
        return err;
    }
  }

  static Result<BootPayload> DefaultPayload(const BootContext& boot) {
    BootPayload p;
    if (boot.node_class == nullptr || boot.offer == nullptr) return p;
    const bj::array* providers =
        ObjectField(*boot.node_class, "spec")
            ? ArrayField(*ObjectField(*boot.node_class, "spec"), "providers")
            : nullptr;
    if (providers == nullptr) return p;
    for (const bj::value& v : *providers) {
      const bj::object* entry = v.if_object();
      if (entry == nullptr || StringField(*entry, "name") != boot.offer->provider) continue;
      if (const bj::array* keys = ArrayField(*entry, "sshKeyNames")) {
        for (const bj::value& k : *keys) {
          if (k.is_string()) p.ssh_key_names.emplace_back(k.get_string());
        }
      }
    }
    return p;
  }

  // Once the Node registered: the device the machine joined the tailnet as, on the claim.
  Result<kube::ReconcileResult> RecordTailnetDevice(Ctx& ctx) {
    if (!o_.tailnet || StringField(ctx.status, "tailnetKeyID").empty() ||
        !StringField(ctx.status, "tailnetDeviceID").empty()) {
      return kube::ReconcileResult{};
    }
    ObjectPtr node_class = inf_.classes->store().Get(internal::ClassNameOf(ctx.claim));
    if (!node_class) return kube::ReconcileResult{.requeue_after = std::chrono::seconds(5)};
    HS_ASSIGN_OR_RETURN(std::optional<Device> device,
                        o_.tailnet->FindDevice(*node_class, ctx.name));
    // The machine brings up Tailscale before its kubelet, so the device is normally there by
    // now; a lagging list is asked again.
    if (!device) return kube::ReconcileResult{.requeue_after = std::chrono::seconds(2)};
    ctx.status["tailnetDeviceID"] = device->id;
    if (std::string ip = TailnetIPv4(*device); !ip.empty()) ctx.status["tailnetIP"] = ip;
    return kube::ReconcileResult{};
  }

  // ---- registration ----
  Result<kube::ReconcileResult> Register(Ctx& ctx) {
    std::string provider_id(StringField(ctx.status, "providerID"));
    auto nodes = inf_.nodes->store().ByIndex(kNodesByProviderId, provider_id);
    if (!nodes.ok()) return nodes.error();
    if (nodes->empty()) {
      auto launched = Age(StringField(ctx.status, "launchedAt"));
      if (launched && *launched > o_.registration_timeout) {
        std::string why =
            "no Node with providerID " + provider_id + " within " +
            std::to_string(
                std::chrono::duration_cast<std::chrono::seconds>(o_.registration_timeout).count()) +
            " s of the launch";
        SetCondition(ctx, "Registered", false, "RegistrationTimeout", why);
        Event(ctx, kube::EventType::kWarning, "RegistrationTimeout",
              why + "; deleting the claim and its machine");
        ctx.delete_claim = true;
        return kube::ReconcileResult{};
      }
      if (!kube::FindCondition(kube::Object{{"status", ctx.status}}, "Registered")) {
        SetCondition(ctx, "Registered", false, "AwaitingNode",
                     "waiting for a Node with providerID " + provider_id);
      }
      return kube::ReconcileResult{.requeue_after = std::chrono::seconds(5)};
    }
    auto full = FullNode(*o_.client, *nodes->front());
    if (!full.ok()) return full.error();
    const kube::Object& node = *full;
    std::string node_name = Meta(node, "name");
    HS_RETURN_IF_ERROR(SyncNode(ctx, node));
    ctx.status["nodeName"] = node_name;
    ctx.status["registeredAt"] = kube::FormatTime(std::chrono::system_clock::now());
    SetCondition(ctx, "Registered", true, "Registered", "Node " + node_name + " registered");
    Event(ctx, kube::EventType::kNormal, "Registered", "Node " + node_name + " registered");
    // The machine holds its node certificate now: its bootstrap token has done its job (a failed
    // delete is retried when the claim goes; the token expires meanwhile).
    if (o_.release_credentials) {
      if (Status rs = o_.release_credentials(ctx.claim); !rs.ok()) {
        log::Warn("gpunodeclaim: releasing join credentials failed",
                  {{"claim", ctx.name}, {"error", rs.error().message}});
      }
    }
    return kube::ReconcileResult{};
  }

  // Labels and taints a Node of this claim carries: the pool template's, the offer's tgp.io
  // labels and their well-known twins; the registration taint removed.
  Status SyncNode(const Ctx& ctx, const kube::Object& node) {
    std::map<std::string, std::string> labels;
    std::vector<kube::Taint> taints;
    auto pool = inf_.pools->store().Get(internal::PoolKeyOf(ctx.claim));
    if (pool) {
      if (const bj::object* l = ObjectAt(*pool, "spec.template.metadata.labels")) {
        for (const auto& [k, v] : *l) {
          if (v.is_string()) labels[std::string(k)] = std::string(v.get_string());
        }
      }
      if (const bj::object* spec = ObjectAt(*pool, "spec.template.spec")) {
        taints = kube::TaintsFrom(spec->if_contains("taints"));
      }
    }
    const bj::object* ref = ObjectAt(ctx.claim, "spec.poolRef");
    labels[kLabelNodePool] = ref ? std::string(StringField(*ref, "name")) : "";
    labels[kLabelProvisioned] = "true";
    labels[kLabelProvider] = std::string(StringField(ctx.status, "provider"));
    labels[kLabelGpuType] = LabelValue(StringField(ctx.status, "gpuType"));
    labels[kLabelRegion] = LabelValue(StringField(ctx.status, "region"));
    labels[kLabelSpot] =
        jsonfield::BoolField(ctx.status, "spot").value_or(false) ? "true" : "false";
    labels["karpenter.sh/capacity-type"] =
        jsonfield::BoolField(ctx.status, "spot").value_or(false) ? "spot" : "on-demand";
    labels["node.kubernetes.io/instance-type"] = LabelValue(StringField(ctx.status, "offerID"));
    labels["topology.kubernetes.io/region"] = labels[kLabelRegion];
    labels["nvidia.com/gpu.product"] = labels[kLabelGpuType];
    if (auto n = jsonfield::IntField(ctx.status, "gpuCount")) {
      labels["nvidia.com/gpu.count"] = std::to_string(*n);
    }

    bj::object patch_meta;
    bj::object label_patch;
    const bj::object* have = ObjectAt(node, "metadata.labels");
    for (const auto& [k, v] : labels) {
      if (have == nullptr || StringField(*have, k) != v) label_patch[k] = v;
    }
    // Taints: keep the Node's own (the kubelet's, startup taints), add the pool's, drop the
    // registration taint.
    bj::array node_taints;
    bool taints_changed = false;
    std::set<std::string> present;
    if (const bj::object* spec = ObjectField(node, "spec")) {
      if (const bj::array* t = ArrayField(*spec, "taints")) {
        for (const bj::value& v : *t) {
          const bj::object* taint = v.if_object();
          if (taint == nullptr) continue;
          if (StringField(*taint, "key") == kTaintUnregistered) {
            taints_changed = true;
            continue;
          }
          present.insert(std::string(StringField(*taint, "key")) + ":" +
                         std::string(StringField(*taint, "effect")));
          node_taints.push_back(v);
        }
      }
    }
    for (const kube::Taint& t : taints) {
      if (present.count(t.key + ":" + t.effect)) continue;
      node_taints.push_back(bj::object{{"key", t.key}, {"value", t.value}, {"effect", t.effect}});
      taints_changed = true;
    }
    // Our finalizer on the Node: deleting the Node by hand (kubectl delete node) then returns the
    // machine gracefully — the claim is deleted, drained and its machine returned before the Node
    // goes (Karpenter's karpenter.sh/termination on Nodes).
    const bool finalizer_missing = !kube::HasFinalizer(node, kClaimFinalizer);
    if (label_patch.empty() && !taints_changed && !finalizer_missing) return OkStatus();
    // A PUT against the version read: the taint list is replaced whole, so a concurrent change
    // (the kubelet, the node lifecycle controller) must make this fail and retry, not be lost.
    kube::Object updated = node;
    if (finalizer_missing) kube::AddFinalizer(updated, kClaimFinalizer);
    bj::object& meta = updated["metadata"].as_object();
    if (!meta.contains("labels") || !meta["labels"].is_object()) meta["labels"] = bj::object{};
    for (const auto& [k, v] : label_patch) meta["labels"].as_object()[k] = v;
    if (taints_changed) {
      if (!updated.contains("spec") || !updated["spec"].is_object()) updated["spec"] = bj::object{};
      updated["spec"].as_object()["taints"] = std::move(node_taints);
    }
    auto written = o_.client->Update(kube::resources::Nodes(), "", updated);
    if (!written.ok()) return written.error();
    return OkStatus();
  }

  // ---- initialization ----
  Result<kube::ReconcileResult> Initialize(Ctx& ctx) {
    std::string provider_id(StringField(ctx.status, "providerID"));
    auto nodes = inf_.nodes->store().ByIndex(kNodesByProviderId, provider_id);
    if (!nodes.ok()) return nodes.error();
    if (nodes->empty()) return kube::ReconcileResult{.requeue_after = std::chrono::seconds(5)};
    auto full = FullNode(*o_.client, *nodes->front());
    if (!full.ok()) return full.error();
    const kube::Object& node = *full;
    // The sync may not be in the cache yet; the Node's update enqueues the claim again.
    bool ready = false;
    if (const bj::object* st = ObjectField(node, "status")) {
      if (const bj::array* conds = ArrayField(*st, "conditions")) {
        for (const bj::value& c : *conds) {
          if (c.is_object() && StringField(c.get_object(), "type") == "Ready") {
            ready = StringField(c.get_object(), "status") == "True";
          }
        }
      }
    }
    std::vector<std::string> waiting;
    if (!ready) waiting.push_back("the Node is not Ready");
    std::set<std::string> startup;
    if (auto pool = inf_.pools->store().Get(internal::PoolKeyOf(ctx.claim))) {
      if (const bj::object* spec = ObjectAt(*pool, "spec.template.spec")) {
        for (const kube::Taint& t : kube::TaintsFrom(spec->if_contains("startupTaints"))) {
          startup.insert(t.key);
        }
      }
    }
    startup.insert(kTaintUnregistered);
    // Taints the control plane keeps on a Node that is not ready for pods yet (Karpenter waits for
    // the same ones).
    for (const char* t : {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
                          "node.cloudprovider.kubernetes.io/uninitialized"}) {
      startup.insert(t);
    }
    if (const bj::object* spec = ObjectField(node, "spec")) {
      if (const bj::array* t = ArrayField(*spec, "taints")) {
        for (const bj::value& v : *t) {
          if (!v.is_object()) continue;
          std::string key(StringField(v.get_object(), "key"));
          if (startup.count(key)) waiting.push_back("taint " + key + " is still on the Node");
        }
      }
    }
    const bj::object* alloc = ObjectAt(node, "status.allocatable");
    std::string gpus = alloc ? std::string(StringField(*alloc, kResourceGpu)) : std::string();
    if (gpus.empty() || gpus == "0") waiting.push_back("nvidia.com/gpu is not allocatable");
    if (!waiting.empty()) {
      std::string msg;
      for (const auto& w : waiting) msg += (msg.empty() ? "" : "; ") + w;
      SetCondition(ctx, "Initialized", false, "NotInitialized", msg);
      SetCondition(ctx, "Ready", false, "NotInitialized", msg);
      return kube::ReconcileResult{.requeue_after = std::chrono::seconds(5)};
    }
    SetCondition(ctx, "Initialized", true, "Initialized",
                 "Node Ready with " + gpus + " nvidia.com/gpu allocatable");
    SetCondition(ctx, "Ready", true, "Ready", "Node " + Meta(node, "name") + " is ready for pods");
    Event(ctx, kube::EventType::kNormal, "Initialized",
          "Node " + Meta(node, "name") + " Ready with " + gpus + " GPUs");
    return kube::ReconcileResult{};
  }

  // ---- termination ----
  Result<kube::ReconcileResult> Terminate(Ctx& ctx) {
    if (!kube::HasFinalizer(ctx.claim, kClaimFinalizer)) return kube::ReconcileResult{};
    std::string instance(StringField(ctx.status, "instanceID"));
    std::string provider(StringField(ctx.status, "provider"));
    if (instance.empty()) {
      if (const bj::object* attempt = ObjectField(ctx.status, "createAttempt")) {
        // A create may have succeeded without our knowing: find it by tag, or prove it absent.
        provider = std::string(StringField(*attempt, "provider"));
        auto state = ProviderFor(ctx, provider);
        if (!state || !state->client) {
          return Error::Make(Error::Code::kUnavailable,
                             "cannot return the machine: provider " + provider + " not ready");
        }
        auto listed = state->client->List({{kTagClaimUid, Meta(ctx.claim, "uid")}});
        if (!listed.ok()) return listed.error();
        for (const Instance& i : *listed) {
          if (i.state != InstanceState::kTerminated) instance = i.id;
        }
        auto sent = Age(StringField(*attempt, "sentAt"));
        if (instance.empty() && sent && *sent < o_.ambiguous_settle) {
          return kube::ReconcileResult{.requeue_after = o_.ambiguous_settle - *sent};
        }
      }
    }
    if (!instance.empty()) {
      auto state = ProviderFor(ctx, provider);
      if (!state || !state->client) {
        return Error::Make(Error::Code::kUnavailable,
                           "cannot return the machine: provider " + provider + " not ready");
      }
      // A delete the provider accepted is not sent again while the machine is stopping: only
      // its state is polled (a provider takes minutes to terminate, and every re-sent delete
      // is a call against its rate limit).
      std::string key = provider + "/" + instance;
      bool sent_before = false;
      {
        std::lock_guard lock(mu_);
        sent_before = delete_sent_.count(key) != 0;
      }
      if (!sent_before) {
        auto draining = Drain(ctx, *state->client, instance);
        if (!draining.ok()) return draining.error();
        if (*draining) return **draining;
        Status d = state->client->Delete(instance);
        if (!d.ok()) return d.error();
        std::lock_guard lock(mu_);
        delete_sent_.insert(key);
      }
      auto got = state->client->Get(instance);
      bool gone = (!got.ok() && KindOf(got.error()) == ErrorKind::kNotFound) ||
                  (got.ok() && got->state == InstanceState::kTerminated);
      if (!got.ok() && !gone) return got.error();
      if (!gone) {
        if (sent_before && got->state != InstanceState::kStopping) {
          std::lock_guard lock(mu_);
          delete_sent_.erase(key);  // not stopping after all: the next pass deletes again
        }
        return kube::ReconcileResult{.requeue_after = std::chrono::seconds(1)};
      }
      std::lock_guard lock(mu_);
      delete_sent_.erase(key);
    }
    // The Node by name, and any Node with the machine's providerID: a claim deleted while it
    // registered (the Node synced, the status with nodeName not written yet) has no nodeName,
    // and its Node would stay behind for pods to be scheduled on.
    std::set<std::string> node_names;
    if (std::string node(StringField(ctx.status, "nodeName")); !node.empty()) {
      node_names.insert(node);
    }
    if (std::string id(StringField(ctx.status, "providerID")); !id.empty()) {
      auto nodes = inf_.nodes->store().ByIndex(kNodesByProviderId, id);
      if (nodes.ok()) {
        for (const ObjectPtr& n : *nodes) node_names.insert(Meta(*n, "name"));
      }
    }
    for (const std::string& node : node_names) HS_RETURN_IF_ERROR(ReleaseNode(node));
    {
      std::lock_guard lock(mu_);
      drain_.erase(Meta(ctx.claim, "uid"));
    }
    if (o_.release_credentials) HS_RETURN_IF_ERROR(o_.release_credentials(ctx.claim));
    // The machine is gone: its tailnet device goes too (an ephemeral one would only after the
    // server's inactivity timeout).
    // A claim that never got a key has no device to look for.
    if (o_.tailnet && !StringField(ctx.status, "tailnetKeyID").empty()) {
      if (ObjectPtr cls = inf_.classes->store().Get(internal::ClassNameOf(ctx.claim))) {
        HS_RETURN_IF_ERROR(o_.tailnet->Release(*cls, ctx.claim));
      }
    }
    Event(ctx, kube::EventType::kNormal, "Terminated",
          instance.empty() ? "no machine was launched"
                           : "machine " + instance + " returned to " + provider);
    std::string patch = kube::RemoveFinalizerPatch(ctx.claim, kClaimFinalizer);
    if (!patch.empty()) {
      auto p = o_.client->Patch(GPUNodeClaims(), "", ctx.name, kube::PatchType::kJson, patch);
      if (!p.ok() && p.error().code != Error::Code::kNotFound) return p.error();
    }
    log::Info("gpunodeclaim terminated",
              {{"claim", ctx.name}, {"provider", provider}, {"instance", instance}});
    return kube::ReconcileResult{};
  }

  // ---- drain (drain.h) ----
  // Before the machine is returned: the pods on its Node are evicted and gone. Returns the
  // requeue while the drain goes on, nullopt when the machine may be returned now. No drain when
  // there is nothing to drain gracefully: no Node, a Node that is not Ready (no kubelet to stop
  // the pods), or a machine the provider no longer runs (asked once per claim).
  Result<std::optional<kube::ReconcileResult>> Drain(const Ctx& ctx, Provider& provider,
                                                     const std::string& instance) {
    std::string node_name(StringField(ctx.status, "nodeName"));
    if (node_name.empty()) return std::optional<kube::ReconcileResult>();
    ObjectPtr cached = inf_.nodes->store().Get(node_name);
    if (!cached || !kube::IsConditionTrue(*cached, "Ready"))
      return std::optional<kube::ReconcileResult>();
    const std::string uid = Meta(ctx.claim, "uid");
    bool checked = false;
    {
      std::lock_guard lock(mu_);
      auto it = drain_.find(uid);
      if (it != drain_.end()) {
        if (!it->second.alive) return std::optional<kube::ReconcileResult>();
        checked = true;
      }
    }
    if (!checked) {
      auto got = provider.Get(instance);
      bool gone = (!got.ok() && KindOf(got.error()) == ErrorKind::kNotFound) ||
                  (got.ok() && (got->state == InstanceState::kTerminated ||
                                got->state == InstanceState::kStopping));
      if (!got.ok() && !gone) return got.error();
      std::lock_guard lock(mu_);
      drain_[uid].alive = !gone;
      if (gone) return std::optional<kube::ReconcileResult>();
    }
    auto node = FullNode(*o_.client, *cached);
    if (!node.ok()) {
      if (node.error().code == Error::Code::kNotFound)
        return std::optional<kube::ReconcileResult>();
      return node.error();
    }
    std::vector<ObjectPtr> pods;
    if (auto on_node = inf_.pods->store().ByIndex(kPodsByNode, node_name); on_node.ok())
      pods = *on_node;
    std::vector<const bj::object*> views;
    views.reserve(pods.size());
    for (const auto& p : pods) views.push_back(p.get());
    // The pool's terminationGracePeriod, counted from the claim's deletion (as Karpenter does).
    std::optional<std::chrono::system_clock::time_point> force_after;
    if (auto pool = inf_.pools->store().Get(internal::PoolKeyOf(ctx.claim))) {
      const bj::object* spec = ObjectAt(*pool, "spec.template.spec");
      std::string grace = spec ? std::string(StringField(*spec, "terminationGracePeriod")) : "";
      auto deleted =
          kube::ParseTime(ObjectAt(ctx.claim, "metadata")
                              ? StringField(*ObjectAt(ctx.claim, "metadata"), "deletionTimestamp")
                              : "");
      if (auto g = ParseDisruptionDuration(grace); g.ok() && g->has_value() && deleted)
        force_after = *deleted + **g;
    }
    auto step = DrainStep(*o_.client, *node, views, std::chrono::system_clock::now(), force_after);
    if (!step.ok()) return step.error();
    std::string blocked = step->blocked;
    bool report = false;
    {
      std::lock_guard lock(mu_);
      DrainState& d = drain_[uid];
      report = blocked != d.last_blocked;
      d.last_blocked = blocked;
    }
    if (step->done) {
      log::Info("gpunodeclaim drained", {{"claim", ctx.name}, {"node", node_name}});
      return std::optional<kube::ReconcileResult>();
    }
    if (report && !blocked.empty()) {
      Event(ctx, kube::EventType::kWarning, "DrainBlocked",
            "draining Node " + node_name + ": " + blocked);
    }
    // Pod events wake the claim; the requeue covers a budget that frees up without one.
    return std::optional<kube::ReconcileResult>(
        kube::ReconcileResult{.requeue_after = std::chrono::seconds(1)});
  }

  // The returned machine's Node: our finalizer off, then deleted; the pods still bound to it are
  // deleted at once (the machine is gone, no kubelet will confirm their end), so their
  // controllers replace them without waiting for the pod garbage collector.
  Status ReleaseNode(const std::string& node) {
    auto full = o_.client->Get(kube::resources::Nodes(), "", node);
    if (full.ok()) {
      std::string patch = kube::RemoveFinalizerPatch(*full, kClaimFinalizer);
      if (!patch.empty()) {
        auto p =
            o_.client->Patch(kube::resources::Nodes(), "", node, kube::PatchType::kJson, patch);
        if (!p.ok() && p.error().code != Error::Code::kNotFound) return p.error();
      }
      Status d = o_.client->Delete(kube::resources::Nodes(), "", node);
      if (!d.ok() && d.error().code != Error::Code::kNotFound) return d.error();
    } else if (full.error().code != Error::Code::kNotFound) {
      return full.error();
    }
    auto pods = inf_.pods->store().ByIndex(kPodsByNode, node);
    if (!pods.ok()) return OkStatus();
    for (const ObjectPtr& pod : *pods) {
      kube::DeleteOptions d;
      d.grace_period_seconds = 0;
      d.precondition_uid = Meta(*pod, "uid");
      Status st = o_.client->Delete(kube::resources::Pods(), Meta(*pod, "namespace"),
                                    Meta(*pod, "name"), d);
      if (!st.ok() && st.error().code != Error::Code::kNotFound &&
          st.error().code != Error::Code::kConflict)
        return st.error();
    }
    return OkStatus();
  }

  struct DrainState {
    bool alive = true;         // the provider ran the machine when the drain began
    std::string last_blocked;  // what the last DrainBlocked event said
  };

  ClaimControllerOptions o_;
  Clock& clock_;
  Informers inf_;
  std::mutex mu_;
  std::map<std::string, Clock::TimePoint> orphan_since_;
  std::map<std::string, Clock::TimePoint> gone_since_;  // claim uid -> machine first missing
  int64_t collected_ = 0;
  std::set<std::string> delete_sent_;        // "<provider>/<instance>" whose delete was accepted
  std::map<std::string, DrainState> drain_;  // claim uid -> its drain
};

// Runs the garbage collector every gc_interval while leading.
class GarbageCollector final : public internal::LoopRunnable {
 public:
  GarbageCollector(std::shared_ptr<ClaimReconciler> r, Clock::Duration interval, Clock& clock)
      : r_(std::move(r)), interval_(interval), clock_(clock) {}
  std::string Name() const override { return "gpu-garbage-collector"; }
  void SetLeaderGate(std::function<bool()> gate) override { gate_ = std::move(gate); }
  ~GarbageCollector() override { Stop(std::chrono::milliseconds(0)); }

 private:
  void Loop() override {
    std::unique_lock lock(mu_);
    clock_.Register(&cv_);
    while (!stop_) {
      clock_.WaitUntil(cv_, lock, clock_.Now() + interval_);
      if (stop_) break;
      if (gate_ && !gate_()) continue;
      lock.unlock();
      r_->CollectGarbage();
      // A pass count lets a dashboard (and a test's negative check) tell that collection runs.
      kube::metrics::Registry::Default()
          .GetCounter("hyperslice_gpu_garbage_collection_passes_total",
                      "Finished passes of the GPU garbage collector (instances, Nodes and "
                      "tailnet devices no claim owns).",
                      {})
          .Inc();
      lock.lock();
    }
    clock_.Unregister(&cv_);
  }

  std::shared_ptr<ClaimReconciler> r_;
  Clock::Duration interval_;
  Clock& clock_;
  std::function<bool()> gate_;
};

}  // namespace

Status RegisterClaimController(kube::Manager& mgr, ClaimControllerOptions options) {
  HS_RETURN_IF_ERROR(internal::RequireInformers(mgr));
  if (!options.client || !options.cache || !options.unavailable || options.cluster_id.empty()) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "gpunodeclaim controller: client, cache, unavailable and cluster_id are "
                       "required");
  }
  ClaimReconciler::Informers inf;
  inf.claims = mgr.informers()->For(GPUNodeClaims());
  inf.pools = mgr.informers()->For(GPUNodePools());
  inf.classes = mgr.informers()->For(GPUNodeClasses());
  inf.nodes = mgr.informers()->For(kube::resources::Nodes());
  inf.pods = mgr.informers()->For(kube::resources::Pods());
  HS_RETURN_IF_ERROR(ClaimReconciler::AddIndexes(inf));
  kube::ControllerOptions co;
  co.name = "gpunodeclaim";
  co.max_concurrent_reconciles = std::max(1, options.workers);
  co.clock = options.clock;
  Clock& clock = options.ClockOrReal();
  Clock::Duration gc_interval = options.gc_interval;
  auto reconciler = std::make_shared<ClaimReconciler>(std::move(options), inf);
  auto controller = std::make_shared<kube::Controller>(
      std::move(co), [reconciler](const std::string& key) { return reconciler->Reconcile(key); });
  controller->Watch(*inf.claims);
  // A Node's changes (registered, Ready, taints) move its claim on.
  std::weak_ptr<kube::Controller> weak = controller;
  auto claims = inf.claims;
  auto enqueue = [weak, claims](const ObjectPtr& node) {
    auto c = weak.lock();
    if (!c || !node) return;
    const bj::object* spec = ObjectField(*node, "spec");
    std::string id = spec ? std::string(StringField(*spec, "providerID")) : std::string();
    if (id.empty()) return;
    auto owners = claims->store().ByIndex(kClaimsByProviderId, id);
    if (!owners.ok()) return;
    for (const ObjectPtr& claim : *owners) c->Enqueue(Meta(*claim, "name"));
  };
  inf.nodes->AddEventHandler(kube::OnEachObject(enqueue));
  // A pod leaving a Node being drained moves the drain on: the claims being deleted whose Node
  // it was are woken (the others do not care about pods).
  auto nodes = inf.nodes;
  auto by_pod = [weak, claims, nodes](const ObjectPtr& pod) {
    auto c = weak.lock();
    if (!c || !pod) return;
    const bj::object* spec = ObjectField(*pod, "spec");
    std::string node = spec ? std::string(StringField(*spec, "nodeName")) : std::string();
    if (node.empty()) return;
    ObjectPtr n = nodes->store().Get(node);
    const bj::object* nspec = n ? ObjectField(*n, "spec") : nullptr;
    std::string id = nspec ? std::string(StringField(*nspec, "providerID")) : std::string();
    if (id.empty()) return;
    auto owners = claims->store().ByIndex(kClaimsByProviderId, id);
    if (!owners.ok()) return;
    for (const ObjectPtr& claim : *owners)
      if (kube::IsDeleting(*claim)) c->Enqueue(Meta(*claim, "name"));
  };
  inf.pods->AddEventHandler(kube::OnEachObject(by_pod));
  mgr.Add(controller);
  if (gc_interval > Clock::Duration::zero()) {
    mgr.Add(std::make_shared<GarbageCollector>(reconciler, gc_interval, clock));
  }
  return OkStatus();
}

}  // namespace hyperslice::gpu
