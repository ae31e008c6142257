// What the operator serves for linked runners besides its controllers (ARCHITECTURE.md §9):
//  - the runners CA, kept in a Secret it creates when missing (ca.crt/ca.key: the CA that signs
//    agents' identities; tls.crt/tls.key: the control nodes' client certificate for agents);
//  - the link server (src/runners/link): one-time join tokens from the Runners' Secrets exchanged
//    for agent certificates;
//  - the kubelet API (src/runners/kubeletapi) the apiserver calls for `kubectl logs`/`exec` on
//    pods of control nodes: mutual TLS against the cluster's client CA (kube-system/
//    extension-apiserver-authentication, client-ca-file), serving certificate obtained as a
//    kubelet's is: a CSR for kubernetes.io/kubelet-serving (CN system:node:<node>,
//    O system:nodes, SANs the control nodes' addresses), approved by the operator, signed by
//    kube-controller-manager. Until it is issued the server presents a certificate from the
//    runners CA (the apiserver verifies kubelets only with --kubelet-certificate-authority);
//  - sealed runners' token issuer (issue 21): the OIDC discovery document
//    (/.well-known/openid-configuration) and the JWKS (/jwks) over HTTPS with a certificate from
//    the runners CA, and AttestationToken on the link server; on the same listener the key
//    broker's resource endpoint (src/runners/kbs, POST /kbs/v0/resource/<name>) releasing the
//    Secrets of `kbs_namespace` labelled kKbsResourceLabel=true.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "src/base/result.h"
#include "src/net/pki.h"
#include "src/runners/controlnode/controlnode.h"

namespace hyperslice::kube {
class Client;
}  // namespace hyperslice::kube

namespace hyperslice::runners::controlnode {

// A key-broker resource (Secret in ServersOptions::kbs_namespace, named as the resource): the
// label must be "true"; data[value] is the secret; the annotations its release policy (the
// token's audience; comma-separated image digests the token's image_digest must be one of).
inline constexpr char kKbsResourceLabel[] = "runners.hyperslice.dev/kbs-resource";
inline constexpr char kKbsAudienceAnnotation[] = "runners.hyperslice.dev/kbs-audience";
inline constexpr char kKbsImagesAnnotation[] = "runners.hyperslice.dev/kbs-image-digests";

struct RunnersCa {
  net::pki::KeyPair ca;            // the runners CA (with its key)
  net::pki::KeyPair control_node;  // client certificate control nodes present to agents
};

// Reads the runners CA Secret `ns/name`, creating it (CA + control-node client certificate) when
// it does not exist. Errors: the Secret exists but lacks a key (kInvalidArgument), API errors.
Result<RunnersCa> EnsureRunnersCa(kube::Client& client, const std::string& ns,
                                  const std::string& name);

// The ES256 key that signs attestation tokens: `key.pem` of Secret `ns/name`, created when
// missing so that tokens stay verifiable across operator restarts. Errors: API errors.
Result<std::string> EnsureAttestationKey(kube::Client& client, const std::string& ns,
                                         const std::string& name);

struct ServersOptions {
  std::shared_ptr<kube::Client> client;
  std::string link_address = "0.0.0.0:10251";     // host:port
  std::string kubelet_address = "0.0.0.0:10250";  // host:port
  // Addresses (IPs or DNS names) put in the serving certificates besides the control nodes'
  // spec.address values.
  std::vector<std::string> serving_names;
  std::string state_dir;  // serving certificate files (created, 0700)
  std::chrono::seconds csr_timeout{120};
  // Sealed runners: where the issuer's discovery document and JWKS are served ("" = nowhere);
  // the issuer's URL must be https://<a serving name or this host>:<this port>.
  std::string attestation_address;
  std::shared_ptr<attest::TokenIssuer> token_issuer;
  // Where key-broker resources are read from ("" = no resource endpoint).
  std::string kbs_namespace;
};

class RunnerServers {
 public:
  virtual ~RunnerServers() = default;
  static Result<std::unique_ptr<RunnerServers>> Start(ServersOptions options, RunnersCa ca,
                                                      std::shared_ptr<ControlNodeSet> set);
  virtual uint16_t link_port() const = 0;
  virtual uint16_t kubelet_port() const = 0;
  virtual uint16_t attestation_port() const = 0;  // 0 when not serving
  // The kubelet serving certificate came from an approved, signed CSR (not the fallback).
  virtual bool serving_from_csr() const = 0;
  virtual void Stop() = 0;
};

}  // namespace hyperslice::runners::controlnode
