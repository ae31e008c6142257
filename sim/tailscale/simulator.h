// The Tailscale API v2 simulator: the part of Tailscale's published API (OpenAPI "Tailscale API"
// v2) a GPU operator uses — OAuth client credentials → access token, auth keys, devices — with
// Tailscale's error shape ({"message": ...}), scopes and status codes, on a loopback listener;
// and, on a second listener, a control endpoint standing in for the coordination server: a device
// "joins" with an auth key (single-use keys spent, tags copied, a 100.64/10 address allocated and
// never dialed). Tested with Tailscale's own Go client (scripts/tailscale-client-check). See
// sim/tailscale/README.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/clock.h"
#include "src/base/result.h"

namespace hyperslice::sim::tailscale {

// An OAuth client of the tailnet (what the admin console's "Trust credentials" page creates).
struct OAuthClient {
  std::string id;
  std::string secret;
  // Scopes the client was created with: "auth_keys", "auth_keys:read", "devices:core",
  // "devices:core:read", "all", "all:read", ... A token gets these or a subset it asks for.
  std::vector<std::string> scopes;
  // Tags the client owns; every auth key it creates must carry tags among these (Tailscale: keys
  // owned by the tailnet must be tagged).
  std::vector<std::string> tags;
};

struct Options {
  std::string address = "127.0.0.1";
  uint16_t api_port = 0, control_port = 0;  // 0: a free port
  int threads = 4;
  // The tailnet's id; "-" in a path means this one, any other id is 404.
  std::string tailnet = "example.com";
  // MagicDNS suffix of device names ("<hostname>.<suffix>").
  std::string dns_suffix = "tail0c0ffee.ts.net";
  std::vector<OAuthClient> clients;
  // Access tokens live an hour (Tailscale's documented lifetime).
  std::chrono::seconds token_lifetime{3600};
  // Per-client request rate (token bucket); 0: unlimited. Beyond it: 429 with Retry-After.
  double requests_per_second = 0;
  int burst = 20;
  // An ephemeral device offline this long is removed (Tailscale: "shortly after" it goes offline).
  std::chrono::seconds ephemeral_offline_timeout{std::chrono::minutes(30)};
  Clock* clock = &RealClock();  // token and key expiry, rate limit, timestamps
  uint64_t seed = 1;            // ids, key secrets and addresses
};

// A device as the simulator holds it (the API serves it as Tailscale's Device object).
struct DeviceInfo {
  std::string node_id;  // "n…CNTRL": the preferred id
  std::string id;       // the legacy numeric id (also accepted in /device/{id})
  std::string hostname;
  std::string name;                    // "<hostname>.<dns_suffix>"
  std::vector<std::string> addresses;  // 100.64.0.0/10 and fd7a:115c:a1e0::/48
  std::vector<std::string> tags;
  bool ephemeral = false;
  bool online = true;
  std::string key_id;  // the auth key it joined with
};

// An auth key as the simulator holds it (never with its secret).
struct KeyInfo {
  std::string id;
  bool reusable = false, ephemeral = false, preauthorized = false;
  std::vector<std::string> tags;
  std::string description;
  int uses = 0;
  bool revoked = false, expired = false;
};

class TailscaleSimulator {
 public:
  virtual ~TailscaleSimulator() = default;
  virtual std::string api_endpoint() const = 0;      // "http://127.0.0.1:<port>" (no /api/v2)
  virtual std::string control_endpoint() const = 0;  // "http://127.0.0.1:<port>"

  // What `tailscale up --authkey <key> --hostname <hostname>` achieves against Tailscale's
  // coordination server. Errors (kForbidden) for an unknown, revoked, expired or spent key,
  // with the message tailscaled would print.
  virtual Result<DeviceInfo> Join(std::string_view auth_key, std::string_view hostname) = 0;
  // Marks a device connected or not (offline ephemeral devices are removed after the timeout).
  virtual Status SetOnline(std::string_view device_id, bool online) = 0;
  virtual std::vector<DeviceInfo> Devices() const = 0;
  virtual std::vector<KeyInfo> Keys() const = 0;

  // Answers the next `count` API requests (the token endpoint included) with 429 and
  // `Retry-After: <retry_after>` before looking at them.
  virtual void RateLimitNext(int count, std::chrono::seconds retry_after) = 0;
  // Invalidates every access token issued so far (as revoking them in the admin console would).
  virtual void RevokeTokens() = 0;
  // Requests answered per route ("POST /api/v2/oauth/token", "GET
  // /api/v2/tailnet/{tailnet}/devices",
  // ...), whatever the status.
  virtual int64_t Requests(std::string_view route) const = 0;
  virtual int64_t TokensIssued() const = 0;

  virtual void Stop() = 0;
};

Result<std::unique_ptr<TailscaleSimulator>> Start(Options options);

}  // namespace hyperslice::sim::tailscale
