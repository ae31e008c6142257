// The GPUNodeClass controller (issue "Ephemeral GPUs 2/4", item 2): for each enabled provider of a
// class it builds the provider client from the class (credentialsRef, endpoint), checks the
// credentials with one cheap authenticated call every `credentials_check_interval`, refreshes the
// offers every `offer_refresh_interval` into the shared OfferCache, and reports it all in the
// class's status:
//   status.providers[]{name, credentialsValid, lastCheck, error, offerCount, lastRefresh,
//                      unknownNames}
//   status.providersReady "<valid>/<enabled>", activeNodes and hourlyCost (its live claims)
//   conditions ProvidersReady (every enabled provider's credentials work; the message names the
//   ones that do not) and Ready (at least one does), with observedGeneration.
//   Condition MachineConfigValid: the inline talosConfig.machineConfigTemplate, rendered with
//   placeholder values, checked for what Talos would refuse (talos.h); False (reason
//   TemplateInvalid, the refusals in the message) when it does not render or Talos would refuse
//   it. A provider in `talos_providers` does not count towards Ready then; when no other provider
//   is usable, Ready is False with reason MachineConfigInvalid, so nothing is rented for it.
// A class is kept (finalizer tgp.io/termination) while a GPUNodePool references it or a
// GPUNodeClaim still uses it (its machine is returned through the class's providers): deletion
// waits, and the Ready condition names what holds it (reason InUse).
// Events: CredentialsInvalid (Warning) and CredentialsValid when a provider's check turns.
// Metrics: hyperslice_gpu_offers{class,provider} (offers in the cache) and
// hyperslice_gpu_offer_cache_refresh_timestamp_seconds{class,provider} (age = time() - it).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/gpu/controller_deps.h"
#include "src/gpu/offer_cache.h"
#include "src/gpu/providers.h"

namespace hyperslice::kube::metrics {
class Registry;
}  // namespace hyperslice::kube::metrics

namespace hyperslice::gpu {

inline constexpr char kClassFinalizer[] = "tgp.io/termination";

// Builds a provider client; tests substitute one that wraps NewProvider.
using ProviderFactory =
    std::function<Result<std::unique_ptr<Provider>>(const ProviderConfig& config)>;

struct ClassControllerOptions : ControllerDeps {
  std::shared_ptr<OfferCache> cache;  // required; shared with the provisioner
  // Where a credentialsRef without namespace is looked up (the operator's
  // --credentials-namespace).
  std::string credentials_namespace = kDefaultCredentialsNamespace;
  Clock::Duration credentials_check_interval = std::chrono::minutes(5);
  Clock::Duration offer_refresh_interval = std::chrono::seconds(60);
  // API base per provider for classes that name no endpoint (the operator's --gpu-endpoint);
  // absent: the provider's public API.
  std::map<std::string, std::string> default_endpoints;
  // Client-side request rate per provider (requests/s, burst the same), overriding each client's
  // documented default (the operator's --gpu-provider-qps, for private endpoints with other
  // limits and for tests).
  std::map<std::string, double> provider_qps;
  // Providers whose machines boot Talos from the class's machine config. Which providers boot
  // Talos is decided per provider by the boot payloads (issue "Ephemeral GPUs 3/4", item 1); until
  // that lands the operator passes none, and an invalid template is only reported.
  std::set<std::string> talos_providers;
  // Leave container-only offers (RunPod pods, Vast containers) out of the cache, so nothing is
  // planned or rented on them: such a machine cannot run a kubelet and would join only as a
  // linked runner, which is not built yet. The provider's status says how many were skipped and
  // why. The operator sets it; tests that launch container offers with stand-in machines do not.
  bool skip_container_offers = false;
  ProviderFactory factory;  // empty: NewProvider
  int workers = 2;
  kube::metrics::Registry* registry = nullptr;  // nullptr: the manager's
};

// Adds the controller (and the GPUNodeClass and GPUNodePool informers it needs) to `mgr`.
Status RegisterClassController(kube::Manager& mgr, ClassControllerOptions options);

}  // namespace hyperslice::gpu
