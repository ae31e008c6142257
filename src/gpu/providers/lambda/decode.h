// Lambda Cloud API response decoders and the wire encoding of tags (internal to the Lambda client;
// here so the fuzz target test/fuzz/gpu_lambda_fuzz.cc can call them).
//
// Shapes are those of Lambda's published OpenAPI document, "Lambda Cloud API" 1.8.3
// (components.schemas InstanceTypes, InstanceTypesItem, InstanceType, InstanceTypeSpecs, Region,
// Instance, InstanceStatus, TagEntry, InstanceLaunchResponse and the ApiError* error objects).
// Every success body is {"data": <payload>}; every error body is
// {"error": {"code", "message", "suggestion"?}} and the code, never the message, says what failed.
//
// The decoders never throw: anything that is not the documented shape is a kInternal error naming
// what was wrong.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"
#include "src/gpu/provider.h"
#include "src/net/http.h"

namespace hyperslice::gpu::providers::lambda {

// InstanceLaunchRequest.user_data: "The user data string must be plain text and cannot exceed
// 1MB in size" (OpenAPI 1.8.3). Read as 10^6 bytes, the stricter reading, so a payload Lambda
// could refuse is refused here, before any call.
inline constexpr size_t kMaxUserDataBytes = 1'000'000;
// InstanceLaunchRequest.name: maxLength 64. RequestedTagEntry: key maxLength 55 and pattern
// ^[a-z][a-z0-9-:]+$, value maxLength 128.
inline constexpr size_t kMaxNameBytes = 64;
inline constexpr size_t kMaxTagKeyBytes = 55;
inline constexpr size_t kMaxTagValueBytes = 128;

// GET /api/v1/instance-types -> one Offer per (instance type, region with capacity available),
// normalised. Instance types with no region with capacity are left out (Lambda names no region
// for them, so there is nothing to launch) and so are instance types without GPUs
// (specs.gpus == 0). `available` is 1: Lambda says only that there is capacity, i.e. at least one.
Result<std::vector<Offer>> DecodeInstanceTypes(std::string_view body);

// GET /api/v1/instances/{id} -> {"data": Instance}.
Result<Instance> DecodeInstance(std::string_view body);
// GET /api/v1/instances -> {"data": [Instance]}.
Result<std::vector<Instance>> DecodeInstances(std::string_view body);
// POST /api/v1/instance-operations/launch -> {"data": {"instance_ids": [...]}}; at least one id.
Result<std::vector<std::string>> DecodeLaunch(std::string_view body);

// A non-2xx answer -> Error with the ErrorKind its `code` says (status when there is no code):
//   global/invalid-api-key, global/account-inactive, global/invalid-address -> kUnauthorized
//   instance-operations/launch/insufficient-capacity, global/quota-exceeded  -> kCapacity
//   global/object-does-not-exist                                             -> kNotFound
//   global/invalid-parameters, global/duplicate, instance-operations/launch/* -> kInvalid
//   global/internal-error, global/unknown, provider/*                        -> kTransient
//   HTTP 429 (Lambda's edge answers "error code: 1015" as text, not JSON)   -> kRateLimited
// The message keeps Lambda's code, message and suggestion.
Error DecodeError(const net::Response& response);

// Tag keys on the wire. Lambda only takes keys matching ^[a-z][a-z0-9-:]+$, so our keys
// ("tgp.io/claim-uid") are escaped: every byte outside [a-z0-9-] becomes ':' and two lower-case
// hex digits ("tgp:2eio:2fclaim-uid"). Errors (kInvalid): a key that does not start with [a-z],
// is shorter than 2 bytes, or is longer than kMaxTagKeyBytes once escaped.
Result<std::string> EncodeTagKey(std::string_view key);
// Inverse of EncodeTagKey; a key with no valid escape (a tag set by hand) is returned unchanged.
std::string DecodeTagKey(std::string_view wire);

}  // namespace hyperslice::gpu::providers::lambda
