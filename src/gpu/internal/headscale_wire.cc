#include "src/gpu/internal/headscale_wire.h"

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/gpu/internal/api_caller.h"
#include "src/gpu/internal/auth_key.h"
#include "src/kube/object_helpers.h"

namespace hyperslice::gpu::internal::headscale {

namespace json = boost::json;
using jsonfield::ArrayField;
using jsonfield::BoolField;
using jsonfield::ObjectField;
using jsonfield::StringField;
using jsonfield::StringsField;

namespace {

Error Bad(std::string_view what, std::string_view why) { return BadAnswer(kHeadscale, what, why); }

// A uint64 id: a string as protojson writes it; a JSON number is accepted too (a proxy may
// re-serialise it). "" when absent, zero or malformed.
std::string Id(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  if (it == o.end()) return {};
  const json::value& v = it->value();
  std::string s;
  if (v.is_string()) {
    s = std::string(v.get_string());
  } else if (v.is_uint64()) {
    s = std::to_string(v.get_uint64());
  } else if (v.is_int64() && v.get_int64() > 0) {
    s = std::to_string(v.get_int64());
  }
  if (s.empty() || s == "0" || s.find_first_not_of("0123456789") != std::string::npos) return {};
  return s;
}

// gRPC status codes (google.golang.org/grpc/codes) headscale's handlers return.
enum GrpcCode {
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnavailable = 14,
  kUnauthenticated = 16,
};

ErrorKind KindOfGrpc(int64_t code) {
  switch (code) {
    case kInvalidArgument:
    case kFailedPrecondition:
    case kOutOfRange:
    case kAlreadyExists:
      return ErrorKind::kInvalid;
    case kNotFound:
      return ErrorKind::kNotFound;
    case kPermissionDenied:
    case kUnauthenticated:
      return ErrorKind::kUnauthorized;
    case kResourceExhausted:
      return ErrorKind::kRateLimited;
    case kCancelled:
    case kDeadlineExceeded:
    case kAborted:
    case kUnavailable:
      return ErrorKind::kTransient;
    default:
      // kUnknown is what a handler's plain Go error becomes ("record not found" for a user id
      // that does not exist): a definite answer, not an outage, so it is not retried.
      return ErrorKind::kInternal;
  }
}

}  // namespace

std::string EncodeCreatePreAuthKey(const AuthKeyRequest& request, std::string_view user_id,
                                   std::chrono::system_clock::time_point expiration) {
  json::object body;
  // uint64 as a string, the protojson form; 0/absent means "no user" (a tagged key).
  if (!user_id.empty()) body["user"] = user_id;
  body["reusable"] = request.reusable;
  body["ephemeral"] = request.ephemeral;
  body["expiration"] = kube::FormatTime(expiration);
  json::array tags;
  for (const auto& t : request.tags) tags.emplace_back(t);
  body["aclTags"] = std::move(tags);
  return json::serialize(body);
}

Result<AuthKey> DecodeCreatePreAuthKey(std::string_view body) {
  constexpr std::string_view kWhat = "preauthkey.create";
  HS_ASSIGN_OR_RETURN(json::object o, ParseAnswerObject(kHeadscale, kWhat, body));
  const json::object* k = ObjectField(o, "preAuthKey");
  if (k == nullptr) return Bad(kWhat, "answer has no \"preAuthKey\"");
  return AuthKeyFrom(kHeadscale, kWhat, Id(*k, "id"), std::string(StringField(*k, "key")),
                     StringField(*k, "expiration"), "expiration");
}

Result<std::vector<Device>> DecodeNodes(std::string_view body) {
  constexpr std::string_view kWhat = "node.list";
  HS_ASSIGN_OR_RETURN(json::object o, ParseAnswerObject(kHeadscale, kWhat, body));
  std::vector<Device> out;
  const json::array* nodes = ArrayField(o, "nodes");
  if (nodes == nullptr) {
    if (o.contains("nodes")) return Bad(kWhat, "\"nodes\" is not a list");
    return out;  // an empty repeated field may be left out by a re-serialising proxy
  }
  for (const auto& v : *nodes) {
    const auto* n = v.if_object();
    if (n == nullptr) return Bad(kWhat, "a node is not an object");
    Device d;
    d.id = Id(*n, "id");
    if (d.id.empty()) return Bad(kWhat, "a node has no id");
    d.name = std::string(StringField(*n, "givenName"));
    d.hostname = std::string(StringField(*n, "name"));
    d.addresses = StringsField(*n, "ipAddresses");
    d.tags = StringsField(*n, "tags");
    d.online = BoolField(*n, "online").value_or(false);
    out.push_back(std::move(d));
  }
  return out;
}

Result<std::string> DecodeUserId(std::string_view body, std::string_view name) {
  constexpr std::string_view kWhat = "user.list";
  HS_ASSIGN_OR_RETURN(json::object o, ParseAnswerObject(kHeadscale, kWhat, body));
  if (const json::array* users = ArrayField(o, "users")) {
    for (const auto& v : *users) {
      const auto* u = v.if_object();
      if (u != nullptr && StringField(*u, "name") == name) {
        std::string id = Id(*u, "id");
        if (id.empty()) return Bad(kWhat, "user has no id");
        return id;
      }
    }
  }
  return std::string();
}

Error DecodeError(const net::Response& response) {
  std::string prefix = std::string(kHeadscale) + ": HTTP " + std::to_string(response.status);
  boost::system::error_code ec;
  json::value v = json::parse(response.body, ec);
  if (!ec && v.is_object()) {
    const auto& o = v.get_object();
    auto code = jsonfield::IntField(o, "code");
    std::string_view message = StringField(o, "message");
    if (code) {
      return MakeError(KindOfGrpc(*code), prefix + ": " + std::string(message), response.status);
    }
  }
  // headscale's auth middleware answers a bare "Unauthorized"; a proxy may answer HTML. Neither
  // is worth quoting at length.
  std::string text = response.body.substr(0, 200);
  return MakeError(KindOfHttpStatus(response.status), text.empty() ? prefix : prefix + ": " + text,
                   response.status);
}

}  // namespace hyperslice::gpu::internal::headscale
