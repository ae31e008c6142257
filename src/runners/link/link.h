// Linking a runner host to the cluster (ARCHITECTURE.md §9, issue 20): the runners CA, one-time
// join tokens, the RunnerLink gRPC server the operator runs, and the client side
// `hyperslice runner-agent` uses to get and rotate its identity.
//
// Identities, all issued by the runners CA (ECDSA P-256, SHA-256):
//   runner agent   CN = runner name, O = kRunnerOrganization, SAN = the host of the address the
//                  agent serves on, serverAuth + clientAuth, short-lived (default 24 h), renewed
//                  at 2/3 of its lifetime over mutual TLS with the current certificate.
//   control node   CN = control node name, O = kControlNodeOrganization, clientAuth: the only
//                  identity a runner agent answers (IssueControlNodeClientCert).
// Private keys are made where they are used: an agent sends a CSR, never a key.
//
// Thread-safety: free functions are thread-safe; LinkServer and JoinTokenStore implementations are
// called from gRPC's threads concurrently.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>

#include "src/base/result.h"
#include "src/net/pki.h"

namespace hyperslice::runners::link {

// Subject organisations of the two identities (Kubernetes-style "group" names).
inline constexpr char kRunnerOrganization[] = "runners.hyperslice.dev:runners";
inline constexpr char kControlNodeOrganization[] = "runners.hyperslice.dev:control-nodes";
// Error::reason of a refused join token and of a refused renewal.
inline constexpr char kReasonJoinTokenRefused[] = "JoinTokenRefused";
inline constexpr char kReasonIdentityRefused[] = "IdentityRefused";

// The Error for a failed gRPC call to a link server or an agent: the code mapped (UNAVAILABLE ->
// kUnavailable, DEADLINE_EXCEEDED -> kTimeout, INVALID_ARGUMENT/FAILED_PRECONDITION ->
// kInvalidArgument, ...), `what` before the message, and as reason the kReason* the server named
// or "grpc:<code>".
Error FromGrpc(const grpc::Status& s, const std::string& what);

// A new runners CA (self-signed, ten years by default).
Result<net::pki::KeyPair> MakeRunnersCa(std::chrono::seconds validity = std::chrono::hours(24 *
                                                                                           3650));

// The control node's client identity towards runner agents: CN = `control_node`,
// O = kControlNodeOrganization, clientAuth only.
Result<net::pki::KeyPair> IssueControlNodeClientCert(
    const net::pki::KeyPair& ca, const std::string& control_node,
    std::chrono::seconds validity = std::chrono::hours(24 * 30));

// The link server's own serving certificate (serverAuth, SAN = `host`, an IP or DNS name).
Result<net::pki::KeyPair> IssueLinkServerCert(
    const net::pki::KeyPair& ca, const std::string& host,
    std::chrono::seconds validity = std::chrono::hours(24 * 365));

// True when `cert_pem` names O = kControlNodeOrganization (signature checks are the caller's).
bool IsControlNodeIdentity(const std::string& cert_pem);

// "host:port" or "[v6]:port" -> host (without brackets). Errors: kInvalidArgument.
Result<std::string> HostOf(const std::string& address);

// One-time join tokens. Consume succeeds at most once per token; a refusal carries
// reason kReasonJoinTokenRefused and a message saying why (unknown, expired, used, other runner)
// without the token itself.
class JoinTokenStore {
 public:
  virtual ~JoinTokenStore() = default;
  virtual Status Consume(const std::string& runner, const std::string& token) = 0;
};

// For tests and single-process setups. Thread-safe.
class MemoryJoinTokenStore : public JoinTokenStore {
 public:
  void Add(
      const std::string& runner, const std::string& token,
      std::chrono::system_clock::time_point expires = std::chrono::system_clock::time_point::max());
  Status Consume(const std::string& runner, const std::string& token) override;

 private:
  struct Entry {
    std::string runner;
    std::chrono::system_clock::time_point expires;
    bool used = false;
  };
  std::mutex mu_;
  std::map<std::string, Entry> tokens_;  // by token
};

// What the link server reports after issuing a certificate (Link or Renew).
struct LinkedRunner {
  std::string runner_name;
  std::string agent_address;
  std::string certificate_pem;
  std::chrono::system_clock::time_point not_after;
  bool renewal = false;
};

// A workload's request for an attestation token (sealed runners, issue 21), as the link server
// passes it on: `runner` is the identity of the mutual-TLS session, never the request's.
struct AttestationTokenRequest {
  std::string runner;
  std::string pod_uid;
  std::string container;
  std::string audience;
  std::vector<std::string> nonces;
  std::string tee_pubkey_sha256;  // "" or 64 lowercase hex (the workload's key binding)
};
// Issues the token or refuses (kForbidden with a reason; the server answers PERMISSION_DENIED).
using AttestationTokenIssuer = std::function<Result<std::string>(const AttestationTokenRequest&)>;

// The RunnerLink gRPC server. TLS with `serving`; client certificates are requested and, when
// sent, verified against the CA: Link needs none (the join token authenticates), Renew needs the
// runner's current certificate.
class LinkServer {
 public:
  struct Options {
    std::string listen = "127.0.0.1:0";  // host:port; port 0 picks one
    net::pki::KeyPair ca;                // the runners CA (signs agents' CSRs)
    net::pki::KeyPair serving;           // this server's certificate
    JoinTokenStore* tokens = nullptr;    // not owned; must outlive the server
    std::chrono::seconds validity{std::chrono::hours(24)};
    std::function<void(const LinkedRunner&)> on_linked;  // optional, called on gRPC threads
    // AttestationToken: absent -> UNIMPLEMENTED (no sealed runners served here).
    AttestationTokenIssuer attestation_tokens;
  };
  virtual ~LinkServer() = default;
  static Result<std::unique_ptr<LinkServer>> Start(Options options);
  virtual int port() const = 0;
  // Idempotent; also done by the destructor.
  virtual void Stop() = 0;
};

// ---- agent side ------------------------------------------------------------------------------

// The agent's identity as persisted under <state_dir>/identity (files 0600, directory 0700).
struct AgentIdentity {
  std::string cert_pem;
  std::string key_pem;
  std::string ca_pem;  // the runners CA: verifies control nodes
  std::chrono::system_clock::time_point obtained;
  std::chrono::system_clock::time_point not_after;
};

struct LinkClientOptions {
  std::string endpoint;     // host:port of RunnerLink
  std::string link_ca_pem;  // verifies the link server's certificate
  std::string runner_name;
  std::string agent_address;  // host:port the control node dials
  std::string state_dir;
  std::chrono::milliseconds timeout{15000};
};

// The identity in the state dir; kNotFound when there is none.
Result<AgentIdentity> LoadIdentity(const std::string& state_dir);
// Exchanges the join token and a CSR for a certificate and persists the identity.
Result<AgentIdentity> Link(const LinkClientOptions& options, const std::string& join_token);
// Renews over mutual TLS with `current`; persists and returns the new identity.
Result<AgentIdentity> Renew(const LinkClientOptions& options, const AgentIdentity& current);
// A workload's attestation token through the link controller (mutual TLS with `current`); the
// request's runner is ignored (the session names it). Errors: FromGrpc's.
Result<std::string> RequestAttestationToken(const LinkClientOptions& options,
                                            const AgentIdentity& current,
                                            const AttestationTokenRequest& request);
// When to renew: 2/3 of the way from when it was obtained to its expiry.
std::chrono::system_clock::time_point RenewalTime(const AgentIdentity& identity);

}  // namespace hyperslice::runners::link
