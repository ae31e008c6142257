// The one HTTP stack of hyperslice: Boost.Beast over Boost.Asio, TLS by OpenSSL.
// (See docs/adr/0001-http-json-threading.md for why.)
//
// HttpClient: blocking calls on the caller's thread, keep-alive connection pool, per-request
// timeouts, streamed bodies for watches. Thread-safe: any number of threads may call Do()/Stream()
// on one client at once; each call uses its own pooled connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::net {

// Trust and identity for a TLS connection. PEM strings, not paths: callers read files so that
// kubeconfig's *-data and *-file forms end up the same.
struct TlsConfig {
  std::string ca_pem;           // trust anchors; empty means the system's default roots
  std::string client_cert_pem;  // optional client certificate (mTLS)
  std::string client_key_pem;
  std::string server_name;  // overrides the name verified and sent as SNI
  bool insecure_skip_verify = false;
};

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method = "GET";
  std::string target;  // origin-form: path and query, e.g. "/api/v1/pods?limit=500"
  Headers headers;
  std::string body;
  std::chrono::milliseconds timeout{30000};  // whole exchange, connect included
  // For requests that must not be sent twice (a create without an idempotency key): use a new
  // connection and never re-send. Without it, a pooled connection that fails on first use is
  // retried once on a new one — right for a stale keep-alive connection, wrong when the server
  // took the request and the answer was lost.
  bool fresh_connection = false;
};

struct Response {
  int status = 0;
  Headers headers;  // names lower-cased
  std::string body;
  // First value of a header (name matched case-insensitively), or "".
  std::string Header(std::string_view name) const;
};

// A response whose body is read piece by piece (watch streams, long polls).
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  virtual int status() const = 0;
  virtual const Headers& headers() const = 0;
  // Reads the next part of the body as the server sends it (chunked encoding removed). An empty
  // string means the body has ended cleanly. Errors: kTimeout when nothing arrived for the idle
  // timeout, kCancelled after Cancel(), kUnavailable when the connection broke mid-body.
  virtual Result<std::string> Next() = 0;
  // Ends the stream from any thread; a blocked Next() returns kCancelled promptly.
  virtual void Cancel() = 0;
};

class HttpClient {
 public:
  struct Options {
    std::string base_url;  // "https://127.0.0.1:6443" or "http://host:port"; a path prefix is kept
    TlsConfig tls;
    std::chrono::milliseconds connect_timeout{10000};
    size_t max_idle_connections = 16;
    std::string user_agent = "hyperslice";
  };
  virtual ~HttpClient() = default;

  // Validates the URL and builds the TLS context (bad PEM is an error here, not at first use).
  static Result<std::shared_ptr<HttpClient>> Create(Options options);

  // One request/response exchange. HTTP error statuses are not errors here: callers map them.
  // Transport failures are kUnavailable (connection refused, reset, TLS failure) or kTimeout.
  virtual Result<Response> Do(const Request& request) = 0;

  // Sends the request and returns once the status line and headers arrived. `idle_timeout`
  // bounds each Next() of the returned stream.
  virtual Result<std::unique_ptr<ResponseStream>> Stream(
      const Request& request, std::chrono::milliseconds idle_timeout) = 0;

  virtual const Options& options() const = 0;
};

// Error::reason of a transport failure while connecting (TCP or TLS handshake): nothing of the
// request was sent, so even a request that must not be sent twice can be retried.
inline constexpr char kReasonConnectFailed[] = "ConnectFailed";

// Percent-encodes a query parameter value or path segment (RFC 3986 unreserved kept).
std::string UrlEncode(std::string_view s);

}  // namespace hyperslice::net
