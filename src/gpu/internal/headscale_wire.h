// headscale's native API (/api/v1) on the wire, as headscale v0.29.3 serves it: its gRPC service
// (proto/headscale/v1/*.proto) through grpc-gateway v2 with the default marshaler, so
//   - field names are the protobuf JSON names (lowerCamelCase: "aclTags", "ipAddresses",
//     "preAuthKey"); requests may use either form, answers always use camelCase;
//   - uint64 fields (ids) are JSON strings ("id": "7"); timestamps are RFC 3339 strings;
//   - unset fields are still sent (EmitUnpopulated);
//   - an error is {"code": <gRPC code>, "message": "...", "details": []} with the HTTP status
//     grpc-gateway maps the code to; a missing or bad API key is a bare 401 "Unauthorized" from
//     headscale's own middleware, before the gateway.
// Kept apart from the client so the decoding is unit-tested against recorded answers.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"
#include "src/gpu/provider.h"
#include "src/gpu/tailnet.h"
#include "src/net/http.h"

namespace hyperslice::gpu::internal::headscale {

// CreatePreAuthKeyRequest: {"user": "<id>" (omitted for a tagged key), "reusable", "ephemeral",
// "expiration": RFC 3339, "aclTags": [...]}.
std::string EncodeCreatePreAuthKey(const AuthKeyRequest& request, std::string_view user_id,
                                   std::chrono::system_clock::time_point expiration);
// CreatePreAuthKeyResponse {"preAuthKey": PreAuthKey}.
Result<AuthKey> DecodeCreatePreAuthKey(std::string_view body);
// ListNodesResponse {"nodes": [Node]}.
Result<std::vector<Device>> DecodeNodes(std::string_view body);
// ListUsersResponse {"users": [User]}: the id of the user named `name` ("" when none is).
Result<std::string> DecodeUserId(std::string_view body, std::string_view name);
// A non-2xx answer as an Error of the matching ErrorKind, with headscale's message.
Error DecodeError(const net::Response& response);

}  // namespace hyperslice::gpu::internal::headscale
