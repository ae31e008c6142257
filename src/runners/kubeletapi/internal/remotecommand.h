// The remotecommand protocol's transport-independent parts (k8s.io/apimachinery
// util/remotecommand, client-go tools/remotecommand): protocol names and negotiation, the Status
// objects the error stream carries, and the ExecSession the server hands to a Backend.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"
#include "src/runners/kubeletapi/kubeletapi.h"

namespace hyperslice::runners::kubeletapi::internal {

inline constexpr std::string_view kProtocolV5 = "v5.channel.k8s.io";
inline constexpr std::string_view kProtocolV4 = "v4.channel.k8s.io";
inline constexpr std::string_view kProtocolV3 = "v3.channel.k8s.io";
inline constexpr std::string_view kProtocolV2 = "v2.channel.k8s.io";

// The channel numbers of the WebSocket protocol (and the SPDY streamType names' order).
enum Channel : uint8_t { kStdin = 0, kStdout = 1, kStderr = 2, kError = 3, kResize = 4 };

// First protocol of `client` (in the client's order, as httpstream.Handshake does) that `server`
// supports; "" when none. Values may be comma-separated lists.
std::string NegotiateProtocol(const std::vector<std::string>& client,
                              const std::vector<std::string_view>& server);
// 2 for v2, 3 for v3, ...; 0 for anything else.
int ProtocolVersion(std::string_view protocol);

// metav1.Status JSON objects.
std::string SuccessStatusJson();
// Failure, reason NonZeroExitCode, details.causes [{reason: ExitCode, message: "<code>"}]: what
// client-go turns into "command terminated with exit code N".
std::string ExitCodeStatusJson(int exit_code);
// Failure with the error's reason (Forbidden, NotFound, ..., InternalError) and message.
std::string ErrorStatusJson(const Error& error);
// The HTTP status a Kubernetes reason maps to (Forbidden: 403, NotFound: 404, ...).
int HttpStatusFor(const Error& error);
std::string ReasonFor(const Error& error);

// Parses a resize message: one or more JSON objects {"Width":w,"Height":h} (client-go writes one
// per line). Complete objects are appended to `out`; an incomplete tail stays in `buffer`.
void ParseResizes(std::string& buffer, std::vector<TerminalSize>& out);

// Bytes queued for the network and not yet written: backend threads wait here while a slow
// client lets the queue grow past the limit.
class SendWindow {
 public:
  explicit SendWindow(size_t limit) : limit_(limit) {}
  // Waits until the queue is below the limit; false once closed (the client went away).
  bool Acquire(size_t bytes);
  void Release(size_t bytes);
  void Close();
  bool closed() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  size_t limit_;
  size_t queued_ = 0;
  bool closed_ = false;
};

// The ExecSession a transport (SPDY or WebSocket) drives: the transport pushes input from its
// I/O thread; `send` queues output for the client (blocking while the window is full) and
// returns false once the client is gone.
class ExecSessionImpl final : public ExecSession {
 public:
  using Sender = std::function<bool(Channel, std::string_view)>;
  ExecSessionImpl(ExecRequest request, Sender send)
      : request_(std::move(request)), send_(std::move(send)) {}

  void PushStdin(std::string data);
  void PushStdinEof();
  void PushResize(TerminalSize size);
  void SetGone();

  ExecInput ReadInput(std::chrono::milliseconds timeout) override;
  bool WriteStdout(std::string_view data) override;
  bool WriteStderr(std::string_view data) override;
  bool Cancelled() const override;

 private:
  ExecRequest request_;
  Sender send_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ExecInput> input_;
  bool stdin_eof_ = false;
  bool gone_ = false;
};

}  // namespace hyperslice::runners::kubeletapi::internal
