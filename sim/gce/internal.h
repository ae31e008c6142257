// Internals of the GCE simulator shared by its source files: GCE's error shape, the API schema
// from compute.proto, OAuth2 JWT checking. Not part of the module's public surface.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "src/base/result.h"

namespace hyperslice::sim::gce::internal {

namespace json = boost::json;

// One error as GCE answers it:
// {"error":{"code":N,"message":"...","errors":[{"message","domain":"global","reason"}],
//           "status":"NOT_FOUND","details":[...]}}
struct ApiError {
  int code = 400;
  std::string reason;    // errors[0].reason: notFound, alreadyExists, conditionNotMet, invalid, ...
  std::string message;   // error.message and errors[0].message
  std::string status;    // google.rpc.Code name; derived from `code` when empty
  std::string location;  // errors[0].location, e.g. "Authorization"
  std::string location_type;  // errors[0].locationType, e.g. "header"
  json::array details;        // google.rpc.* detail messages ("@type": ...)
};

std::string RpcStatusFor(int http_code);
json::object ErrorJson(const ApiError& e);
std::string ErrorBody(const ApiError& e);

ApiError NotFound(
    const std::string& resource);  // resource: "projects/p/global/instanceTemplates/t"
ApiError AlreadyExists(const std::string& resource);
ApiError Invalid(const std::string& message, const std::string& field = {});
ApiError Required(const std::string& field);  // "Required field '<field>' not specified"
ApiError Unauthenticated();

// GCE's resource name rule (RFC 1035): [a-z]([-a-z0-9]{0,61}[a-z0-9])?
bool ValidName(std::string_view name);
// "Invalid value for field 'resource.name': 'X'. Must be a match of regex '...'"
ApiError BadName(const std::string& field, const std::string& value);
// What every insert answers for its body's "name": Required when absent, BadName when not a
// valid name, nullopt when the name is good.
std::optional<ApiError> NameProblem(const json::object& body);

// The Compute v1 API definition, read from compute.proto at start: every rpc's HTTP route and
// request body message. Thread-safe after Load (read-only).
class ApiSchema {
 public:
  struct Rpc {
    std::string id;             // "compute.instanceTemplates.insert"
    std::string http_method;    // "POST"
    std::string path_template;  // "/compute/v1/projects/{project}/global/instanceTemplates"
    std::string body_field;     // "instance_template_resource" ("" when the rpc has no body)
    std::string body_type;      // "google.cloud.compute.v1.InstanceTemplate"
  };
  virtual ~ApiSchema() = default;
  // proto_dir holds google/cloud/compute/v1/compute.proto; its imports are looked up there, in the
  // google-gax package next to it, and in the system's protobuf include folder.
  static Result<std::unique_ptr<ApiSchema>> Load(const std::string& proto_dir);
  virtual const Rpc* Find(const std::string& rpc_id) const = 0;
  virtual size_t rpc_count() const = 0;
  // Checks a request body against the rpc's body message as GCE's front end does: malformed JSON,
  // unknown fields, wrong JSON types and enum values not in the API are 400 INVALID_ARGUMENT
  // ("Invalid JSON payload received. Unknown name \"foo\" at 'instance_template': Cannot find
  // field."). Returns nullopt when the body is acceptable.
  virtual std::optional<ApiError> ValidateBody(const std::string& rpc_id,
                                               std::string_view body) const = 0;
};

// Load() once per folder per process: the schema is immutable, so simulators share it (parsing
// compute.proto takes seconds).
Result<std::shared_ptr<const ApiSchema>> SharedApiSchema(const std::string& proto_dir);

// The default folder of compute.proto: $HYPERSLICE_GCE_PROTO_DIR, else where
// scripts/gce-schema.sh installs the pinned package.
std::string DefaultProtoDir();

// OAuth2: a service-account key the simulator created and trusts.
struct ServiceAccountKey {
  std::string email;
  std::string key_id;
  std::string private_key_pem;
  std::string public_key_pem;
};
Result<ServiceAccountKey> NewServiceAccountKey(const std::string& email);

// Verifies an RS256 JWT-bearer assertion (RFC 7523) against the trusted keys: signature, `iss`
// (a known service account), `aud` (one of `audiences`), `exp`/`iat`. Returns the issuer's email.
// Errors carry OAuth2's error text (invalid_grant reasons) in the message.
Result<std::string> VerifyAssertion(std::string_view jwt,
                                    const std::map<std::string, ServiceAccountKey>& keys_by_id,
                                    const std::vector<std::string>& audiences, int64_t now_unix);

}  // namespace hyperslice::sim::gce::internal
