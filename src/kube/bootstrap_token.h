// Bootstrap token Secrets (bootstrap.kubernetes.io/token in kube-system), the credential a new
// machine's kubelet (or kubeadm join) authenticates with before it has its own: one way to mint
// them for both the TPU slices' kubeadm join tokens and the GPU machines' TLS-bootstrap tokens.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "src/base/result.h"

namespace hyperslice::kube {

class Client;

inline constexpr char kBootstrapTokenNamespace[] = "kube-system";
inline constexpr char kBootstrapTokenSecretPrefix[] = "bootstrap-token-";

struct BootstrapTokenSpec {
  std::string description;  // the Secret's "description" (never the token)
  std::map<std::string, std::string> labels, annotations;
  std::chrono::system_clock::time_point expiration;  // the tokencleaner deletes it then
  bool signing = false;                              // usage-bootstrap-signing (kubeadm's JWS)
  std::string extra_groups;                          // auth-extra-groups
};

struct BootstrapToken {
  std::string id;           // 6 of [a-z0-9]; public (it names the Secret)
  std::string secret;       // 16 of [a-z0-9]; the credential half
  std::string secret_name;  // "bootstrap-token-<id>"
  std::string Token() const { return id + "." + secret; }
};

// Creates the Secret with an id and secret from the CSPRNG (uniform over [a-z0-9]); an id another
// token holds is drawn again, up to 5 times (TokenIdExhausted after that). Other apiserver errors
// are returned as they come.
Result<BootstrapToken> CreateBootstrapToken(Client& client, const BootstrapTokenSpec& spec);

}  // namespace hyperslice::kube
