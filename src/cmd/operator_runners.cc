#include "src/cmd/operator_runners.h"

#include <utility>

#include <grpcpp/grpcpp.h>

#include "src/base/command.h"
#include "src/base/log.h"

namespace hyperslice::cmd {

namespace cn = runners::controlnode;

Result<RunnersPart> StartRunnersPart(kube::Manager& mgr, RunnersPartOptions options) {
  cn::OperatorOptions o;
  o.client = options.client;
  o.ns = options.ns;
  o.probe_interval = options.probe_interval;
  o.unhealthy_after = options.unhealthy_after;
  o.workers = options.workers;
  o.registry.insecure_registries = options.insecure_registries;
  RunnersPart part;
  HS_ASSIGN_OR_RETURN(part.ca, cn::EnsureRunnersCa(*options.client, o.ns, options.ca_secret));
  o.gce.compute = options.compute;
  o.gce.ca_bundle_pem = part.ca.ca.cert_pem;
  o.gce.link_endpoint = options.link_advertise_address;
  if (o.gce.link_endpoint.empty() && options.link_address.rfind("0.0.0.0:", 0) != 0 &&
      !options.link_address.ends_with(":0")) {
    o.gce.link_endpoint = options.link_address;
  }
  if (!options.instance_image.empty()) o.gce.boot_image = options.instance_image;
  o.gce.startup_script = options.instance_startup_script;
  o.market.agent_image = options.agent_image;
  o.market.link_endpoint = o.gce.link_endpoint;
  o.market.ca_bundle_pem = part.ca.ca.cert_pem;
  if (!options.agent_image.empty()) {
    o.market.classes = cn::GpuNodeClassSource(options.client, options.credentials_namespace,
                                              options.provider_endpoints);
  }
  grpc::SslCredentialsOptions so;
  so.pem_root_certs = part.ca.ca.cert_pem;
  so.pem_cert_chain = part.ca.control_node.cert_pem;
  so.pem_private_key = part.ca.control_node.key_pem;
  auto credentials = grpc::SslCredentials(so);
  o.agent_credentials =
      [credentials](const std::string&) -> Result<std::shared_ptr<grpc::ChannelCredentials>> {
    return credentials;
  };
  std::string attestation_address = options.attestation_address;
  if (!attestation_address.empty()) {
    // The issuer URL names the port, so a free one is chosen before anything listens.
    auto colon = attestation_address.rfind(':');
    std::string host = colon == std::string::npos ? "" : attestation_address.substr(0, colon);
    if (colon == std::string::npos || attestation_address.substr(colon + 1) == "0") {
      HS_ASSIGN_OR_RETURN(int port,
                          FreeLoopbackPort(host.empty() || host == "0.0.0.0" ? "127.0.0.1" : host));
      attestation_address = host + ":" + std::to_string(port);
    }
    std::string name = !options.serving_names.empty()      ? options.serving_names.front()
                       : host.empty() || host == "0.0.0.0" ? "127.0.0.1"
                                                           : host;
    part.attestation_issuer =
        "https://" + name + ":" + attestation_address.substr(attestation_address.rfind(':') + 1);
    HS_ASSIGN_OR_RETURN(std::string key, cn::EnsureAttestationKey(*options.client, o.ns,
                                                                  options.attestation_key_secret));
    HS_ASSIGN_OR_RETURN(
        auto issuer, runners::attest::TokenIssuer::FromPrivateKeyPem(part.attestation_issuer, key));
    o.token_issuer = std::move(issuer);
  }
  auto token_issuer = o.token_issuer;
  HS_ASSIGN_OR_RETURN(auto set, cn::RegisterOperator(mgr, std::move(o)));
  cn::ServersOptions sv;
  sv.client = options.client;
  sv.link_address = options.link_address;
  sv.kubelet_address = options.kubelet_address;
  sv.serving_names = options.serving_names;
  sv.state_dir = options.state_dir;
  sv.attestation_address = attestation_address;
  sv.token_issuer = token_issuer;
  sv.kbs_namespace = options.ns;
  HS_ASSIGN_OR_RETURN(part.servers, cn::RunnerServers::Start(std::move(sv), part.ca, set));
  log::Info("runners: control nodes registered",
            {{"namespace", options.ns},
             {"link_port", static_cast<int64_t>(part.servers->link_port())},
             {"kubelet_port", static_cast<int64_t>(part.servers->kubelet_port())}});
  return part;
}

}  // namespace hyperslice::cmd
