#include "src/gce/auth.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include <boost/json/parse.hpp>
#include <boost/url/parse.hpp>

#include "src/base/files.h"
#include "src/base/log.h"
#include "src/gce/internal/jwt.h"

namespace hyperslice::gce {
namespace {

using Code = Error::Code;

std::string StringField(const boost::json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  if (v == nullptr || !v->is_string()) return {};
  return std::string(v->as_string());
}

// "https://host:port/a/b?x" → base "https://host:port", target "/a/b?x".
struct SplitUrl {
  std::string base;
  std::string target;
};
Result<SplitUrl> Split(const std::string& url) {
  auto u = boost::urls::parse_absolute_uri(url);
  if (!u) return Error::Make(Code::kInvalidArgument, "invalid URL \"" + url + "\"");
  SplitUrl s;
  s.base = std::string(u->scheme()) + "://" + std::string(u->encoded_authority());
  s.target = std::string(u->encoded_path());
  if (s.target.empty()) s.target = "/";
  if (u->has_query()) s.target += "?" + std::string(u->encoded_query());
  return s;
}

struct FetchedToken {
  std::string access_token;
  std::chrono::seconds expires_in{0};
};

// Parses an OAuth2 token response; errors map the endpoint's {"error","error_description"}.
Result<FetchedToken> ParseTokenResponse(const net::Response& resp, std::string_view who) {
  boost::system::error_code ec;
  auto parsed = boost::json::parse(resp.body, ec);
  const boost::json::object* obj = (!ec && parsed.is_object()) ? &parsed.as_object() : nullptr;
  if (resp.status != 200) {
    std::string reason = obj != nullptr ? StringField(*obj, "error") : "";
    std::string desc = obj != nullptr ? StringField(*obj, "error_description") : "";
    Code code = Code::kUnknown;
    if (resp.status == 400 || resp.status == 401) {
      code = Code::kUnauthorized;
    } else if (resp.status == 403) {
      code = Code::kForbidden;
    } else if (resp.status == 404) {
      code = Code::kNotFound;
    } else if (resp.status == 429) {
      code = Code::kTooManyRequests;
    } else if (resp.status >= 500) {
      code = Code::kUnavailable;
    }
    std::string msg = std::string(who) + " refused the token request";
    if (!reason.empty()) msg += ": " + reason;
    if (!desc.empty()) msg += " (" + desc + ")";
    return Error::Make(code, msg, reason, resp.status);
  }
  if (obj == nullptr) {
    return Error::Make(Code::kUnavailable, std::string(who) + " answered a token that is not JSON",
                       "", resp.status);
  }
  FetchedToken t;
  t.access_token = StringField(*obj, "access_token");
  if (const auto* e = obj->if_contains("expires_in"); e != nullptr && e->is_number()) {
    boost::system::error_code nec;
    auto n = e->to_number<int64_t>(nec);
    if (!nec && n > 0) t.expires_in = std::chrono::seconds(n);
  }
  if (t.access_token.empty()) {
    return Error::Make(Code::kUnavailable, std::string(who) + " answered no access_token", "",
                       resp.status);
  }
  if (t.expires_in.count() == 0) t.expires_in = std::chrono::seconds(3600);
  return t;
}

// Caching and refresh shared by the sources that fetch tokens.
class CachingTokenSource : public TokenSource {
 public:
  explicit CachingTokenSource(const TokenSourceOptions& o)
      : clock_(o.clock != nullptr ? o.clock : &RealClock()), margin_(o.refresh_margin) {}

  Result<std::string> Token() final {
    std::lock_guard lock(mu_);
    auto now = clock_->Now();
    if (!token_.empty() && now < refresh_at_) return token_;
    auto fetched = Fetch();
    if (!fetched.ok()) {
      // A still-valid cached token beats a failed early refresh.
      if (!token_.empty() && now < expiry_) {
        log::Warn("gce: token refresh failed; using the cached token until it expires",
                  {{"source", Describe()}, {"error", fetched.error().ToString()}});
        return token_;
      }
      return fetched.error();
    }
    auto lifetime = std::chrono::duration_cast<Clock::Duration>(fetched->expires_in);
    auto margin = std::min<Clock::Duration>(margin_, lifetime / 2);
    token_ = std::move(fetched->access_token);
    expiry_ = now + lifetime;
    refresh_at_ = expiry_ - margin;
    log::Debug("gce: fetched an access token",
               {{"source", Describe()},
                {"expires_in_s", static_cast<int64_t>(fetched->expires_in.count())}});
    return token_;
  }

  void Invalidate() final {
    std::lock_guard lock(mu_);
    token_.clear();
  }

 protected:
  virtual Result<FetchedToken> Fetch() = 0;

 private:
  std::mutex mu_;
  Clock* clock_;
  Clock::Duration margin_;
  std::string token_;
  Clock::TimePoint expiry_{}, refresh_at_{};
};

class Static final : public TokenSource {
 public:
  explicit Static(std::string token) : token_(std::move(token)) {}
  Result<std::string> Token() override { return token_; }
  void Invalidate() override {}
  std::string Describe() const override { return "static"; }

 private:
  std::string token_;
};

Result<std::shared_ptr<net::HttpClient>> ClientFor(const std::string& base,
                                                   const TokenSourceOptions& o) {
  net::HttpClient::Options ho;
  ho.base_url = base;
  ho.tls = o.tls;
  ho.connect_timeout = o.request_timeout;
  ho.max_idle_connections = 2;
  return net::HttpClient::Create(ho);
}

std::string FormEncode(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out;
  for (const auto& [k, v] : fields) {
    if (!out.empty()) out += '&';
    out += net::UrlEncode(k) + "=" + net::UrlEncode(v);
  }
  return out;
}

Result<FetchedToken> PostForm(net::HttpClient& http, const std::string& target, std::string body,
                              std::chrono::milliseconds timeout, std::string_view who) {
  net::Request req;
  req.method = "POST";
  req.target = target;
  req.headers = {{"Content-Type", "application/x-www-form-urlencoded"},
                 {"Accept", "application/json"}};
  req.body = std::move(body);
  req.timeout = timeout;
  HS_ASSIGN_OR_RETURN(auto resp, http.Do(req));
  return ParseTokenResponse(resp, who);
}

class ServiceAccount final : public CachingTokenSource {
 public:
  ServiceAccount(ServiceAccountKey key, const TokenSourceOptions& o, std::string token_uri,
                 std::string target, std::shared_ptr<net::HttpClient> http)
      : CachingTokenSource(o),
        key_(std::move(key)),
        scopes_(o.scopes),
        timeout_(o.request_timeout),
        token_uri_(std::move(token_uri)),
        target_(std::move(target)),
        http_(std::move(http)) {}

  std::string Describe() const override { return "service-account:" + key_.client_email; }

 protected:
  Result<FetchedToken> Fetch() override {
    // iat is wall-clock time (the token endpoint checks it against its own clock).
    auto iat = std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
    HS_ASSIGN_OR_RETURN(auto jwt, internal::MakeJwtAssertion(key_, token_uri_, scopes_, iat));
    return PostForm(*http_, target_,
                    FormEncode({{"grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"},
                                {"assertion", jwt}}),
                    timeout_, "the token endpoint");
  }

 private:
  ServiceAccountKey key_;
  std::vector<std::string> scopes_;
  std::chrono::milliseconds timeout_;
  std::string token_uri_, target_;
  std::shared_ptr<net::HttpClient> http_;
};

class AuthorizedUser final : public CachingTokenSource {
 public:
  AuthorizedUser(std::string client_id, std::string client_secret, std::string refresh_token,
                 const TokenSourceOptions& o, std::string target,
                 std::shared_ptr<net::HttpClient> http)
      : CachingTokenSource(o),
        client_id_(std::move(client_id)),
        client_secret_(std::move(client_secret)),
        refresh_token_(std::move(refresh_token)),
        timeout_(o.request_timeout),
        target_(std::move(target)),
        http_(std::move(http)) {}

  std::string Describe() const override { return "authorized-user"; }

 protected:
  Result<FetchedToken> Fetch() override {
    return PostForm(*http_, target_,
                    FormEncode({{"grant_type", "refresh_token"},
                                {"client_id", client_id_},
                                {"client_secret", client_secret_},
                                {"refresh_token", refresh_token_}}),
                    timeout_, "the token endpoint");
  }

 private:
  std::string client_id_, client_secret_, refresh_token_;
  std::chrono::milliseconds timeout_;
  std::string target_;
  std::shared_ptr<net::HttpClient> http_;
};

class Metadata final : public CachingTokenSource {
 public:
  Metadata(const TokenSourceOptions& o, std::string target, std::shared_ptr<net::HttpClient> http)
      : CachingTokenSource(o),
        timeout_(o.request_timeout),
        target_(std::move(target)),
        http_(std::move(http)) {}

  std::string Describe() const override { return "metadata"; }

 protected:
  Result<FetchedToken> Fetch() override {
    net::Request req;
    req.target = target_;
    req.headers = {{"Metadata-Flavor", "Google"}};
    req.timeout = timeout_;
    HS_ASSIGN_OR_RETURN(auto resp, http_->Do(req));
    return ParseTokenResponse(resp, "the metadata server");
  }

 private:
  std::chrono::milliseconds timeout_;
  std::string target_;
  std::shared_ptr<net::HttpClient> http_;
};

}  // namespace

Result<ServiceAccountKey> ParseServiceAccountKey(std::string_view json) {
  boost::system::error_code ec;
  auto v = boost::json::parse(json, ec);
  if (ec || !v.is_object()) {
    return Error::Make(Code::kInvalidArgument, "service-account key is not a JSON object");
  }
  const auto& o = v.as_object();
  if (auto type = StringField(o, "type"); !type.empty() && type != "service_account") {
    return Error::Make(Code::kInvalidArgument,
                       "credentials of type \"" + type + "\" are not a service-account key");
  }
  ServiceAccountKey k;
  k.client_email = StringField(o, "client_email");
  k.private_key_id = StringField(o, "private_key_id");
  k.private_key = StringField(o, "private_key");
  k.token_uri = StringField(o, "token_uri");
  k.project_id = StringField(o, "project_id");
  if (k.token_uri.empty()) k.token_uri = kDefaultTokenUri;
  if (k.client_email.empty() || k.private_key.empty()) {
    return Error::Make(Code::kInvalidArgument,
                       "service-account key lacks client_email or private_key");
  }
  return k;
}

std::shared_ptr<TokenSource> StaticTokenSource(std::string token) {
  return std::make_shared<Static>(std::move(token));
}

Result<std::shared_ptr<TokenSource>> ServiceAccountTokenSource(ServiceAccountKey key,
                                                               const TokenSourceOptions& options) {
  std::string token_uri = options.token_uri.empty() ? key.token_uri : options.token_uri;
  HS_ASSIGN_OR_RETURN(auto split, Split(token_uri));
  HS_ASSIGN_OR_RETURN(auto http, ClientFor(split.base, options));
  // The key is checked now so that a bad key fails at start-up, not at the first API call.
  HS_RETURN_IF_ERROR(internal::MakeJwtAssertion(key, token_uri, options.scopes, 0));
  return std::shared_ptr<TokenSource>(std::make_shared<ServiceAccount>(
      std::move(key), options, token_uri, split.target, std::move(http)));
}

Result<std::shared_ptr<TokenSource>> MetadataTokenSource(const TokenSourceOptions& options) {
  std::string host = options.metadata_host;
  if (host.empty()) {
    const char* env = std::getenv("GCE_METADATA_HOST");
    host = (env != nullptr && *env != '\0') ? env : kDefaultMetadataHost;
  }
  std::string base = host.find("://") == std::string::npos ? "http://" + host : host;
  HS_ASSIGN_OR_RETURN(auto http, ClientFor(base, options));
  std::string target = "/computeMetadata/v1/instance/service-accounts/default/token";
  if (!options.scopes.empty() &&
      !(options.scopes.size() == 1 && options.scopes[0] == kCloudPlatformScope)) {
    std::string scopes;
    for (const auto& s : options.scopes) scopes += (scopes.empty() ? "" : ",") + s;
    target += "?scopes=" + net::UrlEncode(scopes);
  }
  return std::shared_ptr<TokenSource>(
      std::make_shared<Metadata>(options, std::move(target), std::move(http)));
}

Result<std::shared_ptr<TokenSource>> CredentialsFileTokenSource(const std::string& path,
                                                                const TokenSourceOptions& options) {
  auto file = ReadFile(path);
  if (!file.ok()) return Error::Make(Code::kNotFound, "cannot read credentials file " + path);
  const std::string& text = *file;
  boost::system::error_code ec;
  auto v = boost::json::parse(text, ec);
  if (ec || !v.is_object()) {
    return Error::Make(Code::kInvalidArgument, "credentials file " + path + " is not JSON");
  }
  const auto& o = v.as_object();
  const std::string type = StringField(o, "type");
  if (type == "service_account") {
    auto key = ParseServiceAccountKey(text);
    if (!key.ok()) {
      return Error::Make(Code::kInvalidArgument, path + ": " + key.error().message);
    }
    return ServiceAccountTokenSource(std::move(key).value(), options);
  }
  if (type == "authorized_user") {
    std::string token_uri =
        options.token_uri.empty() ? StringField(o, "token_uri") : options.token_uri;
    if (token_uri.empty()) token_uri = kDefaultTokenUri;
    std::string refresh = StringField(o, "refresh_token");
    if (refresh.empty()) {
      return Error::Make(Code::kInvalidArgument, path + ": authorized_user without refresh_token");
    }
    HS_ASSIGN_OR_RETURN(auto split, Split(token_uri));
    HS_ASSIGN_OR_RETURN(auto http, ClientFor(split.base, options));
    return std::shared_ptr<TokenSource>(std::make_shared<AuthorizedUser>(
        StringField(o, "client_id"), StringField(o, "client_secret"), std::move(refresh), options,
        split.target, std::move(http)));
  }
  return Error::Make(Code::kInvalidArgument,
                     path + ": unsupported credentials type \"" + type + "\"");
}

Result<std::shared_ptr<TokenSource>> DefaultTokenSource(const TokenSourceOptions& options) {
  if (const char* env = std::getenv("GOOGLE_APPLICATION_CREDENTIALS");
      env != nullptr && *env != '\0') {
    return CredentialsFileTokenSource(env, options);
  }
  std::string config_dir;
  if (const char* cfg = std::getenv("CLOUDSDK_CONFIG"); cfg != nullptr && *cfg != '\0') {
    config_dir = cfg;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    config_dir = std::string(home) + "/.config/gcloud";
  }
  if (!config_dir.empty()) {
    std::string well_known = config_dir + "/application_default_credentials.json";
    std::error_code ec;
    if (std::filesystem::exists(well_known, ec)) {
      return CredentialsFileTokenSource(well_known, options);
    }
  }
  return MetadataTokenSource(options);
}

}  // namespace hyperslice::gce
