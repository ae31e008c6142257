// `hyperslice runner-agent` as a library (ARCHITECTURE.md §9, issue 20): serves RunnerAgent
// (src/runners/agent.proto) over mutual TLS to control nodes only, runs pods as OCI containers
// with runc (or crun), keeps their state in its state dir so a restarted agent adopts them.
// Never calls the Kubernetes API.
//
// Also the control node's side of the connection: DialAgent.
//
// Thread-safety: Agent's methods may be called from any thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/channel.h>

#include "src/base/result.h"
#include "src/net/pki.h"
#include "src/runners/link/link.h"
#include "src/runners/policy/policy.h"

namespace hyperslice::runners::agent {

// An accelerator device node given to containers that ask for its resource.
struct DeviceConfig {
  std::string resource;        // "google.com/tpu", "nvidia.com/gpu"
  std::string host_path;       // "/dev/accel0"
  std::string container_path;  // "" = host_path
};

struct AgentOptions {
  std::string runner_name;
  std::string region;
  std::string zone;
  std::string slice;
  int slice_index = 0;
  std::string state_dir;
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks one
  std::string advertise_address;       // what control nodes dial (its host is the pod IP of
                                       // host-network pods)
  link::AgentIdentity identity;        // serving certificate + the CA that verifies clients
  std::string runtime = "/usr/sbin/runc";
  // containerd (or any CRI runtime) as a kubelet drives it:
  // "unix:///run/containerd/containerd.sock". Empty: the runc CLI path (`runtime`, the agent's
  // shim). Set, the agent pulls, runs, logs and execs through the CRI API only (images are the
  // runtime's: its registry configuration applies, not insecure_registries); `runtime`, `pod_cidr`
  // and `pod_bridge` do not apply (the runtime's CNI configuration gives pods their network). Not
  // with `sealed`.
  std::string container_runtime_endpoint;
  // How to start the container shim; the agent appends its flags. Default: this executable as
  // `<exe> runner-agent shim`.
  std::vector<std::string> shim_argv;
  std::map<std::string, std::string> capacity;  // resource -> quantity
  std::vector<DeviceConfig> devices;
  bool allow_host_network = false;
  // The pods' network (src/runners/README.md "Pod network"): a bridge `pod_bridge` in the agent's
  // network namespace and a veth with an address from `pod_cidr` per pod. Empty: each pod gets a
  // loopback-only namespace and no pod IP.
  std::string pod_cidr;
  std::string pod_bridge = "hs0";
  bool require_digest = true;
  // Sealed runners (issue 21; src/runners/README.md "Workload policy"): the WorkloadPolicy every
  // RunPod must satisfy (images by digest signed by its keys, its launch policy). With it the
  // agent also refuses Exec, and Logs unless the policy allows them.
  std::optional<policy::WorkloadPolicy> workload_policy;
  std::vector<std::string>
      insecure_registries;  // host:port spoken over plain HTTP (loopback tests)
  std::string registry_ca_pem;
  std::chrono::milliseconds restart_backoff{2000};
  // Sealed runners (issue 21; src/runners/README.md "Sealed runners"): measure into the TPM at
  // `tpm_tcti` ("device:/dev/tpmrm0", "swtpm:host=127.0.0.1,port=2321"), answer Attest, give
  // containers their token socket. `attestation_tokens` asks the link controller for a token.
  bool sealed = false;
  std::string tpm_tcti;
  link::AttestationTokenIssuer attestation_tokens;
  // The executable measured as agent/binary ("" = /proc/self/exe).
  std::string binary_path;
};

// The configuration a sealed agent measures as agent/config: JSON with sorted keys of what decides
// what it runs and how (runtime, capacity, devices, host-network and digest policy, insecure
// registries, registry CA, sealed, the workload policy's keys and launch policy) — not its name,
// location, slice, addresses, state dir, TPM address or identity, which differ between the runners
// of one fleet without changing the software, so one reference value fits a fleet.
std::string SealedConfigDocument(const AgentOptions& options);
// The two measurements a sealed agent with these options makes at start (what an admin puts in
// an AttestationPolicy's referenceValues). Errors: kNotFound (binary unreadable).
Result<std::vector<std::pair<std::string, std::string>>> SealedReferenceValues(
    const AgentOptions& options);

class Agent {
 public:
  virtual ~Agent() = default;
  // Recovers the pods of the state dir, then serves. Errors: kInvalidArgument (options),
  // kUnavailable (cannot listen).
  static Result<std::unique_ptr<Agent>> Start(AgentOptions options);
  virtual int port() const = 0;
  // Serves with a renewed identity (the listener restarts on the same port; clients reconnect).
  virtual Status UpdateIdentity(const link::AgentIdentity& identity) = 0;
  // Stops serving and the pods' workers; containers keep running (their shims own them).
  virtual void Stop() = 0;
};

// The control node's channel to a runner agent: mutual TLS with `client` (from
// link::IssueControlNodeClientCert), the agent verified against the runners CA and by the host
// of `address` (its certificate's SAN). Use with v1::RunnerAgent::NewStub.
std::shared_ptr<grpc::Channel> DialAgent(const std::string& address,
                                         const std::string& runners_ca_pem,
                                         const net::pki::KeyPair& client);

}  // namespace hyperslice::runners::agent
