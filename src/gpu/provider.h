// Provider: one marketplace GPU cloud (RunPod, Lambda Cloud, Paperspace, Vast.ai) behind one
// interface, shaped like Karpenter's CloudProvider: list offers, create from one offer, get, list
// our own instances, delete.
//
// Contract for every implementation:
// - Offers come back normalised (src/gpu/normalize.h): `gpu_type` and `region` are the tgp.io
//   names when the tables know the provider's spelling, and the provider's own spelling otherwise,
//   with `gpu_type_known`/`region_known` false so the caller can report it. Nothing is dropped
//   because a name is unknown.
// - Money is integer micro-dollars per hour for the whole machine (MicroUsd): sums of many prices
//   and the price-paid / cheapest ratio stay exact.
// - Create carries the claim's UID in the instance name and in a tag/label, so a list by tag finds
//   a machine whose create answer was lost (ErrorKind::kAmbiguous). A create is never retried by
//   the client itself once the request may have reached the provider.
// - Delete of an instance that is already gone is success.
// - Errors are hyperslice::Error values; KindOf() classifies them (see ErrorKind). The provider's
//   own error code or message is kept in Error::message, never matched as text by callers.
// - Credentials come from a CredentialSource (credentials.h) on each call and are never logged.
// Thread-safe: one Provider may be used by many reconcilers at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::gpu {

// US dollars × 1e6 (per hour for prices). $0.69/h is 690000.
using MicroUsd = int64_t;
// "0.69" -> 690000. Accepts what users and APIs write: digits with an optional fraction (up to 6
// places kept, more rounded half-up). Errors: kInvalidArgument.
Result<MicroUsd> ParseUsd(std::string_view decimal);
// 690000 -> "0.69"; at least two fraction digits, trailing zeros past them trimmed.
std::string FormatUsd(MicroUsd value);
// A provider's floating-point dollar amount -> MicroUsd, rounded to the nearest micro-dollar.
MicroUsd UsdFromDouble(double dollars);

// Provider names as the GPUNodeClass spells them (seed 002): providers[].name.
inline constexpr char kRunPod[] = "runpod";
inline constexpr char kLambda[] = "lambdalabs";
inline constexpr char kPaperspace[] = "paperspace";
inline constexpr char kVast[] = "vastai";

// What a rented machine can boot, which decides how it joins (ARCHITECTURE.md §8 "Joining").
enum class BootKind {
  kUserData,       // a VM booted from the provider's Linux image with cloud-init user data
  kStartupScript,  // a VM with a provider startup script (Paperspace)
  kContainer,      // only a container image with env and args (RunPod pods, Vast containers)
};

struct Offer {
  std::string provider;  // kRunPod, ...
  // The provider's id for what is bought: RunPod gpuTypeId, Lambda instance type name, Paperspace
  // machine type, Vast ask (offer) id.
  std::string id;
  std::string gpu_type;           // normalised tgp.io/gpu-type ("RTX4090"), else provider's name
  bool gpu_type_known = false;    // false: `gpu_type` is the provider's spelling
  std::string provider_gpu_name;  // as the provider spells it ("NVIDIA GeForce RTX 4090")
  int gpu_count = 0;
  double gpu_memory_gib = 0;  // per GPU
  int vcpus = 0;
  double memory_gib = 0;
  double disk_gib = 0;
  std::string region;           // normalised tgp.io/region ("us-west"), else provider's name
  bool region_known = false;    // false: `region` is the provider's spelling
  std::string provider_region;  // as the provider spells it ("us-west-1", "CA-MTL-1")
  // Price of the whole machine. On-demand is absent when the offer is interruptible only; spot is
  // the provider's current minimum bid (RunPod, Vast) or spot price, absent when it has none.
  std::optional<MicroUsd> on_demand_price;
  std::optional<MicroUsd> spot_price;
  int available = -1;  // machines the provider says it can start now; -1 when it does not say
  BootKind boot = BootKind::kUserData;
  // Provider-specific facts worth keeping (Vast host id and reliability, RunPod secure/community).
  std::map<std::string, std::string> attributes;
};

// What a machine boots with. Each provider takes the parts it supports (and refuses, as
// kInvalidArgument before any call, a payload it cannot carry, e.g. user data over its limit).
struct BootPayload {
  std::string user_data;       // cloud-init user data (Lambda, Vast VMs) or a Talos document
  std::string startup_script;  // Paperspace startup script
  std::string image;           // container image (RunPod, Vast) or OS image/template id
  std::map<std::string, std::string> env;  // container env (RunPod, Vast)
  std::vector<std::string> args;
  // Container TCP ports the provider must publish (RunPod `ports: "<p>/tcp"`, Vast `-p <p>:<p>`):
  // reachable from outside on the machine's public address and a port the provider maps, which
  // the container learns from its env (RUNPOD_PUBLIC_IP + RUNPOD_TCP_PORT_<p>, PUBLIC_IPADDR +
  // VAST_TCP_PORT_<p>). A container port nobody asked for is reachable from nowhere.
  std::vector<int> tcp_ports;
  std::vector<std::string> ssh_key_names;  // Lambda requires exactly one
  // How the machine joins ("CloudInit", "StartupScript", "Talos"): what the claim records as
  // status.joinMethod. Providers ignore it.
  std::string join_method;
};

struct LaunchRequest {
  const Offer* offer = nullptr;  // required; the offer to buy, as listed
  std::string name;              // instance name; carries the claim UID
  std::string claim_uid;
  // Tags/labels the provider stores with the machine (cluster tag, claim UID, pool). Providers
  // without tags encode them in the name or in the fields they have; List() reads them back.
  std::map<std::string, std::string> tags;
  bool spot = false;
  // Spot/interruptible bid for the whole machine (RunPod's bidPerGpu is derived per GPU). Absent:
  // the offer's current spot price.
  std::optional<MicroUsd> bid;
  BootPayload payload;
};

enum class InstanceState {
  kPending,  // accepted, not running yet (provisioning, booting)
  kRunning,
  kStopping,    // terminating or being reclaimed
  kTerminated,  // gone, or stopped and no longer billed
  kUnknown,
};
const char* StateName(InstanceState state);

struct Instance {
  std::string provider;
  std::string id;  // the provider's instance id
  std::string name;
  InstanceState state = InstanceState::kUnknown;
  std::string provider_state;  // as the provider reports it
  bool reclaimed = false;      // interruptible machine taken back by the provider
  std::map<std::string, std::string> tags;
  std::string offer_id;
  std::string gpu_type;  // normalised when known
  int gpu_count = 0;
  std::string region;             // normalised when known
  std::optional<MicroUsd> price;  // what the provider bills per hour, when it says
  bool spot = false;
  std::string public_ip;
  // "<provider>://<id>", the Node's spec.providerID.
  std::string ProviderId() const { return provider + "://" + id; }
};

// Why a call failed. Error::reason carries one of the kReason* strings below (so the kind survives
// being copied into a status condition), Error::code the matching broad code.
enum class ErrorKind {
  kUnauthorized,  // bad or missing credentials (401/403)
  kCapacity,      // offer gone or insufficient capacity: try another offer
  kRateLimited,   // 429; Error::retry_after when the provider said
  kInvalid,       // the provider refused the request as malformed; message is the provider's
  kNotFound,      // the instance does not exist (Get)
  kTransient,     // 5xx, transport failure before the request was sent: safe to retry
  kAmbiguous,     // the request was sent and no answer came: list by tag before creating again
  kInternal,      // anything else (a response we could not decode)
};
inline constexpr char kReasonUnauthorized[] = "ProviderUnauthorized";
inline constexpr char kReasonCapacity[] = "InsufficientCapacity";
inline constexpr char kReasonRateLimited[] = "ProviderRateLimited";
inline constexpr char kReasonInvalid[] = "ProviderInvalidRequest";
inline constexpr char kReasonNotFound[] = "InstanceNotFound";
inline constexpr char kReasonTransient[] = "ProviderUnavailable";
inline constexpr char kReasonAmbiguous[] = "AmbiguousResult";
inline constexpr char kReasonInternal[] = "ProviderInternal";

Error MakeError(ErrorKind kind, std::string message, int http_status = 0,
                std::optional<std::chrono::milliseconds> retry_after = std::nullopt);
ErrorKind KindOf(const Error& error);
const char* KindName(ErrorKind kind);

// What a provider can do; callers use it to pick a join method and to skip impossible offers.
struct Capabilities {
  bool spot = false;               // interruptible machines with a bid or spot price
  bool price_api = true;           // false: prices come from a table (Paperspace)
  bool tags = true;                // native tags/labels on instances
  size_t max_user_data_bytes = 0;  // 0: no user data
};

class Provider {
 public:
  virtual ~Provider() = default;
  virtual const char* name() const = 0;  // kRunPod, ...
  virtual Capabilities capabilities() const = 0;

  // One cheap authenticated call (the account, or an empty list).
  virtual Status CheckCredentials() = 0;
  // Every offer the provider sells now, normalised. Unknown GPU/region names are kept.
  virtual Result<std::vector<Offer>> ListOffers() = 0;
  // Buys one machine. On kAmbiguous the caller must List() by the claim's tag before retrying.
  virtual Result<Instance> Create(const LaunchRequest& request) = 0;
  virtual Result<Instance> Get(const std::string& id) = 0;
  // Our instances: those whose tags include every pair in `tags` (e.g. the cluster tag).
  virtual Result<std::vector<Instance>> List(const std::map<std::string, std::string>& tags) = 0;
  // Terminates; an instance already gone is success.
  virtual Status Delete(const std::string& id) = 0;
};

}  // namespace hyperslice::gpu
