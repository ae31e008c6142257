// Building a Provider by name. The product's clients take an endpoint override (a private API
// endpoint, or a simulator in tests); nothing here knows which it talks to.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/gpu/credentials.h"
#include "src/gpu/provider.h"

namespace hyperslice::kube::metrics {
class Registry;
}

namespace hyperslice::gpu {

// Each provider's public API base, used when ProviderConfig::endpoint is empty.
inline constexpr char kRunPodEndpoint[] = "https://api.runpod.io";           // + /graphql
inline constexpr char kLambdaEndpoint[] = "https://cloud.lambda.ai";         // + /api/v1/...
inline constexpr char kPaperspaceEndpoint[] = "https://api.paperspace.com";  // + /v1/machines
inline constexpr char kVastEndpoint[] = "https://console.vast.ai";           // + /api/v0/...

struct RetryOptions {
  int max_attempts = 5;  // of one logical call, the first included
  std::chrono::milliseconds initial_backoff{500};
  std::chrono::milliseconds max_backoff{20000};
  std::chrono::milliseconds max_elapsed{60000};  // no retry starts after this much time
  // A Retry-After longer than this is not waited for: the call fails kRateLimited with it.
  std::chrono::milliseconds max_retry_after{30000};
};

struct ProviderConfig {
  std::string name;      // kRunPod, kLambda, kPaperspace or kVast
  std::string endpoint;  // base URL override ("http://127.0.0.1:4100"); empty: the public one
  std::shared_ptr<CredentialSource> credentials;  // required
  RetryOptions retry;
  // Client-side rate limit; unset: the provider's documented limit (see each client's header).
  std::optional<double> requests_per_second;
  std::optional<int> burst;
  std::chrono::milliseconds request_timeout{30000};
  // CA bundle (PEM) for a private endpoint; empty: the system roots.
  std::string ca_pem;
  // Paperspace only: a price table (YAML, same shape as the built-in one) that replaces entries of
  // the built-in table; empty: the built-in table alone.
  std::string price_table_yaml;
  Clock* clock = &RealClock();
  kube::metrics::Registry* metrics = nullptr;  // nullptr: the process-wide registry
  uint64_t seed = 0;                           // jitter RNG seed; 0: random
};

// Errors: kInvalidArgument for an unknown name, a bad endpoint or a bad price table.
Result<std::unique_ptr<Provider>> NewProvider(const ProviderConfig& config);

}  // namespace hyperslice::gpu
