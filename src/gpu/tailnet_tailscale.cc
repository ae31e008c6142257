// TailnetAdmin over Tailscale's API v2 (the published OpenAPI document; wire format in
// internal/tailscale_wire.h):
//   access token  → POST   /api/v2/oauth/token                 (client credentials; cached)
//   CreateAuthKey → POST   /api/v2/tailnet/{tailnet}/keys      (scope auth_keys)
//   ListDevices   → GET    /api/v2/tailnet/{tailnet}/devices   (scope devices:core:read)
//   DeleteDevice  → DELETE /api/v2/device/{deviceId}           (scope devices:core)
// Auth: "Authorization: Bearer <access token>". Transport, retries, rate limit and metrics are the
// provider clients' (internal/api_caller.h), labelled provider="tailscale": a key create is never
// re-sent after it may have been received (kAmbiguous; the orphan is single-use and expires within
// the launch timeout). A 401 on an API call means the cached token died early (revoked, or the
// server restarted): the token is dropped and the call made once more with a fresh one — safe for a
// create too, since a 401 is an answer to a request that was not acted on.
#include <algorithm>
#include <mutex>
#include <regex>

#include "src/gpu/internal/api_caller.h"
#include "src/gpu/internal/tailscale_wire.h"
#include "src/gpu/tailnet.h"

namespace hyperslice::gpu {

namespace {

namespace wire = internal::tailscale;
using internal::ApiCaller;
using internal::Redact;

// Tailscale publishes no request rate for the API; this bounds a runaway loop without queueing a
// burst of launches behind one another.
constexpr double kRps = 10;
constexpr int kBurst = 20;
// Auth keys live at most 90 days (the document's expirySeconds).
constexpr std::chrono::seconds kMaxKeyExpiry{int64_t{90} * 24 * 3600};
// A token is renewed this long before it expires (a quarter of its life when that is shorter), so
// a call never starts with a token about to die in flight.
constexpr std::chrono::seconds kRenewBefore{300};

bool ValidTag(const std::string& tag) {
  static const std::regex kTag("^tag:[a-zA-Z][-a-zA-Z0-9]*$");
  return std::regex_match(tag, kTag);
}

// Tailscale's error decoder with `secret` replaced in the message: a server that echoed a
// credential back must not carry it into a log line, a status or an Event.
internal::ErrorDecoder Redacting(std::string secret) {
  return [secret = std::move(secret)](const net::Response& response) {
    Error e = wire::DecodeError(response);
    e.message = Redact(std::move(e.message), secret);
    return e;
  };
}

class TailscaleAdmin final : public TailnetAdmin {
 public:
  TailscaleAdmin(std::unique_ptr<ApiCaller> api, TailscaleConfig config)
      : api_(std::move(api)), config_(std::move(config)) {}

  Result<AuthKey> CreateAuthKey(const AuthKeyRequest& request) override {
    // Tailscale refuses both with a 400; saying so here names the class's field.
    if (request.tags.empty()) {
      return MakeError(ErrorKind::kInvalid,
                       std::string(kTailscale) +
                           ": a key made by an OAuth client must be tagged; set "
                           "tailscaleConfig.tags to tags the OAuth client owns");
    }
    for (const auto& tag : request.tags) {
      if (!ValidTag(tag)) {
        return MakeError(ErrorKind::kInvalid,
                         std::string(kTailscale) + ": tag \"" + tag + "\" must be \"tag:<name>\"");
      }
    }
    if (request.expiry <= std::chrono::seconds(0) || request.expiry > kMaxKeyExpiry) {
      return MakeError(ErrorKind::kInvalid,
                       std::string(kTailscale) + ": key expiry must be between 1 s and 90 days");
    }
    auto r = Call("keys.create", "POST", TailnetPath("/keys"),
                  wire::EncodeCreateKey(request, config_.key_description), /*idempotent=*/false);
    if (!r.ok()) return r.error();
    auto key = wire::DecodeKey(r->body);
    if (!key.ok()) {
      // Tailscale answered 2xx, so a key exists that we cannot name; it expires on its own.
      api_->RecordError("keys.create", key.error());
      return MakeError(ErrorKind::kAmbiguous, key.error().message);
    }
    return key;
  }

  Result<std::vector<Device>> ListDevices() override {
    auto r = Call("devices.list", "GET", TailnetPath("/devices"), "");
    if (!r.ok()) return r.error();
    auto devices = wire::DecodeDevices(r->body);
    if (!devices.ok()) api_->RecordError("devices.list", devices.error());
    return devices;
  }

  Status DeleteDevice(const std::string& id) override {
    // Device ids are "n…CNTRL" or numeric; anything else would change the path.
    if (id.empty() ||
        !std::all_of(id.begin(), id.end(), [](unsigned char c) { return std::isalnum(c) != 0; })) {
      return MakeError(ErrorKind::kInvalid,
                       std::string(kTailscale) + ": device id \"" + id + "\" is not an id");
    }
    // Deleting twice is harmless, so the call is retried like a read.
    auto r = Call("devices.delete", "DELETE", "/api/v2/device/" + id, "");
    if (!r.ok()) {
      if (KindOf(r.error()) == ErrorKind::kNotFound) return OkStatus();  // already gone
      return r.error();
    }
    return OkStatus();
  }

 private:
  std::string TailnetPath(std::string_view rest) const {
    return "/api/v2/tailnet/" + net::UrlEncode(config_.tailnet) + std::string(rest);
  }

  // The cached access token, or a new one when there is none, it is due for renewal, or `renew`.
  Result<std::string> Token(bool renew) {
    std::lock_guard lock(token_mu_);
    auto now = api_->clock().Now();
    if (!renew && !token_.empty() && now < renew_at_) return token_;
    token_.clear();
    auto id = config_.client_id->Get();
    if (!id.ok()) return id.error();
    auto secret = config_.client_secret->Get();
    if (!secret.ok()) return secret.error();
    ApiCaller::Call call;
    call.method = "oauth.token";
    call.request.method = "POST";
    call.request.target = "/api/v2/oauth/token";
    call.request.headers = {{"Content-Type", "application/x-www-form-urlencoded"},
                            {"Accept", "application/json"}};
    call.request.body = wire::EncodeTokenRequest(*id, *secret, config_.scopes);
    // A token request changes nothing a second one would not: retried like a read. The answer is
    // redacted as it is decoded, before the caller's retry log line can carry it.
    auto r = api_->Do(std::move(call), Redacting(*secret));
    if (!r.ok()) {
      if (KindOf(r.error()) == ErrorKind::kUnauthorized) config_.client_id->Invalidate();
      return r.error();
    }
    auto t = wire::DecodeToken(r->body);
    if (!t.ok()) {
      api_->RecordError("oauth.token", t.error());
      return t.error();
    }
    auto renew_before = std::min<std::chrono::seconds>(kRenewBefore, t->expires_in / 4);
    token_ = t->token;
    renew_at_ = now + t->expires_in - renew_before;
    return token_;
  }

  Result<net::Response> Call(std::string_view method, const char* verb, const std::string& path,
                             const std::string& body, bool idempotent = true) {
    for (int attempt = 0;; ++attempt) {
      auto token = Token(/*renew=*/attempt > 0);
      if (!token.ok()) return token.error();
      auto r = api_->Do(ApiCaller::BearerJson(method, verb, path, *token, body, idempotent),
                        Redacting(*token));
      if (r.ok()) return r;
      if (attempt == 0 && r.error().http_status == 401) continue;  // died early: renew once
      return r.error();
    }
  }

  std::unique_ptr<ApiCaller> api_;
  TailscaleConfig config_;
  std::mutex token_mu_;
  std::string token_;
  Clock::TimePoint renew_at_{};
};

}  // namespace

Result<std::unique_ptr<TailnetAdmin>> NewTailscaleAdmin(const TailscaleConfig& config) {
  if (config.client_id == nullptr || config.client_secret == nullptr) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "tailscale: an OAuth client id and secret source are required "
                       "(tailscaleConfig.oauthCredentialsSecretRef)");
  }
  if (config.tailnet.empty() || config.tailnet.find('/') != std::string::npos) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "tailscale: tailnet \"" + config.tailnet + "\" is not a tailnet id");
  }
  static const std::regex kDescription("^[a-zA-Z0-9 -]{0,50}$");
  if (!std::regex_match(config.key_description, kDescription)) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "tailscale: key description must be at most 50 letters, digits, hyphens "
                       "and spaces");
  }
  ProviderConfig pc;
  pc.name = kTailscale;
  // A trailing slash would make "//api/v2"; the base URL's own path (a proxy's prefix) is kept.
  pc.endpoint = config.api_endpoint.empty() ? kTailscaleApiEndpoint : config.api_endpoint;
  while (!pc.endpoint.empty() && pc.endpoint.back() == '/') pc.endpoint.pop_back();
  // The secret is what a 401 may mean was rotated: ApiCaller drops its cache then.
  pc.credentials = config.client_secret;
  internal::CopyTransport(config, pc);
  pc.requests_per_second = config.requests_per_second;
  HS_ASSIGN_OR_RETURN(auto api, ApiCaller::Create(pc, pc.endpoint, kRps, kBurst));
  return std::unique_ptr<TailnetAdmin>(new TailscaleAdmin(std::move(api), config));
}

}  // namespace hyperslice::gpu
