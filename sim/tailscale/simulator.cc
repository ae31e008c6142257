// The Tailscale API v2 simulator (simulator.h, README.md). Written from Tailscale's published
// OpenAPI document ("Tailscale API", v2: paths /tailnet/{tailnet}/keys, /tailnet/{tailnet}/keys/
// {keyId}, /tailnet/{tailnet}/devices, /device/{deviceId}; schemas Key, KeyCapabilities, Device,
// Error; the OAuth scope each operation names) and its OAuth client documentation (client
// credentials grant at /api/v2/oauth/token, one-hour tokens), and checked against Tailscale's own
// Go client (scripts/tailscale-client-check), which decodes every answer with its own types.
#include "sim/tailscale/simulator.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <set>

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/json.h"
#include "src/base/strings.h"
#include "src/base/time.h"
#include "src/net/server.h"

namespace hyperslice::sim::tailscale {

namespace json = boost::json;
using jsonfield::ObjectField;

namespace {

// Route names: the counters' keys and the README's table.
constexpr char kToken[] = "POST /api/v2/oauth/token";
constexpr char kCreateKey[] = "POST /api/v2/tailnet/{tailnet}/keys";
constexpr char kListKeys[] = "GET /api/v2/tailnet/{tailnet}/keys";
constexpr char kGetKey[] = "GET /api/v2/tailnet/{tailnet}/keys/{keyId}";
constexpr char kDeleteKey[] = "DELETE /api/v2/tailnet/{tailnet}/keys/{keyId}";
constexpr char kListDevices[] = "GET /api/v2/tailnet/{tailnet}/devices";
constexpr char kGetDevice[] = "GET /api/v2/device/{deviceId}";
constexpr char kDeleteDevice[] = "DELETE /api/v2/device/{deviceId}";

// The OAuth scope each operation names in the OpenAPI document.
constexpr char kScopeKeys[] = "auth_keys";
constexpr char kScopeKeysRead[] = "auth_keys:read";
constexpr char kScopeDevices[] = "devices:core";
constexpr char kScopeDevicesRead[] = "devices:core:read";

// Auth keys default to, and may not exceed, 90 days (the document's expirySeconds).
constexpr int64_t kMaxKeySeconds = int64_t{90} * 24 * 3600;

struct Answer {
  int status = 200;
  std::string body;
  net::Headers headers;
};

Answer Json(const json::value& v, int status = 200) { return {status, json::serialize(v), {}}; }
// Tailscale's error body (components.schemas.Error): {"message": "..."}.
Answer Message(int status, std::string_view message) {
  return Json(json::object{{"message", message}}, status);
}
// The token endpoint speaks OAuth 2.0 (RFC 6749 §5.2), which clients parse: {"error", ...}.
Answer OAuthError(int status, std::string_view error, std::string_view description) {
  return Json(json::object{{"error", error}, {"error_description", description}}, status);
}
Answer TooMany(std::chrono::seconds after) {
  Answer a = Message(429, "rate limit exceeded, please retry later");
  a.headers.emplace_back("Retry-After", std::to_string(std::max<int64_t>(1, after.count())));
  return a;
}

// application/x-www-form-urlencoded: '+' is a space, %XX a byte. nullopt when an escape is bad.
std::optional<std::string> FormDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '+') {
      out += ' ';
    } else if (c == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      if (!std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
          !std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
        return std::nullopt;
      }
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

std::map<std::string, std::string> ParseForm(std::string_view body, bool* ok) {
  std::map<std::string, std::string> out;
  *ok = true;
  while (!body.empty()) {
    auto amp = body.find('&');
    std::string_view pair = body.substr(0, amp);
    body = amp == std::string_view::npos ? std::string_view() : body.substr(amp + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    auto k = FormDecode(pair.substr(0, eq));
    auto v = FormDecode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    if (!k || !v) {
      *ok = false;
      return {};
    }
    out[*k] = *v;
  }
  return out;
}

// Whether a set of granted scopes allows `needed`: the scope itself, "all", or for a ":read" scope
// its write form or "all:read" (Tailscale: a write scope includes the read access).
bool Grants(const std::vector<std::string>& granted, std::string_view needed) {
  for (const auto& g : granted) {
    if (g == needed || g == "all") return true;
    constexpr std::string_view kRead = ":read";
    if (needed.size() > kRead.size() && needed.substr(needed.size() - kRead.size()) == kRead) {
      if (g == "all:read" || g == needed.substr(0, needed.size() - kRead.size())) return true;
    }
  }
  return false;
}

bool ValidTag(const std::string& tag) {
  static const std::regex kTag("^tag:[a-zA-Z][-a-zA-Z0-9]*$");
  return std::regex_match(tag, kTag);
}

std::string JoinWith(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

struct Token {
  std::string client_id;
  std::vector<std::string> scopes;
  Clock::TimePoint expires;
};

struct Key {
  KeyInfo info;
  std::string secret;
  int64_t expiry_seconds = 0;
  std::chrono::system_clock::time_point created, expires;
  std::optional<std::chrono::system_clock::time_point> revoked;
};

struct Device {
  DeviceInfo info;
  std::chrono::system_clock::time_point created, last_seen;
  Clock::TimePoint offline_since;
  std::string machine_key, node_key, tailnet_lock_key;
};

struct Bucket {
  double tokens = 0;
  Clock::TimePoint refilled;
};

class Simulator final : public TailscaleSimulator {
 public:
  explicit Simulator(Options o)
      : o_(std::move(o)),
        rng_(o_.seed),
        wall_base_(std::chrono::system_clock::now()),
        steady_base_(o_.clock->Now()) {}

  Status Start() {
    net::HttpServer::Options so;
    so.address = o_.address;
    so.port = o_.api_port;
    so.threads = o_.threads;
    HS_ASSIGN_OR_RETURN(
        api_, net::HttpServer::Start(
                  so, [this](const net::ServerRequest& r, std::shared_ptr<net::Responder> out) {
                    Answer a = HandleApi(r);
                    out->Send(a.status, std::move(a.body), std::move(a.headers));
                  }));
    so.port = o_.control_port;
    so.threads = 1;
    HS_ASSIGN_OR_RETURN(
        control_, net::HttpServer::Start(
                      so, [this](const net::ServerRequest& r, std::shared_ptr<net::Responder> out) {
                        Answer a = HandleControl(r);
                        out->Send(a.status, std::move(a.body), std::move(a.headers));
                      }));
    return OkStatus();
  }

  ~Simulator() override { Stop(); }

  std::string api_endpoint() const override {
    return "http://" + o_.address + ":" + std::to_string(api_->port());
  }
  std::string control_endpoint() const override {
    return "http://" + o_.address + ":" + std::to_string(control_->port());
  }
  void Stop() override {
    if (api_) api_->Stop(std::chrono::milliseconds(1000));
    if (control_) control_->Stop(std::chrono::milliseconds(1000));
  }

  Result<DeviceInfo> Join(std::string_view auth_key, std::string_view hostname) override {
    std::lock_guard lock(mu_);
    Expire();
    Key* key = nullptr;
    for (auto& [id, k] : keys_) {
      if (k.secret == auth_key) key = &k;
    }
    // tailscaled's words for each refusal (`tailscale up` prints "backend error: ...").
    if (key == nullptr || key->revoked) {
      return Error::Make(Error::Code::kForbidden, "invalid key: unable to validate API key");
    }
    if (key->info.expired) return Error::Make(Error::Code::kForbidden, "invalid key: key expired");
    if (!key->info.reusable && key->info.uses > 0) {
      return Error::Make(Error::Code::kForbidden, "invalid key: authkey already used");
    }
    if (hostname.empty()) {
      return Error::Make(Error::Code::kInvalidArgument, "join: a hostname is required");
    }
    ++key->info.uses;
    Device d;
    d.info.node_id = RandomId('n');
    d.info.id = std::to_string(next_numeric_id_++);
    d.info.hostname = std::string(hostname);
    d.info.name = UniqueName(d.info.hostname) + "." + o_.dns_suffix;
    uint32_t v4 = AllocateAddress();
    char buf[64];
    std::snprintf(buf, sizeof buf, "100.%u.%u.%u", (v4 >> 16) & 0xff, (v4 >> 8) & 0xff, v4 & 0xff);
    d.info.addresses.emplace_back(buf);
    std::snprintf(buf, sizeof buf, "fd7a:115c:a1e0::%x:%x", (v4 >> 16) & 0xffff, v4 & 0xffff);
    d.info.addresses.emplace_back(buf);
    d.info.tags = key->info.tags;
    d.info.ephemeral = key->info.ephemeral;
    d.info.online = true;
    d.info.key_id = key->info.id;
    d.created = Wall();
    d.last_seen = d.created;
    d.machine_key = "mkey:" + RandomHex(64);
    d.node_key = "nodekey:" + RandomHex(64);
    d.tailnet_lock_key = "nlpub:" + RandomHex(64);
    devices_[d.info.node_id] = d;
    return d.info;
  }

  Status SetOnline(std::string_view device_id, bool online) override {
    std::lock_guard lock(mu_);
    Device* d = FindDevice(device_id);
    if (d == nullptr) return Error::Make(Error::Code::kNotFound, "no such device");
    if (d->info.online && !online) {
      d->offline_since = o_.clock->Now();
      d->last_seen = Wall();
    }
    d->info.online = online;
    return OkStatus();
  }

  std::vector<DeviceInfo> Devices() const override {
    std::lock_guard lock(mu_);
    Expire();
    std::vector<DeviceInfo> out;
    for (const auto& [id, d] : devices_) out.push_back(d.info);
    return out;
  }

  std::vector<KeyInfo> Keys() const override {
    std::lock_guard lock(mu_);
    Expire();
    std::vector<KeyInfo> out;
    for (const auto& [id, k] : keys_) out.push_back(k.info);
    return out;
  }

  void RateLimitNext(int count, std::chrono::seconds retry_after) override {
    std::lock_guard lock(mu_);
    forced_429_ = count;
    forced_retry_after_ = retry_after;
  }

  void RevokeTokens() override {
    std::lock_guard lock(mu_);
    tokens_.clear();
  }

  int64_t Requests(std::string_view route) const override {
    std::lock_guard lock(mu_);
    auto it = requests_.find(std::string(route));
    return it == requests_.end() ? 0 : it->second;
  }
  int64_t TokensIssued() const override {
    std::lock_guard lock(mu_);
    return tokens_issued_;
  }

 private:
  // Wall time that moves with the simulator's clock, so a FakeClock also ages timestamps.
  std::chrono::system_clock::time_point Wall() const {
    return wall_base_ + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            o_.clock->Now() - steady_base_);
  }

  std::string RandomChars(size_t n, std::string_view alphabet) {
    std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
    std::string s;
    for (size_t i = 0; i < n; ++i) s += alphabet[pick(rng_)];
    return s;
  }
  std::string RandomHex(size_t n) { return RandomChars(n, "0123456789abcdef"); }
  // Tailscale's stable ids: a kind letter, random characters, "CNTRL" ("k123456CNTRL").
  std::string RandomId(char kind) {
    return std::string(1, kind) +
           RandomChars(11, "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789") + "CNTRL";
  }

  // A free address in 100.64.0.0/10 (the low 22 bits), never 100.100.100.100 (Tailscale's own
  // resolver address) nor a network or broadcast-looking .0/.255.
  uint32_t AllocateAddress() {
    std::uniform_int_distribution<uint32_t> pick(1, (1u << 22) - 2);
    while (true) {
      uint32_t low = pick(rng_);
      uint32_t v4 = (64u << 16) + low;  // 100.(64 + low >> 16).x.y as the three low octets
      if ((v4 & 0xff) == 0 || (v4 & 0xff) == 255) continue;
      if (v4 == ((100u << 16) | (100u << 8) | 100u)) continue;
      if (used_addresses_.insert(v4).second) return v4;
    }
  }

  // Tailscale gives a second device with a taken name "<name>-1", "<name>-2", ...
  std::string UniqueName(const std::string& hostname) {
    std::string base;
    for (char c : hostname) {
      base +=
          std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '-';
    }
    auto taken = [&](const std::string& n) {
      return std::any_of(devices_.begin(), devices_.end(), [&](const auto& e) {
        return e.second.info.name == n + "." + o_.dns_suffix;
      });
    };
    std::string name = base;
    for (int i = 1; taken(name); ++i) name = base + "-" + std::to_string(i);
    return name;
  }

  // Expired keys become invalid; ephemeral devices offline past the timeout are removed. Applied
  // lazily before any read (hence const over mutable state): what time alone changes.
  void Expire() const {
    auto wall = Wall();
    for (auto& [id, k] : keys_) {
      if (wall >= k.expires) k.info.expired = true;
    }
    auto now = o_.clock->Now();
    for (auto it = devices_.begin(); it != devices_.end();) {
      const Device& d = it->second;
      if (d.info.ephemeral && !d.info.online &&
          now - d.offline_since >= o_.ephemeral_offline_timeout) {
        it = devices_.erase(it);
      } else {
        ++it;
      }
    }
  }

  Device* FindDevice(std::string_view id) {
    if (auto it = devices_.find(std::string(id)); it != devices_.end()) return &it->second;
    for (auto& [nid, d] : devices_) {
      if (d.info.id == id) return &d;
    }
    return nullptr;
  }

  const OAuthClient* FindClient(const std::string& id) const {
    for (const auto& c : o_.clients) {
      if (c.id == id) return &c;
    }
    return nullptr;
  }

  // Token bucket per OAuth client: nullopt when admitted, else how long until a request fits.
  std::optional<std::chrono::seconds> Throttle(const std::string& client_id) {
    if (o_.requests_per_second <= 0) return std::nullopt;
    auto now = o_.clock->Now();
    auto [it, fresh] = buckets_.try_emplace(client_id);
    Bucket& b = it->second;
    if (fresh) {
      b.tokens = o_.burst;
      b.refilled = now;
    }
    double elapsed = std::chrono::duration<double>(now - b.refilled).count();
    b.tokens = std::min<double>(o_.burst, b.tokens + elapsed * o_.requests_per_second);
    b.refilled = now;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return std::nullopt;
    }
    double wait = (1 - b.tokens) / o_.requests_per_second;
    return std::chrono::seconds(static_cast<int64_t>(wait) + 1);
  }

  // ---------------------------------------------------------------------------------------------
  // The API listener.

  Answer HandleApi(const net::ServerRequest& r) {
    std::lock_guard lock(mu_);
    Expire();
    std::string tailnet, id;
    const char* route = Route(r, &tailnet, &id);
    if (route == nullptr) return Message(404, "not found");
    ++requests_[route];
    if (forced_429_ > 0) {
      --forced_429_;
      return TooMany(forced_retry_after_);
    }
    if (std::string_view(route) == kToken) return IssueToken(r);

    // Access tokens are Bearer tokens, or the username of Basic auth with an empty password.
    std::string h = r.Header("authorization");
    std::string token;
    if (h.rfind("Bearer ", 0) == 0) {
      token = h.substr(7);
    } else if (h.rfind("Basic ", 0) == 0) {
      auto decoded = Base64Decode(h.substr(6), "basic credentials");
      if (decoded.ok()) token = decoded->substr(0, decoded->find(':'));
    }
    auto t = tokens_.find(token);
    if (token.empty() || t == tokens_.end() || o_.clock->Now() >= t->second.expires) {
      return Message(401, "API token invalid");
    }
    const Token& tok = t->second;
    if (auto wait = Throttle(tok.client_id)) return TooMany(*wait);
    if (!tailnet.empty() && tailnet != "-" && tailnet != o_.tailnet) {
      return Message(404, "tailnet not found");
    }
    const char* scope = ScopeOf(route);
    if (!Grants(tok.scopes, scope)) {
      // What Tailscale answers a token whose scopes do not cover the call.
      return Message(403,
                     "calling actor does not have enough permissions to perform this function");
    }
    std::string_view rt(route);
    if (rt == kCreateKey) return CreateKey(r, tok);
    if (rt == kListKeys) return ListKeys();
    if (rt == kGetKey) return GetKey(id);
    if (rt == kDeleteKey) return DeleteKey(id);
    if (rt == kListDevices) return ListDevices(r);
    if (rt == kGetDevice) return GetDevice(r, id);
    return DeleteDevice(id);
  }

  static const char* ScopeOf(std::string_view route) {
    if (route == kCreateKey || route == kDeleteKey) return kScopeKeys;
    if (route == kListKeys || route == kGetKey) return kScopeKeysRead;
    if (route == kDeleteDevice) return kScopeDevices;
    return kScopeDevicesRead;
  }

  static const char* Route(const net::ServerRequest& r, std::string* tailnet, std::string* id) {
    const std::string& m = r.method;
    std::string_view p = r.path;
    if (p == "/api/v2/oauth/token") return m == "POST" ? kToken : nullptr;
    constexpr std::string_view kTailnet = "/api/v2/tailnet/";
    constexpr std::string_view kDevice = "/api/v2/device/";
    if (p.rfind(kTailnet, 0) == 0) {
      p.remove_prefix(kTailnet.size());
      auto slash = p.find('/');
      if (slash == std::string_view::npos || slash == 0) return nullptr;
      *tailnet = std::string(p.substr(0, slash));
      std::string_view rest = p.substr(slash);
      if (rest == "/keys") {
        if (m == "POST") return kCreateKey;
        if (m == "GET") return kListKeys;
        return nullptr;
      }
      if (rest == "/devices") return m == "GET" ? kListDevices : nullptr;
      constexpr std::string_view kKeys = "/keys/";
      if (rest.rfind(kKeys, 0) == 0 && rest.size() > kKeys.size() &&
          rest.find('/', kKeys.size()) == std::string_view::npos) {
        *id = std::string(rest.substr(kKeys.size()));
        if (m == "GET") return kGetKey;
        if (m == "DELETE") return kDeleteKey;
      }
      return nullptr;
    }
    if (p.rfind(kDevice, 0) == 0 && p.size() > kDevice.size() &&
        p.find('/', kDevice.size()) == std::string_view::npos) {
      *id = std::string(p.substr(kDevice.size()));
      if (m == "GET") return kGetDevice;
      if (m == "DELETE") return kDeleteDevice;
    }
    return nullptr;
  }

  // POST /api/v2/oauth/token: the client credentials grant (RFC 6749 §4.4). The client
  // authenticates with HTTP Basic (id and secret form-encoded, §2.3.1) or with client_id and
  // client_secret in the form body; golang.org/x/oauth2 tries the first, then the second.
  Answer IssueToken(const net::ServerRequest& r) {
    bool ok = true;
    auto form = ParseForm(r.body, &ok);
    if (!ok) return OAuthError(400, "invalid_request", "the body is not form-encoded");
    std::string id = form["client_id"], secret = form["client_secret"];
    std::string h = r.Header("authorization");
    if (h.rfind("Basic ", 0) == 0) {
      auto decoded = Base64Decode(h.substr(6), "basic credentials");
      if (!decoded.ok()) return OAuthError(400, "invalid_request", "bad basic credentials");
      auto colon = decoded->find(':');
      auto uid = FormDecode(decoded->substr(0, colon));
      auto usecret =
          FormDecode(colon == std::string::npos ? std::string() : decoded->substr(colon + 1));
      if (!uid || !usecret) return OAuthError(400, "invalid_request", "bad basic credentials");
      id = *uid;
      secret = *usecret;
    }
    if (form["grant_type"] != "client_credentials") {
      return OAuthError(400, "unsupported_grant_type", "only client_credentials is supported");
    }
    const OAuthClient* client = FindClient(id);
    // One answer for an unknown id and a wrong secret: which one was wrong is not told.
    if (client == nullptr || secret.empty() || client->secret != secret) {
      return OAuthError(401, "invalid_client", "invalid client id or secret");
    }
    if (auto wait = Throttle(client->id)) return TooMany(*wait);
    std::vector<std::string> scopes = SplitNonEmpty(form["scope"], ' ');
    for (const auto& s : scopes) {
      if (!Grants(client->scopes, s)) {
        return OAuthError(400, "invalid_scope", "scope " + s + " is not granted to this client");
      }
    }
    if (scopes.empty()) scopes = client->scopes;
    std::string token = "tskey-api-" + RandomId('k') + "-" + RandomChars(32, "0123456789abcdef");
    tokens_[token] = Token{client->id, scopes, o_.clock->Now() + o_.token_lifetime};
    ++tokens_issued_;
    return Json(json::object{{"access_token", token},
                             {"token_type", "Bearer"},
                             {"expires_in", o_.token_lifetime.count()},
                             {"scope", JoinWith(scopes, " ")}});
  }

  // POST /tailnet/{tailnet}/keys: an auth key (keyType "auth", the default). The request schema
  // (the document's createKey) is checked strictly so a client sending a misspelt field learns it.
  Answer CreateKey(const net::ServerRequest& r, const Token& tok) {
    boost::system::error_code ec;
    json::value body = json::parse(r.body, ec);
    if (ec || !body.is_object()) return Message(400, "invalid request body: not a JSON object");
    const json::object& o = body.get_object();
    static const std::set<std::string> kFields = {"keyType",       "description", "capabilities",
                                                  "expirySeconds", "scopes",      "tags"};
    for (const auto& kv : o) {
      if (!kFields.count(std::string(kv.key()))) {
        return Message(400,
                       "invalid request body: unknown field \"" + std::string(kv.key()) + "\"");
      }
    }
    if (auto* kt = o.if_contains("keyType")) {
      if (!kt->is_string()) return Message(400, "keyType must be a string");
      if (kt->get_string() != "auth") {
        return Message(400, "keyType \"" + std::string(kt->get_string()) +
                                "\" is not served by this simulator (auth keys only)");
      }
    }
    if (o.contains("scopes") || o.contains("tags")) {
      return Message(400, "scopes and tags apply to OAuth clients and federated identities only");
    }
    std::string description;
    if (auto* d = o.if_contains("description")) {
      if (!d->is_string()) return Message(400, "description must be a string");
      description = std::string(d->get_string());
      static const std::regex kDescription("^[a-zA-Z0-9 -]*$");
      if (description.size() > 50 || !std::regex_match(description, kDescription)) {
        return Message(
            400, "description must be at most 50 alphanumeric characters, hyphens and spaces");
      }
    }
    int64_t expiry = 0;
    if (auto* e = o.if_contains("expirySeconds")) {
      if (!e->is_int64() && !e->is_uint64())
        return Message(400, "expirySeconds must be an integer");
      expiry = e->is_int64() ? e->get_int64() : static_cast<int64_t>(e->get_uint64());
      if (expiry < 0 || expiry > kMaxKeySeconds) {
        return Message(400, "expirySeconds must be between 0 and 7776000 (90 days)");
      }
    }
    if (expiry == 0) expiry = kMaxKeySeconds;
    const json::object* caps = ObjectField(o, "capabilities");
    const json::object* devices = caps ? ObjectField(*caps, "devices") : nullptr;
    if (devices == nullptr) return Message(400, "capabilities.devices is required for an auth key");
    Key k;
    if (const json::object* create = ObjectField(*devices, "create")) {
      for (const auto& kv : *create) {
        std::string f(kv.key());
        if (f == "reusable" || f == "ephemeral" || f == "preauthorized") {
          if (!kv.value().is_bool())
            return Message(400, "capabilities.devices.create." + f + " must be a boolean");
          bool v = kv.value().get_bool();
          (f == "reusable"    ? k.info.reusable
           : f == "ephemeral" ? k.info.ephemeral
                              : k.info.preauthorized) = v;
        } else if (f == "tags") {
          if (kv.value().is_null()) continue;  // Go's nil slice
          if (!kv.value().is_array())
            return Message(400, "capabilities.devices.create.tags must be an array");
          for (const auto& t : kv.value().get_array()) {
            if (!t.is_string() || !ValidTag(std::string(t.get_string()))) {
              return Message(
                  400, "tag " + (t.is_string() ? std::string(t.get_string()) : json::serialize(t)) +
                           " is invalid: tags look like \"tag:<name>\"");
            }
            k.info.tags.emplace_back(t.get_string());
          }
        } else {
          return Message(
              400, "invalid request body: unknown field \"capabilities.devices.create." + f + "\"");
        }
      }
    }
    // Keys made with an OAuth token belong to the tailnet: they must be tagged with tags the
    // client owns (the document's KeyCapabilities.tags).
    const OAuthClient* client = FindClient(tok.client_id);
    if (k.info.tags.empty()) {
      return Message(400, "auth keys created by an OAuth client must have tags");
    }
    std::vector<std::string> foreign;
    for (const auto& t : k.info.tags) {
      if (client == nullptr ||
          std::find(client->tags.begin(), client->tags.end(), t) == client->tags.end()) {
        foreign.push_back(t);
      }
    }
    if (!foreign.empty()) {
      return Message(
          400, "requested tags [" + JoinWith(foreign, ", ") + "] are invalid or not permitted");
    }
    k.info.id = RandomId('k');
    k.info.description = description;
    k.secret = "tskey-auth-" + k.info.id + "-" +
               RandomChars(32, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
    k.expiry_seconds = expiry;
    k.created = Wall();
    k.expires = k.created + std::chrono::seconds(expiry);
    keys_[k.info.id] = k;
    json::object out = KeyJson(k);
    out["key"] = k.secret;  // only here: the secret is never shown again
    return Json(out);
  }

  json::object KeyJson(const Key& k) const {
    json::object create{{"reusable", k.info.reusable},
                        {"ephemeral", k.info.ephemeral},
                        {"preauthorized", k.info.preauthorized},
                        {"tags", json::array(k.info.tags.begin(), k.info.tags.end())}};
    json::object o{
        {"id", k.info.id},
        {"keyType", "auth"},
        {"description", k.info.description},
        {"expirySeconds", k.expiry_seconds},
        {"created", FormatRfc3339(k.created)},
        {"expires", FormatRfc3339(k.expires)},
        {"capabilities", json::object{{"devices", json::object{{"create", std::move(create)}}}}},
        // Keys made by a trust credential have no user.
        {"userId", ""},
    };
    // A revoked, expired or spent single-use key reads back as invalid.
    bool spent = !k.info.reusable && k.info.uses > 0;
    if (k.revoked) o["revoked"] = FormatRfc3339(*k.revoked);
    o["invalid"] = k.revoked.has_value() || k.info.expired || spent;
    return o;
  }

  Answer ListKeys() {
    json::array keys;
    for (const auto& [id, k] : keys_) {
      // "a list of active auth keys": revoked, expired and spent keys are left out.
      if (k.revoked || k.info.expired || (!k.info.reusable && k.info.uses > 0)) continue;
      keys.push_back(KeyJson(k));
    }
    return Json(json::object{{"keys", std::move(keys)}});
  }

  Answer GetKey(const std::string& id) {
    auto it = keys_.find(id);
    if (it == keys_.end()) return Message(404, "key not found");
    return Json(KeyJson(it->second));
  }

  Answer DeleteKey(const std::string& id) {
    auto it = keys_.find(id);
    if (it == keys_.end()) return Message(404, "key not found");
    if (!it->second.revoked) it->second.revoked = Wall();
    return {200, "", {}};
  }

  json::object DeviceJson(const Device& d, bool all) const {
    const auto& i = d.info;
    json::object o{
        {"addresses", json::array(i.addresses.begin(), i.addresses.end())},
        {"id", i.id},
        {"nodeId", i.node_id},
        // Devices of OAuth-made keys are tagged, owned by their tags: Tailscale's pseudo-user.
        {"user", "tagged-devices"},
        {"name", i.name},
        {"hostname", i.hostname},
        {"clientVersion", "1.102.5-t0000000000-g0000000000"},
        {"updateAvailable", false},
        {"os", "linux"},
        {"created", FormatRfc3339(d.created)},
        {"connectedToControl", i.online},
        // Tagged devices' node keys do not expire: the zero time, as Tailscale sends it.
        {"keyExpiryDisabled", !i.tags.empty()},
        {"expires", i.tags.empty() ? FormatRfc3339(d.created + std::chrono::hours(24 * 180))
                                   : "0001-01-01T00:00:00Z"},
        {"authorized", true},
        {"isExternal", false},
        {"machineKey", d.machine_key},
        {"nodeKey", d.node_key},
        {"blocksIncomingConnections", false},
        {"tailnetLockKey", d.tailnet_lock_key},
        {"tailnetLockError", ""},
        {"tags", json::array(i.tags.begin(), i.tags.end())},
        {"isEphemeral", i.ephemeral},
    };
    // "Omitted if the device has never been online or connectedToControl is true."
    if (!i.online) o["lastSeen"] = FormatRfc3339(d.last_seen);
    if (all) {
      o["enabledRoutes"] = json::array();
      o["advertisedRoutes"] = json::array();
      o["clientConnectivity"] =
          json::object{{"endpoints", json::array()},
                       {"mappingVariesByDestIP", false},
                       {"latency", json::object()},
                       {"clientSupports", json::object{{"hairPinning", nullptr},
                                                       {"ipv6", false},
                                                       {"pcp", false},
                                                       {"pmp", false},
                                                       {"udp", true},
                                                       {"upnp", false}}}};
      o["postureIdentity"] = json::object{{"disabled", true}};
      o["sshEnabled"] = false;
    }
    return o;
  }

  // fields=default|all (absent: default); anything else is refused as Tailscale does.
  static std::optional<bool> AllFields(const net::ServerRequest& r) {
    std::string f = r.Query("fields");
    if (f.empty() || f == "default") return false;
    if (f == "all") return true;
    return std::nullopt;
  }

  Answer ListDevices(const net::ServerRequest& r) {
    auto all = AllFields(r);
    if (!all) return Message(400, "invalid fields value: want \"all\" or \"default\"");
    json::array out;
    for (const auto& [id, d] : devices_) out.push_back(DeviceJson(d, *all));
    return Json(json::object{{"devices", std::move(out)}});
  }

  Answer GetDevice(const net::ServerRequest& r, const std::string& id) {
    auto all = AllFields(r);
    if (!all) return Message(400, "invalid fields value: want \"all\" or \"default\"");
    const Device* d = FindDevice(id);
    if (d == nullptr) return Message(404, "device not found");
    return Json(DeviceJson(*d, *all));
  }

  Answer DeleteDevice(const std::string& id) {
    Device* d = FindDevice(id);
    if (d == nullptr) return Message(404, "device not found");
    devices_.erase(d->info.node_id);
    return {200, "", {}};
  }

  // ---------------------------------------------------------------------------------------------
  // The control listener: what a machine does against the coordination server, for tests and
  // tools that cannot call Join() in process (scripts/tailscale-client-check).
  //   POST /control/join {"authKey","hostname"}      → 200 device, 403 {"message"} when refused
  //   POST /control/online {"deviceId","online"}     → 200
  //   POST /control/rate-limit {"count","retryAfterSeconds"} → 200
  Answer HandleControl(const net::ServerRequest& r) {
    boost::system::error_code ec;
    json::value body = json::parse(r.body.empty() ? std::string("{}") : r.body, ec);
    if (ec || !body.is_object()) return Message(400, "body is not a JSON object");
    const json::object& o = body.get_object();
    using jsonfield::BoolField;
    using jsonfield::IntField;
    using jsonfield::StringField;
    if (r.method != "POST") return Message(404, "not a control route");
    if (r.path == "/control/join") {
      auto d = Join(StringField(o, "authKey"), StringField(o, "hostname"));
      if (!d.ok()) {
        return Message(d.error().code == Error::Code::kForbidden ? 403 : 400, d.error().message);
      }
      std::lock_guard lock(mu_);
      return Json(DeviceJson(devices_.at(d->node_id), false));
    }
    if (r.path == "/control/online") {
      auto s = SetOnline(StringField(o, "deviceId"), BoolField(o, "online").value_or(true));
      if (!s.ok()) return Message(404, s.error().message);
      return {200, "{}", {}};
    }
    if (r.path == "/control/rate-limit") {
      RateLimitNext(static_cast<int>(IntField(o, "count").value_or(1)),
                    std::chrono::seconds(IntField(o, "retryAfterSeconds").value_or(1)));
      return {200, "{}", {}};
    }
    return Message(404, "not a control route");
  }

  Options o_;
  mutable std::mutex mu_;
  std::mt19937_64 rng_;
  std::chrono::system_clock::time_point wall_base_;
  Clock::TimePoint steady_base_;
  std::map<std::string, Token> tokens_;
  mutable std::map<std::string, Key> keys_;
  mutable std::map<std::string, Device> devices_;  // by nodeId
  std::set<uint32_t> used_addresses_;
  std::map<std::string, Bucket> buckets_;
  std::map<std::string, int64_t> requests_;
  int64_t tokens_issued_ = 0;
  uint64_t next_numeric_id_ = 92960230385;  // the document's example id, counting up
  int forced_429_ = 0;
  std::chrono::seconds forced_retry_after_{1};
  std::unique_ptr<net::HttpServer> api_, control_;
};

}  // namespace

Result<std::unique_ptr<TailscaleSimulator>> Start(Options options) {
  for (const auto& c : options.clients) {
    for (const auto& t : c.tags) {
      if (!ValidTag(t)) {
        return Error::Make(Error::Code::kInvalidArgument,
                           "tailscale simulator: client " + c.id + ": bad tag " + t);
      }
    }
  }
  auto s = std::make_unique<Simulator>(std::move(options));
  auto ok = s->Start();
  if (!ok.ok()) return ok.error();
  return std::unique_ptr<TailscaleSimulator>(std::move(s));
}

}  // namespace hyperslice::sim::tailscale
