// Simulated rented GPU machines (issue "Ephemeral GPUs 3/4", item 4): every instance of a
// sim/market Market that reaches Running boots from the payload its provider received, exactly as
// given, and joins the cluster the way the payload tells it to:
//   - a join script (cloud-init user data, a Paperspace startup script, a Vast VM's onstart —
//     there a stub carrying the script, run with /bin/sh to unpack it; src/gpu/boot_payload.h):
//     the heredocs that write /etc/kubernetes/bootstrap-kubelet.conf (server, CA, bootstrap
//     token) and /etc/hyperslice/kubelet.env (node name, provider-id prefix, labels, taints) are
//     read as the machine's shell would write them; the instance id is what `cloud-init query
//     v1.instance_id` answers on that machine: its provider instance id;
//   - a runner-agent container (a marketplace Runner's machine): started through
//     Options::runner_agent on an address of its own, stopped when the machine stops; the TCP
//     ports its create published (RunPod `ports`, Vast `-p`) are relayed from the machine's
//     public address (a loopback address; the provider's API reports 192.0.2.x) on the public
//     port the provider reported, and only those get the provider's env variables — an
//     unpublished port is reachable from nowhere, as on a real provider;
//   - a Talos machine config: the v1alpha1 document's cluster.token, cluster.ca.crt and
//     cluster.controlPlane.endpoint, machine.nodeLabels / nodeTaints, the HostnameConfig's
//     hostname; the providerID is `<market provider>://<instance id>`, as Talos's platform code
//     sets it.
// Then sim/kubelet's Agent (BootstrapJoin) does the kubelet's part: the TLS bootstrap (a CSR that
// kube-controller-manager approves and signs), the Node with that providerID, nvidia.com/gpu
// capacity from the listing, the labels and taints, an InternalIP on its own loopback address
// (127.A.B.1), node status and Lease, and with run_pods the pods bound to it (PodRuntime).
//
// A payload it cannot use (nothing it knows, a kubeconfig that does not parse, no token) leaves
// the machine unjoined with the reason in Machine(); a token the apiserver rejects leaves the
// agent retrying its TLS bootstrap — either way no Node appears, as with a real machine. A payload
// that brings up Tailscale needs Options::tailnet (tests: sim/gpumachine/mesh_machines.h, real
// tailscaled); without it the machine stays unjoined (reason TailnetUnavailable). An instance that
// stops or terminates at the provider stops its agent (the Node stays until someone deletes it, as
// a real one would).
//
// Thread-safe. Market notifications are handled on the fleet's own thread, so the market is
// never blocked by a machine booting or stopping.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "sim/kubelet/agent.h"
#include "sim/market/market.h"
#include "src/base/result.h"

namespace hyperslice::sim::gpumachine {

// What a payload says about joining.
struct JoinConfig {
  std::string kind;  // "script" or "talos"
  std::string server, ca_pem, token;
  std::string node_name;
  std::string provider_id;
  std::map<std::string, std::string> labels;
  std::vector<kubelet::NodeTaintSpec> taints;
  std::string tailnet_auth_key;  // empty: no tailnet
  std::string tailnet_login_server;
};

// Reads a join script as the machine would run it; `instance_id` is what cloud-init answers.
Result<JoinConfig> ReadJoinScript(std::string_view script, const std::string& instance_id);
// Reads a Talos machine config (multi-document YAML); `provider` names the providerID scheme.
Result<JoinConfig> ReadTalosConfig(std::string_view yaml, const std::string& provider,
                                   const std::string& instance_id);
// Runs a script stub (src/gpu/boot_payload.h RenderScriptStub, what Vast VMs get as onstart) as a
// machine would: `/bin/sh <stub>` with an empty environment in a scratch directory (TMPDIR), with
// `bash` on PATH replaced by a shim that keeps the script it is asked to run instead of running
// it; returns that script. The stub's base64, gunzip and mktemp are the machine's real ones. A
// stub that fails (corrupt payload) or runs nothing is PayloadUnusable, with the shell's error.
Result<std::string> UnpackScriptStub(std::string_view stub);
// The payload as the provider simulator stored it: `user_data` (a script or a Talos document),
// `startup_script`, or (Vast, a VM: `vm` true) `onstart`, read through UnpackScriptStub when it is
// a stub rather than the join script itself. A Vast container's onstart is unusable: a container
// runs no kubelet.
Result<JoinConfig> ReadPayload(const boost::json::object& payload, const std::string& provider,
                               const std::string& instance_id);

// A marketplace Runner's container (src/runners/controlnode/market_runner.h): `args` start with
// `runner-agent` and `env` carries HYPERSLICE_LINK_ENDPOINT (and the runner name, runners CA,
// join token the agent reads with --link-from-env).
struct RunnerAgentContainer {
  std::string image;
  // The env the container runs with: the create's variables (Vast's docker options such as
  // "-p 7443:7443" are options, not variables) and, once it runs, the provider's own: the
  // machine's public address (RUNPOD_PUBLIC_IP, PUBLIC_IPADDR) and, for each published TCP port
  // only, the public port mapped to it (RUNPOD_TCP_PORT_<port>, VAST_TCP_PORT_<port>).
  std::map<std::string, std::string> env;
  std::vector<std::string> args;  // RunPod's dockerArgs split at spaces; Vast's args as given
  // The container's own address: what `0.0.0.0` is inside it in the simulator (a loopback address
  // of its own). Nothing outside is told it; only the published ports are reachable, through the
  // machine's public address. The seam binds what the container binds here, same port.
  std::string address;
  std::map<int, std::string> published;  // container port -> "public ip:public port"
};
// nullopt when the payload is not such a container (a join script, a Talos config, another image).
std::optional<RunnerAgentContainer> ReadRunnerAgentContainer(const boost::json::object& payload);

struct Options {
  market::Market* market = nullptr;  // required; must outlive the fleet
  bool run_pods = true;              // run the pods bound to each Node (PodRuntime)
  std::chrono::milliseconds lease_renew_interval{2000};
  std::chrono::milliseconds node_status_update_interval{2000};
  std::chrono::milliseconds retry_interval{500};
  // The tailnet seam: called before the kubelet starts when the payload brings up Tailscale (the
  // key and login server as the payload gives them). Empty: such a machine stays unjoined.
  std::function<Status(const market::Instance&, const JoinConfig&)> tailnet;
  // The runner-agent seam: starts a runner-agent container's agent when its machine runs (tests:
  // the real `hyperslice runner-agent` on a loopback address of its own, with the container's
  // env); the function returned stops it when the machine stops or terminates. Empty: such a
  // machine stays unjoined (RunnerAgentUnavailable).
  std::function<Result<std::function<void()>>(const market::Instance&, const RunnerAgentContainer&)>
      runner_agent;
};

struct Machine {
  std::string instance_id;
  market::State state = market::State::kPending;
  bool joined = false;        // an agent runs (it may still be bootstrapping)
  std::string reason;         // why it did not join: "PayloadUnusable", "TailnetUnavailable"
  std::string message;        // never holds a credential
  std::string kind;           // "script", "talos", "runner-agent" or "" (unread)
  kubelet::AgentState agent;  // when joined
  // A runner-agent container's published ports (container port -> "public ip:public port", both
  // loopback) and how many connections were relayed through them.
  std::map<int, std::string> published;
  uint64_t published_connections = 0;
};

class Fleet {
 public:
  ~Fleet();  // Stop()
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  // Subscribes to the market; machines already running boot at once.
  static Result<std::unique_ptr<Fleet>> Start(Options options);

  std::vector<Machine> Machines() const;
  std::optional<Machine> Get(const std::string& instance_id) const;

  void Stop();  // idempotent: unsubscribes and stops every agent

  struct Impl;

 private:
  explicit Fleet(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hyperslice::sim::gpumachine
