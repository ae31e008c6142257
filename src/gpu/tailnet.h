// The tailnet a rented machine joins (issue "Ephemeral GPUs 3/4"): per-machine auth keys before a
// launch, the machine's device (its tailnet address) once it joined, and the device's removal at
// teardown. One interface for the two control servers a GPUNodeClass can name: headscale
// (`tailscaleConfig.loginServer` set; its native API /api/v1, below) and Tailscale's own API v2
// with an OAuth client (no loginServer; below).
//
// Errors use the provider ErrorKinds (src/gpu/provider.h) so the claim controller treats a tailnet
// call like a provider call: kUnauthorized (bad API key), kInvalid (the server refused the
// request, e.g. a tag that is not "tag:..."), kNotFound, kRateLimited, kTransient (retried for
// reads), kAmbiguous (a create sent without an answer: a key may exist; it expires on its own),
// kInternal (an answer we could not read). Keys, API keys and tokens never appear in an error
// message or a log line.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/base/result.h"
#include "src/gpu/providers.h"

namespace hyperslice::gpu {

struct AuthKeyRequest {
  // ACL tags the device gets ("tag:gpu"); the class's tailscaleConfig.tags.
  std::vector<std::string> tags;
  // An ephemeral device is removed by the server once it has been offline for a while
  // (headscale: node.ephemeral.inactivity_timeout), so a machine that died unseen leaves no device.
  bool ephemeral = true;
  // Single use unless set: a key copied out of a machine's user data cannot join a second one.
  bool reusable = false;
  // How long the key may be used (it is spent at the first join anyway). The launch timeout.
  std::chrono::seconds expiry{std::chrono::minutes(10)};
};

struct AuthKey {
  std::string id;   // the server's id for the key (headscale: the pre-auth key's numeric id)
  std::string key;  // the secret: goes into the machine's payload only, never a log or status
  std::chrono::system_clock::time_point expires;
};

struct Device {
  std::string id;                      // what DeleteDevice takes (headscale: the node id)
  std::string name;                    // the device's name in the tailnet (headscale: given_name)
  std::string hostname;                // what the machine reported (headscale: name)
  std::vector<std::string> addresses;  // tailnet IPs: 100.64.0.0/10 and fd7a:115c:a1e0::/48
  std::vector<std::string> tags;
  bool online = false;
};

class TailnetAdmin {
 public:
  virtual ~TailnetAdmin() = default;
  // A pre-authorised key (devices joining with it need no approval).
  virtual Result<AuthKey> CreateAuthKey(const AuthKeyRequest& request) = 0;
  virtual Result<std::vector<Device>> ListDevices() = 0;
  // Removes the device; one that is already gone is success (teardown may run twice).
  virtual Status DeleteDevice(const std::string& id) = 0;
};

// What tailscaleConfig with `loginServer` maps to.
struct HeadscaleConfig {
  // loginServer: headscale's base URL ("https://headscale.example.com"; in tests a loopback URL).
  // The API is served on the same listener under /api/v1.
  std::string login_server;
  // An API key (`headscale apikeys create`), sent as "Authorization: Bearer <key>"; the class's
  // secret reference. Required.
  std::shared_ptr<CredentialSource> api_key;
  // The headscale user that owns untagged keys and their devices. headscale v0.29 ties a pre-auth
  // key to a user or to tags (a tagged key's devices are owned by their tags and need no user; a
  // key with neither is refused), so this is only needed when the class has no tags. The user must
  // exist (`headscale users create <name>`); it is looked up by name on each untagged create.
  std::string user;
  // Transport, retries and metrics as for a provider (src/gpu/providers.h): the calls are counted
  // under provider="headscale".
  RetryOptions retry;
  std::chrono::milliseconds request_timeout{30000};
  std::string ca_pem;  // CA bundle for a private login server; empty: the system roots
  Clock* clock = &RealClock();
  kube::metrics::Registry* metrics = nullptr;
  uint64_t seed = 0;
};

inline constexpr char kHeadscale[] = "headscale";

// Errors: kInvalidArgument for a missing login server or API key source, or a bad URL.
Result<std::unique_ptr<TailnetAdmin>> NewHeadscaleAdmin(const HeadscaleConfig& config);

// What tailscaleConfig without `loginServer` maps to: Tailscale's API v2 (tailnet_tailscale.cc),
// authenticated as an OAuth client (client credentials → a one-hour access token, cached until
// shortly before it expires). The client needs the scopes auth_keys (create keys) and devices:core
// (list and delete devices), and must own the class's tags: Tailscale refuses an untagged key, or
// one with tags the client does not own, made by an OAuth client.
struct TailscaleConfig {
  // The API's base URL, without /api/v2; empty: kTailscaleApiEndpoint. Tests point it at
  // sim/tailscale.
  std::string api_endpoint;
  // The tailnet id; "-" is the OAuth client's own tailnet.
  std::string tailnet = "-";
  // oauthCredentialsSecretRef: the client id (clientIdKey) and secret (clientSecretKey), read on
  // each token request (a rotated Secret takes effect at the next one). Required; never logged.
  std::shared_ptr<CredentialSource> client_id;
  std::shared_ptr<CredentialSource> client_secret;
  // Scopes the token asks for; empty: all the client has.
  std::vector<std::string> scopes;
  // The keys' description in the admin console (Tailscale: at most 50 letters, digits, hyphens and
  // spaces).
  std::string key_description = "hyperslice GPU machine";
  // Transport, retries and metrics as for a provider (src/gpu/providers.h): the calls are counted
  // under provider="tailscale".
  RetryOptions retry;
  std::optional<double> requests_per_second;  // unset: 10 a second (burst 20)
  std::chrono::milliseconds request_timeout{30000};
  std::string ca_pem;           // CA bundle for a private endpoint; empty: the system roots
  Clock* clock = &RealClock();  // token lifetime and backoff
  kube::metrics::Registry* metrics = nullptr;
  uint64_t seed = 0;
};

inline constexpr char kTailscale[] = "tailscale";
inline constexpr char kTailscaleApiEndpoint[] = "https://api.tailscale.com";

// Errors: kInvalidArgument for a missing client id or secret source, a bad URL or tailnet, or a
// key description Tailscale would refuse.
Result<std::unique_ptr<TailnetAdmin>> NewTailscaleAdmin(const TailscaleConfig& config);

}  // namespace hyperslice::gpu
