// The kubelet API a control node serves, so that `kubectl logs` and `kubectl exec` through a real
// kube-apiserver reach pods that run on linked runners (as virtual-kubelet's API server does).
//
// The apiserver calls a Node's kubelet at status.addresses (InternalIP with
// --kubelet-preferred-address-types=InternalIP) and status.daemonEndpoints.kubeletEndpoint.Port,
// presenting its --kubelet-client-certificate. The server here speaks what the kubelet speaks:
//   GET  /healthz
//   GET  /containerLogs/{namespace}/{pod}/{container}?follow&tailLines&sinceSeconds&sinceTime
//        &timestamps&limitBytes&previous            (chunked text/plain, streamed)
//   POST|GET /exec/{namespace}/{pod}[/{uid}]/{container}?command=..&input&output&error&tty
//        upgraded to SPDY/3.1 (X-Stream-Protocol-Version v5/v4/v3/v2.channel.k8s.io: what
//        kube-apiserver 1.36 dials by default, translating kubectl's WebSocket) or to a
//        WebSocket (v5/v4.channel.k8s.io: what it proxies when the Node declares
//        ExtendWebSocketsToKubelet)
//   /attach, /portForward: Backend::AdmitUnsupported's refusal (403 on sealed control nodes), else
//   501 with a Status saying they are not supported; anything else: 404.
// Mutual TLS as the kubelet's --client-ca-file: a client without a certificate that verifies
// against the client CA gets 401; the certificate's CN is the user and its O the groups. An
// optional Authorizer sees the attributes the kubelet's webhook authorizer asks a
// SubjectAccessReview about (verb from the method; resource "nodes"; subresource "proxy" for logs
// and exec) and may refuse with 403.
//
// Thread-safety: a Server is safe to use from any thread. Backend methods are called on a thread
// of their own per request (never an I/O thread) and may block; several run concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::runners::kubeletapi {

// What `kubectl logs` asked for (the kubelet's query parameters, parsed).
struct LogOptions {
  bool follow = false;
  std::optional<int64_t> tail_lines;
  std::optional<int64_t> since_seconds;
  std::string since_time;  // RFC 3339, "" when not given
  bool timestamps = false;
  std::optional<int64_t> limit_bytes;  // the server also truncates the stream at this size
  bool previous = false;
};

// Where a backend writes a container's log. Write blocks while the client reads slower than the
// backend writes (bounded buffering) and returns false once the client has gone away or
// limitBytes is reached: the backend then stops and returns.
class LogSink {
 public:
  virtual ~LogSink() = default;
  virtual bool Write(std::string_view chunk) = 0;
  virtual bool Cancelled() const = 0;
  // Sleeps up to `timeout` (a follow loop's poll); returns early, true, when cancelled.
  virtual bool WaitCancelled(std::chrono::milliseconds timeout) = 0;
};

struct ExecRequest {
  std::string namespace_name;
  std::string pod;
  std::string uid;  // "" when the URL carried none
  std::string container;
  std::vector<std::string> command;
  bool with_stdin = false;   // query input=1
  bool with_stdout = false;  // output=1
  bool with_stderr = false;  // error=1
  bool tty = false;
};

struct TerminalSize {
  uint16_t width = 0;
  uint16_t height = 0;
};

struct ExecInput {
  enum class Kind {
    kStdin,     // `data` holds bytes for the command's stdin
    kStdinEof,  // the client closed stdin
    kResize,    // `size` holds the new terminal size (tty only)
    kTimeout,   // nothing arrived within the timeout
    kGone,      // the client went away: stop the command
  };
  Kind kind = Kind::kTimeout;
  std::string data;
  TerminalSize size;
};

// One exec's streams. Thread-safe: input may be read on one thread while output is written on
// others. Writes block while the client is slower (bounded buffering) and return false once the
// client has gone away (or the stream was not requested).
class ExecSession {
 public:
  virtual ~ExecSession() = default;
  virtual ExecInput ReadInput(std::chrono::milliseconds timeout) = 0;
  virtual bool WriteStdout(std::string_view data) = 0;
  virtual bool WriteStderr(std::string_view data) = 0;  // with tty, merged into stdout
  virtual bool Cancelled() const = 0;
};

// What the control node implements (it forwards to the runner agent running the pod).
class Backend {
 public:
  virtual ~Backend() = default;

  // Streams a container's log into `sink` until done (or, with follow, until the sink is
  // cancelled). An error returned before anything was written becomes the HTTP answer
  // (NotFound: 404, Forbidden: 403, InvalidArgument: 400, else 500); after, it ends the stream.
  virtual Status Logs(const std::string& namespace_name, const std::string& pod,
                      const std::string& container, const LogOptions& options, LogSink& sink) = 0;

  // Called before the upgrade: an error refuses the exec with its HTTP status and a Kubernetes
  // Status. kubectl prints its message (through kube-apiserver 1.36's WebSocket translation:
  // "error: Internal error occurred: unable to upgrade connection: <message>"). Sealed runners
  // refuse here. The default admits every exec.
  virtual Status AdmitExec(const ExecRequest& request) {
    (void)request;
    return OkStatus();
  }

  // Called for /attach/{ns}/{pod}/… and /portForward/{ns}/{pod} (`kind` "attach" or
  // "portForward"), which linked runners do not serve: an error refuses with its HTTP status (a
  // sealed control node answers 403 with why); otherwise the answer is 501.
  virtual Status AdmitUnsupported(const std::string& kind, const std::string& namespace_name,
                                  const std::string& pod) {
    (void)kind;
    (void)namespace_name;
    (void)pod;
    return OkStatus();
  }

  // Runs the command with its streams on `session`; returns its exit code (0-255). An error
  // ends the exec with a Failure Status carrying the error's message and reason (e.g. Forbidden).
  virtual Result<int> Exec(const ExecRequest& request, ExecSession& session) = 0;
};

// Who called, from the client certificate.
struct UserInfo {
  std::string name;                 // subject CN
  std::vector<std::string> groups;  // subject O
};

// The kubelet's authorization attributes for a request (pkg/kubelet/server/auth.go): verb from
// the method (GET/HEAD: get, POST: create, PUT: update, PATCH: patch, DELETE: delete), resource
// "nodes", name the Node, subresource from the path (/containerLogs, /exec, /attach,
// /portForward: proxy; /healthz: healthz; /logs: log; /stats: stats; /metrics: metrics).
struct RequestAttributes {
  UserInfo user;
  std::string verb;
  std::string resource = "nodes";
  std::string subresource;
  std::string name;  // the Node's name
  std::string path;
};

// Allows (OkStatus) or refuses (an error; its message is shown with the 403) a request. Called on
// the request's own thread; may block (a SubjectAccessReview).
using Authorizer = std::function<Status(const RequestAttributes&)>;

struct ServerOptions {
  std::string address = "127.0.0.1";
  uint16_t port = 0;  // 0 picks a free port; see Server::port()
  // Serving certificate chain and key (PEM files), re-read when they change (checked at most once
  // a second, on accept), so rotation needs no restart.
  std::string cert_file;
  std::string key_file;
  // CA bundle (PEM) client certificates must verify against: the cluster's client CA
  // (kube-system/extension-apiserver-authentication client-ca-file), which signs the apiserver's
  // --kubelet-client-certificate. Required.
  std::string client_ca_pem;
  std::string node_name;  // the Node this server fronts (authorization attribute `name`)
  Authorizer authorize;   // empty: every authenticated client is allowed
  int threads = 2;
  // How long an exec waits for the client to open its streams after the upgrade.
  std::chrono::milliseconds stream_creation_timeout{30000};
};

class Server {
 public:
  virtual ~Server() = default;  // Stop()

  static Result<std::unique_ptr<Server>> Start(ServerOptions options,
                                               std::shared_ptr<Backend> backend);

  virtual uint16_t port() const = 0;
  // Replaces the client CA (the ConfigMap changed); connections made afterwards verify against it.
  virtual Status SetClientCa(const std::string& client_ca_pem) = 0;
  // Stops accepting, cancels streaming requests (their sinks and sessions report cancellation),
  // waits up to `grace` for backend calls to return, then closes everything. Idempotent.
  virtual void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000)) = 0;
};

}  // namespace hyperslice::runners::kubeletapi
