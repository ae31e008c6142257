// The operator's runners part (src/runners/controlnode) as one composition, shared by
// `hyperslice operator --runners` (roles_operator.cc) and `hyperslice dev --example runners`
// (roles_dev_runners.cc): the runners CA Secret (created when missing), the control-node
// controllers with the CA's control-node client certificate as their credentials to agents, the
// link server and the kubelet API.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "src/base/result.h"
#include "src/gce/compute.h"
#include "src/kube/client.h"
#include "src/kube/manager.h"
#include "src/runners/controlnode/controlnode.h"
#include "src/runners/controlnode/servers.h"

namespace hyperslice::cmd {

struct RunnersPartOptions {
  std::shared_ptr<kube::Client> client;
  std::string ns;  // the runners CA Secret and the join-token Secrets
  std::string ca_secret = "hyperslice-runners-ca";
  std::string link_address = "0.0.0.0:10251";
  std::string kubelet_address = "0.0.0.0:10250";  // port 0: any free port (kubelet_port())
  std::vector<std::string> serving_names;
  std::string state_dir;
  std::chrono::milliseconds probe_interval{10000};
  std::chrono::milliseconds unhealthy_after{40000};
  int workers = 4;
  // Registries a sealed control node reads cosign signatures from over plain HTTP.
  std::vector<std::string> insecure_registries;
  // Sealed runners' token issuer: HTTPS discovery + JWKS there ("" = no tokens; port 0: a free
  // loopback port). The issuer is https://<first serving name, else the host>:<port>.
  std::string attestation_address;
  std::string attestation_key_secret = "hyperslice-runners-attestation";
  // spec.gce Runners: the client their instances are created with, and the link server's
  // address as instances dial it (default: link_address unless its host is 0.0.0.0 or its port
  // 0). compute nullptr or no address: such Runners stay Pending (GceNotConfigured).
  std::shared_ptr<gce::Compute> compute;
  std::string link_advertise_address;
  std::string instance_image;           // boot image; empty: GceProvisionerOptions' default
  std::string instance_startup_script;  // the instances' startup-script item; empty: none
  // spec.marketplace Runners: the container image (entrypoint `hyperslice`) their rented
  // machines run, where a GPUNodeClass's credentialsRef without namespace is read, and the API
  // base per provider for classes that name no endpoint. No image: such Runners stay Pending
  // (MarketNotConfigured).
  std::string agent_image;
  std::string credentials_namespace = "tgp-system";
  std::map<std::string, std::string> provider_endpoints;
};

struct RunnersPart {
  runners::controlnode::RunnersCa ca;  // ca.ca.cert_pem is what agents verify the link with
  std::unique_ptr<runners::controlnode::RunnerServers> servers;  // live as long as the process
  std::string attestation_issuer;  // the tokens' iss ("" without attestation_address)
};

// Registers the controllers on `mgr` (before mgr.Run()) and starts the servers.
Result<RunnersPart> StartRunnersPart(kube::Manager& mgr, RunnersPartOptions options);

}  // namespace hyperslice::cmd
