// TailnetAdmin over headscale's native API /api/v1 (headscale v0.29.3; wire format in
// internal/headscale_wire.h):
//   CreateAuthKey → POST   /api/v1/preauthkey   (+ GET /api/v1/user?name=… for an untagged key)
//   ListDevices   → GET    /api/v1/node
//   DeleteDevice  → DELETE /api/v1/node/{id}
// Auth: "Authorization: Bearer <API key>". Transport, retries, rate limit and metrics are the
// provider clients' (internal/api_caller.h), labelled provider="headscale": a create is never
// re-sent after it may have been received (kAmbiguous; an orphaned key is single-use and expires
// within the launch timeout, so it is left to expire rather than guessed at).
#include <boost/json.hpp>

#include "src/gpu/internal/api_caller.h"
#include "src/gpu/internal/headscale_wire.h"
#include "src/gpu/tailnet.h"

namespace hyperslice::gpu {

namespace {

namespace wire = internal::headscale;
using internal::ApiCaller;
using internal::Redact;

// headscale documents no limit; this keeps a burst of launches from queueing behind one another
// while still bounding what a runaway loop can send.
constexpr double kRps = 20;
constexpr int kBurst = 40;
constexpr char kApi[] = "/api/v1";

class HeadscaleAdmin final : public TailnetAdmin {
 public:
  HeadscaleAdmin(std::unique_ptr<ApiCaller> api, std::string user)
      : api_(std::move(api)), user_(std::move(user)) {}

  Result<AuthKey> CreateAuthKey(const AuthKeyRequest& request) override {
    for (const auto& tag : request.tags) {
      // headscale refuses these too (InvalidArgument); saying so here names the class's field.
      if (tag.rfind("tag:", 0) != 0 || tag.size() == 4) {
        return MakeError(ErrorKind::kInvalid,
                         std::string(kHeadscale) + ": tag \"" + tag + "\" must be \"tag:<name>\"");
      }
    }
    if (request.expiry <= std::chrono::seconds(0)) {
      return MakeError(ErrorKind::kInvalid, std::string(kHeadscale) + ": expiry must be positive");
    }
    // A tagged key belongs to its tags; only an untagged one needs the owning user's id.
    std::string user_id;
    if (request.tags.empty()) {
      if (user_.empty()) {
        return MakeError(ErrorKind::kInvalid,
                         std::string(kHeadscale) +
                             ": a key without tags must belong to a user, and none is configured");
      }
      auto r = Call("user.list", "GET", "/user?name=" + net::UrlEncode(user_), "");
      if (!r.ok()) return r.error();
      auto id = Decoded("user.list", wire::DecodeUserId(r->body, user_));
      if (!id.ok()) return id.error();
      if (id->empty()) {
        return MakeError(ErrorKind::kInvalid,
                         std::string(kHeadscale) + ": user \"" + user_ + "\" does not exist");
      }
      user_id = *id;
    }
    auto expiration = std::chrono::system_clock::now() + request.expiry;
    auto r = Call("preauthkey.create", "POST", "/preauthkey",
                  wire::EncodeCreatePreAuthKey(request, user_id, expiration),
                  /*idempotent=*/false);
    if (!r.ok()) return r.error();
    auto key = wire::DecodeCreatePreAuthKey(r->body);
    if (!key.ok()) {
      // headscale answered 2xx, so a key exists that we cannot name; it expires on its own.
      api_->RecordError("preauthkey.create", key.error());
      return MakeError(ErrorKind::kAmbiguous, key.error().message);
    }
    return key;
  }

  Result<std::vector<Device>> ListDevices() override {
    auto r = Call("node.list", "GET", "/node", "");
    if (!r.ok()) return r.error();
    return Decoded("node.list", wire::DecodeNodes(r->body));
  }

  Status DeleteDevice(const std::string& id) override {
    if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
      return MakeError(ErrorKind::kInvalid,
                       std::string(kHeadscale) + ": node id \"" + id + "\" is not a number");
    }
    // Deleting twice is harmless, so the call is retried like a read.
    auto r = Call("node.delete", "DELETE", "/node/" + id, "");
    if (!r.ok()) {
      if (KindOf(r.error()) == ErrorKind::kNotFound) return OkStatus();  // already gone
      return r.error();
    }
    return OkStatus();
  }

 private:
  Result<net::Response> Call(std::string_view method, const char* verb, const std::string& path,
                             std::string body, bool idempotent = true) {
    auto key = api_->credentials().Get();
    if (!key.ok()) return key.error();
    auto r = api_->Do(ApiCaller::BearerJson(method, verb, std::string(kApi) + path, *key,
                                            std::move(body), idempotent),
                      wire::DecodeError);
    if (!r.ok()) {
      Error e = r.error();
      e.message = Redact(std::move(e.message), *key);
      return e;
    }
    return r;
  }

  template <typename T>
  Result<T> Decoded(std::string_view method, Result<T> r) {
    if (!r.ok()) api_->RecordError(method, r.error());
    return r;
  }

  std::unique_ptr<ApiCaller> api_;
  std::string user_;
};

}  // namespace

Result<std::unique_ptr<TailnetAdmin>> NewHeadscaleAdmin(const HeadscaleConfig& config) {
  if (config.login_server.empty()) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "headscale: the login server URL (tailscaleConfig.loginServer) is required");
  }
  if (config.api_key == nullptr) {
    return Error::Make(Error::Code::kInvalidArgument, "headscale: an API key source is required");
  }
  ProviderConfig pc;
  pc.name = kHeadscale;
  // A trailing slash would make "//api/v1"; the base URL's own path (a reverse proxy's prefix) is
  // kept by the HTTP client.
  pc.endpoint = config.login_server;
  while (!pc.endpoint.empty() && pc.endpoint.back() == '/') pc.endpoint.pop_back();
  pc.credentials = config.api_key;
  internal::CopyTransport(config, pc);
  HS_ASSIGN_OR_RETURN(auto api, ApiCaller::Create(pc, pc.endpoint, kRps, kBurst));
  return std::unique_ptr<TailnetAdmin>(new HeadscaleAdmin(std::move(api), config.user));
}

}  // namespace hyperslice::gpu
