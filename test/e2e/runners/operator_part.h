// What both runners e2e tests run of the operator: the control-node controllers with the runners
// CA's control-node client certificate as their credentials to agents, probing fast enough for a
// test (probe 500 ms, unhealthy after 4 s, Lease every 2 s).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "src/kube/client.h"
#include "src/runners/controlnode/controlnode.h"
#include "src/runners/controlnode/servers.h"

namespace hyperslice::runners_e2e {

inline runners::controlnode::OperatorOptions TestOperatorOptions(
    std::shared_ptr<kube::Client> client, const std::string& ns,
    const runners::controlnode::RunnersCa& ca) {
  using namespace std::chrono_literals;
  runners::controlnode::OperatorOptions oo;
  oo.client = std::move(client);
  oo.ns = ns;
  grpc::SslCredentialsOptions so;
  so.pem_root_certs = ca.ca.cert_pem;
  so.pem_cert_chain = ca.control_node.cert_pem;
  so.pem_private_key = ca.control_node.key_pem;
  auto creds = grpc::SslCredentials(so);
  oo.agent_credentials =
      [creds](const std::string&) -> Result<std::shared_ptr<grpc::ChannelCredentials>> {
    return creds;
  };
  oo.probe_interval = 500ms;
  oo.unhealthy_after = 4s;
  oo.lease_renew_interval = 2s;
  return oo;
}

}  // namespace hyperslice::runners_e2e
