// Tailscale's API v2 on the wire (the published OpenAPI document "Tailscale API", v2, and the OAuth
// token endpoint), kept apart from the client so the encoding and decoding are unit-tested:
//   - POST /api/v2/oauth/token, form-encoded client credentials grant (RFC 6749 §4.4) →
//     {"access_token","token_type":"Bearer","expires_in","scope"}; its errors are OAuth's
//     {"error","error_description"};
//   - POST /api/v2/tailnet/{tailnet}/keys {"capabilities":{"devices":{"create":{"reusable",
//     "ephemeral","preauthorized","tags"}}},"expirySeconds","description"} → Key (schema Key: "id",
//     "key" only in this answer, "expires" RFC 3339, ...);
//   - GET /api/v2/tailnet/{tailnet}/devices → {"devices":[Device]} (schema Device: "nodeId" the
//     preferred id, "id" the legacy one, "name" the MagicDNS name, "hostname", "addresses", "tags",
//     "connectedToControl");
//   - every other error is {"message": "..."} with the HTTP status.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"
#include "src/gpu/provider.h"
#include "src/gpu/tailnet.h"
#include "src/net/http.h"

namespace hyperslice::gpu::internal::tailscale {

// The token request body: grant_type=client_credentials&client_id=…&client_secret=…[&scope=…],
// each value form-encoded (scopes joined by spaces).
std::string EncodeTokenRequest(std::string_view client_id, std::string_view client_secret,
                               const std::vector<std::string>& scopes);

struct AccessToken {
  std::string token;
  std::chrono::seconds expires_in{0};
};
// The token answer; kInternal when it has no token or a token type other than Bearer.
Result<AccessToken> DecodeToken(std::string_view body);

// The create-key body for an auth key. Tailscale's keys are pre-authorised on request; the
// operator always asks, because nobody approves a rented machine by hand.
std::string EncodeCreateKey(const AuthKeyRequest& request, std::string_view description);
Result<AuthKey> DecodeKey(std::string_view body);
Result<std::vector<Device>> DecodeDevices(std::string_view body);

// A non-2xx answer as an Error of the matching ErrorKind with Tailscale's message (or the OAuth
// error and its description): 401, 403 (a scope the token lacks) and OAuth's invalid_client /
// unauthorized_client / invalid_scope are kUnauthorized; 400, 409, 422 and 501 (Tailscale's "device
// not owned by tailnet") kInvalid; 404 kNotFound; 429 kRateLimited; other 5xx kTransient.
Error DecodeError(const net::Response& response);

}  // namespace hyperslice::gpu::internal::tailscale
