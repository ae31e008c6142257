// The GPU half of `hyperslice operator --gpu` as one call (issue "Ephemeral GPUs"): the
// GPUNodeClass controller, the provisioner, the GPUNodeClaim lifecycle with its boot payloads
// (join scripts / Talos with a per-claim bootstrap token), the disruption controller and the cost
// collector, sharing one offer cache, one unavailable-offers list and one event recorder. The
// composition root (src/cmd: the operator role, `hyperslice dev`) fills the options from flags;
// what is left unset keeps each controller's own default (its header says which).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/gpu/credentials.h"

namespace hyperslice::kube {
class Client;
class Manager;
}  // namespace hyperslice::kube

namespace hyperslice::gpu {

struct OperatorOptions {
  std::shared_ptr<kube::Client> client;  // required
  // The tgp.io/cluster tag on every rented machine; empty: the uid of kube-system (so two
  // clusters sharing an account never collect each other's machines).
  std::string cluster_id;
  std::string credentials_namespace = kDefaultCredentialsNamespace;  // credentialsRef without one
  std::map<std::string, std::string> default_endpoints;              // provider -> API base URL
  std::map<std::string, double> provider_qps;  // provider -> client-side requests/s
  // What a machine's kubelet dials (https://host:port) and the cluster CA it trusts; without an
  // endpoint nothing is launched (claims say NoControlPlaneEndpoint).
  std::string control_plane_endpoint;
  std::string cluster_ca_pem;
  // SSH key names per provider for classes that name none (PayloadBuilderOptions).
  std::map<std::string, std::vector<std::string>> default_ssh_key_names;
  // Per-machine tailnet keys and devices for classes with tailscaleConfig (tailnet_credentials.h);
  // off: machines get no key (`hyperslice dev`, whose simulated machines have no tailnet). The
  // Tailscale API base for classes without loginServer is default_endpoints["tailscale"] (empty:
  // Tailscale's own).
  bool tailnet = false;
  // Container-only offers (RunPod pods, Vast containers) left out until linked runners exist.
  bool skip_container_offers = true;
  std::optional<Clock::Duration> offer_refresh_interval, credentials_check_interval;
  std::optional<Clock::Duration> launch_timeout, registration_timeout;
  std::optional<Clock::Duration> gc_interval, gc_grace;
  std::optional<Clock::Duration> batch_idle, batch_max;
  std::optional<Clock::Duration> disruption_budget_retry;
  int workers = 4;
  Clock* clock = nullptr;  // nullptr: RealClock()
};

// Registers every GPU controller on `mgr` (before it runs). Errors: kInvalidArgument for missing
// options; the kube-system lookup's error when cluster_id is empty and it fails.
Status RegisterOperator(kube::Manager& mgr, OperatorOptions options);

}  // namespace hyperslice::gpu
