// Parts of the Lambda simulator shared by its files: the region table and request validation.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <boost/json/value.hpp>

namespace hyperslice::sim::lambda::internal {

// InstanceLaunchRequest.user_data "cannot exceed 1MB" (OpenAPI 1.8.3), read as 10^6 bytes.
inline constexpr size_t kMaxUserDataBytes = 1'000'000;

// PublicRegionCode (OpenAPI 1.8.3): true for a region code the API knows.
bool KnownRegion(std::string_view code);
// Region.description for a code ("California, USA"); the code itself when unknown.
std::string RegionDescription(std::string_view code);

// Request bodies checked against the OpenAPI 1.8.3 schemas (InstanceLaunchRequest,
// InstanceTerminateRequest, AddSSHKeyRequest): unknown fields, wrong types, missing required
// fields, lengths, patterns and enums. Returns the global/invalid-parameters message (naming the
// field) or nullopt when the body is valid.
std::optional<std::string> ValidateLaunch(const boost::json::value& body);
std::optional<std::string> ValidateTerminate(const boost::json::value& body);
std::optional<std::string> ValidateAddSshKey(const boost::json::value& body);

}  // namespace hyperslice::sim::lambda::internal
