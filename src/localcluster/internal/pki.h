// Certificates and keys of a LocalCluster, generated in-process with OpenSSL's EVP/X509 API.
//
// The CA and leaf certificates use ECDSA P-256 (fast to generate, accepted by every Kubernetes
// component); the service-account signing key is RSA-2048, as kube-apiserver's default issuer
// expects. Nothing here touches the filesystem.
#pragma once

#include <string>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::localcluster::internal {

struct KeyPair {
  std::string cert_pem;
  std::string key_pem;  // PKCS#8
};

struct LeafSpec {
  std::string common_name;
  std::vector<std::string> organizations;
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  bool server = false;  // serverAuth (else clientAuth)
  int valid_days = 365;
};

// A self-signed CA certificate (CN=`common_name`, 10 years).
Result<KeyPair> MakeCa(const std::string& common_name);
// A certificate signed by `ca`.
Result<KeyPair> MakeLeaf(const KeyPair& ca, const LeafSpec& spec);

struct RsaKey {
  std::string private_pem;  // PKCS#8
  std::string public_pem;   // SubjectPublicKeyInfo
};
Result<RsaKey> MakeRsaKey(int bits = 2048);

}  // namespace hyperslice::localcluster::internal
