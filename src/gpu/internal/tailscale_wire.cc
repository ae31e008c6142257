#include "src/gpu/internal/tailscale_wire.h"

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/strings.h"
#include "src/gpu/internal/api_caller.h"
#include "src/gpu/internal/auth_key.h"
#include "src/net/http.h"

namespace hyperslice::gpu::internal::tailscale {

namespace json = boost::json;
using jsonfield::ArrayField;
using jsonfield::BoolField;
using jsonfield::IntField;
using jsonfield::StringField;
using jsonfield::StringsField;

namespace {

constexpr char kName[] = "tailscale";

Error Bad(std::string_view what, std::string_view why) { return BadAnswer(kName, what, why); }

// 501 is Tailscale refusing what it does not implement: a definite answer, not an outage.
ErrorKind KindOfStatus(int status) {
  return status == 501 ? ErrorKind::kInvalid : KindOfHttpStatus(status);
}

}  // namespace

// application/x-www-form-urlencoded: RFC 3986 percent-encoding (a space as %20, which every form
// decoder reads), so net::UrlEncode serves.
std::string EncodeTokenRequest(std::string_view client_id, std::string_view client_secret,
                               const std::vector<std::string>& scopes) {
  std::string body = "grant_type=client_credentials&client_id=" + net::UrlEncode(client_id) +
                     "&client_secret=" + net::UrlEncode(client_secret);
  std::string joined;
  for (const auto& s : scopes) joined += (joined.empty() ? "" : " ") + s;
  if (!joined.empty()) body += "&scope=" + net::UrlEncode(joined);
  return body;
}

Result<AccessToken> DecodeToken(std::string_view body) {
  constexpr std::string_view kWhat = "oauth.token";
  HS_ASSIGN_OR_RETURN(json::object o, ParseAnswerObject(kName, kWhat, body));
  AccessToken t;
  t.token = std::string(StringField(o, "access_token"));
  if (t.token.empty()) return Bad(kWhat, "answer has no access_token");
  const std::string type = AsciiLower(StringField(o, "token_type"));
  if (!type.empty() && type != "bearer") return Bad(kWhat, "token type is not Bearer");
  // RFC 6749 makes expires_in optional; Tailscale's tokens last an hour, so assume that.
  t.expires_in = std::chrono::seconds(IntField(o, "expires_in").value_or(3600));
  if (t.expires_in.count() <= 0) return Bad(kWhat, "expires_in is not positive");
  return t;
}

std::string EncodeCreateKey(const AuthKeyRequest& request, std::string_view description) {
  json::array tags;
  for (const auto& t : request.tags) tags.emplace_back(t);
  json::object create{{"reusable", request.reusable},
                      {"ephemeral", request.ephemeral},
                      {"preauthorized", true},
                      {"tags", std::move(tags)}};
  json::object body{
      {"capabilities", json::object{{"devices", json::object{{"create", std::move(create)}}}}},
      {"expirySeconds", request.expiry.count()}};
  if (!description.empty()) body["description"] = description;
  return json::serialize(body);
}

Result<AuthKey> DecodeKey(std::string_view body) {
  constexpr std::string_view kWhat = "keys.create";
  HS_ASSIGN_OR_RETURN(json::object o, ParseAnswerObject(kName, kWhat, body));
  return AuthKeyFrom(kName, kWhat, std::string(StringField(o, "id")),
                     std::string(StringField(o, "key")), StringField(o, "expires"), "expires");
}

Result<std::vector<Device>> DecodeDevices(std::string_view body) {
  constexpr std::string_view kWhat = "devices.list";
  HS_ASSIGN_OR_RETURN(json::object o, ParseAnswerObject(kName, kWhat, body));
  std::vector<Device> out;
  const json::array* devices = ArrayField(o, "devices");
  if (devices == nullptr) {
    if (o.contains("devices") && !o.at("devices").is_null()) {
      return Bad(kWhat, "\"devices\" is not a list");
    }
    return out;
  }
  for (const auto& v : *devices) {
    const auto* d = v.if_object();
    if (d == nullptr) return Bad(kWhat, "a device is not an object");
    Device dev;
    // nodeId is the id the document prefers; the legacy numeric id also works in /device/{id}.
    dev.id = std::string(StringField(*d, "nodeId"));
    if (dev.id.empty()) dev.id = std::string(StringField(*d, "id"));
    if (dev.id.empty()) return Bad(kWhat, "a device has no nodeId or id");
    dev.name = std::string(StringField(*d, "name"));
    dev.hostname = std::string(StringField(*d, "hostname"));
    dev.addresses = StringsField(*d, "addresses");
    dev.tags = StringsField(*d, "tags");
    dev.online = BoolField(*d, "connectedToControl").value_or(false);
    out.push_back(std::move(dev));
  }
  return out;
}

Error DecodeError(const net::Response& response) {
  std::string prefix = std::string(kName) + ": HTTP " + std::to_string(response.status);
  ErrorKind kind = KindOfStatus(response.status);
  std::string message;
  boost::system::error_code ec;
  json::value v = json::parse(response.body, ec);
  if (!ec && v.is_object()) {
    const auto& o = v.get_object();
    message = std::string(StringField(o, "message"));
    std::string_view oauth = StringField(o, "error");
    if (message.empty() && !oauth.empty()) {
      std::string_view description = StringField(o, "error_description");
      message = std::string(oauth) + (description.empty() ? "" : ": " + std::string(description));
      if (oauth == "invalid_client" || oauth == "unauthorized_client" || oauth == "invalid_scope") {
        kind = ErrorKind::kUnauthorized;
      }
    }
  }
  if (message.empty()) message = response.body.substr(0, 200);  // a proxy's page, or nothing
  if (response.status == 403) {
    // Tailscale's 403 names no scope; the operator's calls need these two.
    message += " (the OAuth client needs the auth_keys and devices:core scopes)";
  }
  return MakeError(kind, message.empty() ? prefix : prefix + ": " + message, response.status);
}

}  // namespace hyperslice::gpu::internal::tailscale
