// Per-machine Kubernetes bootstrap tokens for rented GPU machines (issue "Ephemeral GPUs 3/4",
// item 2): one `bootstrap-token-<id>` Secret in kube-system per GPUNodeClaim, in the format
// kube-apiserver's bootstrap-token authenticator reads (type bootstrap.kubernetes.io/token,
// usage-bootstrap-authentication, auth-extra-groups
// system:bootstrappers:kubeadm:default-node-token, so the RBAC `kubeadm init` creates — and
// localcluster's kubeadm_bootstrap — lets the kubelet create its CSR and have it auto-approved).
//
// The token is the machine's only credential until its kubelet holds a client certificate, so:
//   - it expires after `ttl` (launch + registration timeout: a machine that has not registered by
//     then is deleted anyway) and kube-controller-manager's tokencleaner removes it after that;
//   - it is deleted as soon as the claim's Node registered, and when the claim goes;
//   - no log line, Event, status or error message carries it (the Secret's name holds the public
//     token id only, which is what logs may show).
// The Secret is labelled with the claim's name and UID so it is found again by label: a launch
// that is retried (a capacity refusal, a lost answer) reuses the live token instead of minting
// another, and deleting by the claim's UID removes every token ever minted for it.
//
// Thread-safe: free functions over a kube::Client.
#pragma once

#include <chrono>
#include <string>

#include "src/base/result.h"

namespace hyperslice::kube {
class Client;
}

namespace hyperslice::gpu {

inline constexpr char kBootstrapTokenNamespace[] = "kube-system";
inline constexpr char kBootstrapTokenGroup[] = "system:bootstrappers:kubeadm:default-node-token";
// Labels on the Secret linking it to its claim.
inline constexpr char kLabelTokenClaim[] = "tgp.io/claim";
inline constexpr char kLabelTokenClaimUid[] = "tgp.io/claim-uid";

struct BootstrapToken {
  std::string id;           // 6 chars [a-z0-9]: public, may be logged
  std::string secret_name;  // "bootstrap-token-<id>"
  std::string token;        // "<id>.<secret>": the credential; never log it
  std::chrono::system_clock::time_point expires;
};

// The claim's live token when one exists and expires more than `min_left` from now; otherwise a
// new one (random id and secret from OpenSSL's CSPRNG, an id collision drawn again) valid for
// `ttl`. Errors are the apiserver's (the message never holds the token).
Result<BootstrapToken> EnsureBootstrapToken(kube::Client& client, const std::string& claim_name,
                                            const std::string& claim_uid, std::chrono::seconds ttl,
                                            std::chrono::seconds min_left);

// Deletes every token Secret labelled with the claim's UID; none left is success. Returns how
// many were deleted.
Result<int> DeleteBootstrapTokens(kube::Client& client, const std::string& claim_uid);

// True for "[a-z0-9]{6}.[a-z0-9]{16}" (the bootstrap token format).
bool IsBootstrapToken(const std::string& token);

}  // namespace hyperslice::gpu
