// The Paperspace simulator: Paperspace's v1 REST API (https://api.paperspace.com/v1, as the
// "Paperspace OpenAPI" in DigitalOcean's Paperspace API reference and the Paperspace CLI's
// generated client describe it) over the shared market core:
//   GET/POST /v1/machines, GET/DELETE /v1/machines/{id},
//   GET/POST /v1/startup-scripts, GET/DELETE /v1/startup-scripts/{id}.
// `Authorization: Bearer <key>`. Errors are the v1 error body {"code","message","issues"?} with
// tRPC codes (UNAUTHORIZED 401, NOT_FOUND 404, BAD_REQUEST 400, TOO_MANY_REQUESTS 429 with
// Retry-After, INTERNAL_SERVER_ERROR 500). Out of capacity is a 400 with Paperspace's message.
// Machines go provisioning -> starting -> ready, and stopping after a delete, then disappear.
// Public IPs are 192.0.2.x (never dialed). A machine's payload keeps its startup script text
// (`startup_script`), template (`image`) and the create body, so a simulated machine can boot
// from it. Per-method counters and faults use the method names "POST /v1/machines",
// "GET /v1/machines", "GET /v1/machines/{id}", "DELETE /v1/machines/{id}",
// "POST /v1/startup-scripts", "GET /v1/startup-scripts", "GET /v1/startup-scripts/{id}",
// "DELETE /v1/startup-scripts/{id}".
#include "sim/paperspace/simulator.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>

#include <boost/json.hpp>

#include "sim/paperspace/internal.h"
#include "src/base/time.h"

namespace hyperslice::sim::paperspace {

namespace {

namespace json = boost::json;
using market::Market;

constexpr char kCapacityMessage[] =
    "We are currently out of capacity for the selected VM type. Try again in a few minutes, or "
    "select a different instance.";

// Paperspace writes milliseconds; the simulator's are always .000 (whole seconds).
std::string Iso(std::chrono::system_clock::time_point t) {
  return FormatRfc3339(std::chrono::floor<std::chrono::seconds>(t), 3);
}

// A listing's machine type: its `machineType` attribute, else its id up to '@' ("A4000@ny2"), so
// listings added through the control endpoint sell too.
std::string TypeOf(const market::Listing& l) {
  auto it = l.attributes.find("machineType");
  return it != l.attributes.end() ? it->second : l.id.substr(0, l.id.find('@'));
}

struct Script {
  std::string id, name, script, owner;
  bool run_once = false;
  std::vector<std::string> machines;
  std::chrono::system_clock::time_point created;
};

class Api final : public market::ProviderApi {
 public:
  explicit Api(Market& m) : m_(m) {}

  void Handle(const net::ServerRequest& r, std::shared_ptr<net::Responder> out) override {
    std::string route;  // the method name for counters and faults
    std::string id;     // {id} of the route
    if (!Route(r, &route, &id)) {
      Send(*out, 404, "NOT_FOUND", "No procedure found on path \"" + r.path + "\"");
      return;
    }
    if (route.empty()) {
      Send(*out, 405, "METHOD_NOT_SUPPORTED", "Method not supported: " + r.method);
      return;
    }
    std::string auth = r.Header("authorization");
    std::optional<std::string> owner;
    if (auth.rfind("Bearer ", 0) == 0) owner = m_.Authenticate(auth.substr(7));
    if (!owner) {
      Send(*out, 401, "UNAUTHORIZED", "You must be logged in to access this resource.");
      return;
    }
    if (auto wait = m_.Throttle(*owner)) {
      TooMany(*out, *wait);
      return;
    }
    auto fault = m_.Enter(route);
    if (fault) {
      using K = market::Fault::Kind;
      switch (*fault) {
        case K::kServerError:
          Send(*out, 500, "INTERNAL_SERVER_ERROR", "Internal server error");
          return;
        case K::kUnavailable:
          Send(*out, 503, "INTERNAL_SERVER_ERROR", "Service Unavailable");
          return;
        case K::kRateLimited:
          TooMany(*out, std::chrono::milliseconds(1000));
          return;
        case K::kUnauthorized:
          Send(*out, 401, "UNAUTHORIZED", "You must be logged in to access this resource.");
          return;
        case K::kCapacity:
          if (route == "POST /v1/machines") {
            Send(*out, 400, "BAD_REQUEST", kCapacityMessage);
            return;
          }
          break;
        case K::kDrop:
          out->Abort();
          return;
        case K::kSwallow:
          break;
      }
    }
    Answer a = Dispatch(route, id, r, *owner);
    if (fault && *fault == market::Fault::Kind::kSwallow) {
      out->Abort();  // performed, answer lost
      return;
    }
    out->Send(a.status, std::move(a.body), std::move(a.headers));
  }

 private:
  struct Answer {
    int status = 200;
    std::string body;
    net::Headers headers;
  };

  static Answer Error(int status, const std::string& code, const std::string& message,
                      json::array issues = {}) {
    json::object o{{"code", code}, {"message", message}};
    if (!issues.empty()) o["issues"] = std::move(issues);
    return {status, json::serialize(o), {}};
  }
  static void Send(net::Responder& out, int status, const std::string& code,
                   const std::string& message) {
    Answer a = Error(status, code, message);
    out.Send(a.status, std::move(a.body));
  }
  static void TooMany(net::Responder& out, std::chrono::milliseconds wait) {
    auto seconds = std::max<int64_t>(1, (wait.count() + 999) / 1000);
    Answer a = Error(429, "TOO_MANY_REQUESTS", "Too many requests, please try again later.");
    out.Send(429, std::move(a.body), {{"Retry-After", std::to_string(seconds)}});
  }

  // Maps the request to its method name; false: no such path; "" route: path without that verb.
  static bool Route(const net::ServerRequest& r, std::string* route, std::string* id) {
    const std::string& p = r.path;
    for (const char* base : {"/v1/machines", "/v1/startup-scripts"}) {
      std::string b(base);
      if (p == b) {
        if (r.method == "GET" || r.method == "POST") *route = r.method + " " + b;
        return true;
      }
      if (p.rfind(b + "/", 0) == 0 && p.size() > b.size() + 1 &&
          p.find('/', b.size() + 1) == std::string::npos) {
        *id = p.substr(b.size() + 1);
        if (r.method == "GET" || r.method == "DELETE") *route = r.method + " " + b + "/{id}";
        return true;
      }
    }
    return false;
  }

  Answer Dispatch(const std::string& route, const std::string& id, const net::ServerRequest& r,
                  const std::string& owner) {
    if (route == "GET /v1/machines") return ListMachines(r, owner);
    if (route == "POST /v1/machines") return CreateMachine(r, owner);
    if (route == "GET /v1/machines/{id}") return GetMachine(id, owner);
    if (route == "DELETE /v1/machines/{id}") return DeleteMachine(id, owner);
    if (route == "GET /v1/startup-scripts") return ListScripts(r, owner);
    if (route == "POST /v1/startup-scripts") return CreateScript(r, owner);
    if (route == "GET /v1/startup-scripts/{id}") return GetScript(id, owner);
    return DeleteScript(id, owner);
  }

  // Body parsing as tRPC-OpenAPI does it: unparsable JSON is PARSE_ERROR, a schema violation
  // BAD_REQUEST with zod issues.
  static std::optional<Answer> ParseBody(const std::string& text,
                                         const std::vector<internal::Field>& schema,
                                         json::value* body) {
    boost::system::error_code ec;
    *body = json::parse(text, ec);
    if (ec) return Error(400, "PARSE_ERROR", "Failed to parse request body");
    json::array issues = internal::Validate(*body, schema);
    if (!issues.empty()) return Error(400, "BAD_REQUEST", "Input validation failed", issues);
    return std::nullopt;
  }

  // ?limit= (1..120), ?after=<cursor>; orderBy dtCreated, order desc unless ?order=asc.
  template <typename T, typename ToJson>
  static Answer Page(const net::ServerRequest& r, std::vector<T> items, ToJson to_json,
                     const std::function<std::string(const T&)>& key) {
    int64_t limit = 20;
    if (std::string l = r.Query("limit"); !l.empty()) {
      char* end = nullptr;
      long long v = std::strtoll(l.c_str(), &end, 10);
      if (end == l.c_str() || *end != '\0' || v < 1 || v > 120) {
        return Error(400, "BAD_REQUEST", "Input validation failed",
                     json::array{json::object{
                         {"code", v > 120 ? "too_big" : "too_small"},
                         {"path", json::array{"limit"}},
                         {"message", v > 120 ? "Number must be less than or equal to 120"
                                             : "Number must be greater than or equal to 1"}}});
      }
      limit = v;
    }
    if (r.Query("order") != "asc") std::reverse(items.begin(), items.end());
    size_t start = 0;
    if (std::string after = r.Query("after"); !after.empty()) {
      auto it =
          std::find_if(items.begin(), items.end(), [&](const T& t) { return key(t) == after; });
      if (it == items.end()) {
        return Error(400, "BAD_REQUEST", "Invalid cursor");
      }
      start = static_cast<size_t>(it - items.begin()) + 1;
    }
    json::array out;
    size_t i = start;
    for (; i < items.size() && static_cast<int64_t>(out.size()) < limit; ++i) {
      out.push_back(to_json(items[i]));
    }
    bool more = i < items.size();
    json::object o{{"hasMore", more}, {"items", std::move(out)}};
    o["nextPage"] = more ? json::value(key(items[i - 1])) : json::value(nullptr);
    return {200, json::serialize(o), {}};
  }

  std::chrono::system_clock::time_point Wall(Clock::TimePoint t) {
    return std::chrono::system_clock::now() -
           std::chrono::duration_cast<std::chrono::system_clock::duration>(m_.clock().Now() - t);
  }

  static const char* PsState(market::State s) {
    switch (s) {
      case market::State::kPending:
        return "provisioning";
      case market::State::kBooting:
        return "starting";
      case market::State::kRunning:
        return "ready";
      case market::State::kStopping:
        return "stopping";
      case market::State::kTerminated:
        return "off";
    }
    return "off";
  }

  // The machine object of the v1 reference (machines-get).
  json::object MachineJson(const market::Instance& i) {
    const auto& l = i.listing;
    auto created = Iso(Wall(i.created));
    constexpr double kGiB = 1024.0 * 1024 * 1024;
    json::object o{
        {"id", i.id},
        {"name", i.name},
        {"state", PsState(i.state)},
        {"os", "Ubuntu 22.04"},
        {"machineType", TypeOf(l)},
        {"agentType", "LinuxMachine"},
        {"cpus", l.vcpus},
        {"ram", static_cast<int64_t>(l.memory_gb * kGiB)},
        {"storageTotal", static_cast<int64_t>(l.disk_gb * kGiB)},
        {"storageUsed", 0},
        {"accelerators",
         json::array{json::object{{"name", l.gpu_name},
                                  {"memory", static_cast<int64_t>(l.gpu_memory_gb * kGiB)},
                                  {"count", l.gpu_count}}}},
        {"region", l.region},
        {"privateIp", "10.64.0." + i.public_ip.substr(i.public_ip.rfind('.') + 1)},
        {"networkId", nullptr},
        {"publicIp", i.public_ip},
        {"publicIpType", "dynamic"},
        {"autoShutdownEnabled", false},
        {"autoShutdownTimeout", nullptr},
        {"autoShutdownForce", false},
        {"autoSnapshotEnabled", false},
        {"autoSnapshotFrequency", nullptr},
        {"autoSnapshotSaveCount", nullptr},
        {"updatesPending", false},
        {"restorePointEnabled", false},
        {"restorePointFrequency", nullptr},
        {"restorePointSnapshotId", nullptr},
        {"usageRate", static_cast<double>(i.price) / 1e6},
        {"storageRate", 0},
        {"dtCreated", created},
        {"dtModified", created},
        {"dtDeleted", nullptr},
        {"reservation", nullptr},
    };
    return o;
  }

  json::object Event(const std::string& name, const market::Instance& i) {
    auto now = Iso(std::chrono::system_clock::now());
    return json::object{{"id", NewId("ev", 10)}, {"name", name},     {"state", "new"},
                        {"machineId", i.id},     {"dtCreated", now}, {"dtStarted", nullptr},
                        {"dtFinished", nullptr}, {"error", nullptr}};
  }

  std::string NewId(const char* prefix, int len) {
    static constexpr char kAlpha[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t n = ++ids_ * 0x9E3779B97F4A7C15ULL;
    std::string s(prefix);
    for (int i = 0; i < len; ++i) {
      s += kAlpha[n % 36];
      n /= 36;
      if (n == 0) n = ids_ * 0xD1B54A32D192ED03ULL + static_cast<uint64_t>(i) + 7;
    }
    return s;
  }

  std::optional<market::Instance> Live(const std::string& id, const std::string& owner) {
    auto i = m_.Get(id);
    if (!i || i->owner != owner || i->state == market::State::kTerminated) return std::nullopt;
    return i;
  }

  Answer ListMachines(const net::ServerRequest& r, const std::string& owner) {
    std::vector<market::Instance> items;
    std::string name = r.Query("name"), region = r.Query("region"), type = r.Query("machineType");
    for (auto& i : m_.List(owner)) {
      if (i.state == market::State::kTerminated) continue;
      if (!name.empty() && i.name != name) continue;
      if (!region.empty() && i.listing.region != internal::RegionCode(region)) continue;
      if (!type.empty() && TypeOf(i.listing) != type) continue;
      items.push_back(std::move(i));
    }
    return Page<market::Instance>(
        r, std::move(items), [this](const market::Instance& i) { return MachineJson(i); },
        [](const market::Instance& i) { return i.id; });
  }

  Answer CreateMachine(const net::ServerRequest& r, const std::string& owner) {
    json::value body;
    if (auto bad = ParseBody(r.body, internal::CreateMachineSchema(), &body)) return *bad;
    const json::object& o = body.as_object();
    std::string type(o.at("machineType").get_string());
    std::string region = internal::RegionCode(std::string(o.at("region").get_string()));
    std::string script_id, script_text;
    bool run_once = false;
    if (const auto* s = o.if_contains("startupScriptId")) {
      script_id = std::string(s->get_string());
      std::lock_guard lock(mu_);
      auto it = scripts_.find(script_id);
      if (it == scripts_.end() || it->second.owner != owner) {
        return Error(404, "NOT_FOUND", "Startup script not found");
      }
      script_text = it->second.script;
      run_once = it->second.run_once;
    }
    std::string listing_id;
    bool type_known = false;
    for (const auto& l : m_.Listings()) {
      if (TypeOf(l) != type) continue;
      type_known = true;
      if (l.region == region) listing_id = l.id;
    }
    if (listing_id.empty()) {
      if (!type_known) return Error(400, "BAD_REQUEST", "Invalid machine type: " + type);
      // A type sold elsewhere, or vanished from this region: Paperspace has none to give.
      return Error(400, "BAD_REQUEST", kCapacityMessage);
    }
    market::Market::CreateSpec spec;
    spec.listing_id = listing_id;
    spec.name = std::string(o.at("name").get_string());
    spec.owner = owner;
    spec.payload = json::object{{"startup_script", script_text},
                                {"startupScriptId", script_id},
                                {"isRunOnce", run_once},
                                {"image", o.at("templateId")},
                                {"request", o}};
    auto res = m_.Create(spec, [this] { return NewId("ps", 7); });
    switch (res.error) {
      case Market::CreateError::kNone:
        break;
      case Market::CreateError::kNoSuchListing:
        return Error(400, "BAD_REQUEST", "Invalid machine type: " + type);
      case Market::CreateError::kCapacity:
      case Market::CreateError::kBidTooLow:
      case Market::CreateError::kNotSold:
        return Error(400, "BAD_REQUEST", kCapacityMessage);
    }
    if (!script_id.empty()) {
      std::lock_guard lock(mu_);
      scripts_[script_id].machines.push_back(res.instance.id);
    }
    json::object a{{"event", Event("create", res.instance)}, {"data", MachineJson(res.instance)}};
    return {200, json::serialize(a), {}};
  }

  Answer GetMachine(const std::string& id, const std::string& owner) {
    auto i = Live(id, owner);
    if (!i) return Error(404, "NOT_FOUND", "Machine not found");
    return {200, json::serialize(MachineJson(*i)), {}};
  }

  Answer DeleteMachine(const std::string& id, const std::string& owner) {
    auto i = Live(id, owner);
    if (!i || !m_.Terminate(id, owner)) return Error(404, "NOT_FOUND", "Machine not found");
    auto now = m_.Get(id);
    json::object a{{"event", Event("delete", *now)}, {"data", MachineJson(*now)}};
    return {200, json::serialize(a), {}};
  }

  json::object ScriptJson(const Script& s) {
    json::array machines;
    for (const auto& m : s.machines) machines.emplace_back(m);
    return json::object{{"id", s.id},
                        {"name", s.name},
                        {"description", nullptr},
                        {"isEnabled", true},
                        {"isRunOnce", s.run_once},
                        {"assignedMachineIds", std::move(machines)},
                        {"dtCreated", Iso(s.created)},
                        {"dtDeleted", nullptr}};
  }

  Answer ListScripts(const net::ServerRequest& r, const std::string& owner) {
    std::vector<Script> items;
    std::string name = r.Query("name");
    {
      std::lock_guard lock(mu_);
      for (const auto& id : script_order_) {
        auto it = scripts_.find(id);
        if (it == scripts_.end() || it->second.owner != owner) continue;
        if (!name.empty() && it->second.name != name) continue;
        items.push_back(it->second);
      }
    }
    return Page<Script>(
        r, std::move(items), [this](const Script& s) { return ScriptJson(s); },
        [](const Script& s) { return s.id; });
  }

  Answer CreateScript(const net::ServerRequest& r, const std::string& owner) {
    json::value body;
    if (auto bad = ParseBody(r.body, internal::CreateStartupScriptSchema(), &body)) return *bad;
    const json::object& o = body.as_object();
    Script s;
    s.id = NewId("sc", 7);
    s.name = std::string(o.at("name").get_string());
    s.script = std::string(o.at("script").get_string());
    s.owner = owner;
    if (const auto* v = o.if_contains("isRunOnce")) s.run_once = v->get_bool();
    s.created = std::chrono::system_clock::now();
    std::lock_guard lock(mu_);
    scripts_[s.id] = s;
    script_order_.push_back(s.id);
    return {200, json::serialize(ScriptJson(s)), {}};
  }

  Answer GetScript(const std::string& id, const std::string& owner) {
    std::lock_guard lock(mu_);
    auto it = scripts_.find(id);
    if (it == scripts_.end() || it->second.owner != owner) {
      return Error(404, "NOT_FOUND", "Startup script not found");
    }
    return {200, json::serialize(ScriptJson(it->second)), {}};
  }

  Answer DeleteScript(const std::string& id, const std::string& owner) {
    std::lock_guard lock(mu_);
    auto it = scripts_.find(id);
    if (it == scripts_.end() || it->second.owner != owner) {
      return Error(404, "NOT_FOUND", "Startup script not found");
    }
    json::object o = ScriptJson(it->second);
    o["dtDeleted"] = Iso(std::chrono::system_clock::now());
    scripts_.erase(it);
    script_order_.erase(std::remove(script_order_.begin(), script_order_.end(), id),
                        script_order_.end());
    return {200, json::serialize(o), {}};
  }

  Market& m_;
  std::atomic<uint64_t> ids_{0};
  std::mutex mu_;
  std::map<std::string, Script> scripts_;
  std::vector<std::string> script_order_;
};

}  // namespace

std::vector<market::Listing> DefaultListings() {
  // The machine types and regions of the client's built-in price table
  // (src/gpu/providers/paperspace/price_table.cc). The simulator's prices are its own and may
  // differ from the table (the table is only what the client believes).
  struct Type {
    const char* type;
    const char* gpu;
    int count;
    double gpu_mem, vcpus, mem, disk;
    double usd;
    std::vector<const char*> regions;
    int capacity;
  };
  const std::vector<Type> types = {
      {"H100", "H100", 1, 80, 20, 250, 100, 5.95, {"ny2"}, 2},
      {"H100x8", "H100", 8, 80, 128, 1638, 500, 47.60, {"ny2"}, 1},
      {"A100-80G", "A100-80G", 1, 80, 12, 90, 100, 3.18, {"ny2", "ams1"}, 3},
      {"A100-80Gx8", "A100-80G", 8, 80, 96, 640, 500, 25.44, {"ny2"}, 1},
      {"A100", "A100", 1, 40, 12, 90, 100, 3.09, {"ny2"}, 3},
      {"A6000", "A6000", 1, 48, 8, 45, 50, 1.89, {"ny2", "ca1", "ams1"}, 4},
      {"A5000", "A5000", 1, 24, 8, 45, 50, 1.38, {"ny2", "ca1", "ams1"}, 4},
      {"A4000", "A4000", 1, 16, 8, 45, 50, 0.76, {"ny2", "ca1", "ams1"}, 6},
      {"RTX4000", "RTX4000", 1, 8, 8, 30, 50, 0.56, {"ny2", "ca1", "ams1"}, 6},
      {"P5000", "P5000", 1, 16, 8, 30, 50, 0.78, {"ny2", "ca1", "ams1"}, 4},
      {"P4000", "P4000", 1, 8, 8, 30, 50, 0.51, {"ny2", "ca1", "ams1"}, 4},
  };
  std::vector<market::Listing> out;
  for (const auto& t : types) {
    for (const char* region : t.regions) {
      market::Listing l;
      l.id = std::string(t.type) + "@" + region;
      l.gpu_name = t.gpu;
      l.gpu_count = t.count;
      l.gpu_memory_gb = t.gpu_mem;
      l.vcpus = static_cast<int>(t.vcpus);
      l.memory_gb = t.mem;
      l.disk_gb = t.disk;
      l.region = region;
      l.price = static_cast<market::MicroUsd>(std::llround(t.usd * 1e6));
      l.capacity = t.capacity;
      l.attributes["machineType"] = t.type;
      out.push_back(std::move(l));
    }
  }
  return out;
}

Result<std::unique_ptr<market::MarketSimulator>> Start(market::ServerOptions options) {
  if (options.market.listings.empty()) options.market.listings = DefaultListings();
  options.market.provider = "paperspace";
  return market::StartMarketSimulator(std::move(options), [](market::Market& m) {
    return std::unique_ptr<market::ProviderApi>(std::make_unique<Api>(m));
  });
}

}  // namespace hyperslice::sim::paperspace
