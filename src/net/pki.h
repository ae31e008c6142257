// Minimal X.509 issuance with OpenSSL: a self-signed CA and certificates it signs. Used where
// hyperslice must mint its own trust (the webhook's self-managed mode, the local control plane,
// tests). ECDSA P-256 certificate keys, SHA-256 signatures, PEM in and out; MakeRsaKey for the
// places that need RSA (service-account token signing, GCE service-account keys).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::net::pki {

struct KeyPair {
  std::string cert_pem;
  std::string key_pem;
};

struct CertRequest {
  std::string common_name;
  std::vector<std::string> organizations;  // O= (Kubernetes groups for client certs)
  std::vector<std::string> dns_names;      // subjectAltName DNS entries
  std::vector<std::string> ip_addresses;   // subjectAltName IP entries
  bool server = false;                     // extendedKeyUsage serverAuth
  bool client = false;                     // extendedKeyUsage clientAuth
  std::chrono::seconds validity{std::chrono::hours(24 * 365)};
};

Result<KeyPair> MakeCa(const std::string& common_name,
                       std::chrono::seconds validity = std::chrono::hours(24 * 3650));
Result<KeyPair> Issue(const KeyPair& ca, const CertRequest& req);

// A key made where it will be used and a PKCS#10 request for it, so the private key never leaves
// the host (linked runners: the agent asks, the link controller signs).
struct CsrAndKey {
  std::string csr_pem;
  std::string key_pem;
};
Result<CsrAndKey> MakeCsr(const std::string& common_name);
// The same with the subject's organizations and subjectAltName entries requested (what a kubelet
// puts in its serving CSR: O=system:nodes, CN=system:node:<name>, its addresses as SANs). Only
// `common_name`, `organizations`, `dns_names` and `ip_addresses` of `subject` are used.
Result<CsrAndKey> MakeCsr(const CertRequest& subject);
// Signs the public key of `csr_pem` (whose self-signature must verify) with `ca`. The subject,
// SANs, usages and validity are the signer's (`req`), never the requester's: a CSR only proves
// possession of the key. Errors: kInvalidArgument for a malformed CSR or a bad self-signature.
Result<std::string> SignCsr(const KeyPair& ca, const std::string& csr_pem, const CertRequest& req);

// What a certificate says about itself (the first certificate of a PEM bundle).
struct CertInfo {
  std::string common_name;
  std::vector<std::string> organizations;
  std::chrono::system_clock::time_point not_before;
  std::chrono::system_clock::time_point not_after;
};
Result<CertInfo> Inspect(const std::string& cert_pem);
// True when `cert_pem` carries a valid signature by the key of CA certificate `ca_cert_pem`.
Result<bool> SignedBy(const std::string& cert_pem, const std::string& ca_cert_pem);
// A new RSA-2048 key: cert_pem holds the public key (SubjectPublicKeyInfo PEM), key_pem the
// private key (PKCS#8 PEM).
Result<KeyPair> MakeRsaKey();

}  // namespace hyperslice::net::pki
