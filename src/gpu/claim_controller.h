// The GPUNodeClaim lifecycle (issue "Ephemeral GPUs 2/4", item 4), Karpenter's NodeClaim phases:
//   Launched     the provider accepted the create (status: instance id, providerID, offer, price);
//   Registered   a Node with the claim's providerID exists: the pool's labels and taints and the
//                offer's tgp.io labels are synced to it, the registration taint
//                tgp.io/unregistered removed;
//   Initialized  the Node is Ready, no startup taint is left and nvidia.com/gpu is allocatable;
//   Ready        Initialized.
// A launched claim whose machine the provider no longer runs (spot reclaim, deleted outside
// hyperslice) is deleted with a MachineGone warning by the garbage collector's pass.
// Launch picks the cheapest live offer for the claim's requirements (the planned one when it is
// still sold at or below the planned price: its provider is asked again right before the create),
// records the attempt in status.createAttempt *before* sending the create, and after a create
// whose answer was lost (kAmbiguous) or a crash lists the provider's instances by the claim's UID
// tag before it may create again — a paid machine is never doubled. A capacity failure marks the
// offer unavailable (UnavailableOffers) and tries the next one. Launch and registration timeouts
// delete the claim with a reason. Deletion (finalizer tgp.io/termination) returns the machine —
// delete, then wait until the provider reports it gone — and deletes the Node before the claim
// goes. The garbage collector deletes provider instances tagged with this cluster that no claim
// owns (after a grace period, so a create in flight is never collected).
// Events on the claim: Launched, OfferUnavailable, AmbiguousLaunch, LaunchFailed, Registered,
// Initialized, LaunchTimeout, RegistrationTimeout, Terminated.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/gpu/controller_deps.h"
#include "src/gpu/offer_cache.h"
#include "src/gpu/provider.h"
#include "src/gpu/unavailable_offers.h"
#include "src/kube/resource.h"

namespace hyperslice::gpu {

class TailnetCredentials;

// Annotations the provisioner writes on a claim (the decision it made, for the launch to honour).
inline constexpr char kAnnotationRequirements[] = "tgp.io/offer-requirements";  // JSON
// "<provider>/<offer id>@<provider region>"
inline constexpr char kAnnotationPlannedOffer[] = "tgp.io/planned-offer";
inline constexpr char kAnnotationPlannedPrice[] = "tgp.io/planned-price";  // "0.69" ($/h)
// The uids of the pods the provisioner created the claim for (JSON array; internal/claim.h).
inline constexpr char kAnnotationNominatedPods[] = "tgp.io/nominated-pods";
// On a replacement the disruption controller launched: the expired claim it replaces.
inline constexpr char kAnnotationReplaces[] = "tgp.io/replaces";
// Labels linking a (cluster-scoped) claim to its (namespaced) pool.
inline constexpr char kLabelPoolNamespace[] = "tgp.io/nodepool-namespace";
// Tags on provider instances.
inline constexpr char kTagCluster[] = "tgp.io/cluster";
inline constexpr char kTagClaim[] = "tgp.io/claim";
inline constexpr char kTagClaimUid[] = "tgp.io/claim-uid";
// The taint a rented machine registers with; the claim controller removes it once the Node has
// the pool's labels and taints (Karpenter's karpenter.sh/unregistered).
inline constexpr char kTaintUnregistered[] = "tgp.io/unregistered";
inline constexpr char kClaimFinalizer[] = "tgp.io/termination";

// What a machine boots with (issue "3/4" renders Talos/cloud-init payloads); the default gives
// the provider's SSH key names from the class and nothing else.
struct BootContext {
  const kube::Object* claim = nullptr;
  const kube::Object* node_class = nullptr;
  const Offer* offer = nullptr;
  // The machine's tailnet auth key when ClaimControllerOptions::tailnet minted one for this
  // launch (empty: no tailnet); the payload builder puts it in the payload and nowhere else.
  std::string tailnet_auth_key;
  std::string tailnet_login_server;
};
using PayloadBuilder = std::function<Result<BootPayload>(const BootContext&)>;

struct ClaimControllerOptions : ControllerDeps {
  std::shared_ptr<OfferCache> cache;               // required (the class controller fills it)
  std::shared_ptr<UnavailableOffers> unavailable;  // required
  std::string cluster_id;                          // required: the tgp.io/cluster tag
  PayloadBuilder payload;                          // empty: the default above
  // Called once the claim's Node registered and again before a deleted claim lets go: removes
  // the machine's join credentials (its bootstrap token, boot_payload.h). Empty: nothing to do.
  std::function<Status(const kube::Object& claim)> release_credentials;
  // Per-machine tailnet credentials (tailnet_credentials.h) for classes with tailscaleConfig: a
  // key minted before each launch (expiring within launch_timeout; its id on
  // status.tailnetKeyID), the device recorded once the Node registered (status.tailnetIP,
  // tailnetDeviceID), deleted at teardown, and devices no claim owns collected on the GC pass.
  // Empty: machines get no tailnet key.
  std::shared_ptr<TailnetCredentials> tailnet;
  Clock::Duration launch_timeout = std::chrono::minutes(5);
  Clock::Duration registration_timeout = std::chrono::minutes(15);
  // How long after a create whose answer was lost the instance may take to appear in a list.
  Clock::Duration ambiguous_settle = std::chrono::seconds(10);
  // Garbage collection of instances no claim owns: period and grace (0 period: off).
  Clock::Duration gc_interval = std::chrono::minutes(1);
  Clock::Duration gc_grace = std::chrono::seconds(60);
  int workers = 4;
};

Status RegisterClaimController(kube::Manager& mgr, ClaimControllerOptions options);

}  // namespace hyperslice::gpu
