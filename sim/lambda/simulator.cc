// The Lambda Cloud API simulator: /api/v1 as Lambda's OpenAPI document 1.8.3 defines it, over the
// shared market core (sim/market). See README.md in this folder for what it serves.
//
// Listings: one per (instance type, region). Listing::id is "<instance type>@<region>";
// attributes "instance_type", "description" and "gpu_description" give the InstanceType fields
// (a listing added through /control without them takes the type from the id and the GPU
// description from gpu_name).
#include "sim/lambda/simulator.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include <boost/json.hpp>

#include "sim/lambda/internal.h"
#include "src/base/base64.h"

namespace hyperslice::sim::lambda {

namespace json = boost::json;
using market::Fault;
using market::Listing;
using market::Market;
using market::State;

namespace {

// Method names for the market's counters and faults: "<verb> <path template>".
constexpr char kListTypes[] = "GET /api/v1/instance-types";
constexpr char kListInstances[] = "GET /api/v1/instances";
constexpr char kGetInstance[] = "GET /api/v1/instances/{id}";
constexpr char kLaunch[] = "POST /api/v1/instance-operations/launch";
constexpr char kTerminate[] = "POST /api/v1/instance-operations/terminate";
constexpr char kListKeys[] = "GET /api/v1/ssh-keys";
constexpr char kAddKey[] = "POST /api/v1/ssh-keys";
constexpr char kDeleteKey[] = "DELETE /api/v1/ssh-keys/{id}";

// The key every account starts with, so a launch can name one without setting anything up.
constexpr char kDefaultSshKey[] = "sim-ssh-key";

struct Answer {
  int status = 200;
  std::string body;
  net::Headers headers;
};

Answer Data(json::value v) { return {200, json::serialize(json::object{{"data", std::move(v)}})}; }

// {"error":{"code","message","suggestion"?}}: Lambda's error body (OpenAPI 1.8.3, "Error
// responses").
Answer Err(int status, std::string_view code, std::string_view message,
           std::string_view suggestion = {}) {
  json::object e{{"code", code}, {"message", message}};
  if (!suggestion.empty()) e["suggestion"] = suggestion;
  return {status, json::serialize(json::object{{"error", std::move(e)}})};
}

// ApiErrorUnauthorized's and ApiErrorAccountInactive's documented defaults.
Answer Unauthorized() {
  return Err(401, "global/invalid-api-key", "API key was invalid, expired, or deleted.",
             "Check your API key or create a new one, then try again.");
}
Answer AccountInactive() {
  return Err(403, "global/account-inactive", "Your account is inactive.",
             "Make sure you have verified your email address and have a valid payment method. "
             "Contact Support if problems continue.");
}
Answer InvalidParameters(const std::string& message) {
  return Err(400, "global/invalid-parameters", message);
}
Answer InstanceNotFound() {
  return Err(404, "global/object-does-not-exist", "Specified instance does not exist.");
}
Answer InsufficientCapacity() {
  return Err(400, "instance-operations/launch/insufficient-capacity",
             "Not enough capacity to fulfill launch request.",
             "Choose an instance type with more availability, or try again later.");
}
// Lambda's edge answers a rate-limited request with Cloudflare's error 1015 (Lambda's docs,
// "Are API requests rate-limited?"): HTTP 429 and a plain-text body, not the API's JSON.
Answer RateLimited(std::chrono::milliseconds wait) {
  auto seconds = std::max<int64_t>(1, (wait.count() + 999) / 1000);
  return {
      429,
      "error code: 1015",
      {{"Content-Type", "text/plain; charset=UTF-8"}, {"Retry-After", std::to_string(seconds)}}};
}

std::string InstanceType(const Listing& l) {
  if (auto it = l.attributes.find("instance_type"); it != l.attributes.end()) return it->second;
  return l.id.substr(0, l.id.find('@'));
}

std::string Attr(const Listing& l, const char* key, const std::string& fallback) {
  auto it = l.attributes.find(key);
  return it == l.attributes.end() ? fallback : it->second;
}

std::string GpuDescription(const Listing& l) { return Attr(l, "gpu_description", l.gpu_name); }

// InstanceType (OpenAPI 1.8.3).
json::object TypeJson(const Listing& l, market::MicroUsd price) {
  std::string gpu = GpuDescription(l);
  return json::object{
      {"name", InstanceType(l)},
      {"description", Attr(l, "description", std::to_string(l.gpu_count) + "x " + gpu)},
      {"gpu_description", gpu},
      {"price_cents_per_hour", (price + 5'000) / 10'000},
      {"specs", json::object{{"vcpus", l.vcpus},
                             {"memory_gib", static_cast<int64_t>(l.memory_gb)},
                             {"storage_gib", static_cast<int64_t>(l.disk_gb)},
                             {"gpus", l.gpu_count}}}};
}

json::object RegionJson(const std::string& code) {
  return json::object{{"name", code}, {"description", internal::RegionDescription(code)}};
}

struct SshKey {
  std::string id, name, public_key;
};

class LambdaApi final : public market::ProviderApi {
 public:
  explicit LambdaApi(Market& market) : market_(market), rng_(market.options().seed) {}

  void Handle(const net::ServerRequest& r, std::shared_ptr<net::Responder> out) override {
    std::string id;
    const char* method = Route(r, &id);
    if (method == nullptr) {
      Send(*out,
           Err(404, "global/object-does-not-exist", "No such route: " + r.method + " " + r.path));
      return;
    }
    auto fault = market_.Enter(method);
    if (fault) {
      switch (*fault) {
        case Fault::Kind::kDrop:
          return out->Abort();
        case Fault::Kind::kServerError:
          return Send(*out, Err(500, "global/internal-error", "An internal server error occurred.",
                                "Try again later. Contact Support if the problem persists."));
        case Fault::Kind::kUnavailable:
          // The document's own example of a provider error.
          return Send(*out, Err(503, "provider/internal-unavailable", "Provider unavailable",
                                "Try again shortly"));
        case Fault::Kind::kRateLimited:
          return Send(*out, RateLimited(std::chrono::seconds(1)));
        case Fault::Kind::kUnauthorized:
          return Send(*out, Unauthorized());
        case Fault::Kind::kCapacity:
          if (std::string_view(method) == kLaunch) return Send(*out, InsufficientCapacity());
          break;
        case Fault::Kind::kSwallow:
          break;
      }
    }
    auto key = ApiKey(r);
    auto account = key ? market_.Authenticate(*key) : std::nullopt;
    if (!account) return Send(*out, Unauthorized());
    // An account whose name starts with "inactive" stands for one Lambda has deactivated.
    if (account->rfind("inactive", 0) == 0) return Send(*out, AccountInactive());
    if (auto wait = market_.Throttle(*account)) return Send(*out, RateLimited(*wait));

    Answer a = Serve(method, id, r, *account);
    if (fault == Fault::Kind::kSwallow) return out->Abort();
    Send(*out, std::move(a));
  }

 private:
  static void Send(net::Responder& out, Answer a) {
    out.Send(a.status, std::move(a.body), std::move(a.headers));
  }

  // Bearer <key>, or Basic base64("<key>:") as `curl -u KEY:` sends it (OpenAPI 1.8.3,
  // "Authentication").
  static std::optional<std::string> ApiKey(const net::ServerRequest& r) {
    std::string h = r.Header("authorization");
    auto scheme = h.substr(0, h.find(' '));
    std::string rest = h.size() > scheme.size() ? h.substr(scheme.size() + 1) : "";
    std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (scheme == "bearer" && !rest.empty()) return rest;
    if (scheme == "basic") {
      auto decoded = Base64Decode(rest, "basic credentials");
      if (!decoded.ok()) return std::nullopt;
      return decoded->substr(0, decoded->find(':'));
    }
    return std::nullopt;
  }

  static const char* Route(const net::ServerRequest& r, std::string* id) {
    const std::string& p = r.path;
    const std::string& m = r.method;
    if (m == "GET" && p == "/api/v1/instance-types") return kListTypes;
    if (m == "GET" && p == "/api/v1/instances") return kListInstances;
    constexpr std::string_view kInstances = "/api/v1/instances/";
    if (m == "GET" && p.rfind(kInstances, 0) == 0 && p.size() > kInstances.size() &&
        p.find('/', kInstances.size()) == std::string::npos) {
      *id = p.substr(kInstances.size());
      return kGetInstance;
    }
    if (m == "POST" && p == "/api/v1/instance-operations/launch") return kLaunch;
    if (m == "POST" && p == "/api/v1/instance-operations/terminate") return kTerminate;
    if (m == "GET" && p == "/api/v1/ssh-keys") return kListKeys;
    if (m == "POST" && p == "/api/v1/ssh-keys") return kAddKey;
    constexpr std::string_view kKeys = "/api/v1/ssh-keys/";
    if (m == "DELETE" && p.rfind(kKeys, 0) == 0 && p.size() > kKeys.size()) {
      *id = p.substr(kKeys.size());
      return kDeleteKey;
    }
    return nullptr;
  }

  Answer Serve(std::string_view method, const std::string& id, const net::ServerRequest& r,
               const std::string& account) {
    if (method == kListTypes) return ListTypes();
    if (method == kListInstances) return ListInstances(account);
    if (method == kGetInstance) return GetInstance(id, account);
    if (method == kListKeys) return ListKeys(account);
    if (method == kDeleteKey) return DeleteKey(id, account);
    // The POSTs take a JSON body.
    boost::system::error_code ec;
    json::value body = json::parse(r.body, ec);
    if (ec) return InvalidParameters("Invalid request data: the body is not valid JSON");
    if (method == kLaunch) return Launch(body, account);
    if (method == kTerminate) return Terminate(body, account);
    return AddKey(body, account);
  }

  // InstanceTypes: every instance type on sale, with the regions that can start one now.
  Answer ListTypes() {
    std::map<std::string, std::pair<json::object, std::set<std::string>>> types;
    for (const auto& l : market_.Listings()) {
      auto& [type, regions] = types[InstanceType(l)];
      if (type.empty()) type = TypeJson(l, l.price);
      if (market_.Available(l.id) > 0) regions.insert(l.region);
    }
    json::object data;
    for (auto& [name, entry] : types) {
      json::array regions;
      for (const auto& code : entry.second) regions.push_back(RegionJson(code));
      data[name] = json::object{{"instance_type", std::move(entry.first)},
                                {"regions_with_capacity_available", std::move(regions)}};
    }
    return Data(std::move(data));
  }

  // GET /instances lists "your running instances": terminated ones are left out (a Get still
  // shows them as terminated).
  Answer ListInstances(const std::string& account) {
    json::array out;
    for (const auto& inst : market_.List(account)) {
      if (inst.state != State::kTerminated) out.push_back(InstanceJson(inst));
    }
    return Data(std::move(out));
  }

  Answer GetInstance(const std::string& id, const std::string& account) {
    auto inst = market_.Get(id);
    if (!inst || inst->owner != account) return InstanceNotFound();
    return Data(InstanceJson(*inst));
  }

  Answer Launch(const json::value& body, const std::string& account) {
    if (auto err = internal::ValidateLaunch(body)) return InvalidParameters(*err);
    const auto& o = body.get_object();
    std::string region(o.at("region_name").get_string());
    std::string type(o.at("instance_type_name").get_string());
    std::string key(o.at("ssh_key_names").get_array().front().get_string());
    if (!HasKey(account, key)) {
      // ApiErrorLaunchResourceNotFound: 404 global/object-does-not-exist naming the resource.
      return Err(404, "global/object-does-not-exist", "SSH key " + key + " does not exist.",
                 "Check the names of your SSH keys (GET /api/v1/ssh-keys) and try again.");
    }
    std::optional<Listing> listing;
    bool type_known = false;
    for (const auto& l : market_.Listings()) {
      if (InstanceType(l) != type) continue;
      type_known = true;
      if (l.region == region) listing = l;
    }
    if (!type_known) {
      return Err(404, "global/object-does-not-exist", "Instance type " + type + " does not exist.",
                 "List the available instance types (GET /api/v1/instance-types) and try again.");
    }
    // Sold elsewhere but not here, or sold out here: the same answer Lambda gives.
    if (!listing) return InsufficientCapacity();
    Market::CreateSpec spec;
    spec.listing_id = listing->id;
    spec.owner = account;
    if (const auto* n = o.if_contains("name")) spec.name = std::string(n->get_string());
    if (const auto* tags = o.if_contains("tags")) {
      for (const auto& t : tags->get_array()) {
        const auto& to = t.get_object();
        spec.tags[std::string(to.at("key").get_string())] =
            std::string(to.at("value").get_string());
      }
    }
    // The request as sent (user_data, name, tags, image, ssh_key_names...) is what a simulated
    // machine boots from.
    spec.payload = o;
    auto res = market_.Create(spec, [this] { return NewId(); });
    switch (res.error) {
      case Market::CreateError::kNone:
        break;
      case Market::CreateError::kNoSuchListing:
      case Market::CreateError::kCapacity:
      case Market::CreateError::kBidTooLow:
      case Market::CreateError::kNotSold:
        return InsufficientCapacity();
    }
    return Data(json::object{{"instance_ids", json::array{json::value(res.instance.id)}}});
  }

  // Terminates all the ids or none: an id that is not the account's fails the whole request
  // with 404 (InstanceTerminateRequest's 404 response).
  Answer Terminate(const json::value& body, const std::string& account) {
    if (auto err = internal::ValidateTerminate(body)) return InvalidParameters(*err);
    const auto& ids = body.get_object().at("instance_ids").get_array();
    if (ids.empty()) return InvalidParameters("Invalid value for field \"instance_ids\": empty");
    for (const auto& id : ids) {
      auto inst = market_.Get(std::string(id.get_string()));
      if (!inst || inst->owner != account) return InstanceNotFound();
    }
    json::array out;
    for (const auto& id : ids) {
      std::string s(id.get_string());
      market_.Terminate(s, account);
      if (auto inst = market_.Get(s)) out.push_back(InstanceJson(*inst));
    }
    return Data(json::object{{"terminated_instances", std::move(out)}});
  }

  // SSHKey list (OpenAPI 1.8.3 /api/v1/ssh-keys).
  Answer ListKeys(const std::string& account) {
    json::array out;
    std::lock_guard lock(mu_);
    for (const auto& k : KeysLocked(account)) {
      out.push_back(json::object{{"id", k.id}, {"name", k.name}, {"public_key", k.public_key}});
    }
    return Data(std::move(out));
  }

  Answer AddKey(const json::value& body, const std::string& account) {
    if (auto err = internal::ValidateAddSshKey(body)) return InvalidParameters(*err);
    const auto& o = body.get_object();
    SshKey k;
    k.name = std::string(o.at("name").get_string());
    bool generated = !o.contains("public_key");
    std::lock_guard lock(mu_);
    auto& keys = KeysLocked(account);
    for (const auto& existing : keys) {
      if (existing.name == k.name) return InvalidParameters("Key name must be unique");
    }
    k.id = NewIdLocked();
    k.public_key = generated ? "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + k.id + " " + k.name
                             : std::string(o.at("public_key").get_string());
    keys.push_back(k);
    json::object out{{"id", k.id}, {"name", k.name}, {"public_key", k.public_key}};
    // GeneratedSSHKey: a placeholder, not a key; the simulated machines are never dialed.
    if (generated)
      out["private_key"] =
          "-----BEGIN OPENSSH PRIVATE KEY-----\nsim\n-----END "
          "OPENSSH PRIVATE KEY-----\n";
    return Data(std::move(out));
  }

  Answer DeleteKey(const std::string& id, const std::string& account) {
    std::lock_guard lock(mu_);
    auto& keys = KeysLocked(account);
    auto it = std::find_if(keys.begin(), keys.end(), [&](const SshKey& k) { return k.id == id; });
    if (it == keys.end()) return InvalidParameters("SSH key " + id + " does not exist");
    keys.erase(it);
    return Data(json::object{});
  }

  bool HasKey(const std::string& account, const std::string& name) {
    std::lock_guard lock(mu_);
    const auto& keys = KeysLocked(account);
    return std::any_of(keys.begin(), keys.end(), [&](const SshKey& k) { return k.name == name; });
  }

  std::vector<SshKey>& KeysLocked(const std::string& account) {
    auto [it, fresh] = keys_.try_emplace(account);
    if (fresh) {
      it->second.push_back(
          {NewIdLocked(), kDefaultSshKey,
           "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIsimulated " + std::string(kDefaultSshKey)});
    }
    return it->second;
  }

  // 32 lower-case hex digits, like Lambda's ids ("0920582c7ff041399e34823a0be62549").
  std::string NewIdLocked() {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string id;
    for (int i = 0; i < 2; ++i) {
      uint64_t v = rng_();
      for (int j = 0; j < 16; ++j, v >>= 4) id.push_back(kHex[v & 0xf]);
    }
    return id;
  }
  std::string NewId() {
    std::lock_guard lock(mu_);
    return NewIdLocked();
  }

  // Instance (OpenAPI 1.8.3).
  static json::object InstanceJson(const market::Instance& i) {
    const json::object& req = i.payload;
    json::object o;
    o["id"] = i.id;
    if (!i.name.empty()) o["name"] = i.name;
    bool addressed =
        i.state == State::kBooting || i.state == State::kRunning || i.state == State::kStopping;
    // Both addresses from 192.0.2.0/24 (TEST-NET-1): never dialed.
    std::string octet = i.public_ip.substr(i.public_ip.rfind('.') + 1);
    if (addressed) {
      o["ip"] = i.public_ip;
      o["private_ip"] = "192.0.2." + std::to_string(255 - std::atoi(octet.c_str()));
    }
    const char* status = "booting";
    switch (i.state) {
      case State::kPending:
      case State::kBooting:
        status = "booting";
        break;
      case State::kRunning:
        status = "active";
        break;
      case State::kStopping:
        status = "terminating";
        break;
      case State::kTerminated:
        status = i.reclaimed ? "preempted" : "terminated";
        break;
    }
    o["status"] = status;
    o["ssh_key_names"] = req.contains("ssh_key_names") ? req.at("ssh_key_names") : json::array{};
    o["file_system_names"] =
        req.contains("file_system_names") ? req.at("file_system_names") : json::array{};
    o["region"] = RegionJson(i.listing.region);
    o["instance_type"] = TypeJson(i.listing, i.price);
    if (addressed) {
      std::string host = i.public_ip;
      std::replace(host.begin(), host.end(), '.', '-');
      if (const auto* h = req.if_contains("hostname")) host = std::string(h->get_string());
      o["hostname"] = host;
      std::string token(i.id.rbegin(), i.id.rend());
      o["jupyter_token"] = token;
      o["jupyter_url"] = "https://jupyter-" + i.id + ".lambdaspaces.com/?token=" + token;
    }
    auto action = [&](bool available) {
      json::object a{{"available", available}};
      if (!available) {
        bool ending = i.state == State::kStopping || i.state == State::kTerminated;
        a["reason_code"] = ending ? "vm-is-terminating" : "vm-has-not-launched";
      }
      return a;
    };
    bool active = i.state == State::kRunning;
    bool ending = i.state == State::kStopping || i.state == State::kTerminated;
    o["actions"] = json::object{{"migrate", action(active)},
                                {"rebuild", action(active)},
                                {"restart", action(active)},
                                {"cold_reboot", action(active)},
                                {"terminate", action(!ending)}};
    json::array tags;
    if (const auto* t = req.if_contains("tags")) tags = t->get_array();
    o["tags"] = std::move(tags);
    return o;
  }

  Market& market_;
  std::mutex mu_;
  std::mt19937_64 rng_;
  std::map<std::string, std::vector<SshKey>> keys_;  // by account
};

Listing Type(const char* type, const char* description, const char* gpu_description, int gpus,
             double gpu_memory, int vcpus, double memory, double disk, int cents,
             const char* region, int capacity) {
  Listing l;
  l.id = std::string(type) + "@" + region;
  l.gpu_name = gpu_description;
  l.gpu_count = gpus;
  l.gpu_memory_gb = gpu_memory;
  l.vcpus = vcpus;
  l.memory_gb = memory;
  l.disk_gb = disk;
  l.region = region;
  l.price = static_cast<market::MicroUsd>(cents) * 10'000;
  l.capacity = capacity;
  l.attributes = {
      {"instance_type", type}, {"description", description}, {"gpu_description", gpu_description}};
  return l;
}

}  // namespace

market::Listing Rtx4090Listing(const std::string& region, market::MicroUsd price, int capacity) {
  Listing l = Type("gpu_1x_rtx4090", "1x RTX 4090 (24 GB PCIe)", "RTX 4090 (24 GB PCIe)", 1, 24, 16,
                   64, 500, 0, region.c_str(), capacity);
  l.price = price;
  return l;
}

std::vector<Listing> DefaultListings() {
  // Instance types, specs and on-demand prices as Lambda lists them (cents per hour); regions
  // and capacities are the simulator's. gpu_8x_v100 has no capacity anywhere, as sold-out types
  // do on the real market.
  struct Spec {
    const char *type, *description, *gpu;
    int gpus;
    double gpu_memory;
    int vcpus;
    double memory, disk;
    int cents;
  };
  constexpr Spec kTypes[] = {
      {"gpu_1x_rtx6000", "1x RTX 6000 (24 GB)", "RTX 6000 (24 GB)", 1, 24, 14, 46, 512, 50},
      {"gpu_1x_a10", "1x A10 (24 GB PCIe)", "A10 (24 GB PCIe)", 1, 24, 30, 200, 1400, 75},
      {"gpu_1x_a6000", "1x RTX A6000 (48 GB)", "RTX A6000 (48 GB)", 1, 48, 14, 100, 512, 80},
      {"gpu_1x_a100_sxm4", "1x A100 (40 GB SXM4)", "A100 (40 GB SXM4)", 1, 40, 30, 200, 512, 129},
      {"gpu_1x_gh200", "1x GH200 (96 GB)", "GH200 (96 GB)", 1, 96, 64, 432, 4096, 149},
      {"gpu_1x_h100_pcie", "1x H100 (80 GB PCIe)", "H100 (80 GB PCIe)", 1, 80, 26, 200, 1024, 249},
      {"gpu_8x_v100", "8x Tesla V100 (16 GB)", "Tesla V100 (16 GB)", 8, 16, 92, 448, 5900, 440},
      {"gpu_8x_a100_80gb_sxm4", "8x A100 (80 GB SXM4)", "A100 (80 GB SXM4)", 8, 80, 240, 1800,
       19500, 1432},
      {"gpu_8x_h100_sxm5", "8x H100 (80 GB SXM5)", "H100 (80 GB SXM5)", 8, 80, 208, 1800, 24780,
       2392},
      {"gpu_8x_b200_sxm6", "8x B200 (180 GB SXM6)", "B200 (180 GB SXM6)", 8, 180, 208, 2900, 22000,
       3992},
  };
  struct Stock {
    const char *type, *region;
    int capacity;
  };
  constexpr Stock kStock[] = {
      {"gpu_1x_rtx6000", "us-south-1", 2},
      {"gpu_1x_rtx6000", "asia-northeast-1", 1},
      {"gpu_1x_a10", "us-west-1", 4},
      {"gpu_1x_a10", "us-east-1", 4},
      {"gpu_1x_a10", "us-south-1", 2},
      {"gpu_1x_a6000", "us-west-1", 2},
      {"gpu_1x_a6000", "asia-south-1", 1},
      {"gpu_1x_a100_sxm4", "us-west-1", 3},
      {"gpu_1x_a100_sxm4", "us-east-1", 2},
      {"gpu_1x_a100_sxm4", "europe-central-1", 2},
      {"gpu_1x_gh200", "us-east-3", 2},
      {"gpu_1x_h100_pcie", "us-west-3", 2},
      {"gpu_1x_h100_pcie", "us-south-1", 1},
      {"gpu_8x_v100", "us-east-1", 0},
      {"gpu_8x_a100_80gb_sxm4", "us-midwest-1", 1},
      {"gpu_8x_h100_sxm5", "us-south-2", 1},
      {"gpu_8x_h100_sxm5", "europe-central-1", 1},
      {"gpu_8x_b200_sxm6", "us-west-3", 1},
  };
  std::vector<Listing> out;
  for (const auto& s : kStock) {
    for (const auto& t : kTypes) {
      if (std::string_view(t.type) != s.type) continue;
      out.push_back(Type(t.type, t.description, t.gpu, t.gpus, t.gpu_memory, t.vcpus, t.memory,
                         t.disk, t.cents, s.region, s.capacity));
    }
  }
  return out;
}

Result<std::unique_ptr<market::MarketSimulator>> Start(market::ServerOptions options) {
  if (options.market.listings.empty()) options.market.listings = DefaultListings();
  options.market.provider = "lambdalabs";
  return market::StartMarketSimulator(std::move(options), [](Market& m) {
    return std::unique_ptr<market::ProviderApi>(new LambdaApi(m));
  });
}

}  // namespace hyperslice::sim::lambda
