// Vast.ai client: gpu::Provider over Vast's REST API (/api/v0, /api/v1), the calls and bodies
// vast-cli 1.9.1 sends (vastai/api/offers.py, instances.py, billing.py, client.py) and the Vast.ai
// docs repository's api-reference/openapi.yaml describes. See README.md beside this file for the
// calls, the label that carries name and tags, the error mapping and the rate limit.
//
// Auth: `Authorization: Bearer <key>` on every call, as vast-cli 1.9.1 does (VastClient.
// _build_headers); it no longer sends an api_key query parameter, and neither do we (a key in a
// URL ends up in proxy logs).
#include <memory>
#include <string>

#include <boost/json.hpp>

#include "src/base/log.h"
#include "src/gpu/internal/api_caller.h"
#include "src/gpu/providers/clients.h"
#include "src/gpu/providers/vast/decode.h"

namespace hyperslice::gpu::providers {

namespace {

namespace json = boost::json;
using internal::ApiCaller;
using vast::Call;

// Vast publishes a minimum interval per endpoint and identity (openapi.yaml x-rateLimit
// thresholds: bundles 2, GET instances/{id} 2, DELETE instances/{id} 3, PUT asks/{id} 4.5;
// docs api-reference/rate-limits-and-errors: "an acceptable threshold number in seconds"). One
// bucket for all calls at the strictest read interval: one request per 2 s, bursts of 2; a 429
// still says how long to wait (the threshold), which ApiCaller honours.
constexpr double kDefaultRps = 0.5;
constexpr int kDefaultBurst = 2;
// How many offers one refresh asks for (the bundles `limit`), cheapest first.
constexpr int kOfferLimit = 2000;
// Disk allocated to an instance: 32 GB, or the whole offer when it has less. Also sent as
// `allocated_storage` when searching, so dph_total prices that much storage.
constexpr double kDiskGb = 32;
// openapi.yaml: "`onstart` field is limited to 4048 characters".
constexpr size_t kMaxOnstart = 4048;
// The image a VM ask boots when the payload names none: the disk image of Vast's "Ubuntu 22.04
// VM" template (docs guides/instances/virtual-machines: VMs boot Vast's kvm images, SSH launch
// mode only), which runs systemd and the onstart script.
constexpr char kDefaultVmImage[] = "vastai/kvm:ubuntu_cli_22.04-2025-11-21";
// v1 instances pages hold at most 25 rows (vast-cli show instances: "max instances per page
// (1-25)"); a runaway next_token loop stops here.
constexpr int kMaxPages = 400;

bool AllDigits(const std::string& s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

class VastProvider final : public Provider {
 public:
  explicit VastProvider(std::unique_ptr<ApiCaller> api) : api_(std::move(api)) {}

  const char* name() const override { return kVast; }

  Capabilities capabilities() const override {
    return {.spot = true,  // interruptible instances: a bid (`price`) on the ask
            .price_api = true,
            .tags = true,               // in the label (decode.h EncodeLabel)
            .max_user_data_bytes = 0};  // no cloud-init user data: VMs and containers take onstart
  }

  Status CheckCredentials() override {
    // vast-cli `show user`: GET /api/v0/users/current (billing.py show_user).
    auto r = Do(Call::kUser, "users.current", "GET", "/api/v0/users/current/", "", true);
    if (!r.ok()) return r.error();
    return OkStatus();
  }

  Result<std::vector<Offer>> ListOffers() override {
    // vast-cli `search offers` (api/offers.py search_offers): its default query (verified,
    // not external, rentable, not rented), cheapest first.
    json::object q;
    q["verified"] = json::object{{"eq", true}};
    q["external"] = json::object{{"eq", false}};
    q["rentable"] = json::object{{"eq", true}};
    q["rented"] = json::object{{"eq", false}};
    q["order"] = json::array{json::array{"dph_total", "asc"}};
    q["type"] = "on-demand";
    q["limit"] = kOfferLimit;
    q["allocated_storage"] = kDiskGb;
    auto r =
        Do(Call::kOffers, "bundles.search", "POST", "/api/v0/bundles/", json::serialize(q), true);
    if (!r.ok()) return r.error();
    auto offers = vast::DecodeOffers(r->body);
    if (!offers.ok()) api_->RecordError("bundles.search", offers.error());
    return offers;
  }

  Result<Instance> Create(const LaunchRequest& req) override {
    auto invalid = [](std::string m) {
      return MakeError(ErrorKind::kInvalid, "vastai create instance: " + std::move(m));
    };
    const Offer* offer = req.offer;
    if (!offer || offer->provider != kVast || !AllDigits(offer->id)) {
      return invalid("the request needs a Vast.ai offer (numeric ask id)");
    }
    const BootPayload& p = req.payload;
    // A VM ask (vms_enabled) is created with `vm: true` (openapi.yaml createInstance: "Whether
    // this is a VM instance"); a VM launches in SSH mode only (docs: virtual machines).
    bool vm = offer->boot == BootKind::kStartupScript;
    std::string image = p.image.empty() && vm ? std::string(kDefaultVmImage) : p.image;
    if (image.empty()) return invalid("Vast.ai runs a container image: payload.image is required");
    if (vm && !p.args.empty()) {
      return invalid("a Vast.ai VM launches in SSH mode only: payload.args cannot be used");
    }
    if (!p.user_data.empty()) {
      return invalid("Vast.ai instances take no cloud-init user data; use onstart");
    }
    if (p.startup_script.size() > kMaxOnstart) {
      return invalid("onstart script is " + std::to_string(p.startup_script.size()) +
                     " bytes; Vast.ai takes at most 4048");
    }
    std::map<std::string, std::string> tags = req.tags;
    if (!req.claim_uid.empty()) tags.emplace("claim-uid", req.claim_uid);
    std::string label = vast::EncodeLabel(req.name, tags);
    if (label.size() > vast::kMaxLabel) {
      return invalid("name and tags take " + std::to_string(label.size()) +
                     " bytes in the label; Vast.ai keeps at most 1024");
    }
    std::optional<MicroUsd> price;
    if (req.spot) {
      price = req.bid ? req.bid : offer->spot_price;
      if (!price || *price <= 0)
        return invalid("interruptible needs a bid: the offer has no min_bid");
    } else if (!offer->on_demand_price) {
      return invalid("offer " + offer->id + " has no on-demand price");
    }
    double disk = offer->disk_gib > 0 ? std::min(kDiskGb, offer->disk_gib) : kDiskGb;

    // The body vast-cli 1.9.1 builds (api/instances.py build_create_instance_payload), with our
    // values; cancel_unavail so a machine that cannot start now fails the create (410) instead
    // of becoming a stopped instance we would pay storage for.
    json::object env;
    for (const auto& [k, v] : p.env) {
      if (k.empty() || k.front() == '-') return invalid("env key " + k + " is not a variable name");
      env[k] = v;
    }
    // Published ports: docker options ride in `env` as keys, "-p <port>:<port>" with the value
    // "1" (vast-cli's parse_env); Vast maps each on the machine's public IP to a port of its
    // choosing (PUBLIC_IPADDR, VAST_TCP_PORT_<port> in the container's env).
    for (int port : p.tcp_ports) {
      if (port < 1 || port > 65535) {
        return invalid("port " + std::to_string(port) + " cannot be published");
      }
      env["-p " + std::to_string(port) + ":" + std::to_string(port)] = "1";
    }
    json::object body;
    body["client_id"] = "me";
    body["image"] = image;
    body["env"] = std::move(env);
    body["price"] = price ? json::value(static_cast<double>(*price) / 1e6) : json::value(nullptr);
    body["disk"] = disk;
    body["label"] = label;
    body["extra"] = nullptr;
    body["onstart"] =
        p.startup_script.empty() ? json::value(nullptr) : json::value(p.startup_script);
    body["image_login"] = nullptr;
    body["python_utf8"] = false;
    body["lang_utf8"] = false;
    body["use_jupyter_lab"] = false;
    body["jupyter_dir"] = nullptr;
    body["force"] = false;
    body["cancel_unavail"] = true;
    body["template_hash_id"] = nullptr;
    body["user"] = nullptr;
    if (vm) body["vm"] = true;
    if (p.args.empty()) {
      body["runtype"] = "ssh";  // vast-cli's default: the image with onstart, reachable by ssh
    } else {
      body["runtype"] = "args";  // the image's entrypoint with these arguments
      json::array args;
      for (const auto& a : p.args) args.emplace_back(a);
      body["args"] = std::move(args);
    }
    auto r = Do(Call::kCreate, "asks.create", "PUT", "/api/v0/asks/" + offer->id + "/",
                json::serialize(body), false);
    if (!r.ok()) return r.error();
    auto id = vast::DecodeCreate(r->body);
    if (!id.ok()) {
      // A 2xx we cannot read: the instance may exist. Same rule as a lost answer.
      Error e = MakeError(ErrorKind::kAmbiguous, id.error().message +
                                                     " (the create may have "
                                                     "taken effect)");
      api_->RecordError("asks.create", e);
      return e;
    }
    Instance out;
    out.provider = kVast;
    out.id = *id;
    out.name = req.name;
    out.tags = std::move(tags);
    out.state = InstanceState::kPending;
    out.provider_state = "created";
    out.offer_id = offer->id;
    out.gpu_type = offer->gpu_type;
    out.gpu_count = offer->gpu_count;
    out.region = offer->region;
    out.price = req.spot ? price : offer->on_demand_price;
    out.spot = req.spot;
    log::Info("vastai instance created", {{"instance", out.id},
                                          {"offer", offer->id},
                                          {"name", req.name},
                                          {"spot", req.spot},
                                          {"vm", vm}});
    return out;
  }

  Result<Instance> Get(const std::string& id) override {
    if (!AllDigits(id)) {
      return MakeError(ErrorKind::kNotFound, "vastai show instance: no instance \"" + id + "\"");
    }
    // vast-cli show instance: GET /api/v0/instances/{id}/?owner=me (api/instances.py).
    auto r =
        Do(Call::kGet, "instances.get", "GET", "/api/v0/instances/" + id + "/?owner=me", "", true);
    if (!r.ok()) return r.error();
    auto inst = vast::DecodeInstance(r->body);
    if (!inst.ok()) {
      api_->RecordError("instances.get", inst.error());
      return inst.error();
    }
    if (!*inst) {
      // Vast answers {"instances": null} for an instance that is not (or no longer) ours.
      return MakeError(ErrorKind::kNotFound, "vastai show instance: instance " + id + " not found");
    }
    return std::move(**inst);
  }

  Result<std::vector<Instance>> List(const std::map<std::string, std::string>& tags) override {
    // vast-cli show instances: GET /api/v1/instances/ paged by next_token (api/instances.py
    // show_instances); /api/v0/instances/ is deprecated (410 for newer accounts). The label holds
    // the tags, so the filter is ours, on the decoded label.
    std::vector<Instance> out;
    std::string after;
    for (int page = 0; page < kMaxPages; ++page) {
      std::string target = "/api/v1/instances/?select_filters=" + net::UrlEncode("{}") +
                           "&order_by=" + net::UrlEncode(R"([{"col": "id", "dir": "asc"}])") +
                           "&limit=25";
      if (!after.empty()) target += "&after_token=" + net::UrlEncode(after);
      auto r = Do(Call::kList, "instances.list", "GET", target, "", true);
      if (!r.ok()) return r.error();
      auto decoded = vast::DecodeInstancePage(r->body);
      if (!decoded.ok()) {
        api_->RecordError("instances.list", decoded.error());
        return decoded.error();
      }
      for (auto& i : decoded->instances) {
        bool match = true;
        for (const auto& [k, v] : tags) {
          auto it = i.tags.find(k);
          if (it == i.tags.end() || it->second != v) {
            match = false;
            break;
          }
        }
        if (match) out.push_back(std::move(i));
      }
      if (decoded->next_token.empty() || decoded->next_token == after) return out;
      after = std::move(decoded->next_token);
    }
    return MakeError(ErrorKind::kInternal,
                     "vastai show instances: more than " + std::to_string(kMaxPages) + " pages");
  }

  Status Delete(const std::string& id) override {
    if (!AllDigits(id)) {
      return MakeError(ErrorKind::kInvalid, "vastai destroy instance: \"" + id + "\" is not an id");
    }
    // vast-cli destroy instance: DELETE /api/v0/instances/{id}/ with an empty JSON body.
    auto r = Do(Call::kDelete, "instances.delete", "DELETE", "/api/v0/instances/" + id + "/", "{}",
                true);
    if (!r.ok()) {
      if (KindOf(r.error()) == ErrorKind::kNotFound) return OkStatus();  // gone is success
      return r.error();
    }
    return OkStatus();
  }

 private:
  Result<net::Response> Do(Call call, std::string_view method, const char* verb, std::string target,
                           std::string body, bool idempotent) {
    auto key = api_->credentials().Get();
    if (!key.ok()) return key.error();
    return api_->Do(
        ApiCaller::BearerJson(method, verb, std::move(target), *key, std::move(body), idempotent),
        [call](const net::Response& r) { return vast::DecodeError(call, r); });
  }

  std::unique_ptr<ApiCaller> api_;
};

}  // namespace

Result<std::unique_ptr<Provider>> NewVast(const ProviderConfig& config) {
  auto api = ApiCaller::Create(config, kVastEndpoint, kDefaultRps, kDefaultBurst);
  if (!api.ok()) return api.error();
  return std::unique_ptr<Provider>(std::make_unique<VastProvider>(std::move(*api)));
}

}  // namespace hyperslice::gpu::providers
