// Agent: one simulated TPU VM's node agent. It does what the VM's startup script + kubeadm join +
// kubelet do, over the same interfaces, except running containers:
//
//   1. polls its own metadata server (GCE_METADATA_HOST form, `Metadata-Flavor: Google`,
//      `?wait_for_change=true`) for kubeadm-join-token, kubeadm-ca-hash, kubeadm-control-plane-ip
//      and kube-labels;
//   2. token discovery as kubeadm does: GETs kube-public/cluster-info anonymously (TLS not yet
//      verified), checks the detached JWS `jws-kubeconfig-<token-id>` (HS256 with the token
//      secret, written by kube-controller-manager's bootstrapsigner) over its kubeconfig, pins the
//      kubeconfig's CA against kubeadm-ca-hash (sha256 of the DER SubjectPublicKeyInfo) and
//      fetches cluster-info again over TLS verified with that CA. A failed check refuses the join
//      (Phase::kJoinRefused): nothing is created in the cluster;
//   3. kubelet TLS bootstrap with the bootstrap token: a certificates.k8s.io/v1 CSR (ECDSA P-256,
//      CN system:node:<instance>, O system:nodes, signer
//      kubernetes.io/kube-apiserver-client-kubelet, usages digital signature + client auth),
//      watched until kube-controller-manager approves and signs it;
//   4. from then on only its node credentials (the Node authorizer and NodeRestriction accept
//      every call): creates its Node (name = instance, spec.providerID
//      gce://<project>/<zone>/<name>, kubelet's well-known labels + kube-labels as --node-labels
//      would), posts node status through the status subresource (google.com/tpu capacity = chips
//      per host of the machine type, cpu, memory, pods; Ready=True and the pressure conditions with
//      heartbeats) and renews its Lease in kube-node-lease.
//
// Failure modes (the VM misbehaving, not the agent): StopHeartbeating() keeps the agent alive but
// silent (Lease and status stop; kube-controller-manager's node lifecycle controller marks the Node
// Ready=Unknown after its grace period); Vanish() stops everything as if the VM were gone;
// Restore() resumes heartbeats, or after Vanish() boots again with what was on "disk" (the node
// credentials, so a rebooted VM does not join again).
//
// The Node's InternalIP is the VM's own loopback address (127.A.B.1), where the agent serves the
// kubelet API, so nothing dials the VM's GCE address; with run_pods the agent also runs the pods
// bound to its Node (pod_runtime.h).
//
// Thread-safety: every method may be called from any thread. The agent runs on its own thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::sim::kubelet {

// With AgentOptions::bootstrap the agent starts in kTlsBootstrap and retries it with backoff.
enum class Phase {
  kWaitingForJoinValues,  // metadata lacks a join value, or a Ready Node of this name exists
  kDiscovery,             // fetching and verifying cluster-info
  kTlsBootstrap,          // CSR submitted, waiting for approval and the certificate
  kRegistering,           // creating the Node / first status
  kRunning,               // registered; Lease and node status heartbeats
  kHeartbeatStopped,      // StopHeartbeating(): alive and silent
  kJoinRefused,           // discovery failed verification (CA pin, JWS); retried when metadata
                          // changes, nothing was created
  kStopped,               // Vanish() or destroyed: the VM is gone
};
const char* PhaseName(Phase phase);

struct NodeTaintSpec {
  std::string key, value, effect;
};

// A machine that joins with a bootstrap kubeconfig, as a kubelet started with
// --bootstrap-kubeconfig does (a rented GPU machine, sim/gpumachine): no metadata server and no
// token discovery — the server, CA and bootstrap token are given — then the same TLS bootstrap,
// registration, status and Lease as a TPU VM.
struct BootstrapJoin {
  std::string server;  // the apiserver URL as the kubeconfig names it
  std::string ca_pem;
  std::string token;  // "<id>.<secret>"
  std::string provider_id;
  std::map<std::string, std::string> labels;  // --node-labels
  std::vector<NodeTaintSpec> taints;          // --register-with-taints
  // Extended resources without an in-process plugin (nvidia.com/gpu: N), see
  // PodRuntimeOptions::static_devices.
  std::map<std::string, int> devices;
  std::string os_image = "Simulated rented GPU machine (hyperslice sim)";
};

struct AgentOptions {
  // With `bootstrap`: project and zone are unused, `instance` is the Node's name.
  std::optional<BootstrapJoin> bootstrap;
  std::string project, zone, instance;
  // GCE machine type ("tpu7x-standard-4t"): google.com/tpu capacity is its chips per host (0 for a
  // machine type hyperslice does not know), and node.kubernetes.io/instance-type.
  std::string machine_type;
  // The VM's GCE_METADATA_HOST: "127.0.0.1:<port>/sim/instances/<project>/<zone>/<name>"
  // (sim::gce::Simulator::metadata_host).
  std::string metadata_host;
  // Where the VM reaches the address in kubeadm-control-plane-ip. Empty: that value itself
  // ("https://" added when it has no scheme, ":6443" when it has no port). In the simulation the
  // metadata may carry an address a real VM would reach over its VPC (the seed's 10.128.0.2);
  // setting the loopback apiserver URL here routes discovery there. After discovery the agent uses
  // the server named in cluster-info, as kubeadm does.
  std::string discovery_endpoint;
  std::chrono::milliseconds lease_renew_interval{10000};
  int64_t lease_duration_seconds = 40;
  // How often node status is compared with the server's and patched when it differs, and how old
  // the Ready heartbeat may get before it is patched anyway (kubelet: 10 s / 5 min).
  std::chrono::milliseconds node_status_update_interval{10000};
  std::chrono::milliseconds node_status_report_interval{60000};
  // First wait between join attempts; doubles up to 10x this after each failure.
  std::chrono::milliseconds retry_interval{500};
  // Longest metadata long-poll (`timeout_sec`); also bounds how long Vanish() takes while the
  // agent waits for its join values.
  std::chrono::seconds metadata_wait{2};
  // Run the pods bound to the Node (pod_runtime.h): a fake TPU device tree of the machine type's
  // chips under the VM's root folder, the kubelet's device manager, the DaemonSet's device plugin
  // in process; google.com/tpu capacity then comes from the plugin's ListAndWatch. False: the
  // Node reports the machine type's chips as capacity and pods bound to it stay Pending.
  bool run_pods = false;
  // The VM's root folder ("/" of the VM); empty: a fresh /tmp/hsvm-XXXXXX, removed with the agent.
  // Short: the plugin sockets live below it (unix socket paths are limited to 108 bytes).
  std::string vm_root;
  std::string arch = "amd64";
  std::string cpu = "224";
  std::string memory = "990000000Ki";
  std::string pods = "110";
};

struct AgentState {
  Phase phase = Phase::kWaitingForJoinValues;
  // What it waits for or why the last attempt failed; never holds a credential.
  std::string message;
  // Machine-readable reason of the last failure: "CACertHashMismatch", "JWSInvalid",
  // "ClusterInfoUnavailable", "CSRDenied", "NodeExists", "" when none.
  std::string reason;
  std::string node_name;
  std::string provider_id;
  std::string csr_name;          // the CSR it submitted ("" before)
  bool has_credentials = false;  // holds a signed node client certificate
  int64_t join_attempts = 0;     // discovery + TLS bootstrap runs, failed ones included
  int64_t lease_renewals = 0;    // successful Lease creates/updates
  int64_t status_updates = 0;    // successful node status patches
  // The VM's loopback address (the Node's InternalIP and kubelet API) and root folder.
  std::string address;
  uint16_t kubelet_port = 0;
  std::string vm_root;
  // With run_pods: google.com/tpu as the device plugin reports it (-1 before it registered).
  int tpu_capacity = -1, tpu_allocatable = -1;
  int plugin_registrations = 0;
};

class Agent {
 public:
  virtual ~Agent() = default;  // like Vanish()

  // Validates the options and starts the agent's thread.
  static Result<std::unique_ptr<Agent>> Start(AgentOptions options);

  virtual AgentState state() const = 0;
  virtual const AgentOptions& options() const = 0;

  virtual void StopHeartbeating() = 0;
  virtual void Vanish() = 0;   // returns once the agent's thread has ended
  virtual void Restore() = 0;  // heartbeats again; after Vanish() boots again
};

}  // namespace hyperslice::sim::kubelet
