// One-time join tokens for Runners, kept as Secrets in the operator's namespace.
//
// For a Runner that never linked, the runner controller mints one Secret
//   <namespace>/runner-join-<runner name>   type runners.hyperslice.dev/join-token
//   data: token (64 hex characters), runner, expiration (RFC 3339)
// owner-referenced to the Runner (garbage-collected with it). The admin hands the token to the
// host (`hyperslice runner-agent --join-token ...`); the link controller checks it through
// Consume(), which is one-time: it deletes the Secret with a uid + resourceVersion precondition
// (of two concurrent consumers exactly one wins), then records kJoinTokenConsumedAnnotation on the
// Runner so no new token is minted for a runner about to link. Token values are never logged, nor
// written to Events or statuses.
//
// link::JoinTokenStore is the seam the link protocol (src/runners/link) calls; this is its
// Secrets implementation (refusals carry reason link::kReasonJoinTokenRefused). Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "src/base/result.h"
#include "src/kube/client.h"
#include "src/runners/link/link.h"

namespace hyperslice::runners::controlnode {

inline constexpr char kJoinTokenSecretType[] = "runners.hyperslice.dev/join-token";
std::string JoinTokenSecretName(const std::string& runner);

// The link protocol's seam (src/runners/link/link.h).
using JoinTokenStore = link::JoinTokenStore;

class SecretJoinTokens final : public JoinTokenStore {
 public:
  SecretJoinTokens(std::shared_ptr<kube::Client> client, std::string ns,
                   std::chrono::seconds ttl = std::chrono::hours(24));

  // Mints the Runner's token Secret when it has none (or only an expired one). Returns whether
  // one was created.
  Result<bool> Ensure(const kube::Object& runner);
  // The token of the Runner's unexpired Secret, for handing it to a host the operator creates
  // (gce_runner.h); nullopt when there is none. The caller must not log it.
  Result<std::optional<std::string>> Token(const std::string& runner);
  // Deletes the Runner's token Secret if present (the runner linked).
  Status Remove(const std::string& runner);
  // OK exactly once per minted token; kUnauthorized (reason link::kReasonJoinTokenRefused) when
  // the token is unknown, wrong, expired or already used.
  Status Consume(const std::string& runner, const std::string& token) override;

  const std::string& ns() const { return ns_; }

 private:
  std::shared_ptr<kube::Client> client_;
  std::string ns_;
  std::chrono::seconds ttl_;
};

}  // namespace hyperslice::runners::controlnode
