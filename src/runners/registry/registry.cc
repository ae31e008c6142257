// Registry conversations over the project's HTTP client.
#include "src/runners/registry/registry.h"

#include <boost/json.hpp>
#include <regex>

namespace hyperslice::runners::registry {
namespace json = boost::json;
namespace {

// Parameters of a WWW-Authenticate: Bearer challenge (realm, service, scope).
std::map<std::string, std::string> ParseChallenge(const std::string& header) {
  std::map<std::string, std::string> out;
  static const std::regex param(R"re((\w+)="([^"]*)")re");
  for (auto it = std::sregex_iterator(header.begin(), header.end(), param);
       it != std::sregex_iterator(); ++it) {
    out[(*it)[1]] = (*it)[2];
  }
  return out;
}

}  // namespace

bool ValidDigest(const std::string& d) {
  static const std::regex re("^sha256:[a-f0-9]{64}$");
  return std::regex_match(d, re);
}

Result<ImageRef> ParseImageRef(const std::string& image) {
  auto bad = [&image](const std::string& why) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "image reference \"" + image + "\" is invalid: " + why, "InvalidImageName");
  };
  ImageRef ref;
  std::string rest = image;
  if (auto at = rest.find('@'); at != std::string::npos) {
    ref.digest = rest.substr(at + 1);
    rest = rest.substr(0, at);
    if (!ValidDigest(ref.digest)) return bad("digest must be sha256:<64 lowercase hex>");
  }
  auto slash = rest.find('/');
  if (slash == std::string::npos) return bad("it must name its registry (host[:port]/path)");
  std::string host = rest.substr(0, slash);
  if (host.find('.') == std::string::npos && host.find(':') == std::string::npos &&
      host != "localhost") {
    return bad("it must name its registry (host[:port]/path)");
  }
  ref.registry = host;
  std::string path = rest.substr(slash + 1);
  auto colon = path.rfind(':');
  if (colon != std::string::npos) {
    ref.tag = path.substr(colon + 1);
    path = path.substr(0, colon);
  }
  static const std::regex repo_re(R"re(^[a-z0-9]+([._/-][a-z0-9]+)*$)re");
  if (!std::regex_match(path, repo_re)) return bad("bad repository name");
  ref.repository = path;
  if (ref.digest.empty() && ref.tag.empty()) ref.tag = "latest";
  return ref;
}

Client::Client(const ImageRef& ref, const RegistryOptions& options) : ref_(ref), options_(options) {
  bool insecure = false;
  for (const auto& r : options.insecure_registries) insecure |= (r == ref.registry);
  origin_ = (insecure ? "http://" : "https://") + ref.registry;
}

Result<net::Response> Client::Get(const std::string& path, const std::string& accept) {
  HS_ASSIGN_OR_RETURN(auto resp, GetOnce(origin_, path, accept));
  if (resp.status == 401 && token_.empty()) {
    HS_RETURN_IF_ERROR(Authenticate(resp.Header("www-authenticate")));
    HS_ASSIGN_OR_RETURN(resp, GetOnce(origin_, path, accept));
  }
  for (int hops = 0; hops < 5 && (resp.status == 307 || resp.status == 302 || resp.status == 301 ||
                                  resp.status == 303);
       ++hops) {
    std::string loc = resp.Header("location");
    static const std::regex abs(R"re(^(https?://[^/]+)(/.*)?$)re");
    std::smatch m;
    if (std::regex_match(loc, m, abs)) {
      HS_ASSIGN_OR_RETURN(resp, GetOnce(m[1], m[2].matched ? std::string(m[2]) : "/", "",
                                        /*auth=*/false));
    } else {
      HS_ASSIGN_OR_RETURN(resp, GetOnce(origin_, loc, accept));
    }
  }
  if (resp.status == 404) {
    return Error::Make(Error::Code::kNotFound,
                       ref_.registry + "/" + ref_.repository + ": " + path + " not found",
                       "NotFound", 404);
  }
  if (resp.status == 401 || resp.status == 403) {
    return Error::Make(Error::Code::kUnauthorized,
                       "registry " + ref_.registry + " refused access to " + ref_.repository,
                       "Unauthorized", resp.status);
  }
  if (resp.status != 200) {
    return Error::Make(
        Error::Code::kUnavailable,
        "registry " + ref_.registry + " answered " + std::to_string(resp.status) + " for " + path,
        "", resp.status);
  }
  return resp;
}

Result<std::shared_ptr<net::HttpClient>> Client::HttpFor(const std::string& origin) {
  auto it = clients_.find(origin);
  if (it != clients_.end()) return it->second;
  net::HttpClient::Options o;
  o.base_url = origin;
  o.tls.ca_pem = options_.ca_pem;
  o.user_agent = options_.user_agent;
  HS_ASSIGN_OR_RETURN(auto c, net::HttpClient::Create(o));
  clients_[origin] = c;
  return c;
}

Result<net::Response> Client::GetOnce(const std::string& origin, const std::string& target,
                                      const std::string& accept, bool auth) {
  HS_ASSIGN_OR_RETURN(auto client, HttpFor(origin));
  net::Request req;
  req.target = target;
  req.timeout = options_.timeout;
  if (!accept.empty()) req.headers.emplace_back("Accept", accept);
  if (auth && !token_.empty()) req.headers.emplace_back("Authorization", "Bearer " + token_);
  return client->Do(req);
}

Status Client::Authenticate(const std::string& challenge) {
  if (challenge.rfind("Bearer ", 0) != 0) {
    return Error::Make(Error::Code::kUnauthorized,
                       "registry " + ref_.registry + " asks for credentials this runner lacks",
                       "Unauthorized", 401);
  }
  auto params = ParseChallenge(challenge);
  static const std::regex realm_re(R"re(^(https?://[^/]+)(/[^?]*)?$)re");
  std::smatch m;
  const std::string realm = params["realm"];
  if (!std::regex_match(realm, m, realm_re)) {
    return Error::Make(Error::Code::kUnauthorized, "registry token realm is not a URL");
  }
  std::string target = m[2].matched ? std::string(m[2]) : "/";
  std::string scope =
      params.count("scope") ? params["scope"] : "repository:" + ref_.repository + ":pull";
  target += "?service=" + net::UrlEncode(params["service"]) + "&scope=" + net::UrlEncode(scope);
  HS_ASSIGN_OR_RETURN(auto resp, GetOnce(m[1], target, "application/json", false));
  if (resp.status != 200) {
    return Error::Make(Error::Code::kUnauthorized,
                       "registry token endpoint answered " + std::to_string(resp.status),
                       "Unauthorized", resp.status);
  }
  boost::system::error_code ec;
  json::value v = json::parse(resp.body, ec);
  if (ec || !v.is_object()) {
    return Error::Make(Error::Code::kUnauthorized, "registry token answer is not JSON");
  }
  for (const char* key : {"token", "access_token"}) {
    if (const auto* t = v.as_object().if_contains(key); t && t->is_string()) {
      token_ = std::string(t->as_string());
      return OkStatus();
    }
  }
  return Error::Make(Error::Code::kUnauthorized, "registry token answer has no token");
}

}  // namespace hyperslice::runners::registry
