// HttpServer: an asynchronous HTTP/1.1 server (Beast) for the webhook, health/metrics endpoints
// and the cloud simulators. Plain or TLS (1.2+), keep-alive, bounded request bodies, TLS key pair
// re-read from disk when the files change (checked at most once a second, on accept), so
// certificate rotation needs no restart and never drops an in-flight request.
//
// Handlers run on the server's I/O threads and must not block for long; a handler that needs to
// wait (long polls) keeps the Responder and completes it later from any thread.
//
// Optional mutual TLS (Options::client_ca_pem) and connection takeover (Responder::Hijack, for
// protocol upgrades such as SPDY or WebSocket) let a server with its own wire protocol after the
// first request (the control node's kubelet API) share this accept/handshake/request loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/base/result.h"
#include "src/net/http.h"

namespace hyperslice::net {

// Who a verified client certificate names, as Kubernetes' x509 authenticator reads it: the
// subject's CN is the user, its O entries the groups.
struct ClientIdentity {
  std::string name;
  std::vector<std::string> groups;
};

struct ServerRequest {
  std::string method;
  std::string target;                             // as received: path and query
  std::string path;                               // percent-decoded path
  std::multimap<std::string, std::string> query;  // decoded query parameters
  Headers headers;                                // names lower-cased
  std::string body;
  std::string remote_address;
  // Set when the server authenticates clients (Options::client_ca_pem) and this connection's
  // certificate verified against the client CA of the moment it connected.
  std::optional<ClientIdentity> client;
  std::string Header(std::string_view name) const;
  // First value of a query parameter, or "".
  std::string Query(std::string_view name) const;
};

// A connection taken over from the server (src/net/hijack.h).
struct HijackedConnection;
using HijackHandler = std::function<void(HijackedConnection&)>;

// Completes one request. Send() may be called from any thread, once; later calls are ignored.
// A Responder dropped without Send() answers 500 so no client hangs.
// Content-Type is application/json unless `headers` set one; Content-Length and Connection are the
// server's.
class Responder {
 public:
  virtual ~Responder() = default;
  virtual void Send(int status, std::string body, Headers headers = {}) = 0;
  // Closes the connection without any answer (instead of Send). Simulators use it to model a
  // request that reached the service but whose answer was lost: the client sees a reset, not a
  // status, and cannot tell whether the request took effect.
  virtual void Abort() = 0;
  // True once the client has gone away (lets long polls stop early).
  virtual bool ClientGone() const = 0;
  // Instead of Send: takes the connection over, to speak another protocol on it (an upgrade) or
  // stream an answer by hand. `take` runs on the connection's executor, once, with the stream and
  // the bytes already read past the request; from then on the server neither reads, writes, times
  // out nor closes the connection. If the server stops first, `take` may be dropped unrun; a
  // connection the client closed is handed over closed (its first read or write fails).
  virtual void Hijack(HijackHandler take) = 0;
};

using Handler = std::function<void(const ServerRequest&, std::shared_ptr<Responder>)>;

struct ServerTlsFiles {
  std::string cert_file;  // PEM chain
  std::string key_file;   // PEM private key
};

class HttpServer {
 public:
  struct Options {
    std::string address = "127.0.0.1";
    uint16_t port = 0;  // 0 picks a free port; see port()
    int threads = 1;
    std::optional<ServerTlsFiles> tls;
    size_t max_body_bytes = size_t{8} * 1024 * 1024;  // larger bodies get 413
    std::chrono::milliseconds idle_timeout{60000};
    std::chrono::milliseconds read_timeout{30000};  // TLS handshake; header+body of one request
    // Mutual TLS (with `tls` only): a client certificate is requested, not required. One that
    // verifies (for client authentication) against this CA bundle names ServerRequest::client;
    // without one the request still reaches the handler, which answers it (e.g. 401, as the
    // kubelet does, rather than a TLS alert). Checked once per connection, after the handshake;
    // session resumption is off so that every connection presents its certificate.
    std::optional<std::string> client_ca_pem;
  };
  virtual ~HttpServer() = default;

  static Result<std::unique_ptr<HttpServer>> Start(Options options, Handler handler);

  virtual uint16_t port() const = 0;
  // Stops accepting, lets in-flight requests finish for up to `grace`, then closes everything.
  // Idempotent; also called by the destructor.
  virtual void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000)) = 0;
  // Number of times the TLS key pair was (re)loaded; 1 after Start with TLS.
  virtual int tls_generation() const = 0;
  // Replaces the client CA (Options::client_ca_pem); connections made afterwards verify against
  // it. An error (no certificate in `pem`) keeps the previous one.
  virtual Status SetClientCa(const std::string& pem) = 0;
};

}  // namespace hyperslice::net
