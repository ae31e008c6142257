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
  std::chrono::hours validity{24 * 365};
};

Result<KeyPair> MakeCa(const std::string& common_name,
                       std::chrono::hours validity = std::chrono::hours(24 * 3650));
Result<KeyPair> Issue(const KeyPair& ca, const CertRequest& req);
// A new RSA-2048 key: cert_pem holds the public key (SubjectPublicKeyInfo PEM), key_pem the
// private key (PKCS#8 PEM).
Result<KeyPair> MakeRsaKey();

}  // namespace hyperslice::net::pki
