// Per-machine tailnet credentials (issue "Ephemeral GPUs 3/4", item 2): for a GPUNodeClass with
// spec.tailscaleConfig, one TailnetAdmin (tailnet.h) per class, built from the class:
//   loginServer set     headscale's /api/v1 with the API key from tailscaleConfig.apiKeySecretRef
//                       (key "api-key" by default; without it, the clientSecretKey of
//                       oauthCredentialsSecretRef, as the CRD documents);
//   no loginServer      Tailscale's API v2 with the OAuth client of oauthCredentialsSecretRef
//                       (default: the client-id/client-secret keys of the Secret the class's first
//                       provider's credentialsRef names).
// The claim controller (claim_controller.h, ClaimControllerOptions::tailnet) uses it to
//   - Mint, before each launch: a single-use, pre-authorised key, ephemeral as the class says,
//     tagged with the class's tags, expiring within the launch timeout. The key goes into the boot
//     payload only (BootContext); the claim records its id as status.tailnetKeyID;
//   - FindDevice, once the Node registered: the device the machine joined as (its hostname is the
//     claim's name, as the join script sets it), recorded as status.tailnetIP / tailnetDeviceID;
//   - Release, at teardown once the machine is gone: its device is deleted (by the recorded id,
//     else found by name; one already gone is success);
//   - CollectGarbage, on the controller's GC pass: a device that is ours (it carries every one of
//     its class's tags — a class without tags has nothing collected — and its hostname has the
//     shape of a claim's name, "<pool>-<5 letters of the provisioner's alphabet>", with a pool
//     that uses the class) and that no claim has, is deleted once it has been seen without a claim
//     for the grace period. Devices anyone else made (other tags, other names) are never touched.
// Keys, API keys and OAuth secrets never appear in a log line, Event, status or error message.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/gpu/credentials.h"
#include "src/gpu/tailnet.h"
#include "src/kube/resource.h"
#include "src/kube/store.h"

namespace hyperslice::kube {
class Client;
}

namespace hyperslice::gpu {

// Builds the admin for a class (tests may substitute one); the default is DefaultTailnetAdmin.
using TailnetAdminFactory =
    std::function<Result<std::unique_ptr<TailnetAdmin>>(const kube::Object& node_class)>;

struct TailnetCredentialsOptions {
  std::shared_ptr<kube::Client> client;  // required: the classes' Secrets
  // Where a secret reference without namespace is looked up (the operator's
  // --credentials-namespace).
  std::string credentials_namespace = kDefaultCredentialsNamespace;
  // Tailscale's API base for classes without loginServer; empty: kTailscaleApiEndpoint.
  std::string tailscale_api_endpoint;
  TailnetAdminFactory factory;  // empty: DefaultTailnetAdmin
  Clock* clock = nullptr;       // nullptr: RealClock()
};

struct MintedKey {
  std::string id;            // goes on the claim (status.tailnetKeyID)
  std::string key;           // the payload only
  std::string login_server;  // the class's loginServer ("" for Tailscale)
};

class TailnetCredentials {
 public:
  explicit TailnetCredentials(TailnetCredentialsOptions options);

  // Whether the class asks for a tailnet (has spec.tailscaleConfig).
  static bool Wanted(const kube::Object* node_class);

  // nullopt when the class has no tailscaleConfig. Errors: the admin's (tailnet.h), or
  // kInvalidArgument for a class whose tailscaleConfig cannot be used.
  Result<std::optional<MintedKey>> Mint(const kube::Object& node_class,
                                        std::chrono::seconds expiry);
  // The device named `claim_name` (hostname or name); nullopt while there is none.
  Result<std::optional<Device>> FindDevice(const kube::Object& node_class,
                                           const std::string& claim_name);
  // Deletes the claim's device (status.tailnetDeviceID, else found by the claim's name).
  Status Release(const kube::Object& node_class, const kube::Object& claim);
  // One GC pass over every class with a tailnet: `claims` are the names of all claims, `pools`
  // the names of the pools by the class they use. Returns how many devices were deleted.
  int CollectGarbage(const std::vector<kube::ObjectPtr>& classes,
                     const std::set<std::string>& claims,
                     const std::map<std::string, std::set<std::string>>& pools,
                     Clock::Duration grace);

 private:
  Result<std::shared_ptr<TailnetAdmin>> AdminFor(const kube::Object& node_class);

  TailnetCredentialsOptions o_;
  Clock& clock_;
  std::mutex mu_;
  struct Cached {
    std::string fingerprint;  // the tailscaleConfig the admin was built from
    std::shared_ptr<TailnetAdmin> admin;
  };
  std::map<std::string, Cached> admins_;             // by class name
  std::map<std::string, Clock::TimePoint> orphans_;  // "<class>/<device id>" -> first seen
};

// The admin tailscaleConfig describes (see the top of this file).
Result<std::unique_ptr<TailnetAdmin>> DefaultTailnetAdmin(const TailnetCredentialsOptions& options,
                                                          const kube::Object& node_class);

// Whether `hostname` has the shape of a claim of one of `pools` ("<pool>-<suffix>").
bool LooksLikeClaimName(const std::string& hostname, const std::set<std::string>& pools);

// The first IPv4 address of a device ("" when it has none).
std::string TailnetIPv4(const Device& device);

}  // namespace hyperslice::gpu
