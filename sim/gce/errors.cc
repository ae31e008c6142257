// GCE's error shape and the common errors the simulator answers with.
#include <regex>

#include "sim/gce/internal.h"
#include "src/base/json.h"

namespace hyperslice::sim::gce::internal {

std::string RpcStatusFor(int http_code) {
  switch (http_code) {
    case 400:
      return "INVALID_ARGUMENT";
    case 401:
      return "UNAUTHENTICATED";
    case 403:
      return "PERMISSION_DENIED";
    case 404:
      return "NOT_FOUND";
    case 409:
      return "ALREADY_EXISTS";
    case 412:
      return "FAILED_PRECONDITION";
    case 429:
      return "RESOURCE_EXHAUSTED";
    case 499:
      return "CANCELLED";
    case 500:
      return "INTERNAL";
    case 501:
      return "UNIMPLEMENTED";
    case 503:
      return "UNAVAILABLE";
    case 504:
      return "DEADLINE_EXCEEDED";
    default:
      return http_code >= 500 ? "INTERNAL" : "UNKNOWN";
  }
}

json::object ErrorJson(const ApiError& e) {
  json::object item{{"message", e.message}, {"domain", "global"}, {"reason", e.reason}};
  if (!e.location.empty()) item["location"] = e.location;
  if (!e.location_type.empty()) item["locationType"] = e.location_type;
  json::object err{{"code", e.code},
                   {"message", e.message},
                   {"errors", json::array{item}},
                   {"status", e.status.empty() ? RpcStatusFor(e.code) : e.status}};
  if (!e.details.empty()) err["details"] = e.details;
  return json::object{{"error", err}};
}

std::string ErrorBody(const ApiError& e) { return json::serialize(ErrorJson(e)); }

ApiError NotFound(const std::string& resource) {
  return ApiError{404, "notFound", "The resource '" + resource + "' was not found"};
}

ApiError AlreadyExists(const std::string& resource) {
  return ApiError{409, "alreadyExists", "The resource '" + resource + "' already exists"};
}

ApiError Invalid(const std::string& message, const std::string& field) {
  ApiError e{400, "invalid", message};
  if (!field.empty()) {
    e.details.push_back(
        json::object{{"@type", "type.googleapis.com/google.rpc.BadRequest"},
                     {"fieldViolations",
                      json::array{json::object{{"field", field}, {"description", message}}}}});
  }
  return e;
}

ApiError Required(const std::string& field) {
  return ApiError{400, "required", "Required field '" + field + "' not specified"};
}

ApiError Unauthenticated() {
  ApiError e{401, "authError",
             "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
             "cookie or other valid authentication credential. See "
             "https://developers.google.com/identity/sign-in/web/devconsole-project."};
  e.location = "Authorization";
  e.location_type = "header";
  return e;
}

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (name.front() < 'a' || name.front() > 'z') return false;
  if (name.back() == '-') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

ApiError BadName(const std::string& field, const std::string& value) {
  return Invalid("Invalid value for field '" + field + "': '" + value +
                     "'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'",
                 field);
}

std::optional<ApiError> NameProblem(const json::object& body) {
  if (!body.contains("name")) return Required("resource.name");
  std::string name = jsonfield::StringValue(body, "name");
  if (!ValidName(name)) return BadName("resource.name", name);
  return std::nullopt;
}

}  // namespace hyperslice::sim::gce::internal
