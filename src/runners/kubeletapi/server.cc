// The kubelet API server on Boost.Beast (the project's HTTP stack): TLS with a client certificate
// requested and verified here against the client CA, one HTTP/1.1 request at a time per
// connection, streamed log responses, and exec connections upgraded to SPDY/3.1 or WebSocket.
//
// Each connection runs on a strand of the server's io_context; everything touching its socket
// runs there. Backend calls (and the Authorizer) run on a thread of their own per request: they
// post output to the strand through a bounded SendWindow, which blocks them while the client is
// slow and releases them (false) once the client is gone.
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <boost/url/parse.hpp>

#include "src/base/log.h"
#include "src/net/tls.h"
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
constexpr auto kHandshakeTimeout = std::chrono::seconds(30);

std::string Lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool ParseBool(std::string_view v) {
  return v == "1" || v == "t" || v == "T" || v == "true" || v == "TRUE" || v == "True";
}

// ---- client certificates -------------------------------------------------------------------

using CaStore = std::shared_ptr<X509_STORE>;

Result<CaStore> LoadCaStore(const std::string& pem) {
  CaStore store(X509_STORE_new(), X509_STORE_free);
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  if (!store || !bio) return Error::Make(Error::Code::kInternal, "out of memory");
  int n = 0;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store.get(), cert);
    X509_free(cert);
    ++n;
  }
  ERR_clear_error();
  if (n == 0) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "client CA: no PEM certificate found (expected the cluster's client CA, "
                       "kube-system/extension-apiserver-authentication client-ca-file)");
  }
  return store;
}

std::vector<std::string> NameEntries(X509_NAME* name, int nid) {
  std::vector<std::string> out;
  int i = -1;
  while ((i = X509_NAME_get_index_by_NID(name, nid, i)) >= 0) {
    ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
    unsigned char* utf8 = nullptr;
    int len = ASN1_STRING_to_UTF8(&utf8, data);
    if (len >= 0) out.emplace_back(reinterpret_cast<char*>(utf8), static_cast<size_t>(len));
    OPENSSL_free(utf8);
  }
  return out;
}

// The user a verified client certificate names (as the apiserver's and the kubelet's x509
// authenticator: CN the user, O the groups); nullopt without a certificate or when it does not
// verify against `store` for client authentication.
std::optional<UserInfo> AuthenticatePeer(SSL* ssl, X509_STORE* store) {
  std::unique_ptr<X509, decltype(&X509_free)> leaf(SSL_get1_peer_certificate(ssl), X509_free);
  if (!leaf) return std::nullopt;
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(),
                                                                      X509_STORE_CTX_free);
  if (!ctx ||
      X509_STORE_CTX_init(ctx.get(), store, leaf.get(), SSL_get_peer_cert_chain(ssl)) != 1) {
    return std::nullopt;
  }
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT);
  bool ok = X509_verify_cert(ctx.get()) == 1;
  ERR_clear_error();
  if (!ok) return std::nullopt;
  UserInfo user;
  X509_NAME* subject = X509_get_subject_name(leaf.get());
  auto cn = NameEntries(subject, NID_commonName);
  if (cn.empty() || cn.front().empty()) return std::nullopt;
  user.name = cn.front();
  user.groups = NameEntries(subject, NID_organizationName);
  return user;
}

// ---- HTTP answers --------------------------------------------------------------------------

std::string HttpResponse(int status, std::string_view content_type, std::string_view body,
                         bool close) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " +
                    std::string(http::obsolete_reason(static_cast<http::status>(status))) + "\r\n";
  out += "Content-Type: ";
  out += content_type;
  out += "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  out += "X-Content-Type-Options: nosniff\r\n";
  if (close) out += "Connection: close\r\n";
  out += "\r\n";
  out += body;
  return out;
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

class Connection;

struct State : std::enable_shared_from_this<State> {
  explicit State(ServerOptions o) : options(std::move(o)) {}

  ServerOptions options;
  std::shared_ptr<Backend> backend;
  asio::io_context ioc;
  std::atomic<bool> stopping{false};

  std::mutex tls_mu;
  std::shared_ptr<ssl::context> tls_ctx;
  std::pair<timespec, timespec> tls_mtimes{};
  std::chrono::steady_clock::time_point tls_checked{};

  std::mutex ca_mu;
  CaStore ca_store;

  std::mutex workers_mu;
  std::condition_variable workers_cv;
  int workers = 0;

  std::mutex conns_mu;
  std::vector<std::weak_ptr<Connection>> conns;

  CaStore CurrentCa() {
    std::lock_guard lock(ca_mu);
    return ca_store;
  }

  std::shared_ptr<ssl::context> CurrentTls() {
    std::lock_guard lock(tls_mu);
    auto now = std::chrono::steady_clock::now();
    if (now - tls_checked >= std::chrono::seconds(1)) {
      tls_checked = now;
      if (auto st = ReloadLocked(); !st.ok()) {
        log::Warn("kubelet API: serving certificate not reloaded; serving the previous one",
                  {{"error", st.error().message}});
      }
    }
    return tls_ctx;
  }

  // Reloads when a file's mtime changed and the new pair loads; a half-written pair keeps the
  // previous context (the next check retries).
  Status ReloadLocked() {
    struct stat cs {
    }, ks{};
    if (stat(options.cert_file.c_str(), &cs) != 0 || stat(options.key_file.c_str(), &ks) != 0) {
      return Error::Make(
          Error::Code::kInvalidArgument,
          "serving certificate files not readable: " + options.cert_file + ", " + options.key_file);
    }
    auto same = [](const timespec& a, const timespec& b) {
      return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
    };
    if (tls_ctx && same(cs.st_mtim, tls_mtimes.first) && same(ks.st_mtim, tls_mtimes.second)) {
      return OkStatus();
    }
    auto ctx = net::internal::MakeServerContext(options.cert_file, options.key_file);
    if (!ctx.ok()) return ctx.error();
    SSL_CTX* native = (*ctx)->native_handle();
    // Ask for a client certificate but let the handshake finish without one (or with one that
    // does not verify): the request is then answered 401, as the kubelet does, instead of a TLS
    // alert. Verification is done after the handshake against the current client CA.
    SSL_CTX_set_verify(native, SSL_VERIFY_PEER, [](int, X509_STORE_CTX*) { return 1; });
    // No resumption: every connection presents and verifies its certificate.
    SSL_CTX_set_session_cache_mode(native, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_options(native, SSL_OP_NO_TICKET);
    static const unsigned char kSessionContext[] = "hyperslice-kubeletapi";
    SSL_CTX_set_session_id_context(native, kSessionContext, sizeof kSessionContext - 1);
    tls_ctx = *ctx;
    tls_mtimes = {cs.st_mtim, ks.st_mtim};
    return OkStatus();
  }

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

// ---- connection ----------------------------------------------------------------------------

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, std::shared_ptr<ssl::context> ctx, std::shared_ptr<State> state)
      : state_(std::move(state)),
        ctx_(std::move(ctx)),
        ex_(socket.get_executor()),
        linger_(ex_),
        window_(kWindowBytes) {
    tls_.emplace(std::move(socket), *ctx_);
  }

  void Start() {
    beast::get_lowest_layer(*tls_).expires_after(kHandshakeTimeout);
    tls_->async_handshake(ssl::stream_base::server, [self = shared_from_this()](error_code ec) {
      if (ec) return self->CloseNow();
      beast::get_lowest_layer(*self->tls_).expires_never();
      if (auto ca = self->state_->CurrentCa()) {
        self->user_ = AuthenticatePeer(self->tls_->native_handle(), ca.get());
      }
      self->DoRead();
    });
  }

  // From any thread.
  void Close() {
    asio::post(ex_, [self = shared_from_this()] { self->CloseNow(); });
  }

 private:
  enum class After { kNone, kReadNext, kClose, kLinger, kWsClose };
  struct Pending {
    std::string bytes;
    size_t window = 0;  // bytes to give back to the window once written
    After after = After::kNone;
  };

  // ---- HTTP ----

  void DoRead() {
    parser_.emplace();
    parser_->body_limit(size_t{64} * 1024);
    parser_->header_limit(64 * 1024);
    beast::get_lowest_layer(*tls_).expires_after(std::chrono::seconds(120));
    http::async_read(*tls_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(error_code ec) {
    beast::get_lowest_layer(*tls_).expires_never();
    if (ec) {
      if (ec != http::error::end_of_stream && ec != asio::error::eof &&
          ec != asio::error::operation_aborted && ec != beast::error::timeout &&
          ec != asio::error::connection_reset && ec != ssl::error::stream_truncated) {
        Queue(HttpResponse(400, "text/plain; charset=utf-8", "malformed request\n", true), 0,
              After::kClose);
        return;
      }
      return CloseNow();
    }
    request_ = parser_->release();
    Request req;
    req.method = std::string(request_.method_string());
    auto url = boost::urls::parse_origin_form(request_.target());
    if (!url) {
      Queue(HttpResponse(400, "text/plain; charset=utf-8", "malformed request target\n", true), 0,
            After::kClose);
      return;
    }
    req.path = std::string(url->path());
    for (auto seg : url->segments()) req.segments.emplace_back(seg);
    for (auto p : url->params()) req.query.emplace(std::string(p.key), std::string(p.value));
    if (!user_) {
      Queue(
          HttpResponse(401, "text/plain; charset=utf-8", "Unauthorized\n", !request_.keep_alive()),
          0, request_.keep_alive() ? After::kReadNext : After::kClose);
      return;
    }
    state_->RunWorker([self = shared_from_this(), req = std::move(req)] { self->Handle(req); });
  }

  // On a worker thread.
  void Handle(const Request& req) {
    RequestAttributes attrs;
    attrs.user = *user_;
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
      Error e = Error::Make(Error::Code::kUnknown,
                            first +
                                " is not supported by this node: its pods run on linked "
                                "runners, which serve logs and exec only",
                            "NotImplemented", 501);
      return Answer(501, "application/json", internal::ErrorStatusJson(e));
    }
    Answer(404, "text/plain; charset=utf-8", "404 page not found\n");
  }

  // A whole answer from a worker; the connection stays open for the next request.
  void Answer(int status, std::string_view type, std::string_view body) {
    bool keep = request_.keep_alive();
    Post(HttpResponse(status, type, body, !keep), 0, keep ? After::kReadNext : After::kClose);
  }

  // ---- logs ----

  class Sink final : public LogSink {
   public:
    Sink(Connection& c, std::optional<int64_t> limit) : c_(c), limit_(limit) {}
    bool Write(std::string_view chunk) override {
      if (Cancelled()) return false;
      if (limit_) {
        if (written_ >= *limit_) return false;
        chunk = chunk.substr(0, static_cast<size_t>(*limit_ - written_));
      }
      if (!started_) Begin();
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
    void Begin() {
      started_ = true;
      c_.Post(
          "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
          "X-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n",
          0, After::kNone);
      asio::post(c_.ex_, [self = c_.shared_from_this()] { self->WatchForHangUp(); });
    }
    bool started() const { return started_; }

   private:
    Connection& c_;
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
      sink.Begin();
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

    std::string upgrade = Lower(request_[http::field::upgrade]);
    bool ws = upgrade.find("websocket") != std::string::npos;
    bool spdy = upgrade.find("spdy/3.1") != std::string::npos;
    if (!ws && !spdy) {
      return Answer(400, "text/plain; charset=utf-8",
                    "unable to upgrade: missing upgrade headers in request\n");
    }
    std::vector<std::string> offered;
    auto field = ws ? http::field::sec_websocket_protocol : http::field::unknown;
    for (const auto& f : request_) {
      bool match = ws ? f.name() == field : Lower(f.name_string()) == "x-stream-protocol-version";
      if (match) offered.emplace_back(f.value());
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
    std::weak_ptr<Connection> weak = shared_from_this();
    session_ = std::make_shared<internal::ExecSessionImpl>(
        er, [weak](Channel channel, std::string_view data) {
          auto self = weak.lock();
          return self && self->SendChannel(channel, data);
        });
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
    std::string type = Lower(spdy::HeaderValue(syn.headers, "streamtype"));
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
    ws_.emplace(std::move(*tls_));
    tls_.reset();
    ws_mode_ = true;
    ws_->binary(true);
    ws_->read_message_max(size_t{4} << 20);
    ws_->set_option(websocket::stream_base::decorator([protocol](websocket::response_type& res) {
      res.set(http::field::sec_websocket_protocol, protocol);
    }));
    ws_->async_accept(request_, [self = shared_from_this()](error_code ec) {
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

  // From any thread: queue bytes on the strand.
  void Post(std::string bytes, size_t window, After after) {
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
        case After::kReadNext:
          self->writing_ = false;
          if (!self->out_.empty()) self->DoWrite();
          return self->DoRead();
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
    linger_.expires_after(kLinger);
    linger_.async_wait([self = shared_from_this()](error_code ec) {
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
    linger_.cancel();
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
  std::shared_ptr<ssl::context> ctx_;  // the key pair this connection started with
  asio::any_io_executor ex_;
  std::optional<TlsStream> tls_;
  std::optional<WsStream> ws_;
  asio::steady_timer linger_;
  beast::flat_buffer buffer_;
  beast::flat_buffer ws_buffer_;
  std::array<char, size_t{16} * 1024> scratch_{};
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  std::optional<UserInfo> user_;

  std::deque<Pending> out_;
  bool writing_ = false;
  bool closed_ = false;
  internal::SendWindow window_;
  std::atomic<bool> gone_{false};

  // Exec (set by the worker before the upgrade is posted; stream ids set on the strand under mu_
  // before ready_, read by the worker after it).
  std::mutex mu_;
  std::condition_variable cv_;
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

class ServerImpl final : public Server {
 public:
  explicit ServerImpl(std::shared_ptr<State> state)
      : state_(std::move(state)), acceptor_(asio::make_strand(state_->ioc)) {}
  ~ServerImpl() override { Stop(std::chrono::milliseconds(2000)); }

  Status Listen() {
    error_code ec;
    auto addr = asio::ip::make_address(state_->options.address, ec);
    if (ec) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "invalid listen address " + state_->options.address);
    }
    tcp::endpoint ep(addr, state_->options.port);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return Error::Make(Error::Code::kUnavailable,
                         "kubelet API: cannot listen on " + state_->options.address + ":" +
                             std::to_string(state_->options.port) + ": " + ec.message());
    }
    port_ = acceptor_.local_endpoint().port();
    work_.emplace(state_->ioc.get_executor());
    DoAccept();
    for (int i = 0; i < std::max(1, state_->options.threads); ++i) {
      threads_.emplace_back([s = state_] { s->ioc.run(); });
    }
    return OkStatus();
  }

  uint16_t port() const override { return port_; }

  Status SetClientCa(const std::string& pem) override {
    HS_ASSIGN_OR_RETURN(auto store, LoadCaStore(pem));
    std::lock_guard lock(state_->ca_mu);
    state_->ca_store = std::move(store);
    return OkStatus();
  }

  void Stop(std::chrono::milliseconds grace) override {
    if (stopped_.exchange(true)) return;
    state_->stopping = true;
    asio::post(acceptor_.get_executor(), [this] {
      error_code ec;
      acceptor_.close(ec);
    });
    std::vector<std::shared_ptr<Connection>> live;
    {
      std::lock_guard lock(state_->conns_mu);
      for (auto& w : state_->conns) {
        if (auto c = w.lock()) live.push_back(std::move(c));
      }
      state_->conns.clear();
    }
    for (auto& c : live) c->Close();
    live.clear();
    {
      std::unique_lock lock(state_->workers_mu);
      if (!state_->workers_cv.wait_for(lock, grace, [&] { return state_->workers == 0; })) {
        log::Warn("kubelet API: backend calls still running at stop", {{"count", state_->workers}});
      }
    }
    work_.reset();
    state_->ioc.stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
    error_code ec;
    acceptor_.close(ec);
    state_->ioc.restart();
    state_->ioc.poll();
  }

 private:
  void DoAccept() {
    acceptor_.async_accept(asio::make_strand(state_->ioc), [this](error_code ec, tcp::socket s) {
      if (ec) {
        if (ec == asio::error::operation_aborted || state_->stopping) return;
        log::Warn("kubelet API: accept failed", {{"error", ec.message()}});
      } else {
        error_code ignored;
        s.set_option(tcp::no_delay(true), ignored);
        auto conn = std::make_shared<Connection>(std::move(s), state_->CurrentTls(), state_);
        {
          std::lock_guard lock(state_->conns_mu);
          std::erase_if(state_->conns, [](const auto& w) { return w.expired(); });
          state_->conns.push_back(conn);
        }
        conn->Start();
      }
      if (!state_->stopping) DoAccept();
    });
  }

  std::shared_ptr<State> state_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::vector<std::thread> threads_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
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
  HS_ASSIGN_OR_RETURN(auto ca, LoadCaStore(options.client_ca_pem));
  auto state = std::make_shared<State>(std::move(options));
  state->backend = std::move(backend);
  state->ca_store = std::move(ca);
  {
    std::lock_guard lock(state->tls_mu);
    HS_RETURN_IF_ERROR(state->ReloadLocked());
    state->tls_checked = std::chrono::steady_clock::now();
  }
  auto server = std::make_unique<ServerImpl>(state);
  HS_RETURN_IF_ERROR(server->Listen());
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace hyperslice::runners::kubeletapi
