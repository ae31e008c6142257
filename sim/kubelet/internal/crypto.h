// The cryptography a joining node does itself (kubeadm's token discovery and the kubelet's TLS
// bootstrap), with OpenSSL. Not part of the module's public surface. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "src/base/result.h"

namespace hyperslice::sim::kubelet::internal {

// "sha256:" + lower-case hex SHA-256 of the DER SubjectPublicKeyInfo of the first certificate in
// `ca_pem` (kubeadm's --discovery-token-ca-cert-hash).
Result<std::string> CaCertHash(std::string_view ca_pem);

// Checks a detached compact JWS "<protected header>..<signature>" over `payload` as
// k8s.io/cluster-bootstrap/token/jws does: alg HS256, kid = token id, key = the token secret.
// kInvalidArgument (reason "JWSInvalid") when it does not verify.
Status VerifyDetachedJws(std::string_view jws, std::string_view payload, std::string_view token_id,
                         std::string_view token_secret);
// Signs like the bootstrapsigner controller (exposed for tests).
std::string SignDetachedJws(std::string_view payload, std::string_view token_id,
                            std::string_view token_secret);

// A new ECDSA P-256 key and a PKCS#10 request for it with subject O=<organization>, CN=<cn>.
struct KeyAndCsr {
  std::string key_pem;  // PKCS#8
  std::string csr_pem;
};
Result<KeyAndCsr> MakeCsr(const std::string& common_name, const std::string& organization);

// Subject CN and O of a PEM certificate, and whether its public key is the one of `key_pem`.
struct CertFacts {
  std::string common_name, organization;
  bool matches_key = false;
};
Result<CertFacts> InspectCertificate(std::string_view cert_pem, std::string_view key_pem);

}  // namespace hyperslice::sim::kubelet::internal
