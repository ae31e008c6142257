// Where a provider's API key comes from. The GPUNodeClass names a Secret key per provider
// (credentialsRef{name,key,namespace}); the key is read when a call needs it, cached for a short
// time so a rotated Secret takes effect without a restart, and never logged or put in an error.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "src/base/clock.h"
#include "src/base/result.h"

namespace hyperslice::kube {
class Client;
}

namespace hyperslice::gpu {

class CredentialSource {
 public:
  virtual ~CredentialSource() = default;
  // The secret value. Errors: kUnauthorized (reason kReasonUnauthorized) when the Secret or key
  // is missing or empty, with a message naming the Secret and key (never the value).
  virtual Result<std::string> Get() = 0;
  // Forget any cached value (after the provider answered 401, the Secret may have been rotated).
  virtual void Invalidate() {}
};

// A fixed value (tests, benchmarks, `hyperslice dev`).
std::shared_ptr<CredentialSource> StaticCredential(std::string value);

struct SecretRef {
  std::string ns;  // empty: the operator's default credentials namespace
  std::string name;
  std::string key;
};

// Namespace a credentialsRef without one is looked up in (seed 002 creates tgp-operator-secret in
// tgp-system); the operator's --credentials-namespace flag overrides it.
inline constexpr char kDefaultCredentialsNamespace[] = "tgp-system";

// Reads `ref` through the apiserver; the value is cached for `ttl`.
std::shared_ptr<CredentialSource> SecretCredential(
    std::shared_ptr<kube::Client> client, SecretRef ref, std::string default_namespace,
    std::chrono::seconds ttl = std::chrono::seconds(60), Clock* clock = &RealClock());

}  // namespace hyperslice::gpu
