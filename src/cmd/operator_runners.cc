#include "src/cmd/operator_runners.h"

#include <utility>

#include <grpcpp/grpcpp.h>

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
  grpc::SslCredentialsOptions so;
  so.pem_root_certs = part.ca.ca.cert_pem;
  so.pem_cert_chain = part.ca.control_node.cert_pem;
  so.pem_private_key = part.ca.control_node.key_pem;
  auto credentials = grpc::SslCredentials(so);
  o.agent_credentials =
      [credentials](const std::string&) -> Result<std::shared_ptr<grpc::ChannelCredentials>> {
    return credentials;
  };
  HS_ASSIGN_OR_RETURN(auto set, cn::RegisterOperator(mgr, std::move(o)));
  cn::ServersOptions sv;
  sv.client = options.client;
  sv.link_address = options.link_address;
  sv.kubelet_address = options.kubelet_address;
  sv.serving_names = options.serving_names;
  sv.state_dir = options.state_dir;
  HS_ASSIGN_OR_RETURN(part.servers, cn::RunnerServers::Start(std::move(sv), part.ca, set));
  log::Info("runners: control nodes registered",
            {{"namespace", options.ns},
             {"link_port", static_cast<int64_t>(part.servers->link_port())},
             {"kubelet_port", static_cast<int64_t>(part.servers->kubelet_port())}});
  return part;
}

}  // namespace hyperslice::cmd
