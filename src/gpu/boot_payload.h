// Boot payloads of rented GPU machines (issue "Ephemeral GPUs 3/4", item 1): what a machine boots
// with so that it joins the cluster by itself, chosen by what its provider can boot, and the
// claim controller's PayloadBuilder that makes one per launch.
//
// Join methods (recorded on the claim as status.joinMethod, the CRD's enum):
//   CloudInit      Lambda: cloud-init user data that is a shell script;
//   StartupScript  Paperspace and Vast VMs: the same script as the machine's startup script
//                  (Vast's `onstart`, which takes at most 4048 characters: Vast gets the script
//                  as a stub that carries it gzip+base64, RenderScriptStub);
//   Talos          a provider listed in PayloadBuilderOptions::talos_providers (one that boots a
//                  Talos image with user data; none does by default): the class's machine config
//                  template (inline, from machineConfigSecretRef, else the default worker
//                  template) rendered with real values and refused when CheckTalosConfig objects;
//   LinkedRunner   container-only offers (RunPod pods, Vast containers): such a machine cannot
//                  run a kubelet, and linked runners (ARCHITECTURE.md §9) are not built yet, so
//                  the builder refuses them (kInvalidArgument, reason LinkedRunnerRequired)
//                  and the class controller leaves them out of planning (skip_container_offers).
//
// The join script (RenderJoinScript) installs nothing it need not: kubelet and containerd (and
// tailscale when a tailnet key is given) only when missing, from the image's own apt sources. It
// writes the kubelet's bootstrap kubeconfig (the cluster CA and the per-machine bootstrap token:
// the kubelet's TLS bootstrap, no kube-public/cluster-info discovery, so it works against Talos and
// kubeadm control planes alike), brings up Tailscale with the auth key when one is given (the
// Node's address is then its tailnet IP, --node-ip), and starts the kubelet as a systemd unit with
// --provider-id <provider>://<instance id>, --node-labels and --register-with-taints (always
// tgp.io/unregistered:NoExecute, removed by the claim controller once labels and taints are
// synced). The instance id is not known when the script is written (the provider assigns it at
// create), so the script asks cloud-init on the machine (`cloud-init query v1.instance_id`).
//
// The script has a fixed shape that sim/gpumachine reads as a machine would: the heredocs that
// write /etc/kubernetes/bootstrap-kubelet.conf and /etc/hyperslice/kubelet.env (KEY=VALUE). A
// value that could break out of that shape (a quote, a space, a line break) is refused at render
// time, never escaped.
//
// Secrets: the bootstrap token and the tailnet auth key are in the payload and nowhere else; no
// error message or log line of this module contains them.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"
#include "src/gpu/claim_controller.h"
#include "src/gpu/provider.h"

namespace hyperslice::kube {
class Client;
}

namespace hyperslice::gpu {

enum class JoinMethod { kCloudInit, kStartupScript, kTalos, kLinkedRunner };
// The claim's status.joinMethod value: "CloudInit", "StartupScript", "Talos", "LinkedRunner".
const char* JoinMethodName(JoinMethod method);
// How a machine of `offer` joins: Talos when its provider is in `talos_providers` (and it boots
// user data), else by the offer's BootKind.
JoinMethod JoinMethodFor(const Offer& offer, const std::set<std::string>& talos_providers);

inline constexpr char kReasonLinkedRunnerRequired[] = "LinkedRunnerRequired";

struct NodeTaint {
  std::string key, value, effect;  // effect: NoSchedule | PreferNoSchedule | NoExecute
};

// Everything a join script holds. Values are checked (RenderJoinScript's errors name the field,
// never echo a secret).
struct JoinScriptValues {
  std::string server;           // https://host:port the machine dials (the control plane)
  std::string cluster_ca_pem;   // the cluster CA the kubelet verifies the apiserver with
  std::string bootstrap_token;  // "<id>.<secret>"
  std::string node_name;        // the claim's name (--hostname-override)
  std::string provider;         // "lambdalabs": --provider-id <provider>://<instance id>
  std::map<std::string, std::string> labels;  // --node-labels
  std::vector<NodeTaint> taints;              // --register-with-taints (tgp.io/unregistered added)
  // The tailnet (the claim controller mints the keys, tailnet_credentials.h): empty auth key means
  // no tailnet — the script
  // then neither installs nor starts Tailscale and the kubelet picks its own address.
  std::string tailscale_auth_key;
  std::string tailscale_login_server;  // a headscale URL; empty: Tailscale's own
};

// The join script (bash, shellcheck-clean), or kInvalidArgument naming the bad field.
Result<std::string> RenderJoinScript(const JoinScriptValues& values);

// Where the rendered payload goes and how large it may be (the provider clients refuse more).
// Lambda user_data: 1,000,000 bytes (its API reference: "cannot exceed 1MB"); Paperspace startup
// script: 64 KiB; Vast onstart: 4048 characters (openapi.yaml: "limited to 4048 characters --
// gzip+base64 for longer scripts").
size_t MaxPayloadBytes(const std::string& provider, JoinMethod method);

// A script as a small POSIX sh stub that carries it gzip-compressed (zlib, level 9) and base64
// encoded in a quoted heredoc, and runs it: decoded (`base64 -d | gunzip`) into a mktemp file,
// run with bash (the join script is bash), the file removed on exit. A corrupt payload fails
// gunzip and stops the stub (set -e). shellcheck-clean (sh). The join script with a tailnet is
// about 4.5 KB, over Vast's onstart limit; its stub is about 2.5 KB. Errors: kInternal when zlib
// fails. The first line after the shebang is kScriptStubMarker.
Result<std::string> RenderScriptStub(std::string_view script);
inline constexpr char kScriptStubMarker[] =
    "# hyperslice: a join script, gzip+base64; it is decoded and run with bash.";
// Whether `provider` gets script payloads as a stub: Vast (its onstart limit). Every Vast VM gets
// one, so a machine reads one shape whatever the script's size.
bool DeliversScriptStub(const std::string& provider);

// A tailnet auth key for one machine. A seam: when PayloadBuilderOptions::tailnet is unset, the
// key the claim controller minted (BootContext::tailnet_auth_key, tailnet_credentials.h) is
// used. Empty key: no tailnet.
struct TailnetJoin {
  std::string auth_key;
  std::string login_server;
};
using TailnetKeySource = std::function<Result<TailnetJoin>(const BootContext&)>;

struct PayloadBuilderOptions {
  std::shared_ptr<kube::Client> client;  // required: tokens, pools, Secrets
  // What machines dial to reach the apiserver ("https://host:port"); required for any join (the
  // operator's --gpu-control-plane-endpoint: the in-cluster address is not reachable from a
  // rented machine).
  std::string control_plane_endpoint;
  // The cluster CA (PEM). Empty: the CA the operator's own client trusts (in a pod, the service
  // account's ca.crt, which is the cluster CA).
  std::string cluster_ca_pem;
  std::string cluster_name = "kubernetes";  // Talos's ClusterName
  // How long a machine's bootstrap token lives: launch + registration timeout.
  std::chrono::seconds token_ttl = std::chrono::minutes(20);
  std::set<std::string> talos_providers;  // providers that boot Talos (none by default)
  // SSH key names per provider for classes whose providers[] entry names none (the operator's
  // --gpu-ssh-key): Lambda launches need exactly one key registered with the account.
  std::map<std::string, std::vector<std::string>> default_ssh_key_names;
  TailnetKeySource tailnet;  // empty: no tailnet
};

// The claim controller's PayloadBuilder: per launch, the claim's bootstrap token (reused while
// it lives), the join method for the offer, the payload for it, the class's sshKeyNames. The
// payload's join_method is what the claim records.
PayloadBuilder NewPayloadBuilder(PayloadBuilderOptions options);

}  // namespace hyperslice::gpu
