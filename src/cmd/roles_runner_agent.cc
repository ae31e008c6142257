// `hyperslice runner-agent`: runs on a linked runner host (issue 20). Links with its one-time
// join token when its state dir holds no identity, serves RunnerAgent to control nodes over
// mutual TLS, renews its certificate at 2/3 of its lifetime, and runs pods as OCI containers.
// `hyperslice runner-agent shim ...` is the per-container shim the agent starts (not for people).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/json/parse.hpp>

#include "src/base/files.h"
#include "src/base/log.h"
#include "src/base/strings.h"
#include "src/cmd/flags.h"
#include "src/cmd/roles.h"
#include "src/gce/metadata.h"
#include "src/runners/agent/agent.h"
#include "src/runners/agent/runtime.h"
#include "src/runners/controlnode/gce_runner.h"
#include "src/runners/controlnode/market_runner.h"
#include "src/runners/link/link.h"

namespace hyperslice::cmd {
namespace {

struct RunnerAgentFlags {
  runners::agent::AgentOptions options;
  std::string link_endpoint;
  std::string join_token_file;
  std::string link_ca_file;
  std::string workload_policy_file;
  std::vector<std::string> capacity;
  std::vector<std::string> devices;
  int restart_backoff_ms = 2000;
  bool print_reference_values = false;
  bool gce_metadata = false;
  bool link_from_env = false;
  CLI::App* shim = nullptr;
  runners::agent::ShimOptions shim_options;
};

RunnerAgentFlags& Flags() {
  static RunnerAgentFlags flags;
  return flags;
}

// A file a flag names; an unreadable one is kInvalidArgument naming what it is.
Result<std::string> ReadFlagFile(const std::string& path, const std::string& what) {
  auto text = ReadFile(path);
  if (!text.ok())
    return Error::Make(Error::Code::kInvalidArgument, "cannot read " + what + " " + path);
  return text;
}

// The identity in the state dir, or a new one from the join token (`join_token`: read only
// when needed, so a relinking agent does not ask for a token it no longer has).
Result<runners::link::AgentIdentity> Identity(
    const runners::link::LinkClientOptions& lo,
    const std::function<Result<std::string>()>& join_token) {
  auto current = runners::link::LoadIdentity(lo.state_dir);
  if (current.ok() && current->not_after > std::chrono::system_clock::now()) {
    if (std::chrono::system_clock::now() < runners::link::RenewalTime(*current)) return current;
    auto renewed = runners::link::Renew(lo, *current);
    if (renewed.ok()) return renewed;
    log::Warn("identity renewal failed; using the current one",
              {{"error", renewed.error().message}});
    return current;
  }
  HS_ASSIGN_OR_RETURN(std::string token, join_token());
  return runners::link::Link(lo, TrimSpace(token));
}

// --gce-metadata: what the operator put in the instance's metadata (src/runners/controlnode/
// gce_runner.h) fills the link parameters the flags leave empty; the zone (and its region) come
// from the instance. The join token stays in memory (never in a file, never logged).
Status FromGceMetadata(RunnerAgentFlags& f, std::string* link_ca_pem,
                       std::function<Result<std::string>()>* join_token) {
  HS_ASSIGN_OR_RETURN(std::shared_ptr<gce::MetadataServer> md, gce::MetadataServer::Create({}));
  auto& o = f.options;
  auto fill = [&](std::string& field, const char* key) -> Status {
    if (!field.empty()) return OkStatus();
    auto v = md->Attribute(key);
    if (!v.ok()) {
      return Error::Make(v.error().code,
                         std::string("instance metadata ") + key + ": " + v.error().message);
    }
    field = TrimSpace(*v);
    return OkStatus();
  };
  HS_RETURN_IF_ERROR(fill(o.runner_name, runners::controlnode::kMetadataRunnerName));
  HS_RETURN_IF_ERROR(fill(f.link_endpoint, runners::controlnode::kMetadataLinkEndpoint));
  if (f.link_ca_file.empty()) {
    HS_RETURN_IF_ERROR(fill(*link_ca_pem, runners::controlnode::kMetadataRunnersCa));
  }
  if (o.zone.empty()) {
    HS_ASSIGN_OR_RETURN(o.zone, md->Zone());
  }
  if (o.region.empty()) {
    auto dash = o.zone.rfind('-');
    if (dash != std::string::npos) o.region = o.zone.substr(0, dash);
  }
  // Listening on every interface of a VM: control nodes dial the VM's own address.
  if (o.advertise_address.empty() && o.listen.rfind("0.0.0.0:", 0) == 0) {
    const std::string port = o.listen.substr(o.listen.find(':') + 1);
    if (port == "0") {
      return Error::Make(Error::Code::kInvalidArgument,
                         "--listen 0.0.0.0:0 needs --advertise-address (no port to advertise)");
    }
    HS_ASSIGN_OR_RETURN(std::string ip, md->Get("instance/network-interfaces/0/ip"));
    o.advertise_address = TrimSpace(ip) + ":" + port;
  }
  if (f.join_token_file.empty()) {
    *join_token = [md]() -> Result<std::string> {
      return md->Attribute(runners::controlnode::kMetadataJoinToken);
    };
  }
  log::Info("runner agent: link parameters from the instance metadata",
            {{"metadata", md->base_url()},
             {"runner", o.runner_name},
             {"link_endpoint", f.link_endpoint},
             {"zone", o.zone}});
  return OkStatus();
}

// --link-from-env: a marketplace container (src/runners/controlnode/market_runner.h) gets the
// runner name, link endpoint, runners CA and join token as env. The token is taken out of the
// environment at once (kept in memory), so no shim or container this agent starts inherits it.
Status FromEnv(RunnerAgentFlags& f, std::string* link_ca_pem,
               std::function<Result<std::string>()>* join_token) {
  namespace cn = runners::controlnode;
  auto env = [](const char* key) {
    const char* v = std::getenv(key);
    return std::string(v != nullptr ? v : "");
  };
  auto& o = f.options;
  if (o.runner_name.empty()) o.runner_name = env(cn::kEnvRunnerName);
  if (f.link_endpoint.empty()) f.link_endpoint = env(cn::kEnvLinkEndpoint);
  if (f.link_ca_file.empty()) *link_ca_pem = env(cn::kEnvRunnersCa);
  std::string token = env(cn::kEnvJoinToken);
  ::unsetenv(cn::kEnvJoinToken);
  if (f.join_token_file.empty() && !token.empty()) {
    *join_token = [token]() -> Result<std::string> { return token; };
  }
  // In a rented container no address of the container's own is reachable from outside, whatever
  // --listen binds: control nodes dial the public address and the port the provider mapped to the
  // listen port, which only a port published at the create has (RunPod: RUNPOD_PUBLIC_IP,
  // RUNPOD_TCP_PORT_<port>; Vast: PUBLIC_IPADDR, VAST_TCP_PORT_<port>). Without that mapping
  // nothing could dial the agent, so it refuses to start rather than link an unreachable address.
  if (o.advertise_address.empty()) {
    const std::string port = o.listen.substr(o.listen.rfind(':') + 1);
    static constexpr std::pair<const char*, const char*> kPublic[] = {
        {"RUNPOD_PUBLIC_IP", "RUNPOD_TCP_PORT_"}, {"PUBLIC_IPADDR", "VAST_TCP_PORT_"}};
    for (const auto& [ip, mapped] : kPublic) {
      std::string host = env(ip), p = env((std::string(mapped) + port).c_str());
      if (!host.empty() && !p.empty()) o.advertise_address = host.append(":").append(p);
    }
    if (o.advertise_address.empty()) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "--listen " + o.listen + ": port " + port +
                             " is not published by the provider (no RUNPOD_TCP_PORT_" + port +
                             " or VAST_TCP_PORT_" + port +
                             " in the env); give --advertise-address or publish the port");
    }
  }
  log::Info("runner agent: link parameters from the environment",
            {{"runner", o.runner_name}, {"link_endpoint", f.link_endpoint}});
  return OkStatus();
}

}  // namespace

void SetupRunnerAgent(CLI::App& app) {
  RunnerAgentFlags& f = Flags();
  auto& o = f.options;
  app.add_option("--name", o.runner_name, "the Runner object's name (required)");
  app.add_option("--state-dir", o.state_dir, "identity, images, pods (kept across restarts)")
      ->capture_default_str();
  o.state_dir = "/var/lib/hyperslice/runner-agent";
  app.add_option("--listen", o.listen, "host:port to serve RunnerAgent on")->capture_default_str();
  app.add_option("--advertise-address", o.advertise_address,
                 "host:port control nodes dial (default: --listen)");
  app.add_option("--link-endpoint", f.link_endpoint,
                 "host:port of the RunnerLink server (required)");
  app.add_option("--join-token-file", f.join_token_file,
                 "file holding the one-time join token (needed only for the first link)");
  app.add_option("--link-ca-file", f.link_ca_file,
                 "CA that verifies the RunnerLink server (required)");
  app.add_flag("--gce-metadata", f.gce_metadata,
               "boot on a GCE VM: read the runner name, link endpoint, runners CA and join token "
               "the operator put in the instance's metadata (GCE_METADATA_HOST honoured); flags "
               "given win; with --listen 0.0.0.0:<port> it advertises the VM's address");
  app.add_flag(
      "--link-from-env", f.link_from_env,
      "boot in a rented container: read the runner name, link endpoint, runners CA and "
      "join token from HYPERSLICE_RUNNER_NAME, HYPERSLICE_LINK_ENDPOINT, "
      "HYPERSLICE_RUNNERS_CA and HYPERSLICE_JOIN_TOKEN (flags given win); it advertises the "
      "provider's public address and the port mapped to --listen's (refused when the "
      "port is not published), unless --advertise-address is given");
  app.add_option("--runtime", o.runtime, "OCI runtime binary (runc, or crun where it works)")
      ->capture_default_str();
  app.add_option("--container-runtime-endpoint", o.container_runtime_endpoint,
                 "run pods through this CRI runtime instead of --runtime, as a kubelet does "
                 "(unix:///run/containerd/containerd.sock); its registry and CNI configuration "
                 "apply (--insecure-registry and --pod-cidr do not); not with --sealed");
  app.add_option("--capacity", f.capacity,
                 "resource=quantity this runner offers (repeatable: cpu=8, memory=32Gi, "
                 "google.com/tpu=4)");
  app.add_option("--device", f.devices,
                 "resource=host_path[:container_path] device node handed to containers that "
                 "ask for the resource (repeatable)");
  app.add_flag("--allow-host-network", o.allow_host_network, "let pods use the host's network");
  app.add_option("--pod-cidr", o.pod_cidr,
                 "IPv4 CIDR of the pods' addresses (a bridge in the agent's network namespace "
                 "holds its first address; each pod gets a veth and the next free one); without "
                 "it pods have only a loopback and no pod IP");
  app.add_option("--pod-bridge", o.pod_bridge, "name of the pods' bridge (with --pod-cidr)")
      ->capture_default_str();
  app.add_option("--require-digest", o.require_digest,
                 "refuse images referenced by tag (true/false)")
      ->capture_default_str();
  app.add_option("--insecure-registry", o.insecure_registries,
                 "host:port of a registry spoken over plain HTTP (loopback test registries)");
  app.add_option("--workload-policy-file", f.workload_policy_file,
                 "sealed runner: the WorkloadPolicy (JSON, as kubectl get -o json prints it) every "
                 "pod must satisfy; exec is then refused, and logs unless the policy allows them");
  app.add_option("--region", o.region, "region reported to the control node");
  app.add_option("--zone", o.zone, "zone reported to the control node");
  app.add_option("--slice", o.slice, "multi-host slice id this runner belongs to");
  app.add_option("--slice-index", o.slice_index, "this runner's index within its slice");
  app.add_flag("--sealed", o.sealed,
               "sealed runner (issue 21): measure this binary, its config and every workload "
               "into the TPM, answer attestation, serve workloads their token socket");
  o.tpm_tcti = "device:/dev/tpmrm0";
  app.add_option("--tpm", o.tpm_tcti,
                 "TSS TCTI of the TPM a sealed agent uses (device:/dev/tpmrm0, "
                 "swtpm:host=127.0.0.1,port=2321)")
      ->capture_default_str();
  app.add_flag("--print-reference-values", f.print_reference_values,
               "print the AttestationPolicy referenceValues (agent/binary, agent/config) a sealed "
               "agent with these flags measures, and exit");
  app.add_option("--restart-backoff-ms", f.restart_backoff_ms,
                 "first delay before restarting a container (doubled per restart, 5 min cap)")
      ->capture_default_str();

  f.shim = app.add_subcommand("shim", "");  // no help text: hidden, started by the agent
  auto& s = f.shim_options;
  f.shim->add_option("--runtime", s.runtime)->required();
  f.shim->add_option("--root", s.root)->required();
  f.shim->add_option("--id", s.id)->required();
  f.shim->add_option("--bundle", s.bundle)->required();
  f.shim->add_option("--dir", s.dir)->required();
  f.shim->add_option("--attempt", s.attempt)->required();
}

int RunRunnerAgent(CLI::App&) {
  RunnerAgentFlags& f = Flags();
  if (f.shim != nullptr && f.shim->parsed()) return runners::agent::RunShim(f.shim_options);
  auto& o = f.options;
  std::string link_ca_pem;
  std::function<Result<std::string>()> join_token = [&f]() -> Result<std::string> {
    if (f.join_token_file.empty()) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "no identity in the state dir and no --join-token-file to link with");
    }
    return ReadFlagFile(f.join_token_file, "join token file");
  };
  if (f.gce_metadata) {
    if (Status st = FromGceMetadata(f, &link_ca_pem, &join_token); !st.ok()) {
      log::Error("runner agent cannot read its instance metadata", {{"error", st.error().message}});
      return 1;
    }
  }
  if (f.link_from_env) {
    if (Status st = FromEnv(f, &link_ca_pem, &join_token); !st.ok()) {
      log::Error("runner agent cannot read its environment", {{"error", st.error().message}});
      return 2;
    }
  }
  // Checked here, not by CLI11: the shim subcommand does not take them.
  if (!f.print_reference_values && (o.runner_name.empty() || f.link_endpoint.empty() ||
                                    (f.link_ca_file.empty() && link_ca_pem.empty()))) {
    log::Error(
        "runner-agent needs --name, --link-endpoint and --link-ca-file (or --gce-metadata, "
        "--link-from-env)");
    return 2;
  }
  auto capacity = KeyValueFlag("--capacity", f.capacity, "resource=quantity");
  auto devices = KeyValueFlag("--device", f.devices, "resource=host_path[:container_path]");
  for (const auto* kvs : {&capacity, &devices}) {
    if (!kvs->ok()) {
      log::Error("bad flag", {{"error", kvs->error().message}});
      return 2;
    }
  }
  for (auto& [resource, quantity] : *capacity) o.capacity[resource] = std::move(quantity);
  for (const auto& [resource, paths] : *devices) {
    runners::agent::DeviceConfig dc;
    dc.resource = resource;
    auto colon = paths.find(':');
    dc.host_path = paths.substr(0, colon);
    if (colon != std::string::npos) dc.container_path = paths.substr(colon + 1);
    o.devices.push_back(dc);
  }
  o.restart_backoff = std::chrono::milliseconds(f.restart_backoff_ms);
  if (o.advertise_address.empty()) o.advertise_address = o.listen;
  if (f.print_reference_values) {
    auto refs = runners::agent::SealedReferenceValues(o);
    if (!refs.ok()) {
      log::Error("cannot compute the reference values", {{"error", refs.error().message}});
      return 1;
    }
    std::string out = "referenceValues:\n";
    for (const auto& [name, digest] : *refs) {
      out.append("  - name: ")
          .append(name)
          .append("\n    digests: [\"")
          .append(digest)
          .append("\"]\n");
    }
    std::fputs(out.c_str(), stdout);
    return 0;
  }

  BlockStopSignals();
  auto link_ca = link_ca_pem.empty() ? ReadFlagFile(f.link_ca_file, "link CA file")
                                     : Result<std::string>(link_ca_pem);
  if (!link_ca.ok()) {
    log::Error("runner agent cannot start", {{"error", link_ca.error().message}});
    return 2;
  }
  if (!f.workload_policy_file.empty()) {
    auto text = ReadFlagFile(f.workload_policy_file, "workload policy file");
    boost::system::error_code ec;
    boost::json::value v = text.ok() ? boost::json::parse(*text, ec) : boost::json::value();
    if (!text.ok() || ec || !v.is_object()) {
      log::Error("runner agent cannot start",
                 {{"error", text.ok() ? "workload policy file is not a JSON object"
                                      : text.error().message}});
      return 2;
    }
    auto p = runners::policy::ParseWorkloadPolicy(v.as_object());
    if (!p.ok()) {
      log::Error("runner agent cannot start", {{"error", p.error().message}});
      return 2;
    }
    o.workload_policy = *p;
  }
  runners::link::LinkClientOptions lo;
  lo.endpoint = f.link_endpoint;
  lo.link_ca_pem = *link_ca;
  lo.runner_name = o.runner_name;
  lo.agent_address = o.advertise_address;
  lo.state_dir = o.state_dir;
  auto identity = Identity(lo, join_token);
  if (!identity.ok()) {
    log::Error("runner agent could not get its identity",
               {{"runner", o.runner_name}, {"error", identity.error().message}});
    return 1;
  }
  o.identity = *identity;
  // A workload's token request goes to the link controller with the identity current then.
  std::mutex identity_mu;
  runners::link::AgentIdentity token_identity = *identity;
  if (o.sealed) {
    o.attestation_tokens = [&](const runners::link::AttestationTokenRequest& r) {
      runners::link::AgentIdentity id;
      {
        std::lock_guard lock(identity_mu);
        id = token_identity;
      }
      return runners::link::RequestAttestationToken(lo, id, r);
    };
  }
  auto agent = runners::agent::Agent::Start(o);
  if (!agent.ok()) {
    log::Error("runner agent could not start", {{"error", agent.error().message}});
    return 1;
  }
  log::Info(
      "runner agent started",
      {{"runner", o.runner_name}, {"port", (*agent)->port()}, {"advertise", o.advertise_address}});

  // Renewal at 2/3 of the certificate's lifetime; failures retried every 30 s until it expires.
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::thread renewer([&] {
    runners::link::AgentIdentity current = *identity;
    std::unique_lock lock(mu);
    auto when = runners::link::RenewalTime(current);
    while (!cv.wait_until(lock, when, [&] { return stopping; })) {
      lock.unlock();
      auto renewed = runners::link::Renew(lo, current);
      if (renewed.ok()) {
        current = *renewed;
        {
          std::lock_guard id_lock(identity_mu);
          token_identity = current;
        }
        if (Status st = (*agent)->UpdateIdentity(current); !st.ok()) {
          log::Error("serving the renewed identity failed", {{"error", st.error().message}});
        }
        when = runners::link::RenewalTime(current);
      } else {
        log::Warn("identity renewal failed", {{"error", renewed.error().message}});
        when = std::chrono::system_clock::now() + std::chrono::seconds(30);
      }
      lock.lock();
    }
  });
  int sig = WaitForStopSignal();
  log::Info("runner agent stopping", {{"signal", sig}});
  {
    std::lock_guard lock(mu);
    stopping = true;
  }
  cv.notify_all();
  renewer.join();
  (*agent)->Stop();
  return 0;
}

}  // namespace hyperslice::cmd
