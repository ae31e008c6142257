// The kubelet API server on the project's HTTP server (src/net): it accepts, does the TLS
// handshake (with a client certificate requested and verified against the client CA), reads
// requests and answers the short ones; streamed log responses and exec connections upgraded to
// SPDY/3.1 or WebSocket take the connection over from it (Responder::Hijack).
//
// Each request is a Call. Backend calls (and the Authorizer) run on a thread of their own per
// request; once a Call holds the connection, everything touching its socket runs on the
// connection's executor (a strand), and backend output is posted there through a bounded
// SendWindow, which blocks the backend while the client is slow and releases it (false) once the
// client is gone.
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <boost/url/parse.hpp>

#include "src/base/log.h"
#include "src/base/strings.h"
#include "src/net/hijack.h"
#include "src/net/server.h"
#include "src/runners/kubeletapi/internal/remotecommand.h"
#include "src/runners/kubeletapi/internal/spdy.h"
#include "src/runners/kubeletapi/kubeletapi.h"

namespace hyperslice::runners::kubeletapi {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using internal::Channel;

using TlsStream = beast::ssl_stream<beast::tcp_stream>;
using WsStream = websocket::stream<TlsStream>;

constexpr size_t kWindowBytes = size_t{1} << 20;   // output queued per connection before blocking
constexpr size_t kMaxChunk = size_t{32} * 1024;    // bytes per DATA frame / WebSocket message
constexpr auto kLinger = std::chrono::seconds(5);  // wait for the client to close after an exec

bool ParseBool(std::string_view v) {
  return v == "1" || v == "t" || v == "T" || v == "true" || v == "TRUE" || v == "True";
}

// ---- HTTP answers --------------------------------------------------------------------------

// The kubelet's headers on a whole answer (net adds Content-Length and Connection).
net::Headers AnswerHeaders(std::string_view content_type) {
  return {{"Content-Type", std::string(content_type)}, {"X-Content-Type-Options", "nosniff"}};
}

std::string Chunk(std::string_view data) {
  char size[16];
  int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out(size, static_cast<size_t>(n));
  out += data;
  out += "\r\n";
  return out;
}

// The kubelet's authorization attributes for a path and method (pkg/kubelet/server/auth.go).
std::string VerbFor(std::string_view method) {
  if (method == "POST") return "create";
  if (method == "PUT") return "update";
  if (method == "PATCH") return "patch";
  if (method == "DELETE") return "delete";
  return "get";
}

std::string SubresourceFor(std::string_view path) {
  auto under = [&](std::string_view prefix) {
    return path == prefix || path.substr(0, prefix.size() + 1) == std::string(prefix) + "/";
  };
  if (under("/stats")) return "stats";
  if (under("/metrics")) return "metrics";
  if (under("/logs")) return "log";
  if (under("/healthz")) return "healthz";
  if (under("/configz")) return "configz";
  if (under("/pods")) return "pods";
  return "proxy";
}

// ---- server state --------------------------------------------------------------------------

class Call;

struct State : std::enable_shared_from_this<State> {
  explicit State(ServerOptions o) : options(std::move(o)) {}

  ServerOptions options;
  std::shared_ptr<Backend> backend;
  std::atomic<bool> stopping{false};

  std::mutex workers_mu;
  std::condition_variable workers_cv;
  int workers = 0;

  // Calls in progress, so Stop() can cancel them (their sinks and sessions report it).
  std::mutex calls_mu;
  std::vector<std::weak_ptr<Call>> calls;

  // Runs `fn` on a thread of its own, counted so Stop() can wait for backend calls.
  template <typename Fn>
  void RunWorker(Fn fn) {
    {
      std::lock_guard lock(workers_mu);
      workers++;
    }
    std::thread([self = shared_from_this(), fn = std::move(fn)]() mutable {
      try {
        fn();
      } catch (const std::exception& e) {
        log::Error("kubelet API: request handler threw", {{"error", e.what()}});
      } catch (...) {
        log::Error("kubelet API: request handler threw", {});
      }
      std::lock_guard lock(self->workers_mu);
      self->workers--;
      self->workers_cv.notify_all();
    }).detach();
  }
};

struct Request {
  std::string method;
  std::string path;
  std::vector<std::string> segments;  // decoded path segments
  std::multimap<std::string, std::string> query;
  std::string Query(const std::string& name) const {
    auto it = query.find(name);
    return it == query.end() ? std::string() : it->second;
  }
  bool Has(const std::string& name) const { return query.count(name) > 0; }
};

// ---- one request ---------------------------------------------------------------------------

class Call : public std::enable_shared_from_this<Call> {
 public:
  Call(std::shared_ptr<State> state, net::ServerRequest http, std::shared_ptr<net::Responder> r)
      : state_(std::move(state)),
        http_(std::move(http)),
        responder_(std::move(r)),
        window_(kWindowBytes) {}

  // From any thread: cancels the call and closes its connection if it holds it.
  void Close() {
    MarkGone();
    std::lock_guard lock(mu_);
    if (adopted_) asio::post(ex_, [self = shared_from_this()] { self->CloseNow(); });
  }

 private:
  enum class After { kNone, kClose, kLinger, kWsClose };
  struct Pending {
    std::string bytes;
    size_t window = 0;  // bytes to give back to the window once written
    After after = After::kNone;
  };

 public:
  // On a worker thread.
  void Handle(const Request& req) {
    RequestAttributes attrs;
    attrs.user.name = http_.client->name;
    attrs.user.groups = http_.client->groups;
    attrs.verb = VerbFor(req.method);
    attrs.subresource = SubresourceFor(req.path);
    attrs.name = state_->options.node_name;
    attrs.path = req.path;
    if (state_->options.authorize) {
      Status allowed = state_->options.authorize(attrs);
      if (!allowed.ok()) {
        std::string msg = "Forbidden (user=" + attrs.user.name + ", verb=" + attrs.verb +
                          ", resource=" + attrs.resource + ", subresource=" + attrs.subresource +
                          ")";
        if (!allowed.error().message.empty()) msg += ": " + allowed.error().message;
        return Answer(403, "text/plain; charset=utf-8", msg + "\n");
      }
    }
    const auto& seg = req.segments;
    std::string first = seg.empty() ? std::string() : seg[0];
    if (first == "healthz" && seg.size() == 1) return Answer(200, "text/plain", "ok");
    if (first == "containerLogs" && seg.size() == 4 &&
        (req.method == "GET" || req.method == "HEAD")) {
      return HandleLogs(req);
    }
    if (first == "exec" && (seg.size() == 4 || seg.size() == 5) &&
        (req.method == "GET" || req.method == "POST")) {
      return HandleExec(req);
    }
    if (first == "attach" || first == "portForward") {
      if (seg.size() >= 3) {
        Status admitted = OkStatus();
        try {
          admitted = state_->backend->AdmitUnsupported(first, seg[1], seg[2]);
        } catch (const std::exception& e) {
          admitted = Error::Make(Error::Code::kInternal,
                                 std::string("kubelet backend failed: ") + e.what());
        }
        if (!admitted.ok()) {
          return Answer(internal::HttpStatusFor(admitted.error()), "application/json",
                        internal::ErrorStatusJson(admitted.error()));
        }
      }
      Error e = Error::Make(Error::Code::kUnknown,
                            first +
                                " is not supported by this node: its pods run on linked "
                                "runners, which serve logs and exec only",
                            "NotImplemented", 501);
      return Answer(501, "application/json", internal::ErrorStatusJson(e));
    }
    Answer(404, "text/plain; charset=utf-8", "404 page not found\n");
  }

  // A whole answer from a worker, through the HTTP server (which keeps the connection for the
  // next request unless the client asked to close it).
  void Answer(int status, std::string_view type, std::string_view body) {
    responder_->Send(status, std::string(body), AnswerHeaders(type));
  }

 private:
  // From a worker: takes the connection over from the HTTP server for a streamed answer or an
  // upgrade, and waits until this call holds it. False when the call was cancelled or the server
  // stopped first (the connection is then closed, or answered 500 by the server).
  bool TakeOver() {
    if (gone_) return false;
    auto adopted = std::make_shared<std::promise<void>>();
    auto done = adopted->get_future();
    responder_->Hijack([self = shared_from_this(), adopted](net::HijackedConnection& conn) {
      self->Adopt(conn);
      adopted->set_value();
    });
    try {
      done.get();
    } catch (const std::future_error&) {  // dropped unrun: the server stopped
      MarkGone();
      return false;
    }
    return !gone_;
  }

  // On the connection's executor.
  void Adopt(net::HijackedConnection& conn) {
    owner_ = std::move(conn.owner);
    tls_.emplace(std::move(*conn.tls));
    buffer_ = std::move(conn.buffer);
    {
      std::lock_guard lock(mu_);
      ex_ = tls_->get_executor();
      linger_.emplace(ex_);
      adopted_ = true;
    }
    if (gone_) CloseNow();  // cancelled (Stop) while the connection was being handed over
  }

  // ---- logs ----

  class Sink final : public LogSink {
   public:
    Sink(Call& c, std::optional<int64_t> limit) : c_(c), limit_(limit) {}
    bool Write(std::string_view chunk) override {
      if (Cancelled()) return false;
      if (limit_) {
        if (written_ >= *limit_) return false;
        chunk = chunk.substr(0, static_cast<size_t>(*limit_ - written_));
      }
      if (!started_ && !Begin()) return false;
      while (!chunk.empty()) {
        std::string_view piece = chunk.substr(0, kMaxChunk);
        chunk.remove_prefix(piece.size());
        std::string bytes = Chunk(piece);
        if (!c_.window_.Acquire(bytes.size())) return false;
        written_ += static_cast<int64_t>(piece.size());
        size_t n = bytes.size();
        c_.Post(std::move(bytes), n, After::kNone);
      }
      return !(limit_ && written_ >= *limit_);
    }
    bool Cancelled() const override { return c_.gone_.load(); }
    bool WaitCancelled(std::chrono::milliseconds timeout) override {
      std::unique_lock lock(c_.mu_);
      c_.cv_.wait_for(lock, timeout, [&] { return c_.gone_.load(); });
      return c_.gone_.load();
    }
    // Takes the connection and starts the streamed answer; false when the client is gone.
    bool Begin() {
      started_ = true;
      if (!c_.TakeOver()) return false;
      c_.Post(
          "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
          "X-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n",
          0, After::kNone);
      asio::post(c_.ex_, [self = c_.shared_from_this()] { self->WatchForHangUp(); });
      return true;
    }
    bool started() const { return started_; }

   private:
    Call& c_;
    std::optional<int64_t> limit_;
    int64_t written_ = 0;
    bool started_ = false;
  };

  void HandleLogs(const Request& req) {
    LogOptions o;
    o.follow = ParseBool(req.Query("follow"));
    o.timestamps = ParseBool(req.Query("timestamps"));
    o.previous = ParseBool(req.Query("previous"));
    o.since_time = req.Query("sinceTime");
    for (auto [name, field] :
         {std::pair{"tailLines", &o.tail_lines}, std::pair{"sinceSeconds", &o.since_seconds},
          std::pair{"limitBytes", &o.limit_bytes}}) {
      if (!req.Has(name)) continue;
      std::string v = req.Query(name);
      char* end = nullptr;
      errno = 0;
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno != 0 || n < 0 ||
          (n == 0 && std::string_view(name) != "tailLines")) {
        Error e = Error::Make(Error::Code::kInvalidArgument,
                              std::string("invalid ") + name + " \"" + v + "\"");
        return Answer(400, "application/json", internal::ErrorStatusJson(e));
      }
      *field = n;
    }
    Sink sink(*this, o.limit_bytes);
    Status st = OkStatus();
    try {
      st = state_->backend->Logs(req.segments[1], req.segments[2], req.segments[3], o, sink);
    } catch (const std::exception& e) {
      st = Error::Make(Error::Code::kInternal, std::string("log backend failed: ") + e.what());
    }
    if (!sink.started()) {
      if (!st.ok()) {
        return Answer(internal::HttpStatusFor(st.error()), "application/json",
                      internal::ErrorStatusJson(st.error()));
      }
      if (!sink.Begin()) return;
    } else if (!st.ok()) {
      log::Warn("kubelet API: log stream ended with an error",
                {{"pod", req.segments[1] + "/" + req.segments[2]}, {"error", st.error().message}});
    }
    Post("0\r\n\r\n", 0, After::kClose);
  }

  // While a streamed answer is written the client sends nothing; a read completing means it
  // hung up (the apiserver closes its connection when kubectl goes away).
  void WatchForHangUp() {
    if (!tls_) return;
    tls_->async_read_some(asio::buffer(scratch_),
                          [self = shared_from_this()](error_code ec, size_t) {
                            if (ec) return self->MarkGone();
                            self->WatchForHangUp();
                          });
  }

  // ---- exec ----

  void HandleExec(const Request& req) {
    const auto& seg = req.segments;
    ExecRequest er;
    er.namespace_name = seg[1];
    er.pod = seg[2];
    if (seg.size() == 5) er.uid = seg[3];
    er.container = seg.back();
    for (auto it = req.query.lower_bound("command");
         it != req.query.end() && it->first == "command"; ++it) {
      er.command.push_back(it->second);
    }
    er.with_stdin = ParseBool(req.Query("input")) || ParseBool(req.Query("stdin"));
    er.with_stdout = ParseBool(req.Query("output")) || ParseBool(req.Query("stdout"));
    er.with_stderr = ParseBool(req.Query("error")) || ParseBool(req.Query("stderr"));
    er.tty = ParseBool(req.Query("tty"));
    auto bad = [&](const std::string& msg) {
      Error e = Error::Make(Error::Code::kInvalidArgument, msg);
      Answer(400, "application/json", internal::ErrorStatusJson(e));
    };
    if (er.command.empty()) return bad("you must specify at least one command for the container");
    if (!er.with_stdin && !er.with_stdout && !er.with_stderr) {
      return bad("you must specify at least 1 of stdin, stdout, stderr");
    }
    if (er.tty && er.with_stderr) er.with_stderr = false;  // a terminal merges stderr into stdout

    Status admitted = OkStatus();
    try {
      admitted = state_->backend->AdmitExec(er);
    } catch (const std::exception& e) {
      admitted =
          Error::Make(Error::Code::kInternal, std::string("exec backend failed: ") + e.what());
    }
    if (!admitted.ok()) {
      return Answer(internal::HttpStatusFor(admitted.error()), "application/json",
                    internal::ErrorStatusJson(admitted.error()));
    }

    std::string upgrade = AsciiLower(http_.Header("upgrade"));
    bool ws = upgrade.find("websocket") != std::string::npos;
    bool spdy = upgrade.find("spdy/3.1") != std::string::npos;
    if (!ws && !spdy) {
      return Answer(400, "text/plain; charset=utf-8",
                    "unable to upgrade: missing upgrade headers in request\n");
    }
    std::vector<std::string> offered;
    std::string_view field = ws ? "sec-websocket-protocol" : "x-stream-protocol-version";
    for (const auto& [name, value] : http_.headers) {  // names lower-cased by the HTTP server
      if (name == field) offered.push_back(value);
    }
    std::vector<std::string_view> supported =
        ws ? std::vector<std::string_view>{internal::kProtocolV5, internal::kProtocolV4}
           : std::vector<std::string_view>{internal::kProtocolV5, internal::kProtocolV4,
                                           internal::kProtocolV3, internal::kProtocolV2};
    std::string protocol = internal::NegotiateProtocol(offered, supported);
    if (protocol.empty()) {
      std::string msg = "unable to upgrade: unable to negotiate protocol: client supports [";
      for (size_t i = 0; i < offered.size(); ++i) msg += (i ? " " : "") + offered[i];
      msg += "], server accepts [";
      for (size_t i = 0; i < supported.size(); ++i)
        msg += (i ? " " : "") + std::string(supported[i]);
      msg += "]";
      return Answer(offered.empty() ? 400 : 403, "text/plain; charset=utf-8", msg + "\n");
    }
    version_ = internal::ProtocolVersion(protocol);
    request_info_ = er;
    std::weak_ptr<Call> weak = shared_from_this();
    session_ = std::make_shared<internal::ExecSessionImpl>(
        er, [weak](Channel channel, std::string_view data) {
          auto self = weak.lock();
          return self && self->SendChannel(channel, data);
        });
    if (!TakeOver()) return;
    asio::post(ex_, [self = shared_from_this(), ws, protocol] {
      if (ws) {
        self->StartWebSocket(protocol);
      } else {
        self->StartSpdy(protocol);
      }
    });
    {
      std::unique_lock lock(mu_);
      bool ready = cv_.wait_for(lock, state_->options.stream_creation_timeout,
                                [&] { return ready_ || gone_.load(); });
      if (!ready || gone_) {
        lock.unlock();
        if (!ready) log::Warn("kubelet API: exec client did not create its streams in time", {});
        Close();
        return;
      }
    }
    Result<int> result = 0;
    try {
      result = state_->backend->Exec(er, *session_);
    } catch (const std::exception& e) {
      result = Error::Make(Error::Code::kInternal, std::string("exec backend failed: ") + e.what());
    }
    asio::post(ex_, [self = shared_from_this(), result = std::move(result)] {
      if (self->ws_) {
        self->FinishWebSocket(result);
      } else {
        self->FinishSpdy(result);
      }
    });
  }

  // The error stream's content for the exec's outcome (v4+: a Status; v2/v3: text on failure).
  std::string Outcome(const Result<int>& result) const {
    if (version_ >= 4) {
      if (!result.ok()) return internal::ErrorStatusJson(result.error());
      if (*result == 0) return internal::SuccessStatusJson();
      return internal::ExitCodeStatusJson(*result);
    }
    if (!result.ok()) return result.error().message;
    if (*result == 0) return {};
    return "command terminated with non-zero exit code: exit status " + std::to_string(*result);
  }

  // From a backend thread: queues output on `channel`, blocking while the window is full.
  bool SendChannel(Channel channel, std::string_view data) {
    uint32_t stream_id = 0;
    if (!ws_mode_) {
      stream_id = channel == internal::kStdout ? stdout_id_ : stderr_id_;
      if (stream_id == 0) return false;
    }
    while (!data.empty()) {
      std::string_view piece = data.substr(0, kMaxChunk);
      data.remove_prefix(piece.size());
      std::string bytes;
      if (ws_mode_) {
        bytes.reserve(piece.size() + 1);
        bytes += static_cast<char>(channel);
        bytes += piece;
      } else {
        bytes = internal::spdy::DataFrame(stream_id, piece, false);
      }
      size_t n = bytes.size();
      if (!window_.Acquire(n)) return false;
      Post(std::move(bytes), n, After::kNone);
    }
    return !gone_;
  }

  // ---- SPDY ----

  void StartSpdy(const std::string& protocol) {
    if (gone_ || !tls_) return;
    std::string head =
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
        "X-Stream-Protocol-Version: " +
        protocol + "\r\n\r\n";
    Queue(std::move(head), 0, After::kNone);
    // Frames the client sent right behind its request are already in the HTTP read buffer.
    auto leftover = buffer_.data();
    spdy_parser_.Feed(std::string_view(static_cast<const char*>(leftover.data()), leftover.size()));
    buffer_.consume(buffer_.size());
    if (ProcessSpdy()) DoSpdyRead();
  }

  void DoSpdyRead() {
    tls_->async_read_some(asio::buffer(scratch_),
                          [self = shared_from_this()](error_code ec, size_t n) {
                            if (ec) {
                              self->MarkGone();
                              return self->CloseNow();
                            }
                            self->spdy_parser_.Feed(std::string_view(self->scratch_.data(), n));
                            if (self->ProcessSpdy()) self->DoSpdyRead();
                          });
  }

  // Handles every complete frame; false when the connection was dropped.
  bool ProcessSpdy() {
    namespace spdy = internal::spdy;
    while (true) {
      auto next = spdy_parser_.Next();
      if (!next.ok()) return SpdyFail(next.error().message);
      if (!next->has_value()) return true;
      const spdy::RawFrame& f = **next;
      if (!f.control) {
        OnSpdyData(f);
        continue;
      }
      switch (static_cast<spdy::ControlType>(f.type)) {
        case spdy::ControlType::kSynStream: {
          auto syn = spdy::ParseSynStream(f, spdy_in_);
          if (!syn.ok()) return SpdyFail(syn.error().message);
          OnSynStream(*syn);
          break;
        }
        case spdy::ControlType::kSynReply:
        case spdy::ControlType::kHeaders: {
          // Decoded only to keep the shared compression context in step.
          auto h = spdy::ParseHeaders(f, spdy_in_);
          if (!h.ok()) return SpdyFail(h.error().message);
          break;
        }
        case spdy::ControlType::kRstStream: {
          auto rst = spdy::ParseRstStream(f);
          if (!rst.ok()) return SpdyFail(rst.error().message);
          if (rst->stream_id == stdin_id_) session_->PushStdinEof();
          if (rst->stream_id == error_id_) MarkGone();
          break;
        }
        case spdy::ControlType::kPing: {
          auto id = spdy::ParsePing(f);
          if (!id.ok()) return SpdyFail(id.error().message);
          // Client pings are odd (the apiserver's translator pings every 5 s); echo them.
          if ((*id & 1U) == 1U) Queue(spdy::PingFrame(*id), 0, After::kNone);
          break;
        }
        case spdy::ControlType::kGoAway:
          MarkGone();
          break;
        default:
          // SETTINGS, WINDOW_UPDATE (spdystream does no flow control) and unknown types.
          break;
      }
    }
  }

  bool SpdyFail(const std::string& why) {
    log::Warn("kubelet API: SPDY protocol error; closing", {{"error", why}});
    Queue(internal::spdy::GoAwayFrame(last_stream_id_, 1), 0, After::kClose);
    MarkGone();
    return false;
  }

  void OnSynStream(const internal::spdy::SynStream& syn) {
    namespace spdy = internal::spdy;
    if ((syn.stream_id & 1U) == 0 || syn.stream_id <= last_stream_id_) {
      Queue(spdy::RstStreamFrame(syn.stream_id, spdy::RstStatus::kProtocolError), 0, After::kNone);
      return;
    }
    last_stream_id_ = syn.stream_id;
    auto reply = spdy_out_.Compress({});
    if (!reply.ok()) {
      SpdyFail(reply.error().message);
      return;
    }
    Queue(spdy::SynReplyFrame(syn.stream_id, *reply, false), 0, After::kNone);
    std::string type = AsciiLower(spdy::HeaderValue(syn.headers, "streamtype"));
    uint32_t* slot = nullptr;
    if (type == "error") slot = &error_id_;
    if (type == "stdin") slot = &stdin_id_;
    if (type == "stdout") slot = &stdout_id_;
    if (type == "stderr") slot = &stderr_id_;
    if (type == "resize") slot = &resize_id_;
    if (slot == nullptr) {
      Queue(spdy::RstStreamFrame(syn.stream_id, spdy::RstStatus::kRefusedStream), 0, After::kNone);
      return;
    }
    {
      std::lock_guard lock(mu_);
      *slot = syn.stream_id;
    }
    if (slot == &stdin_id_ && (syn.flags & spdy::kFlagFin) != 0) session_->PushStdinEof();
    const ExecRequest& r = request_info_;
    bool all = error_id_ != 0 && (!r.with_stdin || stdin_id_ != 0) &&
               (!r.with_stdout || stdout_id_ != 0) && (!r.with_stderr || stderr_id_ != 0) &&
               (!r.tty || version_ < 3 || resize_id_ != 0);
    if (all) SignalReady();
  }

  void OnSpdyData(const internal::spdy::RawFrame& f) {
    bool fin = (f.flags & internal::spdy::kFlagFin) != 0;
    if (f.stream_id != 0 && f.stream_id == stdin_id_) {
      if (!f.payload.empty()) session_->PushStdin(f.payload);
      if (fin) session_->PushStdinEof();
    } else if (f.stream_id != 0 && f.stream_id == resize_id_) {
      resize_buf_ += f.payload;
      std::vector<TerminalSize> sizes;
      internal::ParseResizes(resize_buf_, sizes);
      for (auto s : sizes) session_->PushResize(s);
    }
  }

  void FinishSpdy(const Result<int>& result) {
    namespace spdy = internal::spdy;
    if (gone_ || !tls_) return CloseNow();
    if (stdout_id_ != 0) Queue(spdy::DataFrame(stdout_id_, "", true), 0, After::kNone);
    if (stderr_id_ != 0) Queue(spdy::DataFrame(stderr_id_, "", true), 0, After::kNone);
    Queue(spdy::DataFrame(error_id_, Outcome(result), true), 0, After::kNone);
    Queue(spdy::GoAwayFrame(last_stream_id_, 0), 0, After::kLinger);
  }

  // ---- WebSocket ----

  void StartWebSocket(const std::string& protocol) {
    if (gone_ || !tls_) return;
    // The upgrade request as Beast's handshake checks it, from what the HTTP server read.
    ws_upgrade_.method_string(http_.method);
    ws_upgrade_.target(http_.target);
    ws_upgrade_.version(11);
    for (const auto& [name, value] : http_.headers) ws_upgrade_.insert(name, value);
    ws_.emplace(std::move(*tls_));
    tls_.reset();
    ws_mode_ = true;
    ws_->binary(true);
    ws_->read_message_max(size_t{4} << 20);
    ws_->set_option(websocket::stream_base::decorator([protocol](websocket::response_type& res) {
      res.set(http::field::sec_websocket_protocol, protocol);
    }));
    ws_->async_accept(ws_upgrade_, [self = shared_from_this()](error_code ec) {
      if (ec) {
        self->MarkGone();
        return self->CloseNow();
      }
      // As the kubelet: an empty message on the lowest writable channel tells the client the
      // streams are ready.
      const ExecRequest& r = self->request_info_;
      char first = r.with_stdout   ? static_cast<char>(internal::kStdout)
                   : r.with_stderr ? static_cast<char>(internal::kStderr)
                                   : static_cast<char>(internal::kError);
      self->Queue(std::string(1, first), 0, After::kNone);
      self->SignalReady();
      self->DoWsRead();
    });
  }

  void DoWsRead() {
    ws_->async_read(ws_buffer_, [self = shared_from_this()](error_code ec, size_t) {
      if (ec) {
        self->MarkGone();
        return self->CloseNow();
      }
      auto data = self->ws_buffer_.data();
      std::string msg(static_cast<const char*>(data.data()), data.size());
      self->ws_buffer_.consume(self->ws_buffer_.size());
      self->OnWsMessage(msg);
      self->DoWsRead();
    });
  }

  void OnWsMessage(const std::string& msg) {
    if (msg.empty()) return;
    auto channel = static_cast<uint8_t>(msg[0]);
    std::string_view body(msg);
    body.remove_prefix(1);
    if (channel == 255 && version_ >= 5) {  // v5: close signal for the channel that follows
      if (body.size() == 1 && static_cast<uint8_t>(body[0]) == internal::kStdin) {
        session_->PushStdinEof();
      }
      return;
    }
    if (channel == internal::kStdin) {
      if (!body.empty()) session_->PushStdin(std::string(body));
    } else if (channel == internal::kResize) {
      resize_buf_ += body;
      std::vector<TerminalSize> sizes;
      internal::ParseResizes(resize_buf_, sizes);
      for (auto s : sizes) session_->PushResize(s);
    }
  }

  void FinishWebSocket(const Result<int>& result) {
    if (gone_ || !ws_) return CloseNow();
    std::string status(1, static_cast<char>(internal::kError));
    status += Outcome(result);
    Queue(std::move(status), 0, After::kWsClose);
  }

  // ---- plumbing (strand) ----

  void SignalReady() {
    std::lock_guard lock(mu_);
    ready_ = true;
    cv_.notify_all();
  }

  // From any thread: queue bytes on the strand (dropped unless the call holds the connection).
  void Post(std::string bytes, size_t window, After after) {
    {
      std::lock_guard lock(mu_);
      if (!adopted_) {
        window_.Release(window);
        return;
      }
    }
    asio::post(ex_, [self = shared_from_this(), bytes = std::move(bytes), window, after]() mutable {
      self->Queue(std::move(bytes), window, after);
    });
  }

  void Queue(std::string bytes, size_t window, After after) {
    if (closed_) {
      window_.Release(window);
      return;
    }
    out_.push_back(Pending{std::move(bytes), window, after});
    if (!writing_) DoWrite();
  }

  void DoWrite() {
    if (out_.empty() || closed_) {
      writing_ = false;
      return;
    }
    writing_ = true;
    auto done = [self = shared_from_this()](error_code ec, size_t) {
      // Closed while this write was in flight (the client hung up and our read saw it first, or
      // Stop): CloseNow gave every queued window back, and nothing may start now. A linger timer
      // started here would outlive the close, and CloseNow does not run twice to cancel it: its
      // handler would hold this call, and so the server's io_context, past Stop.
      if (self->closed_) {
        self->writing_ = false;
        return;
      }
      Pending p = std::move(self->out_.front());
      self->out_.pop_front();
      self->window_.Release(p.window);
      if (ec) {
        self->MarkGone();
        return self->CloseNow();
      }
      switch (p.after) {
        case After::kNone:
          break;
        case After::kClose:
          return self->CloseNow();
        case After::kLinger:
          self->StartLinger();
          break;
        case After::kWsClose:
          self->ws_->async_close(websocket::close_code::normal,
                                 [self](error_code) { self->CloseNow(); });
          self->writing_ = false;
          return;
      }
      self->DoWrite();
    };
    const std::string& bytes = out_.front().bytes;
    if (ws_) {
      ws_->async_write(asio::buffer(bytes), std::move(done));
    } else {
      asio::async_write(*tls_, asio::buffer(bytes), std::move(done));
    }
  }

  // After the last frame: the client closes once it has read everything; close anyway later.
  void StartLinger() {
    linger_->expires_after(kLinger);
    linger_->async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->CloseNow();
    });
  }

  void MarkGone() {
    if (gone_.exchange(true)) return;
    window_.Close();
    if (session_) session_->SetGone();
    std::lock_guard lock(mu_);
    cv_.notify_all();
  }

  void CloseNow() {
    MarkGone();
    if (closed_) return;
    closed_ = true;
    if (linger_) linger_->cancel();
    error_code ec;
    if (ws_) {
      beast::get_lowest_layer(*ws_).socket().shutdown(tcp::socket::shutdown_both, ec);
      beast::get_lowest_layer(*ws_).close();
    } else if (tls_) {
      beast::get_lowest_layer(*tls_).socket().shutdown(tcp::socket::shutdown_both, ec);
      beast::get_lowest_layer(*tls_).close();
    }
    for (auto& p : out_) window_.Release(p.window);
  }

  std::shared_ptr<State> state_;
  net::ServerRequest http_;
  std::shared_ptr<net::Responder> responder_;  // until the call takes the connection
  // The connection, once taken over (Adopt). `owner_` keeps the HTTP server's io_context and TLS
  // context alive for the streams, so it is declared before them (destroyed after).
  std::shared_ptr<const void> owner_;
  asio::any_io_executor ex_;
  std::optional<TlsStream> tls_;
  std::optional<WsStream> ws_;
  http::request<http::empty_body> ws_upgrade_;
  std::optional<asio::steady_timer> linger_;
  beast::flat_buffer buffer_;
  beast::flat_buffer ws_buffer_;
  std::array<char, size_t{16} * 1024> scratch_{};

  std::deque<Pending> out_;
  bool writing_ = false;
  bool closed_ = false;
  internal::SendWindow window_;
  std::atomic<bool> gone_{false};

  // Exec (set by the worker before the upgrade is posted; stream ids set on the strand under mu_
  // before ready_, read by the worker after it).
  std::mutex mu_;
  std::condition_variable cv_;
  bool adopted_ = false;  // under mu_: ex_ is set and the streams are this call's
  bool ready_ = false;
  int version_ = 0;
  bool ws_mode_ = false;
  ExecRequest request_info_;
  std::shared_ptr<internal::ExecSessionImpl> session_;
  internal::spdy::FrameParser spdy_parser_;
  internal::spdy::HeaderDecompressor spdy_in_;
  internal::spdy::HeaderCompressor spdy_out_;
  uint32_t last_stream_id_ = 0;
  uint32_t error_id_ = 0, stdin_id_ = 0, stdout_id_ = 0, stderr_id_ = 0, resize_id_ = 0;
  std::string resize_buf_;
};

// ---- server --------------------------------------------------------------------------------

// Requests as the HTTP server reads them (on its I/O threads): unauthenticated ones are answered
// there; the rest become Calls on threads of their own.
void Dispatch(const std::shared_ptr<State>& state, const net::ServerRequest& http,
              const std::shared_ptr<net::Responder>& responder) {
  if (state->stopping) return responder->Abort();
  auto url = boost::urls::parse_origin_form(http.target);
  if (!url) {
    return responder->Send(400, "malformed request target\n",
                           AnswerHeaders("text/plain; charset=utf-8"));
  }
  if (!http.client) {
    return responder->Send(401, "Unauthorized\n", AnswerHeaders("text/plain; charset=utf-8"));
  }
  Request req;
  req.method = http.method;
  req.path = std::string(url->path());
  for (auto seg : url->segments()) req.segments.emplace_back(seg);
  req.query = http.query;
  auto call = std::make_shared<Call>(state, http, responder);
  {
    std::lock_guard lock(state->calls_mu);
    std::erase_if(state->calls, [](const auto& w) { return w.expired(); });
    state->calls.push_back(call);
  }
  state->RunWorker([call, req = std::move(req)] { call->Handle(req); });
}

class ServerImpl final : public Server {
 public:
  ServerImpl(std::shared_ptr<State> state, std::unique_ptr<net::HttpServer> http)
      : state_(std::move(state)), http_(std::move(http)) {}
  ~ServerImpl() override { Stop(std::chrono::milliseconds(2000)); }

  uint16_t port() const override { return http_->port(); }

  Status SetClientCa(const std::string& pem) override {
    Status st = http_->SetClientCa(pem);
    if (!st.ok()) return WithClientCaHint(st.error());
    return st;
  }

  // Cancels the calls first (so that streaming backends return), waits for them, then stops the
  // HTTP server, which has no request left in flight but those its I/O threads refuse.
  void Stop(std::chrono::milliseconds grace) override {
    if (stopped_.exchange(true)) return;
    state_->stopping = true;
    std::vector<std::shared_ptr<Call>> live;
    {
      std::lock_guard lock(state_->calls_mu);
      for (auto& w : state_->calls) {
        if (auto c = w.lock()) live.push_back(std::move(c));
      }
      state_->calls.clear();
    }
    for (auto& c : live) c->Close();
    live.clear();
    {
      std::unique_lock lock(state_->workers_mu);
      if (!state_->workers_cv.wait_for(lock, grace, [&] { return state_->workers == 0; })) {
        log::Warn("kubelet API: backend calls still running at stop", {{"count", state_->workers}});
      }
    }
    http_->Stop(std::chrono::milliseconds(100));
  }

  // The client CA's errors name where a control node reads it.
  static Error WithClientCaHint(Error e) {
    e.message =
        "kubelet API: " + e.message +
        " (expected the cluster's client CA, kube-system/extension-apiserver-authentication "
        "client-ca-file)";
    return e;
  }

 private:
  std::shared_ptr<State> state_;
  std::unique_ptr<net::HttpServer> http_;
  std::atomic<bool> stopped_{false};
};

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options,
                                              std::shared_ptr<Backend> backend) {
  if (!backend) return Error::Make(Error::Code::kInvalidArgument, "kubelet API: no backend");
  if (options.cert_file.empty() || options.key_file.empty()) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "kubelet API: a serving certificate and key are required");
  }
  if (options.client_ca_pem.empty()) {
    return ServerImpl::WithClientCaHint(
        Error::Make(Error::Code::kInvalidArgument, "client CA: no PEM certificate found"));
  }
  net::HttpServer::Options http;
  http.address = options.address;
  http.port = options.port;
  http.threads = options.threads;
  http.tls = net::ServerTlsFiles{options.cert_file, options.key_file};
  http.client_ca_pem = options.client_ca_pem;
  http.max_body_bytes = size_t{64} * 1024;  // requests carry no body worth more
  http.idle_timeout = std::chrono::seconds(120);
  http.read_timeout = std::chrono::seconds(30);
  auto state = std::make_shared<State>(std::move(options));
  state->backend = std::move(backend);
  auto server = net::HttpServer::Start(
      std::move(http),
      [weak = std::weak_ptr<State>(state)](const net::ServerRequest& req,
                                           const std::shared_ptr<net::Responder>& responder) {
        if (auto s = weak.lock()) Dispatch(s, req, responder);
      });
  if (!server.ok()) {
    Error e = server.error();
    if (e.message.starts_with("client CA")) return ServerImpl::WithClientCaHint(e);
    e.message = "kubelet API: " + e.message;
    return e;
  }
  return std::unique_ptr<Server>(std::make_unique<ServerImpl>(state, std::move(*server)));
}

}  // namespace hyperslice::runners::kubeletapi
