// The sealed agent's relay to the key broker (kbs_relay.h).
#include "src/runners/agent/kbs_relay.h"

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/log.h"

namespace hyperslice::runners::agent {
namespace {

// The `iss` of a JWT's payload, unverified: the token came from the link controller itself.
std::string IssuerOf(const std::string& token) {
  auto first = token.find('.');
  auto second = token.find('.', first == std::string::npos ? 0 : first + 1);
  if (first == std::string::npos || second == std::string::npos) return {};
  std::string payload = token.substr(first + 1, second - first - 1);
  for (char& c : payload) c = c == '-' ? '+' : c == '_' ? '/' : c;
  payload.append((4 - payload.size() % 4) % 4, '=');
  auto decoded = Base64Decode(payload, "token payload");
  if (!decoded.ok()) return {};
  boost::system::error_code ec;
  auto v = boost::json::parse(*decoded, ec);
  const auto* iss = !ec && v.is_object() ? v.as_object().if_contains("iss") : nullptr;
  return iss != nullptr && iss->is_string() ? std::string(iss->as_string()) : std::string();
}

}  // namespace

void KbsRelay::LearnIssuer(const std::string& token) {
  std::string iss = IssuerOf(token);
  if (iss.rfind("https://", 0) != 0) return;
  std::lock_guard lock(mu_);
  if (iss == issuer_) return;
  issuer_ = iss;
  client_.reset();
}

Result<KbsAnswer> KbsRelay::Forward(const KbsAsk& ask) {
  if (ask.resource.empty() || ask.resource.size() > 253 ||
      ask.resource.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
          "._-") != std::string::npos) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "a resource name is 1 to 253 of [A-Za-z0-9._-]");
  }
  std::shared_ptr<net::HttpClient> client;
  {
    std::lock_guard lock(mu_);
    if (issuer_.empty()) {
      return Error::Make(Error::Code::kUnavailable,
                         "no key broker known yet: ask the socket for a token first");
    }
    if (!client_) {
      net::HttpClient::Options o;
      o.base_url = issuer_;
      o.tls.ca_pem = ca_pem_;
      o.connect_timeout = std::chrono::milliseconds(5000);
      HS_ASSIGN_OR_RETURN(client_, net::HttpClient::Create(o));
    }
    client = client_;
  }
  net::Request r;
  r.method = "POST";
  r.target = "/kbs/v0/resource/" + ask.resource;
  r.body = ask.body;
  r.headers.push_back({"Content-Type", "application/json"});
  if (!ask.authorization.empty()) r.headers.push_back({"Authorization", ask.authorization});
  HS_ASSIGN_OR_RETURN(net::Response resp, client->Do(r));
  log::Info("sealed: key broker request relayed",
            {{"resource", ask.resource}, {"status", static_cast<int64_t>(resp.status)}});
  return KbsAnswer{resp.status, std::move(resp.body)};
}

}  // namespace hyperslice::runners::agent
