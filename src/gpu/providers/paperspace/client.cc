// The Paperspace client: GPU machines over Paperspace's v1 REST API (https://api.paperspace.com/v1,
// `Authorization: Bearer <key>`), see README.md in this folder for the wire calls and sources.
//
// - Offers come from the price table (price_table.h): Paperspace has no price API. One offer per
//   machine type and region; `available` is -1 (unknown), or 0 for kCapacityWindow after a launch
//   of that type in that region was refused for capacity (learned, per client, on its Clock).
// - Create: POST /startup-scripts (the boot script, its name carrying the tags), then
//   POST /machines with its startupScriptId. Machines have no tags in v1; List() reads the tags
//   back from the scripts' names and `assignedMachineIds`.
// - Delete: DELETE /machines/{id} (404 is success), then the machine's scripts, best effort.
#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include <boost/json.hpp>

#include "src/base/log.h"
#include "src/gpu/internal/api_caller.h"
#include "src/gpu/normalize.h"
#include "src/gpu/providers/clients.h"
#include "src/gpu/providers/paperspace/decode.h"
#include "src/gpu/providers/paperspace/price_table.h"

namespace hyperslice::gpu::providers {

namespace {

namespace json = boost::json;
using paperspace::ClassifyError;
using paperspace::MachineTypePrice;
using paperspace::PriceTable;

// Paperspace publishes no numeric request limit (see README.md "Limits"): stay well below what a
// console session does.
constexpr double kDefaultRps = 2;
constexpr int kDefaultBurst = 5;
// How long an offer whose launch was refused for capacity is reported unavailable.
constexpr auto kCapacityWindow = std::chrono::minutes(10);
// Startup scripts: no size limit is published; refuse more than this before any call.
constexpr size_t kMaxScriptBytes = size_t{64} * 1024;
// The OS template when the payload names none: Ubuntu 22.04 (`t0nspur5`).
constexpr char kDefaultTemplate[] = "t0nspur5";
constexpr int kPageLimit = 120;  // the v1 list routes' maximum `limit`

std::string Upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The v1 API spells regions "ny2"; the normalisation table knows Paperspace's data-center codes
// in upper case ("NY2") and the long names ("East Coast (NY2)").
Normalized Region(const std::string& r) {
  Normalized n = NormalizeRegion(kPaperspace, r);
  if (n.known) return n;
  Normalized up = NormalizeRegion(kPaperspace, Upper(r));
  if (up.known) return up;
  return n;
}

class Paperspace final : public Provider {
 public:
  Paperspace(std::unique_ptr<internal::ApiCaller> api, PriceTable table)
      : api_(std::move(api)), table_(std::move(table)) {}

  const char* name() const override { return kPaperspace; }

  Capabilities capabilities() const override {
    return {
        .spot = false, .price_api = false, .tags = false, .max_user_data_bytes = kMaxScriptBytes};
  }

  Status CheckCredentials() override {
    auto r = Call("machines.list", "GET", "/v1/machines?limit=1", "", true);
    if (!r.ok()) return r.error();
    return Status();
  }

  Result<std::vector<Offer>> ListOffers() override {
    std::vector<Offer> out;
    auto now = api_->clock().Now();
    std::lock_guard lock(mu_);
    for (const auto& e : table_.entries) {
      for (const auto& region : e.regions) {
        Offer o;
        o.provider = kPaperspace;
        o.id = e.machine_type;
        o.provider_gpu_name = e.gpu;
        Normalized g = NormalizeGpu(kPaperspace, e.gpu, e.gpu_memory_gib);
        o.gpu_type = g.name;
        o.gpu_type_known = g.known;
        o.gpu_count = e.gpu_count;
        o.gpu_memory_gib = e.gpu_memory_gib;
        o.vcpus = e.vcpus;
        o.memory_gib = e.memory_gib;
        o.disk_gib = e.disk_gib;
        o.provider_region = region;
        Normalized r = Region(region);
        o.region = r.name;
        o.region_known = r.known;
        o.on_demand_price = e.price;
        o.boot = BootKind::kStartupScript;
        o.attributes["priceTableVersion"] = table_.version;
        auto it = capacity_until_.find({e.machine_type, region});
        if (it != capacity_until_.end() && now < it->second) {
          o.available = 0;
          o.attributes["capacityRefusedUntilSeconds"] = std::to_string(
              std::chrono::duration_cast<std::chrono::seconds>(it->second - now).count());
        }
        out.push_back(std::move(o));
      }
    }
    return out;
  }

  Result<Instance> Create(const LaunchRequest& req) override {
    if (req.offer == nullptr || req.offer->provider != kPaperspace) {
      return MakeError(ErrorKind::kInvalid, "paperspace: create needs a Paperspace offer");
    }
    if (req.spot) {
      return MakeError(ErrorKind::kInvalid, "paperspace: no interruptible machines (spot)");
    }
    if (req.name.empty()) return MakeError(ErrorKind::kInvalid, "paperspace: empty name");
    if (req.payload.startup_script.size() > kMaxScriptBytes) {
      return MakeError(ErrorKind::kInvalid, "paperspace: startup script of " +
                                                std::to_string(req.payload.startup_script.size()) +
                                                " bytes is over the client's limit of " +
                                                std::to_string(kMaxScriptBytes));
    }
    const Offer& offer = *req.offer;
    std::map<std::string, std::string> tags = req.tags;
    if (!req.claim_uid.empty()) tags.emplace("claim-uid", req.claim_uid);

    // 1. The startup script, named after the tags. Not idempotent: a lost answer leaves at most an
    // unassigned script (no machine), which is reported as ambiguous like any lost create.
    std::string script = req.payload.startup_script.empty()
                             ? "#!/bin/sh\n# hyperslice: no startup script\n"
                             : req.payload.startup_script;
    json::object sbody{
        {"name", paperspace::EncodeTags(tags)}, {"script", script}, {"isRunOnce", false}};
    auto sres =
        Call("startupScripts.create", "POST", "/v1/startup-scripts", json::serialize(sbody), false);
    if (!sres.ok()) return sres.error();
    auto created = paperspace::DecodeStartupScript(sres->body);
    if (!created.ok()) {
      api_->RecordError("startupScripts.create", created.error());
      return created.error();
    }

    // 2. The machine. Body per the v1 reference (machines-create).
    json::object body{
        {"name", req.name},
        {"machineType", offer.id},
        {"templateId", req.payload.image.empty() ? kDefaultTemplate : req.payload.image},
        {"diskSize", static_cast<int64_t>(offer.disk_gib > 0 ? offer.disk_gib : 50)},
        {"region", offer.provider_region},
        {"publicIpType", "dynamic"},
        {"startupScriptId", created->id},
        {"startOnCreate", true},
        {"emailPassword", false},
        {"autoShutdownEnabled", false},
    };
    auto mres = Call("machines.create", "POST", "/v1/machines", json::serialize(body), false, true);
    if (!mres.ok()) {
      if (KindOf(mres.error()) == ErrorKind::kCapacity) {
        std::lock_guard lock(mu_);
        capacity_until_[{offer.id, offer.provider_region}] = api_->clock().Now() + kCapacityWindow;
      }
      // No machine was made unless the answer was lost: the script alone is garbage.
      if (KindOf(mres.error()) != ErrorKind::kAmbiguous) DeleteScript(created->id);
      return mres.error();
    }
    auto m = paperspace::DecodeMachineEvent(mres->body);
    if (!m.ok()) {
      api_->RecordError("machines.create", m.error());
      return MakeError(
          ErrorKind::kAmbiguous,
          "paperspace: machine created but its answer was unreadable (" + m.error().message + ")");
    }
    Instance inst = ToInstance(*m);
    inst.tags = tags;
    return inst;
  }

  Result<Instance> Get(const std::string& id) override {
    auto r = Call("machines.get", "GET", "/v1/machines/" + net::UrlEncode(id), "", true);
    if (!r.ok()) return r.error();
    auto m = paperspace::DecodeMachine(r->body);
    if (!m.ok()) {
      api_->RecordError("machines.get", m.error());
      return m.error();
    }
    return ToInstance(*m);
  }

  Result<std::vector<Instance>> List(const std::map<std::string, std::string>& want) override {
    auto scripts = Scripts();
    if (!scripts.ok()) return scripts.error();
    std::map<std::string, std::map<std::string, std::string>> tags_of;  // machine id -> tags
    for (const auto& s : *scripts) {
      auto t = paperspace::DecodeTags(s.name);
      if (!t) continue;
      for (const auto& id : s.assigned_machine_ids) tags_of[id] = *t;
    }
    std::vector<Instance> out;
    std::string after;
    for (int page = 0; page < 1000; ++page) {
      std::string target = "/v1/machines?limit=" + std::to_string(kPageLimit);
      if (!after.empty()) target += "&after=" + net::UrlEncode(after);
      auto r = Call("machines.list", "GET", target, "", true);
      if (!r.ok()) return r.error();
      auto p = paperspace::DecodeMachineList(r->body);
      if (!p.ok()) {
        api_->RecordError("machines.list", p.error());
        return p.error();
      }
      for (const auto& m : p->items) {
        Instance inst = ToInstance(m);
        auto it = tags_of.find(m.id);
        if (it != tags_of.end()) inst.tags = it->second;
        bool match = std::all_of(want.begin(), want.end(), [&](const auto& kv) {
          auto t = inst.tags.find(kv.first);
          return t != inst.tags.end() && t->second == kv.second;
        });
        if (match) out.push_back(std::move(inst));
      }
      if (!p->has_more) break;
      after = p->next_page;
    }
    return out;
  }

  Status Delete(const std::string& id) override {
    auto r = Call("machines.delete", "DELETE", "/v1/machines/" + net::UrlEncode(id), "", true);
    if (!r.ok() && KindOf(r.error()) != ErrorKind::kNotFound) return r.error();
    // The machine's startup scripts are ours to remove; failing to is not the caller's problem.
    auto scripts = Scripts();
    if (scripts.ok()) {
      for (const auto& s : *scripts) {
        if (!paperspace::DecodeTags(s.name)) continue;
        if (std::find(s.assigned_machine_ids.begin(), s.assigned_machine_ids.end(), id) !=
            s.assigned_machine_ids.end()) {
          DeleteScript(s.id);
        }
      }
    }
    return Status();
  }

 private:
  Result<net::Response> Call(std::string_view method, std::string verb, std::string target,
                             std::string body, bool idempotent, bool create = false) {
    auto key = api_->credentials().Get();
    if (!key.ok()) return key.error();
    auto call = internal::ApiCaller::BearerJson(method, std::move(verb), std::move(target), *key,
                                                std::move(body), idempotent);
    return api_->Do(std::move(call), [create](const net::Response& r) {
      return ClassifyError(r.status, r.body, create);
    });
  }

  Result<std::vector<paperspace::StartupScript>> Scripts() {
    std::vector<paperspace::StartupScript> out;
    std::string after;
    for (int page = 0; page < 1000; ++page) {
      std::string target = "/v1/startup-scripts?limit=" + std::to_string(kPageLimit);
      if (!after.empty()) target += "&after=" + net::UrlEncode(after);
      auto r = Call("startupScripts.list", "GET", target, "", true);
      if (!r.ok()) return r.error();
      auto p = paperspace::DecodeStartupScriptList(r->body);
      if (!p.ok()) {
        api_->RecordError("startupScripts.list", p.error());
        return p.error();
      }
      for (auto& s : p->items) out.push_back(std::move(s));
      if (!p->has_more) break;
      after = p->next_page;
    }
    return out;
  }

  void DeleteScript(const std::string& id) {
    auto r = Call("startupScripts.delete", "DELETE", "/v1/startup-scripts/" + net::UrlEncode(id),
                  "", true);
    if (!r.ok() && KindOf(r.error()) != ErrorKind::kNotFound) {
      log::Warn("paperspace startup script not deleted",
                {{"scriptId", id}, {"error", r.error().message}});
    }
  }

  Instance ToInstance(const paperspace::Machine& m) const {
    Instance i;
    i.provider = kPaperspace;
    i.id = m.id;
    i.name = m.name;
    i.provider_state = m.state;
    i.state = paperspace::StateFromPaperspace(m.state);
    i.offer_id = m.machine_type;
    i.public_ip = m.public_ip;
    Normalized r = Region(m.region);
    i.region = r.name;
    if (const MachineTypePrice* e = table_.Find(m.machine_type)) {
      i.gpu_type = NormalizeGpu(kPaperspace, e->gpu, e->gpu_memory_gib).name;
      i.gpu_count = e->gpu_count;
      i.price = e->price;
    }
    // What Paperspace says it bills wins over what the table believes.
    if (m.usage_rate) i.price = UsdFromDouble(*m.usage_rate);
    return i;
  }

  std::unique_ptr<internal::ApiCaller> api_;
  const PriceTable table_;
  std::mutex mu_;
  std::map<std::pair<std::string, std::string>, Clock::TimePoint> capacity_until_;
};

}  // namespace

Result<std::unique_ptr<Provider>> NewPaperspace(const ProviderConfig& config) {
  auto table = paperspace::LoadPriceTable(config.price_table_yaml);
  if (!table.ok()) return table.error();
  auto api = internal::ApiCaller::Create(config, kPaperspaceEndpoint, kDefaultRps, kDefaultBurst);
  if (!api.ok()) return api.error();
  return std::unique_ptr<Provider>(new Paperspace(std::move(*api), std::move(*table)));
}

}  // namespace hyperslice::gpu::providers
