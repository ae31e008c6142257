// The Vast.ai simulator: Vast's REST API over the shared market (sim/market), the paths, bodies,
// errors and statuses vast-cli 1.9.1 and our client (src/gpu/providers/vast) use:
//
//   POST /api/v0/bundles/            search offers (JSON query; GET with ?q= too)   no auth needed
//   PUT  /api/v0/asks/{id}/          create instance -> {"success":true,"new_contract":N}
//   GET  /api/v0/instances/{id}/     show instance -> {"instances":{...}|null}
//   GET  /api/v1/instances/          show instances, paged (select_filters, order_by, limit,
//                                    after_token, select_cols) -> {instances,next_token,...}
//   GET  /api/v0/instances/          legacy list -> {"instances_found":N,"instances":[...]}
//   DELETE /api/v0/instances/{id}/   destroy instance -> {"success":true}
//   GET  /api/v0/users/current/      show user (vast-cli also calls it to learn its role)
//   GET  /api/v0/gpu_names/unique/, /api/v0/gpu_types/   the catalogs vast-cli fetches on start
//
// Sources: the Vast.ai docs repository's api-reference/openapi.yaml (create/destroy/show instance
// bodies and errors, 429 bodies), api-reference/openapi/yaml/auto_get_api_v0_* (bundles, instances
// list and get), docs page api-reference/rate-limits-and-errors, vast-cli 1.9.1 vastai/api/*.py.
//
// Auth: `Authorization: Bearer <key>` (or the older ?api_key=); a bad key gets 401
// {"success":false,"error":"auth_error","msg":"Invalid user key"}, none at all 403
// {"success":false,"error":"auth_error","msg":"This action requires login."}. Searching needs no
// key (openapi: `security: []`). Rate limited: 429 {"success":false,"error":"rate_limit_exceeded",
// "msg":"API requests too frequent endpoint threshold=<s>"} with Retry-After.
//
// Instance statuses as Vast reports them: created (actual_status "created", cur_state "stopped")
// -> loading -> running; an outbid interruptible instance stays listed with intended_status
// "running", cur_state "stopped", actual_status "exited"; a destroyed one is gone at once
// ({"instances": null}) while the market bills it until terminated.
#include "sim/vast/simulator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <mutex>
#include <set>

#include "sim/vast/internal.h"
#include "src/base/base64.h"
#include "src/base/json.h"
#include "src/base/strings.h"

namespace hyperslice::sim::vast {

namespace {

using namespace internal;  // NOLINT(google-build-using-namespace): this file is the module
using market::Fault;
using market::Market;

constexpr char kBundles[] = "POST /api/v0/bundles/";
constexpr char kCreate[] = "PUT /api/v0/asks/{id}/";
constexpr char kGet[] = "GET /api/v0/instances/{id}/";
constexpr char kListV1[] = "GET /api/v1/instances/";
constexpr char kListV0[] = "GET /api/v0/instances/";
constexpr char kDelete[] = "DELETE /api/v0/instances/{id}/";
constexpr char kUser[] = "GET /api/v0/users/current/";

std::optional<int64_t> ParseId(std::string_view s) {
  if (s.empty() || s.size() > 15) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

json::value ParseOr(const std::string& s, bool* ok) {
  boost::system::error_code ec;
  json::value v = json::parse(s, ec);
  *ok = !ec;
  return v;
}

// The create body's fields (openapi.yaml createInstance requestBody, plus what vast-cli 1.9.1
// build_create_instance_payload sends) and what each may hold.
enum class Kind { kString, kNumber, kBool, kInt, kEnv, kStrings, kObject };
const std::map<std::string, Kind, std::less<>>& CreateFields() {
  static const std::map<std::string, Kind, std::less<>> f = {
      {"client_id", Kind::kString},
      {"image", Kind::kString},
      {"env", Kind::kEnv},
      {"price", Kind::kNumber},
      {"disk", Kind::kNumber},
      {"label", Kind::kString},
      {"extra", Kind::kString},
      {"onstart", Kind::kString},
      {"image_login", Kind::kString},
      {"python_utf8", Kind::kBool},
      {"lang_utf8", Kind::kBool},
      {"use_jupyter_lab", Kind::kBool},
      {"jupyter_dir", Kind::kString},
      {"force", Kind::kBool},
      {"cancel_unavail", Kind::kBool},
      {"template_hash_id", Kind::kString},
      {"template_id", Kind::kInt},
      {"user", Kind::kString},
      {"runtype", Kind::kString},
      {"args", Kind::kStrings},
      {"args_str", Kind::kString},
      {"target_state", Kind::kString},
      {"vm", Kind::kBool},
      {"volume_info", Kind::kObject},
  };
  return f;
}

bool TypeOk(Kind k, const json::value& v) {
  if (v.is_null()) return true;  // vast-cli sends null for every option not given
  switch (k) {
    case Kind::kString:
      return v.is_string();
    case Kind::kNumber:
      return v.is_number();
    case Kind::kInt:
      return v.is_int64() || v.is_uint64();
    case Kind::kBool:
      return v.is_bool();
    case Kind::kObject:
      return v.is_object();
    case Kind::kEnv:
      if (v.is_string()) return true;  // docker flags ("-e K=V -p 80:80"), openapi's form
      if (!v.is_object()) return false;
      for (const auto& [k2, v2] : v.get_object()) {
        if (!v2.is_string()) return false;
      }
      return true;
    case Kind::kStrings:
      if (!v.is_array()) return false;
      for (const auto& e : v.get_array()) {
        if (!e.is_string()) return false;
      }
      return true;
  }
  return false;
}

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kString:
      return "a string";
    case Kind::kNumber:
      return "a number";
    case Kind::kInt:
      return "an integer";
    case Kind::kBool:
      return "a boolean";
    case Kind::kObject:
      return "an object";
    case Kind::kEnv:
      return "an object of strings or a string of docker flags";
    case Kind::kStrings:
      return "a list of strings";
  }
  return "valid";
}

// "-e K=V -e X='y z' -p 8000:8000" -> {"K":"V","X":"y z","-p 8000:8000":"1"} (vast-cli parse_env).
json::object EnvFromFlags(std::string_view s) {
  json::object out;
  std::vector<std::string> words;
  std::string cur;
  char quote = 0;
  for (char c : s) {
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else {
        cur.push_back(c);
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == ' ') {
      if (!cur.empty()) words.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] == "-e") {
      size_t eq = words[i + 1].find('=');
      if (eq != std::string::npos) out[words[i + 1].substr(0, eq)] = words[i + 1].substr(eq + 1);
      ++i;
    } else if (words[i] == "-p") {
      out["-p " + words[i + 1]] = "1";
      ++i;
    }
  }
  return out;
}

// The container TCP ports an env's docker options publish: keys "-p <host>:<container>[/tcp]"
// (vast-cli parse_env keeps them as keys with the value "1"); Vast maps each container port to a
// public port of its own choosing, whatever host port the option names (docs "Networking & Ports").
std::vector<int> PublishedTcpPorts(const json::object& payload) {
  std::vector<int> out;
  const json::value* env = payload.if_contains("env");
  if (env == nullptr || !env->is_object()) return out;
  for (const auto& [k, v] : env->get_object()) {
    std::string_view key = k;
    if (!key.starts_with("-p ")) continue;
    key.remove_prefix(3);
    size_t colon = key.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view container = key.substr(colon + 1);
    std::string_view proto = "tcp";
    if (size_t slash = container.find('/'); slash != std::string_view::npos) {
      proto = container.substr(slash + 1);
      container = container.substr(0, slash);
    }
    int port = 0;
    for (char c : container) {
      if (c < '0' || c > '9' || port > 65535) {
        port = 0;
        break;
      }
      port = port * 10 + (c - '0');
    }
    if (proto == "tcp" && port >= 1 && port <= 65535) out.push_back(port);
  }
  return out;
}

bool RuntypeOk(std::string_view r) {
  // openapi enum, plus the space-separated combinations vast-cli resolve_runtype builds
  // ("ssh_direc ssh_proxy", "jupyter_direc ssh_direc ssh_proxy").
  static const std::set<std::string, std::less<>> words = {
      "ssh",       "jupyter",       "args",           "ssh_proxy",    "ssh_direct",
      "ssh_direc", "jupyter_proxy", "jupyter_direct", "jupyter_direc"};
  const std::vector<std::string> pieces = SplitNonEmpty(r, ' ');
  for (const std::string& piece : pieces) {
    if (!words.count(piece)) return false;
  }
  return !pieces.empty();
}

class VastApi final : public market::ProviderApi {
 public:
  explicit VastApi(Market& m) : m_(m) {}

  void Handle(const net::ServerRequest& r, std::shared_ptr<net::Responder> out) override {
    std::string path = r.path;
    if (path.size() > 1 && path.back() != '/') path.push_back('/');  // Django-style routes
    // Catalogs vast-cli fetches when it starts (cli/util.py), without a key.
    if (r.method == "GET" && path == "/api/v0/gpu_names/unique/") return GpuNames(out);
    if (r.method == "GET" && path == "/api/v0/gpu_types/") return GpuTypes(out);
    if (path == "/api/v0/bundles/") {
      if (r.method != "POST" && r.method != "GET") return NotAllowed(out);
      return Bundles(r, out);
    }
    constexpr std::string_view kAsks = "/api/v0/asks/";
    if (path.rfind(kAsks, 0) == 0 && path.find('/', kAsks.size()) == path.size() - 1) {
      if (r.method != "PUT") return NotAllowed(out);
      return Create(r, path.substr(kAsks.size(), path.size() - kAsks.size() - 1), out);
    }
    if (path == "/api/v1/instances/") {
      if (r.method != "GET") return NotAllowed(out);
      return ListV1(r, out);
    }
    if (path == "/api/v0/instances/") {
      if (r.method != "GET") return NotAllowed(out);
      return ListV0(r, out);
    }
    constexpr std::string_view kInst = "/api/v0/instances/";
    if (path.rfind(kInst, 0) == 0 && path.find('/', kInst.size()) == path.size() - 1) {
      std::string id = path.substr(kInst.size(), path.size() - kInst.size() - 1);
      if (r.method == "GET") return GetOne(r, id, out);
      if (r.method == "DELETE") return Destroy(r, id, out);
      return NotAllowed(out);
    }
    if (path == "/api/v0/users/current/") {
      if (r.method != "GET") return NotAllowed(out);
      return User(r, out);
    }
    out->Send(404, ErrorBody("not_found", "No API route for " + r.method + " " + r.path));
  }

 private:
  static void NotAllowed(const std::shared_ptr<net::Responder>& out) {
    out->Send(405, R"({"detail":"Method not allowed."})");
  }

  // Injected faults that change how a request is carried out rather than answered at once.
  struct Entered {
    bool swallow = false;   // perform it, then drop the answer
    bool capacity = false;  // a create fails with Vast's "no longer available"
  };

  // Authenticates, rate-limits and applies injected faults for `method`. Returns the account
  // ("" for an anonymous search), or nullopt when the request has been answered.
  std::optional<std::string> Enter(const net::ServerRequest& r, const char* method,
                                   const std::shared_ptr<net::Responder>& out, bool need_auth,
                                   Entered* entered) {
    // Every request is counted (and may draw an injected fault) on arrival; a refused key or a
    // rate limit answers before the fault takes effect.
    auto fault = m_.Enter(method);
    std::string key;
    std::string auth = r.Header("authorization");
    if (auth.rfind("Bearer ", 0) == 0) key = auth.substr(7);
    if (key.empty()) key = r.Query("api_key");
    std::optional<std::string> account;
    if (!key.empty()) {
      account = m_.Authenticate(key);
      if (!account) {
        // openapi.yaml: 401 for the instance calls; searchOffers documents a 404 for it.
        out->Send(std::string_view(method) == kBundles ? 404 : 401,
                  ErrorBody("auth_error", "Invalid user key"));
        return std::nullopt;
      }
    } else if (need_auth) {
      // openapi.yaml (showCharges): "403 Forbidden. Returned when no Authorization header is
      // provided."
      out->Send(403, ErrorBody("auth_error", "This action requires login."));
      return std::nullopt;
    }
    std::string who = account.value_or("anonymous:" + r.remote_address);
    // Vast limits per endpoint and identity (docs: rate-limits-and-errors).
    if (auto wait = m_.Throttle(who + " " + method)) return RateLimited(out, *wait);
    if (fault) {
      switch (*fault) {
        case Fault::Kind::kServerError:
          out->Send(500, ErrorBody("server_error", "Internal server error, please try again."));
          return std::nullopt;
        case Fault::Kind::kUnavailable:
          // What Vast's nginx front answers while the backend is away.
          out->Send(503,
                    "<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n"
                    "<body>\r\n<center><h1>503 Service Temporarily Unavailable</h1></center>\r\n"
                    "<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n",
                    {{"Content-Type", "text/html"}});
          return std::nullopt;
        case Fault::Kind::kRateLimited:
          return RateLimited(out, std::chrono::milliseconds(1000));
        case Fault::Kind::kUnauthorized:
          out->Send(401, ErrorBody("auth_error", "Invalid user key"));
          return std::nullopt;
        case Fault::Kind::kDrop:
          out->Abort();
          return std::nullopt;
        case Fault::Kind::kSwallow:
          entered->swallow = true;
          break;
        case Fault::Kind::kCapacity:
          entered->capacity = true;  // only a create has capacity to lack; others ignore it
          break;
      }
    }
    return account.value_or("");
  }

  std::optional<std::string> RateLimited(const std::shared_ptr<net::Responder>& out,
                                         std::chrono::milliseconds wait) {
    double seconds = std::ceil(static_cast<double>(wait.count()) / 1000.0);
    if (seconds < 1) seconds = 1;
    char threshold[32];
    std::snprintf(threshold, sizeof threshold, "%.1f", seconds);
    out->Send(429,
              ErrorBody("rate_limit_exceeded",
                        std::string("API requests too frequent endpoint threshold=") + threshold),
              {{"Retry-After", std::to_string(static_cast<int64_t>(seconds))}});
    return std::nullopt;
  }

  static void Finish(const std::shared_ptr<net::Responder>& out, bool swallow, int status,
                     std::string body) {
    if (swallow) {
      out->Abort();  // acted on, answer lost
      return;
    }
    out->Send(status, std::move(body));
  }

  void Bundles(const net::ServerRequest& r, const std::shared_ptr<net::Responder>& out) {
    Entered e;
    if (!Enter(r, kBundles, out, false, &e)) return;
    bool swallow = e.swallow;
    bool ok = false;
    json::value q =
        ParseOr(r.method == "GET" ? r.Query("q").empty() ? "{}" : r.Query("q") : r.body, &ok);
    // openapi.yaml searchOffers 400: {"error":"invalid_request","msg":"Invalid json body"}.
    if (!ok) return out->Send(400, ErrorBody("invalid_request", "Invalid json body"));
    if (!q.is_object()) {
      return out->Send(400,
                       ErrorBody("invalid_request", "Invalid query: must be dict of conditions"));
    }
    auto query = ParseQuery(q.get_object(), OfferFields(), true);
    if (!query.ok()) return out->Send(400, ErrorBody("invalid_request", query.error().message));
    if (query->order.empty()) query->order.emplace_back("score", true);  // vast-cli's default
    if (!query->limit) query->limit = 64;
    std::vector<json::object> rows;
    for (const auto& l : m_.Listings()) {
      if (query->type == "bid" && !l.spot_price) continue;
      if (query->type != "bid" && l.price <= 0) continue;
      json::object o = OfferJson(l, m_.Available(l.id), query->type);
      if (Matches(query->conditions, o)) rows.push_back(std::move(o));
    }
    OrderAndLimit(*query, &rows);
    json::array offers;
    for (auto& o : rows) offers.emplace_back(std::move(o));
    Finish(out, swallow, 200, json::serialize(json::object{{"offers", std::move(offers)}}));
  }

  void Create(const net::ServerRequest& r, const std::string& ask,
              const std::shared_ptr<net::Responder>& out) {
    Entered e;
    auto account = Enter(r, kCreate, out, true, &e);
    if (!account) return;
    bool swallow = e.swallow;
    auto ask_id = ParseId(ask);
    if (!ask_id) {
      return out->Send(400, ErrorBody("invalid_args",
                                      "error 400/3467: Invalid args: 'id' is "
                                      "required and must be a valid offer ID"));
    }
    json::object extra{{"ask_id", *ask_id}};
    auto invalid = [&](const std::string& msg) {
      out->Send(400, ErrorBody("invalid_args", "error 400/3467: Invalid args: " + msg, extra));
    };
    bool ok = false;
    json::value v = ParseOr(r.body, &ok);
    if (!ok || !v.is_object()) return invalid("request body must be a JSON object");
    const json::object& b = v.get_object();
    for (const auto& [k, val] : b) {
      auto it = CreateFields().find(std::string_view(k));
      if (it == CreateFields().end()) return invalid("unknown field '" + std::string(k) + "'");
      if (!TypeOk(it->second, val)) {
        return invalid("'" + std::string(k) + "' must be " + KindName(it->second));
      }
    }
    auto str = [&](const char* k) { return jsonfield::StringValue(b, k); };
    if (auto it = b.find("template_hash_id"); it != b.end() && !it->value().is_null()) {
      return invalid("template " + str("template_hash_id") + " does not exist");
    }
    if (str("image").empty()) return invalid("'image' is required");
    if (str("label").size() > 1024) return invalid("'label' is longer than 1024 characters");
    if (str("onstart").size() > 4048) return invalid("'onstart' is longer than 4048 characters");
    if (auto rt = str("runtype"); !rt.empty() && !RuntypeOk(rt)) {
      return invalid("'runtype' " + rt +
                     " is not one of ssh, jupyter, args, ssh_proxy, "
                     "ssh_direct, jupyter_proxy, jupyter_direct");
    }
    if (auto ts = str("target_state"); !ts.empty() && ts != "running" && ts != "stopped") {
      return invalid("'target_state' must be running or stopped");
    }
    std::optional<double> price;
    if (auto it = b.find("price"); it != b.end() && !it->value().is_null()) {
      price = it->value().to_number<double>();
      if (*price < 0.001 || *price > 128) {
        return out->Send(400, ErrorBody("invalid_price",
                                        "error 400/3468: Please set a bid price >= 0.001 and "
                                        "<= 128.",
                                        extra));
      }
    }
    if (auto it = b.find("disk"); it != b.end() && it->value().is_number()) {
      if (it->value().to_number<double>() < 1) return invalid("'disk' must be at least 1 GB");
    }
    std::string ask_str = std::to_string(*ask_id);
    auto listing = m_.FindListing(ask_str);
    auto gone = [&] {
      out->Send(410, ErrorBody("no_such_ask",
                               "error 410/3907: no_such_ask Instance type " + ask_str +
                                   " is no longer available.",
                               extra));
    };
    if (!listing) {
      return out->Send(404, ErrorBody("invalid_args",
                                      "error 404/3603: no_such_ask Instance type by id " + ask_str +
                                          " is not available.",
                                      extra));
    }
    if (e.capacity) return gone();
    // A VM (openapi.yaml createInstance `vm`) runs only on a machine that hosts VMs
    // (vms_enabled) and launches in SSH mode only (docs guides/instances/virtual-machines).
    bool vm = false;
    if (auto it = b.find("vm"); it != b.end() && it->value().is_bool()) vm = it->value().get_bool();
    if (vm) {
      auto attr = listing->attributes.find("vms_enabled");
      if (attr == listing->attributes.end() || attr->second != "true") {
        return invalid("offer " + ask_str + " is not on a machine that runs VMs");
      }
      if (auto rt = str("runtype"); !rt.empty() && rt.rfind("ssh", 0) != 0) {
        return invalid("'runtype' " + rt + " is not supported for VMs; use ssh");
      }
    }

    // What the machine boots from, as Vast keeps it with the instance.
    json::object payload;
    payload["image"] = str("image");
    if (auto it = b.find("env"); it != b.end() && it->value().is_object()) {
      payload["env"] = it->value();
    } else {
      payload["env"] = EnvFromFlags(str("env"));
    }
    payload["onstart"] = str("onstart");
    payload["vm"] = vm;
    payload["label"] = str("label");
    payload["runtype"] = str("runtype").empty() ? "ssh" : str("runtype");
    if (auto it = b.find("args"); it != b.end() && it->value().is_array()) {
      payload["args"] = it->value();
    } else {
      payload["args"] = json::array();
    }
    if (auto it = b.find("disk"); it != b.end() && it->value().is_number()) {
      payload["disk"] = it->value().to_number<double>();
    } else {
      payload["disk"] = 10.0;  // vast-cli's --disk default
    }

    Market::CreateSpec spec;
    spec.listing_id = ask_str;
    spec.name = str("label");
    spec.owner = *account;
    spec.spot = price.has_value();
    if (price) spec.bid = static_cast<market::MicroUsd>(std::llround(*price * 1e6));
    spec.tcp_ports = PublishedTcpPorts(payload);
    if (payload.at("runtype").as_string().starts_with("ssh")) spec.tcp_ports.push_back(22);
    spec.payload = std::move(payload);
    auto res = m_.Create(spec, [this] { return std::to_string(next_id_++); });
    switch (res.error) {
      case Market::CreateError::kNone:
        break;
      case Market::CreateError::kNoSuchListing:
      case Market::CreateError::kCapacity:
        return gone();
      case Market::CreateError::kBidTooLow: {
        char msg[160];
        std::snprintf(msg, sizeof msg,
                      "error 400/3470: Your bid of $%.4f/hr is below the minimum bid of "
                      "$%.4f/hr for offer %s.",
                      *price, static_cast<double>(listing->spot_price.value_or(0)) / 1e6,
                      ask_str.c_str());
        return out->Send(400, ErrorBody("invalid_price", msg, extra));
      }
      case Market::CreateError::kNotSold:
        return invalid(price ? "offer " + ask_str + " is not available as interruptible"
                             : "offer " + ask_str + " is only available as interruptible");
    }
    int64_t id = 0;
    for (char c : res.instance.id) id = id * 10 + (c - '0');
    Finish(out, swallow, 200,
           json::serialize(json::object{{"success", true}, {"new_contract", id}}));
  }

  bool Visible(const market::Instance& i) {
    std::lock_guard lock(mu_);
    if (destroyed_.count(i.id)) return false;
    return i.state != market::State::kTerminated || i.reclaimed;
  }

  json::object InstanceJson(const market::Instance& i) {
    using std::chrono::duration;
    auto now = m_.clock().Now();
    double wall = duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    double start = wall - duration<double>(now - i.created).count();
    json::object o = OfferJson(i.listing, 0, i.spot ? "bid" : "on-demand");
    for (const char* k :
         {"ask_contract_id", "bundled_results", "rented", "duration", "resource_type"}) {
      o.erase(k);
    }
    auto id = ParseId(i.id).value_or(0);
    o["id"] = id;
    const char* actual = "created";
    const char* cur = "stopped";
    const char* intended = "running";
    std::string status_msg = "Instance created, waiting for the machine.";
    switch (i.state) {
      case market::State::kPending:
        break;
      case market::State::kBooting:
        actual = "loading";
        cur = "running";
        status_msg = "Pulling image " + std::string(jsonfield::StringField(i.payload, "image"));
        break;
      case market::State::kRunning:
        actual = "running";
        cur = "running";
        status_msg = "success, running " + std::string(jsonfield::StringField(i.payload, "image"));
        break;
      case market::State::kStopping:
      case market::State::kTerminated:
        actual = "exited";
        cur = "stopped";
        intended = i.reclaimed ? "running" : "stopped";
        status_msg = i.reclaimed ? "Instance outbid: stopped until the bid is raised above the "
                                   "current minimum."
                                 : "Instance stopped.";
        break;
    }
    o["actual_status"] = actual;
    o["intended_status"] = intended;
    o["cur_state"] = cur;
    o["next_state"] = intended == std::string_view("running") ? "running" : "stopped";
    o["status_msg"] = status_msg;
    o["image_uuid"] = jsonfield::StringField(i.payload, "image");
    o["image_runtype"] = jsonfield::StringField(i.payload, "runtype");
    const json::value* args = i.payload.if_contains("args");
    o["image_args"] = args ? *args : json::value(json::array());
    o["label"] = i.name.empty() ? json::value(nullptr) : json::value(i.name);
    o["onstart"] = jsonfield::StringField(i.payload, "onstart");
    json::array extra_env;
    if (const json::value* env = i.payload.if_contains("env"); env && env->is_object()) {
      for (const auto& [k, v] : env->get_object()) {
        extra_env.push_back(json::array{json::string(k), v});
      }
    }
    o["extra_env"] = std::move(extra_env);
    o["is_bid"] = i.spot;
    o["gpu_totalram"] = o["gpu_total_ram"];
    o["duration"] = duration<double>(now - i.created).count();
    double price = static_cast<double>(i.price) / 1e6;
    o["dph_total"] = price;
    o["dph_base"] = price;
    o["public_ipaddr"] = i.public_ip;
    o["ssh_host"] = i.public_ip;
    auto ssh = i.tcp_ports.find(22);
    o["ssh_port"] = ssh != i.tcp_ports.end() ? ssh->second : 20000 + id % 10000;
    o["ssh_idx"] = "0";
    o["local_ipaddrs"] = "172.17.0.2";
    o["direct_port_start"] = 40000;
    o["direct_port_end"] = 40063;
    o["jupyter_token"] = "";
    const json::value* disk = i.payload.if_contains("disk");
    o["disk_space"] = disk && disk->is_number() ? disk->to_number<double>() : 10.0;
    o["start_date"] = start;
    o["end_date"] = start + 30 * 86400.0;
    o["uptime_mins"] = i.state == market::State::kRunning
                           ? duration<double>(now - i.running_since).count() / 60.0
                           : 0.0;
    o["gpu_util"] = nullptr;
    o["cpu_util"] = nullptr;
    o["gpu_temp"] = nullptr;
    o["mem_usage"] = nullptr;
    o["mem_limit"] = nullptr;
    o["vmem_usage"] = nullptr;
    o["disk_usage"] = nullptr;
    o["disk_util"] = nullptr;
    o["template_id"] = nullptr;
    o["template_hash_id"] = nullptr;
    o["template_name"] = nullptr;
    o["machine_dir_ssh_port"] = 21000 + id % 10000;
    // Port mappings exist only while the container runs (openapi.yaml showInstances).
    // Each published TCP port (docker's "<port>/tcp" -> HostIp/HostPort) with the public port the
    // market mapped to it; ssh launch modes publish 22 (docs "Networking & Ports").
    json::object ports;
    for (const auto& [port, public_port] : i.tcp_ports) {
      ports[std::to_string(port) + "/tcp"] = json::array{
          json::object{{"HostIp", "0.0.0.0"}, {"HostPort", std::to_string(public_port)}}};
    }
    o["ports"] =
        i.state == market::State::kRunning ? json::value(std::move(ports)) : json::value(nullptr);
    return o;
  }

  void GetOne(const net::ServerRequest& r, const std::string& id,
              const std::shared_ptr<net::Responder>& out) {
    Entered e;
    auto account = Enter(r, kGet, out, true, &e);
    if (!account) return;
    bool swallow = e.swallow;
    if (!ParseId(id)) {
      return out->Send(400, ErrorBody("invalid_args", "invalid instance_id"));
    }
    auto inst = m_.Get(id);
    json::value row = nullptr;
    // Someone else's instance is answered as if it did not exist.
    if (inst && inst->owner == *account && Visible(*inst)) row = InstanceJson(*inst);
    Finish(out, swallow, 200, json::serialize(json::object{{"instances", std::move(row)}}));
  }

  std::vector<json::object> Rows(const std::string& account) {
    std::vector<json::object> rows;
    for (const auto& i : m_.List(account)) {
      if (Visible(i)) rows.push_back(InstanceJson(i));
    }
    return rows;
  }

  void ListV0(const net::ServerRequest& r, const std::shared_ptr<net::Responder>& out) {
    Entered e;
    auto account = Enter(r, kListV0, out, true, &e);
    if (!account) return;
    bool swallow = e.swallow;
    json::array list;
    for (auto& o : Rows(*account)) list.emplace_back(std::move(o));
    json::object body{{"instances_found", list.size()}, {"instances", std::move(list)}};
    Finish(out, swallow, 200, json::serialize(body));
  }

  // v1 (openapi.yaml showInstances): select_filters (the search condition language, on stored
  // columns only: computed ones such as dph_total and num_gpus are refused), order_by
  // ([{"col","dir"}], a dir other than desc is asc, id always the last key), limit (default and
  // most 25, <= 0 means 5), after_token (keyset cursor), select_cols (unknown names are null).
  void ListV1(const net::ServerRequest& r, const std::shared_ptr<net::Responder>& out) {
    Entered e;
    auto account = Enter(r, kListV1, out, true, &e);
    if (!account) return;
    bool swallow = e.swallow;
    auto bad = [&](const char* code, const std::string& m) {
      out->Send(400, json::serialize(json::object{{"error", code}, {"msg", m}}));
    };
    auto not_key = [&](std::string_view col) {
      bad("invalid_request",
          "Error in query parameters: " + std::string(col) + " is not a valid search key");
    };
    bool ok = true;
    Query q;
    if (std::string f = r.Query("select_filters"); !f.empty()) {
      json::value v = ParseOr(f, &ok);
      if (!ok || !v.is_object())
        return bad("invalid_request", "select_filters is not a JSON object");
      for (const auto& [k, cond] : v.get_object()) {
        if (!Contains(FilterableInstanceFields(), k)) return not_key(k);
      }
      auto parsed = ParseQuery(v.get_object(), FilterableInstanceFields(), false);
      if (!parsed.ok()) return bad("invalid_request", parsed.error().message);
      q.conditions = std::move(parsed->conditions);
    }
    bool by_id = false;
    if (std::string o = r.Query("order_by"); !o.empty()) {
      json::value v = ParseOr(o, &ok);
      if (!ok || !v.is_array()) return bad("invalid_request", "order_by is not a JSON list");
      for (const auto& d : v.get_array()) {
        const json::object* c = d.if_object();
        const json::value* col = c ? c->if_contains("col") : nullptr;
        if (!col || !col->is_string()) return bad("invalid_request", "order_by: no col");
        if (!Contains(InstanceFields(), col->get_string())) return not_key(col->get_string());
        const json::value* dir = c->if_contains("dir");
        bool desc = dir && dir->is_string() && dir->get_string() == "desc";
        q.order.emplace_back(std::string(col->get_string()), desc);
        by_id = by_id || col->get_string() == "id";
      }
    }
    if (!by_id) q.order.emplace_back("id", false);
    int64_t limit = 25;
    if (std::string l = r.Query("limit"); !l.empty()) {
      char* end = nullptr;
      long long n = std::strtoll(l.c_str(), &end, 10);
      if (!end || *end != '\0') return bad("invalid_request", "limit is not an integer");
      limit = n <= 0 ? 5 : std::min<long long>(n, 25);
    }
    std::vector<std::string> cols;
    if (std::string s = r.Query("select_cols"); !s.empty()) {
      json::value v = ParseOr(s, &ok);
      if (!ok || !v.is_array()) return bad("invalid_request", "select_cols is not a JSON list");
      for (const auto& c : v.get_array()) {
        if (!c.is_string()) return bad("invalid_request", "select_cols holds a non-string");
        if (c.get_string() != "*") cols.emplace_back(c.get_string());
      }
    }
    std::vector<json::object> rows;
    for (auto& o : Rows(*account)) {
      if (Matches(q.conditions, o)) rows.push_back(std::move(o));
    }
    OrderAndLimit(q, &rows);
    // The cursor: {"values":{"id":<last id of the page>},"os_page":<page>}, base64, as Vast's.
    size_t offset = 0;
    int64_t page_no = 0;
    if (std::string t = r.Query("after_token"); !t.empty()) {
      auto raw = Base64Decode(t, "after_token");
      json::value c = raw.ok() ? ParseOr(*raw, &ok) : json::value(nullptr);
      const json::value* last = c.is_object() ? c.get_object().if_contains("values") : nullptr;
      last = last && last->is_object() ? last->get_object().if_contains("id") : nullptr;
      const json::value* pg = c.is_object() ? c.get_object().if_contains("os_page") : nullptr;
      if (!raw.ok() || !ok || !last || !last->is_int64() || !pg || !pg->is_int64()) {
        return bad("invalid_token", "Invalid pagination token");
      }
      page_no = pg->get_int64() + 1;
      offset = rows.size();
      for (size_t i = 0; i < rows.size(); ++i) {
        const json::value* id = rows[i].if_contains("id");
        if (id && id->is_int64() && id->get_int64() == last->get_int64()) offset = i + 1;
      }
    }
    json::object label_counts;
    for (const auto& row : rows) {
      const json::value* l = row.if_contains("label");
      std::string key = l && l->is_string() ? std::string(l->get_string()) : "";
      label_counts[key] = (label_counts.contains(key) ? label_counts[key].as_int64() : 0) + 1;
    }
    json::array page;
    int64_t last_id = 0;
    for (size_t i = offset; i < rows.size() && page.size() < static_cast<size_t>(limit); ++i) {
      last_id = rows[i].at("id").as_int64();
      if (cols.empty()) {
        page.emplace_back(std::move(rows[i]));
      } else {
        json::object p;
        for (const auto& c : cols) {
          const json::value* v = rows[i].if_contains(c);
          p[c] = v ? *v : json::value(nullptr);
        }
        page.emplace_back(std::move(p));
      }
    }
    json::value next = nullptr;
    if (offset + page.size() < rows.size()) {
      next = Base64Encode(json::serialize(
          json::object{{"values", json::object{{"id", last_id}}}, {"os_page", page_no}}));
    }
    size_t found = page.size();
    json::object body{{"success", true},
                      {"instances_found", found},
                      {"total_instances", rows.size()},
                      {"label_counts", std::move(label_counts)},
                      {"next_token", std::move(next)},
                      {"instances", std::move(page)}};
    Finish(out, swallow, 200, json::serialize(body));
  }

  static bool Contains(const std::vector<std::string>& v, std::string_view s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  }

  void Destroy(const net::ServerRequest& r, const std::string& id,
               const std::shared_ptr<net::Responder>& out) {
    Entered e;
    auto account = Enter(r, kDelete, out, true, &e);
    if (!account) return;
    bool swallow = e.swallow;
    if (!ParseId(id)) return out->Send(400, ErrorBody("invalid_args", "invalid instance_id"));
    auto inst = m_.Get(id);
    if (!inst || inst->owner != *account || !Visible(*inst)) {
      return out->Send(404, ErrorBody("not_found", "Instance not found"));
    }
    m_.Terminate(id, *account);
    {
      std::lock_guard lock(mu_);
      destroyed_.insert(id);
    }
    Finish(out, swallow, 200,
           json::serialize(
               json::object{{"success", true}, {"msg", "Instance destroyed successfully"}}));
  }

  void User(const net::ServerRequest& r, const std::shared_ptr<net::Responder>& out) {
    Entered e;
    auto account = Enter(r, kUser, out, true, &e);
    if (!account) return;
    bool swallow = e.swallow;
    uint64_t id = std::hash<std::string>{}(*account) % 900000 + 100000;
    // openapi.yaml showUser (id, key_id, email, balance, ssh_key, sid) and what vast-cli reads
    // (host_agreement_accepted); the key itself is never echoed here.
    json::object u{{"id", id},
                   {"key_id", id + 1000000},
                   {"sid", "sim-" + std::to_string(id)},
                   {"ssh_key", ""},
                   {"username", *account},
                   {"email", *account + "@example.com"},
                   {"fullname", *account},
                   {"balance", 0.0},
                   {"credit", 100.0},
                   {"has_billing", true},
                   {"host_agreement_accepted", false},
                   {"can_pay", true}};
    Finish(out, swallow, 200, json::serialize(u));
  }

  void GpuNames(const std::shared_ptr<net::Responder>& out) {
    (void)m_.Enter("GET /api/v0/gpu_names/unique/");  // counted, so tests see who asked
    std::set<std::string> names;
    for (const auto& l : m_.Listings()) names.insert(l.gpu_name);
    json::array a;
    for (const auto& n : names) a.emplace_back(n);
    out->Send(200, json::serialize(json::object{{"gpu_names", std::move(a)}}));
  }

  void GpuTypes(const std::shared_ptr<net::Responder>& out) {
    (void)m_.Enter("GET /api/v0/gpu_types/");
    std::map<std::string, double> ram;
    for (const auto& l : m_.Listings()) ram[l.gpu_name] = std::round(l.gpu_memory_gb * 1024);
    json::array a;
    for (const auto& [n, mb] : ram)
      a.push_back(json::object{{"canonical_name", n}, {"gpu_ram_mb", mb}});
    out->Send(200, json::serialize(json::object{{"gpu_types", std::move(a)}}));
  }

  Market& m_;
  std::atomic<int64_t> next_id_{27400001};  // contract ids look like Vast's (8 digits)
  std::mutex mu_;
  std::set<std::string> destroyed_;
};

}  // namespace

Result<std::unique_ptr<market::MarketSimulator>> Start(market::ServerOptions options) {
  if (options.market.listings.empty()) options.market.listings = DefaultListings();
  options.market.provider = "vastai";
  return market::StartMarketSimulator(std::move(options), [](Market& m) {
    return std::unique_ptr<market::ProviderApi>(std::make_unique<VastApi>(m));
  });
}

}  // namespace hyperslice::sim::vast
