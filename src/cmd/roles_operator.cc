// `hyperslice operator`: the TPU operator (src/tpu) on a leader-elected kube::Manager, with a
// Compute Engine client authenticated by Application Default Credentials (or a service-account
// key file, or an access-token file), health probes and graceful shutdown on SIGTERM/SIGINT.
#include <malloc.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "src/base/files.h"
#include "src/base/log.h"
#include "src/base/strings.h"
#include "src/cmd/flags.h"
#include "src/cmd/operator_runners.h"
#include "src/cmd/roles.h"
#include "src/gce/auth.h"
#include "src/gce/compute.h"
#include "src/gpu/credentials.h"
#include "src/gpu/operator.h"
#include "src/kube/client.h"
#include "src/kube/config.h"
#include "src/kube/events.h"
#include "src/kube/manager.h"
#include "src/kube/store.h"
#include "src/runners/controlnode/controlnode.h"
#include "src/runners/controlnode/servers.h"
#include "src/tpu/operator.h"

namespace hyperslice::cmd {
namespace {

struct OperatorFlags {
  std::string kubeconfig;
  std::string gce_endpoint = gce::kDefaultEndpoint;
  std::string gce_credentials_file;
  std::string gce_access_token_file;
  bool leader_elect = true;
  std::string leader_election_namespace;
  std::string leader_election_id = "hyperslice-tpu-operator";
  std::string lease_duration = "15s";
  std::string renew_deadline = "10s";
  std::string retry_period = "2s";
  std::string health_probe_address = "0.0.0.0";
  int health_probe_port = 8081;
  std::string cluster_id;
  std::string cluster_ca_file;
  std::string device_plugin_image = "hyperslice:latest";
  std::string device_plugin_namespace;
  std::string drift_check_interval = "10m";
  std::string orphan_sweep_interval = "5m";
  int workers = 4;
  // Ephemeral GPUs (tgp.io): off unless asked, since its informers need the tgp.io CRDs.
  bool gpu = false;
  bool gpu_tailnet = true;
  std::string credentials_namespace = gpu::kDefaultCredentialsNamespace;
  std::string gpu_offer_refresh_interval = "60s";
  std::string gpu_credentials_check_interval = "5m";
  std::vector<std::string> gpu_endpoints;  // "<provider>=<url>"
  std::string gpu_launch_timeout = "5m";
  std::string gpu_registration_timeout = "15m";
  std::vector<std::string> gpu_ssh_keys;      // "<provider>=<key name>"
  std::vector<std::string> gpu_provider_qps;  // "<provider>=<requests per second>"
  std::string gpu_gc_interval = "1m";
  std::string gpu_gc_grace = "60s";
  std::string gpu_batch_idle = "200ms";
  std::string gpu_batch_max = "2s";
  // What rented machines dial to join, and the CA they verify it with (empty: the CA this
  // operator's own client trusts).
  std::string gpu_control_plane_endpoint;
  std::string gpu_cluster_ca_file;
  // Linked runners (src/runners/controlnode): off unless asked, since its informers need the
  // runners.hyperslice.dev CRDs.
  bool runners = false;
  std::string runners_namespace;  // default: the leader-election namespace
  std::string runners_ca_secret = "hyperslice-runners-ca";
  std::string runners_link_address = "0.0.0.0:10251";
  std::string runners_kubelet_address = "0.0.0.0:10250";
  std::string runners_attestation_address = "0.0.0.0:10252";
  std::vector<std::string> runners_serving_names;  // extra SANs of the serving certificates
  std::string runners_state_dir = "/var/lib/hyperslice/runners";
  std::string runners_probe_interval = "10s";
  std::string runners_unhealthy_after = "40s";
  std::vector<std::string> runners_insecure_registries;  // sealed control nodes' signature reads
  std::string runners_link_advertise_address;
  std::string runners_instance_image;
  std::string runners_instance_startup_script_file;
  std::string runners_agent_image;
};

OperatorFlags& Flags() {
  static OperatorFlags flags;
  return flags;
}

// An access token kept in a file that something else refreshes (a sidecar, a test): re-read on
// every use, surrounding white space dropped.
class FileTokenSource final : public gce::TokenSource {
 public:
  explicit FileTokenSource(std::string path) : path_(std::move(path)) {}
  Result<std::string> Token() override {
    HS_ASSIGN_OR_RETURN(std::string file, ReadFile(path_));
    std::string t = TrimSpace(file);
    if (t.empty()) return Error::Make(Error::Code::kUnauthorized, path_ + " holds no token");
    return t;
  }
  void Invalidate() override {}
  std::string Describe() const override { return "token-file"; }

 private:
  std::string path_;
};

Result<std::shared_ptr<gce::TokenSource>> Tokens(const OperatorFlags& f) {
  gce::TokenSourceOptions o;
  if (!f.gce_access_token_file.empty()) {
    return std::shared_ptr<gce::TokenSource>(
        std::make_shared<FileTokenSource>(f.gce_access_token_file));
  }
  if (!f.gce_credentials_file.empty()) {
    return gce::CredentialsFileTokenSource(f.gce_credentials_file, o);
  }
  return gce::DefaultTokenSource(o);
}

// The ephemeral-GPU controllers (src/gpu): class (credentials, offers), provisioner (pods ->
// claims) and claim lifecycle, sharing one offer cache and one unavailable-offers cache.
Status RegisterGpu(kube::Manager& mgr, const std::shared_ptr<kube::Client>& client,
                   const OperatorFlags& f) {
  HS_ASSIGN_OR_RETURN(Clock::Duration offer_refresh,
                      DurationFlag("--gpu-offer-refresh-interval", f.gpu_offer_refresh_interval));
  HS_ASSIGN_OR_RETURN(
      Clock::Duration credentials_check,
      DurationFlag("--gpu-credentials-check-interval", f.gpu_credentials_check_interval));
  HS_ASSIGN_OR_RETURN(Clock::Duration launch_timeout,
                      DurationFlag("--gpu-launch-timeout", f.gpu_launch_timeout));
  HS_ASSIGN_OR_RETURN(Clock::Duration registration_timeout,
                      DurationFlag("--gpu-registration-timeout", f.gpu_registration_timeout));
  HS_ASSIGN_OR_RETURN(Clock::Duration gc_interval,
                      DurationFlag("--gpu-gc-interval", f.gpu_gc_interval));
  HS_ASSIGN_OR_RETURN(Clock::Duration gc_grace, DurationFlag("--gpu-gc-grace", f.gpu_gc_grace));
  HS_ASSIGN_OR_RETURN(Clock::Duration batch_idle,
                      DurationFlag("--gpu-batch-idle", f.gpu_batch_idle));
  HS_ASSIGN_OR_RETURN(Clock::Duration batch_max, DurationFlag("--gpu-batch-max", f.gpu_batch_max));
  std::map<std::string, double> qps;
  HS_ASSIGN_OR_RETURN(auto qps_entries, KeyValueFlag("--gpu-provider-qps", f.gpu_provider_qps,
                                                     "<provider>=<requests per second>"));
  for (const auto& [provider, text] : qps_entries) {
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (end == nullptr || *end != '\0' || !(v > 0)) {
      std::string message = "--gpu-provider-qps ";
      message.append(provider).append("=").append(text);
      return Error::Make(Error::Code::kInvalidArgument,
                         message + ": want <provider>=<requests per second>");
    }
    qps[provider] = v;
  }
  HS_ASSIGN_OR_RETURN(auto endpoints,
                      KeyValueFlag("--gpu-endpoint", f.gpu_endpoints, "<provider>=<url>"));
  HS_ASSIGN_OR_RETURN(auto ssh_keys,
                      KeyValueFlag("--gpu-ssh-key", f.gpu_ssh_keys, "<provider>=<key name>"));
  gpu::OperatorOptions o;
  o.client = client;
  o.cluster_id = f.cluster_id;
  o.credentials_namespace = f.credentials_namespace;
  for (auto& [provider, url] : endpoints) o.default_endpoints[provider] = std::move(url);
  o.provider_qps = qps;
  o.control_plane_endpoint = f.gpu_control_plane_endpoint;
  o.tailnet = f.gpu_tailnet;
  for (auto& [provider, key] : ssh_keys) {
    o.default_ssh_key_names[provider].push_back(std::move(key));
  }
  if (!f.gpu_cluster_ca_file.empty()) {
    auto ca = ReadFile(f.gpu_cluster_ca_file);
    if (!ca.ok() || ca->empty()) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "--gpu-cluster-ca-file " + f.gpu_cluster_ca_file + ": cannot read it");
    }
    o.cluster_ca_pem = *std::move(ca);
  }
  o.offer_refresh_interval = offer_refresh;
  o.credentials_check_interval = credentials_check;
  o.launch_timeout = launch_timeout;
  o.registration_timeout = registration_timeout;
  o.gc_interval = gc_interval;
  o.gc_grace = gc_grace;
  o.batch_idle = batch_idle;
  o.batch_max = batch_max;
  o.workers = f.workers;
  return gpu::RegisterOperator(mgr, std::move(o));
}

// The control nodes of linked runners, and what they serve (operator_runners.h): the runners CA
// Secret (created when missing; its tls.crt/tls.key is the client certificate the control nodes
// present to agents), the link server on --runners-link-address and the kubelet API on
// --runners-kubelet-address. The servers live as long as the process.
Result<std::unique_ptr<runners::controlnode::RunnerServers>> RegisterRunners(
    kube::Manager& mgr, const std::shared_ptr<kube::Client>& client,
    const std::shared_ptr<gce::Compute>& compute, const OperatorFlags& f) {
  HS_ASSIGN_OR_RETURN(Clock::Duration probe,
                      DurationFlag("--runners-probe-interval", f.runners_probe_interval));
  HS_ASSIGN_OR_RETURN(Clock::Duration unhealthy,
                      DurationFlag("--runners-unhealthy-after", f.runners_unhealthy_after));
  RunnersPartOptions o;
  o.client = client;
  o.ns = f.runners_namespace.empty() ? f.leader_election_namespace : f.runners_namespace;
  o.ca_secret = f.runners_ca_secret;
  o.link_address = f.runners_link_address;
  o.kubelet_address = f.runners_kubelet_address;
  o.attestation_address = f.runners_attestation_address;
  o.serving_names = f.runners_serving_names;
  o.state_dir = f.runners_state_dir;
  o.probe_interval = std::chrono::duration_cast<std::chrono::milliseconds>(probe);
  o.unhealthy_after = std::chrono::duration_cast<std::chrono::milliseconds>(unhealthy);
  o.workers = f.workers;
  o.insecure_registries = f.runners_insecure_registries;
  o.compute = compute;
  o.link_advertise_address = f.runners_link_advertise_address;
  o.instance_image = f.runners_instance_image;
  o.agent_image = f.runners_agent_image;
  o.credentials_namespace = f.credentials_namespace;
  HS_ASSIGN_OR_RETURN(auto endpoints,
                      KeyValueFlag("--gpu-endpoint", f.gpu_endpoints, "<provider>=<url>"));
  for (auto& [provider, url] : endpoints) o.provider_endpoints[provider] = std::move(url);
  if (!f.runners_instance_startup_script_file.empty()) {
    HS_ASSIGN_OR_RETURN(o.instance_startup_script,
                        ReadFile(f.runners_instance_startup_script_file));
  }
  HS_ASSIGN_OR_RETURN(RunnersPart part, StartRunnersPart(mgr, std::move(o)));
  return std::move(part.servers);
}

}  // namespace

void SetupOperator(CLI::App& app) {
  OperatorFlags& f = Flags();
  const char* pod_ns = std::getenv("POD_NAMESPACE");
  f.leader_election_namespace = pod_ns != nullptr && *pod_ns != 0 ? pod_ns : "tpu-node-group";
  f.device_plugin_namespace = f.leader_election_namespace;
  app.add_option("--kubeconfig", f.kubeconfig,
                 "kubeconfig to reach the apiserver (default: $KUBECONFIG, in-cluster, "
                 "~/.kube/config)");
  app.add_option("--gce-endpoint", f.gce_endpoint, "Compute Engine API base URL")
      ->capture_default_str();
  app.add_option("--gce-credentials-file", f.gce_credentials_file,
                 "service-account JSON key (default: Application Default Credentials: "
                 "$GOOGLE_APPLICATION_CREDENTIALS, gcloud's file, the metadata server)");
  app.add_option("--gce-access-token-file", f.gce_access_token_file,
                 "file holding an OAuth2 access token, re-read on every call");
  app.add_option("--leader-elect", f.leader_elect, "run only while holding the leader Lease")
      ->capture_default_str();
  app.add_option("--leader-election-namespace", f.leader_election_namespace,
                 "namespace of the leader Lease (default $POD_NAMESPACE or tpu-node-group)")
      ->capture_default_str();
  app.add_option("--leader-election-id", f.leader_election_id, "name of the leader Lease")
      ->capture_default_str();
  app.add_option("--leader-election-lease-duration", f.lease_duration,
                 "how long a standby waits after the last renewal before taking over")
      ->capture_default_str();
  app.add_option("--leader-election-renew-deadline", f.renew_deadline,
                 "how long the leader keeps trying to renew before it gives up leadership")
      ->capture_default_str();
  app.add_option("--leader-election-retry-period", f.retry_period,
                 "how often candidates try to acquire or renew the Lease")
      ->capture_default_str();
  app.add_option("--health-probe-address", f.health_probe_address,
                 "address of /healthz, /readyz and /metrics")
      ->capture_default_str();
  app.add_option("--health-probe-port", f.health_probe_port,
                 "port of /healthz, /readyz and /metrics (0: any free port, -1: off)")
      ->capture_default_str();
  app.add_option("--cluster-id", f.cluster_id,
                 "id written on every GCE resource (default: the uid of kube-system)");
  app.add_option("--cluster-ca-file", f.cluster_ca_file,
                 "PEM CA whose hash joining VMs verify (default: kube-public/cluster-info, "
                 "else the kubeconfig's CA)");
  app.add_option("--device-plugin-image", f.device_plugin_image,
                 "image of the TPU device-plugin DaemonSet")
      ->capture_default_str();
  app.add_option("--device-plugin-namespace", f.device_plugin_namespace,
                 "namespace of the TPU device-plugin DaemonSet")
      ->capture_default_str();
  app.add_option("--drift-check-interval", f.drift_check_interval,
                 "how often a Ready GCE resource is re-read for drift")
      ->capture_default_str();
  app.add_option("--orphan-sweep-interval", f.orphan_sweep_interval,
                 "how often unowned GCE resources are swept (0: never)")
      ->capture_default_str();
  app.add_option("--workers", f.workers, "concurrent reconciles per controller")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_flag("--gpu", f.gpu,
               "run the ephemeral-GPU controllers (tgp.io GPUNodeClass/GPUNodePool; needs their "
               "CRDs)");
  app.add_option("--credentials-namespace", f.credentials_namespace,
                 "namespace of a GPUNodeClass credentialsRef that names none")
      ->capture_default_str();
  app.add_option("--gpu-offer-refresh-interval", f.gpu_offer_refresh_interval,
                 "how often each provider's offers are re-listed")
      ->capture_default_str();
  app.add_option("--gpu-credentials-check-interval", f.gpu_credentials_check_interval,
                 "how often each provider's credentials are re-checked")
      ->capture_default_str();
  app.add_option("--gpu-endpoint", f.gpu_endpoints,
                 "<provider>=<url>: API base for classes whose provider entry names no endpoint "
                 "(a private endpoint; repeatable)");
  app.add_option("--gpu-launch-timeout", f.gpu_launch_timeout,
                 "a claim not launched within this is deleted")
      ->capture_default_str();
  app.add_option("--gpu-registration-timeout", f.gpu_registration_timeout,
                 "a launched machine whose Node does not register within this is returned")
      ->capture_default_str();
  app.add_flag("--gpu-tailnet,!--no-gpu-tailnet", f.gpu_tailnet,
               "mint a tailnet auth key per machine for classes with tailscaleConfig (headscale "
               "when loginServer is set, else Tailscale's API; --gpu-endpoint tailscale=<url> for "
               "another API base), record and delete its device, collect devices no claim owns "
               "(default: on)");
  app.add_option("--gpu-ssh-key", f.gpu_ssh_keys,
                 "<provider>=<key name>: the SSH key registered with that provider account, for "
                 "classes whose providers[] entry names none (Lambda needs exactly one; "
                 "repeatable)");
  app.add_option("--gpu-provider-qps", f.gpu_provider_qps,
                 "<provider>=<requests/s>: client-side rate limit instead of the provider's "
                 "documented one (repeatable)");
  app.add_option("--gpu-gc-interval", f.gpu_gc_interval,
                 "how often provider instances no claim owns are looked for (0: never)")
      ->capture_default_str();
  app.add_option("--gpu-gc-grace", f.gpu_gc_grace,
                 "how long an instance must be seen without a claim before it is deleted")
      ->capture_default_str();
  app.add_option("--gpu-batch-idle", f.gpu_batch_idle,
                 "a batch of pending GPU pods closes after this long without a new one")
      ->capture_default_str();
  app.add_option("--gpu-batch-max", f.gpu_batch_max, "and at the latest this long after it opened")
      ->capture_default_str();
  app.add_option("--gpu-control-plane-endpoint", f.gpu_control_plane_endpoint,
                 "https://host:port rented GPU machines dial to join (required for them to join: "
                 "the in-cluster address is not reachable from a provider's machine)");
  app.add_flag("--runners", f.runners,
               "run the linked-runner control nodes (runners.hyperslice.dev ControlNode/Runner; "
               "needs their CRDs)");
  app.add_option("--runners-namespace", f.runners_namespace,
                 "namespace of the runners CA Secret and the join-token Secrets (default: the "
                 "leader-election namespace)");
  app.add_option("--runners-ca-secret", f.runners_ca_secret,
                 "Secret with the runners CA (ca.crt) and the control node's client certificate "
                 "(tls.crt, tls.key) presented to runner agents")
      ->capture_default_str();
  app.add_option("--runners-link-address", f.runners_link_address,
                 "where the runner link service (join tokens, certificate renewal) listens")
      ->capture_default_str();
  app.add_option("--runners-kubelet-address", f.runners_kubelet_address,
                 "where the control nodes' kubelet API (logs, exec) listens")
      ->capture_default_str();
  app.add_option("--runners-attestation-address", f.runners_attestation_address,
                 "where sealed runners' token issuer serves its OIDC discovery document and JWKS "
                 "over HTTPS (\"\" = no attestation tokens)")
      ->capture_default_str();
  app.add_option("--runners-serving-name", f.runners_serving_names,
                 "an IP or DNS name to put in the link and kubelet API serving certificates "
                 "(repeatable; the control nodes' addresses)");
  app.add_option("--runners-state-dir", f.runners_state_dir,
                 "where the kubelet API's serving certificate files are kept")
      ->capture_default_str();
  app.add_option("--runners-probe-interval", f.runners_probe_interval,
                 "how often each runner agent is asked for its Info")
      ->capture_default_str();
  app.add_option("--runners-insecure-registry", f.runners_insecure_registries,
                 "host:port of a registry a sealed control node reads cosign signatures from over "
                 "plain HTTP (loopback test registries)");
  app.add_option("--runners-unhealthy-after", f.runners_unhealthy_after,
                 "silence after which a runner is Unhealthy, leaves its Node's allocatable and its "
                 "pods fail (RunnerLost)")
      ->capture_default_str();
  app.add_option("--runners-link-advertise-address", f.runners_link_advertise_address,
                 "host:port of the link server as the instances of spec.gce Runners dial it "
                 "(default: --runners-link-address unless it listens on 0.0.0.0)");
  app.add_option("--runners-instance-image", f.runners_instance_image,
                 "boot image of spec.gce Runners' instances (default: Debian 12's family)");
  app.add_option("--runners-instance-startup-script-file", f.runners_instance_startup_script_file,
                 "startup-script of spec.gce Runners' instances (it starts `hyperslice "
                 "runner-agent --gce-metadata`)");
  app.add_option("--runners-agent-image", f.runners_agent_image,
                 "container image (entrypoint hyperslice) spec.marketplace Runners' rented "
                 "machines run; their GPUNodeClass's providers use --gpu-endpoint and "
                 "--credentials-namespace");
  app.add_option("--gpu-cluster-ca-file", f.gpu_cluster_ca_file,
                 "PEM file of the cluster CA rented machines verify the apiserver with (default: "
                 "the CA this operator trusts)");
}

int RunOperator(CLI::App&) {
  // glibc gives each thread that allocates its own arena (up to 8 per core); the operator's ~25
  // threads (reconcile workers, reflectors, recorders) each touch JSON for a moment, so their
  // arenas' free lists fragment memory that no other thread reuses. Two arenas measured 9 % less
  // peak RSS at 300 slices (bench/tpu_scale_bench) for no measurable CPU. MALLOC_ARENA_MAX wins.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 2);
  const OperatorFlags& f = Flags();
  auto drift = DurationFlag("--drift-check-interval", f.drift_check_interval);
  auto sweep = DurationFlag("--orphan-sweep-interval", f.orphan_sweep_interval);
  auto lease = DurationFlag("--leader-election-lease-duration", f.lease_duration);
  auto renew = DurationFlag("--leader-election-renew-deadline", f.renew_deadline);
  auto retry = DurationFlag("--leader-election-retry-period", f.retry_period);
  for (const auto* d : {&drift, &sweep, &lease, &renew, &retry}) {
    if (!d->ok()) {
      log::Error("bad flag", {{"error", d->error().message}});
      return 2;
    }
  }

  auto config = kube::DefaultConfig(f.kubeconfig);
  if (!config.ok()) {
    log::Error("no apiserver configuration", {{"error", config.error().message}});
    return 1;
  }
  config->user_agent = "hyperslice-operator";
  auto client = kube::Client::Create(*config);
  if (!client.ok()) {
    log::Error("kube client", {{"error", client.error().message}});
    return 1;
  }

  auto tokens = Tokens(f);
  if (!tokens.ok()) {
    log::Error("GCE credentials", {{"error", tokens.error().message}});
    return 1;
  }
  gce::ComputeOptions co;
  co.endpoint = f.gce_endpoint;
  co.tokens = *tokens;
  auto compute = gce::Compute::Create(co);
  if (!compute.ok()) {
    log::Error("GCE client", {{"error", compute.error().message}});
    return 1;
  }

  tpu::OperatorOptions options;
  options.client = *client;
  options.compute = std::shared_ptr<gce::Compute>(std::move(*compute));
  options.cluster_id = f.cluster_id;
  options.device_plugin_image = f.device_plugin_image;
  options.device_plugin_namespace = f.device_plugin_namespace;
  options.drift_check_interval = *drift;
  options.orphan_sweep_interval = *sweep;
  options.workers = f.workers;
  if (!f.cluster_ca_file.empty()) {
    auto pem = ReadFile(f.cluster_ca_file);
    if (!pem.ok()) {
      log::Error("cluster CA", {{"error", pem.error().message}});
      return 1;
    }
    options.cluster_ca_pem = *pem;
  }

  kube::ManagerOptions mo;
  mo.client = *client;
  mo.leader_election = f.leader_elect;
  mo.leader_election_namespace = f.leader_election_namespace;
  mo.leader_election_id = f.leader_election_id;
  mo.lease_duration = *lease;
  mo.renew_deadline = *renew;
  mo.retry_period = *retry;
  mo.health_probe_address = f.health_probe_address;
  mo.health_probe_port = f.health_probe_port;
  mo.handle_signals = true;
  auto mgr = kube::Manager::Create(mo);
  if (!mgr.ok()) {
    log::Error("manager", {{"error", mgr.error().message}});
    return 1;
  }
  if (Status s = tpu::RegisterOperator(**mgr, options); !s.ok()) {
    log::Error("tpu operator", {{"error", s.error().message}});
    return 1;
  }
  if (f.gpu) {
    if (Status s = RegisterGpu(**mgr, *client, f); !s.ok()) {
      log::Error("gpu controllers", {{"error", s.error().message}});
      return 1;
    }
  }
  std::unique_ptr<runners::controlnode::RunnerServers> runner_servers;
  if (f.runners) {
    auto servers = RegisterRunners(**mgr, *client, options.compute, f);
    if (!servers.ok()) {
      log::Error("runners controllers", {{"error", servers.error().message}});
      return 1;
    }
    runner_servers = std::move(*servers);
  }
  log::Info("operator starting", {{"gce_endpoint", f.gce_endpoint},
                                  {"gce_credentials", (*tokens)->Describe()},
                                  {"leader_elect", f.leader_elect},
                                  {"health_port", static_cast<int64_t>((*mgr)->health_port())}});
  Status run = (*mgr)->Run();
  if (!run.ok()) {
    log::Error("operator stopped", {{"error", run.error().message}});
    return 1;
  }
  log::Info("operator stopped");
  return 0;
}

}  // namespace hyperslice::cmd
