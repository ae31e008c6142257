#include "src/runners/controlnode/market_runner.h"

#include <algorithm>
#include <mutex>
#include <set>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/gpu/api.h"
#include "src/gpu/class_providers.h"
#include "src/gpu/credentials.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/kube/store.h"

namespace hyperslice::runners::controlnode {
namespace {

namespace json = boost::json;
using jsonfield::ObjectField;
using jsonfield::StringField;
using jsonfield::StringValue;
using Ms = std::chrono::milliseconds;
using Code = Error::Code;

const MarketClass::Provider* FindProvider(const MarketClass& cls, std::string_view name) {
  for (const auto& p : cls.providers) {
    if (p.client && p.client->name() == name) return &p;
  }
  return nullptr;
}

// The machine fields an observation (or a launch) writes.
void Observe(const gpu::Instance& inst, json::object& machine) {
  machine["provider"] = inst.provider;
  machine["id"] = inst.id;
  if (!inst.name.empty()) machine["name"] = inst.name;
  machine["state"] = gpu::StateName(inst.state);
}

bool Gone(const gpu::Instance& inst) {
  return inst.state == gpu::InstanceState::kTerminated ||
         inst.state == gpu::InstanceState::kStopping;
}

}  // namespace

std::string MarketMachineName(std::string_view runner) { return GceInstanceName(runner); }

bool HoldsMachine(const json::object* machine) {
  if (machine == nullptr) return false;
  if (ObjectField(*machine, "launchAttempt") != nullptr) return true;
  return !StringField(*machine, "id").empty() &&
         StringField(*machine, "state") != gpu::StateName(gpu::InstanceState::kTerminated);
}

MarketClassSource GpuNodeClassSource(std::shared_ptr<kube::Client> client,
                                     std::string credentials_namespace,
                                     std::map<std::string, std::string> default_endpoints,
                                     gpu::ProviderFactory factory) {
  if (!factory) factory = [](const gpu::ProviderConfig& c) { return gpu::NewProvider(c); };
  struct Cache {
    std::mutex mu;
    // (class, provider) -> (what it was built from, the client)
    std::map<std::pair<std::string, std::string>,
             std::pair<std::string, std::shared_ptr<gpu::Provider>>>
        clients;
  };
  auto cache = std::make_shared<Cache>();
  return [client = std::move(client), ns = std::move(credentials_namespace),
          endpoints = std::move(default_endpoints), factory = std::move(factory),
          cache](const std::string& name, const kube::Object* read) -> Result<MarketClass> {
    kube::Object got;
    if (read == nullptr) {
      HS_ASSIGN_OR_RETURN(got, client->Get(gpu::GPUNodeClasses(), "", name));
      read = &got;
    }
    const kube::Object& cls = *read;
    MarketClass out;
    gpu::ApplyInstanceRequirements(cls, out.base);
    const json::object* spec = ObjectField(cls, "spec");
    if (spec == nullptr) return out;
    for (const auto& p : gpu::ReadClassProviders(*spec)) {
      if (!p.enabled) continue;
      std::lock_guard lock(cache->mu);
      auto& [built_from, provider] = cache->clients[{name, p.name}];
      if (!provider || built_from != p.Fingerprint()) {
        gpu::ProviderConfig config;
        config.name = p.name;
        config.endpoint = p.endpoint;
        if (config.endpoint.empty()) {
          if (auto it = endpoints.find(p.name); it != endpoints.end()) config.endpoint = it->second;
        }
        config.credentials = gpu::SecretCredential(client, p.credentials, ns);
        auto made = factory(config);
        if (!made.ok()) {
          log::Warn("runners: cannot build a marketplace provider",
                    {{"class", name}, {"provider", p.name}, {"error", made.error().message}});
          continue;
        }
        provider = std::shared_ptr<gpu::Provider>(std::move(*made));
        built_from = p.Fingerprint();
      }
      out.providers.push_back({provider, p.priority, p.regions});
    }
    return out;
  };
}

MarketRunnerProvisioner::MarketRunnerProvisioner(MarketProvisionerOptions options, Store store)
    : options_(std::move(options)),
      recorder_(std::move(store), "machine",
                {"id", "name", "state", "launchAttempt", "lastError", "offer", "gpuType", "region",
                 "price", "spot", "provider"},
                options_.retry_initial, options_.retry_max, options_.clock) {}

ProvisionOutcome MarketRunnerProvisioner::Failed(const std::string& runner, json::object& machine,
                                                 const std::string& reason,
                                                 const std::string& message) {
  ProvisionOutcome failed = recorder_.NoteFailure(machine, reason, message);
  if (Status st = recorder_.Record(runner, machine); !st.ok()) {
    log::Warn("runners: cannot record a failed launch", {{"runner", runner}});
  }
  return failed;
}

Result<ProvisionOutcome> MarketRunnerProvisioner::Reconcile(const kube::Object& runner,
                                                            const RunnerSpec& spec,
                                                            json::object& status,
                                                            const kube::Object* read_class) {
  const std::string name = spec.name;
  const std::string uid(kube::MetaString(runner, "uid"));
  ProvisionRecord record = recorder_.Open(name, status);
  json::object& machine = record.holder();
  auto cls = options_.classes(spec.market.gpu_node_class, read_class);
  if (!cls.ok()) {
    return record.Finish(ProvisionOutcome{
        .reason = cls.error().code == Code::kNotFound ? "GPUNodeClassNotFound"
                                                      : "GPUNodeClassUnavailable",
        .message = "GPUNodeClass " + spec.market.gpu_node_class + ": " + cls.error().message,
        .requeue_after = Ms(5000)});
  }

  // A machine we know: observe it.
  if (std::string id = StringValue(machine, "id"); !id.empty()) {
    const auto* p = FindProvider(*cls, StringField(machine, "provider"));
    if (p == nullptr) {
      return record.Finish(ProvisionOutcome{
          .reason = "ProviderUnavailable",
          .message = "provider " + StringValue(machine, "provider") + " of machine " + id +
                     " is not usable in class " + spec.market.gpu_node_class,
          .requeue_after = Ms(5000)});
    }
    auto got = p->client->Get(id);
    if (got.ok() && !Gone(*got)) {
      Observe(*got, machine);
      if (got->state == gpu::InstanceState::kRunning) {
        return record.Finish(
            ProvisionOutcome{.ready = true,
                             .reason = "MachineRunning",
                             .message = "machine " + id + " runs on " + p->client->name()});
      }
      return record.Finish(ProvisionOutcome{
          .reason = "MachinePending",
          .message = "machine " + id + " on " + p->client->name() + " is " + got->provider_state,
          .requeue_after = Ms(1000)});
    }
    if (!got.ok() && gpu::KindOf(got.error()) != gpu::ErrorKind::kNotFound) {
      return record.Finish(ProvisionOutcome{
          .reason = got.error().reason, .message = got.error().message, .requeue_after = Ms(5000)});
    }
    // Gone under us (reclaimed, terminated at the provider): forget it; a new one needs a token.
    log::Warn("runners: the Runner's machine is gone at its provider",
              {{"runner", name}, {"provider", p->client->name()}, {"machine", id}});
    for (const char* k : {"id", "name", "state"}) machine.erase(k);
  }

  // A create that may have reached the provider: find it by the Runner's uid before another.
  if (const json::object* attempt = ObjectField(machine, "launchAttempt")) {
    const auto* p = FindProvider(*cls, StringField(*attempt, "provider"));
    if (p != nullptr) {
      auto listed = p->client->List({{kLabelRunnerUid, uid}});
      if (!listed.ok()) {
        return record.Finish(ProvisionOutcome{.reason = listed.error().reason,
                                              .message = listed.error().message,
                                              .requeue_after = Ms(2000)});
      }
      for (const auto& inst : *listed) {
        if (Gone(inst)) continue;
        const json::object bought = *attempt;  // `attempt` points into `machine`, which changes
        Observe(inst, machine);
        for (const char* k : {"offer", "gpuType", "region", "price", "spot"}) {
          if (const auto* v = bought.if_contains(k)) machine[k] = *v;
        }
        machine.erase("launchAttempt");
        HS_RETURN_IF_ERROR(recorder_.Record(name, machine));
        return record.Finish(
            ProvisionOutcome{.reason = "MachinePending",
                             .message = "found machine " + inst.id + " of an earlier launch",
                             .requeue_after = Ms(200)});
      }
      auto sent = kube::ParseTime(StringField(*attempt, "sentAt"));
      auto now = recorder_.Now();
      if (sent && now < *sent + options_.ambiguous_settle) {
        return record.Finish(ProvisionOutcome{
            .reason = "MachinePending",
            .message = "waiting for an earlier launch to show at the provider",
            .requeue_after =
                std::chrono::duration_cast<Ms>(*sent + options_.ambiguous_settle - now) + Ms(1)});
      }
    }
    machine.erase("launchAttempt");
  }

  // A recent failure: wait out its backoff, whatever woke this reconcile.
  if (auto waiting = recorder_.BackingOff(machine)) return record.Finish(*waiting);
  HS_ASSIGN_OR_RETURN(auto launched, Launch(runner, spec, *cls, machine));
  return record.Finish(launched);
}

Result<ProvisionOutcome> MarketRunnerProvisioner::Launch(const kube::Object& runner,
                                                         const RunnerSpec& spec,
                                                         const MarketClass& cls,
                                                         json::object& machine) {
  const std::string name = spec.name;
  const std::string uid(kube::MetaString(runner, "uid"));
  const auto& m = spec.market;
  // Only container offers: the machine runs the agent's container, never a kubelet.
  std::vector<gpu::Offer> offers;
  std::vector<std::string> errors;
  gpu::OfferRequirements req = cls.base;
  for (const auto& p : cls.providers) {
    auto listed = p.client->ListOffers();
    if (!listed.ok()) {
      errors.push_back(std::string(p.client->name()) + ": " + listed.error().message);
      continue;
    }
    for (auto& o : *listed) {
      if (o.boot != gpu::BootKind::kContainer) continue;
      if (!p.regions.empty() &&
          std::find(p.regions.begin(), p.regions.end(), o.provider_region) == p.regions.end() &&
          std::find(p.regions.begin(), p.regions.end(), o.region) == p.regions.end()) {
        continue;
      }
      offers.push_back(std::move(o));
    }
    req.providers.insert(p.client->name());
    req.provider_priority[p.client->name()] = p.priority;
  }
  if (!m.gpu_type.empty()) req.gpu_types = {m.gpu_type};
  req.min_gpu_count = std::max(req.min_gpu_count, m.gpu_count);
  if (!m.regions.empty()) req.regions = {m.regions.begin(), m.regions.end()};
  req.spot_allowed = req.spot_allowed || m.spot;
  if (!m.max_hourly_price.empty()) {
    auto price = gpu::ParseUsd(m.max_hourly_price);
    if (!price.ok()) {
      return ProvisionOutcome{
          .reason = "InvalidSpec",
          .message = "spec.marketplace.maxHourlyPrice: " + price.error().message};
    }
    req.max_price = *price;
  }
  if (req.providers.empty()) {
    return Failed(name, machine, "NoProvider",
                  "GPUNodeClass " + m.gpu_node_class + " has no enabled provider");
  }
  gpu::OfferCatalog catalog(std::move(offers));
  auto choice = catalog.Select(req);
  if (!choice) {
    std::string why = catalog.size() == 0 ? "no container offer from the class's providers"
                                          : catalog.Explain(req);
    for (const auto& e : errors) why += "; " + e;
    return Failed(name, machine, errors.empty() ? "NoOfferFits" : "ProviderError", why);
  }
  const gpu::Offer& offer = *choice->offer;
  const auto* provider = FindProvider(cls, offer.provider);
  HS_ASSIGN_OR_RETURN(auto token, recorder_.JoinToken(name));
  if (!token) return recorder_.NoJoinToken();
  // Recorded before the create: a restart (or a lost answer) lists by tag instead of renting twice.
  // It also carries what was bought, so that a machine adopted from the listing (after a lost
  // answer, or by a reconcile that read the Runner before the create's record) keeps it.
  machine["launchAttempt"] = json::object{{"provider", offer.provider},
                                          {"offer", offer.id},
                                          {"gpuType", offer.gpu_type},
                                          {"region", offer.region},
                                          {"price", gpu::FormatUsd(choice->price)},
                                          {"spot", choice->spot},
                                          {"sentAt", kube::FormatMicroTime(recorder_.Now())}};
  HS_RETURN_IF_ERROR(recorder_.Record(name, machine));

  gpu::LaunchRequest lr;
  lr.offer = &offer;
  lr.name = MarketMachineName(name);
  lr.claim_uid = uid;
  lr.tags = {
      {kLabelRunner, GceLabelValue(name)}, {kLabelRunnerUid, uid}, {kLabelManagedBy, "hyperslice"}};
  lr.spot = choice->spot;
  lr.payload.image = options_.agent_image;
  lr.payload.args = {"runner-agent", "--link-from-env", "--listen",
                     "0.0.0.0:" + std::to_string(options_.agent_port)};
  lr.payload.tcp_ports = {options_.agent_port};
  lr.payload.env = {{kEnvRunnerName, name},
                    {kEnvLinkEndpoint, options_.link_endpoint},
                    {kEnvRunnersCa, options_.ca_bundle_pem},
                    {kEnvJoinToken, std::move(*token)}};
  lr.payload.join_method = "LinkedRunner";
  auto created = provider->client->Create(lr);
  auto& secret = lr.payload.env[kEnvJoinToken];
  secret.assign(secret.size(), '\0');
  if (!created.ok()) {
    if (gpu::KindOf(created.error()) == gpu::ErrorKind::kAmbiguous) {
      // Maybe rented: the next reconcile lists by tag (launchAttempt stays).
      return ProvisionOutcome{.reason = "MachinePending",
                              .message = "no answer to the create; looking for the machine",
                              .requeue_after = Ms(1000)};
    }
    machine.erase("launchAttempt");
    return Failed(name, machine,
                  created.error().reason.empty() ? "LaunchFailed" : created.error().reason,
                  offer.provider + ": " + created.error().message);
  }
  log::Info("runners: rented a machine", {{"runner", name},
                                          {"provider", offer.provider},
                                          {"machine", created->id},
                                          {"offer", offer.id},
                                          {"price", gpu::FormatUsd(choice->price)}});
  Observe(*created, machine);
  machine["offer"] = offer.id;
  machine["gpuType"] = offer.gpu_type;
  machine["region"] = offer.region;
  machine["price"] = gpu::FormatUsd(choice->price);
  machine["spot"] = choice->spot;
  machine.erase("launchAttempt");
  machine.erase("lastError");
  HS_RETURN_IF_ERROR(recorder_.Record(name, machine));
  return ProvisionOutcome{.reason = "MachinePending",
                          .message = "rented " + offer.gpu_type + " on " + offer.provider + " " +
                                     offer.region + " at $" + gpu::FormatUsd(choice->price) + "/h",
                          .requeue_after = Ms(500)};
}

Result<bool> MarketRunnerProvisioner::Finalize(const kube::Object& runner, json::object& status) {
  const std::string name(kube::MetaString(runner, "name"));
  const std::string uid(kube::MetaString(runner, "uid"));
  ProvisionRecord record = recorder_.Open(name, status);
  json::object& machine = record.holder();
  std::string provider_name = StringValue(machine, "provider");
  if (provider_name.empty()) {
    if (const json::object* a = ObjectField(machine, "launchAttempt")) {
      provider_name = StringValue(*a, "provider");
    }
  }
  if (provider_name.empty()) return true;  // never rented anything
  auto spec = ParseRunner(runner);
  if (!spec.ok()) return spec.error();
  HS_ASSIGN_OR_RETURN(auto cls, options_.classes(spec->market.gpu_node_class, nullptr));
  const auto* p = FindProvider(cls, provider_name);
  if (p == nullptr) {
    return Error::Make(Code::kUnavailable,
                       "provider " + provider_name + " is not usable in GPUNodeClass " +
                           spec->market.gpu_node_class + "; cannot return the Runner's machine");
  }
  // Every machine of this Runner: the recorded one and any a lost create left.
  HS_ASSIGN_OR_RETURN(auto listed, p->client->List({{kLabelRunnerUid, uid}}));
  std::set<std::string> ids;
  for (const auto& i : listed) {
    if (i.state != gpu::InstanceState::kTerminated) ids.insert(i.id);
  }
  if (std::string id = StringValue(machine, "id"); !id.empty()) {
    auto got = p->client->Get(id);
    if (got.ok() && got->state != gpu::InstanceState::kTerminated) ids.insert(id);
    if (!got.ok() && gpu::KindOf(got.error()) != gpu::ErrorKind::kNotFound) return got.error();
  }
  for (const auto& id : ids) {
    HS_RETURN_IF_ERROR(p->client->Delete(id));
    log::Info("runners: returning the Runner's machine",
              {{"runner", name}, {"provider", provider_name}, {"machine", id}});
  }
  if (!ids.empty()) {
    machine["state"] = gpu::StateName(gpu::InstanceState::kStopping);
    record.Keep();
    return false;  // the next reconcile sees them terminated
  }
  return true;
}

}  // namespace hyperslice::runners::controlnode
