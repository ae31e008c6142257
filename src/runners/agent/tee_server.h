// The token server a sealed runner's agent gives each container (sealed::kTeeServerSocket inside,
// a unix socket in the pod's directory outside): HTTP/1.1, one request per connection,
// `POST /v1/token` with {"audience": "...", "nonces": ["..."]} answered 200 with the JWT as
// text/plain, or 400/403/404/503 with a one-line reason. Like Confidential Space's launcher
// teeserver: the workload's identity is the socket it reached, never something it claims.
// With a relay, also `POST /kbs/v0/resource/<name>` (the key broker's request, kbs_relay.h):
// forwarded with its Authorization header and body, answered with the broker's status and body.
//
// Thread-safety: one accept thread per server; Stop() (and the destructor) joins it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "src/base/result.h"
#include "src/runners/agent/kbs_relay.h"

namespace hyperslice::runners::agent {

struct TokenAsk {
  std::string audience;
  std::vector<std::string> nonces;
  std::string tee_pubkey_sha256;  // optional: hex SHA-256 of a key the workload holds
};

class TeeServer {
 public:
  using Issue = std::function<Result<std::string>(const TokenAsk&)>;
  using Relay = std::function<Result<KbsAnswer>(const KbsAsk&)>;
  // Listens on `socket_path` (an old socket file is replaced; the file is 0666 so a container's
  // non-root user reaches it); `relay` null: no key-broker path. Errors: kInternal (cannot bind).
  static Result<std::unique_ptr<TeeServer>> Start(std::string socket_path, Issue issue,
                                                  Relay relay = nullptr);
  ~TeeServer();
  TeeServer(const TeeServer&) = delete;
  TeeServer& operator=(const TeeServer&) = delete;
  void Stop();

  // Parses a request body: audience required (at most 512 bytes), at most 6 nonces of 8 to 74
  // bytes each (Confidential Space's limits), tee_pubkey_sha256 absent or 64 lowercase hex.
  // Errors: kInvalidArgument naming the field.
  static Result<TokenAsk> ParseAsk(std::string_view body);

 private:
  TeeServer(std::string path, Issue issue, Relay relay, int fd);
  void Loop();
  void Serve(int conn);
  std::string path_;
  Issue issue_;
  Relay relay_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace hyperslice::runners::agent
