// HttpServer on Boost.Beast: an acceptor and one session per connection on an io_context run by
// `threads` threads. A session handles one request at a time (HTTP/1.1 without pipelining); the
// handler answers through a Responder that may complete later from any thread.
//
// Timeouts are deadlines kept by each session and enforced by one periodic sweep, not Beast's
// per-operation timers: those arm and cancel a timer around every socket read and write (timerfd
// system calls and an extra completion each time), a large share of the cost of a small keep-alive
// request. A deadline is therefore honoured within a sweep period (a quarter of the shorter
// timeout, 10 ms to 1 s).
//
// With a client CA the TLS context asks for a client certificate and each connection verifies it
// once, after the handshake; a hijacked connection leaves the session (and its tracking) with its
// stream and read buffer.
#include "src/net/server.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/url/parse.hpp>

#include "src/base/log.h"
#include "src/base/strings.h"
#include "src/net/hijack.h"
#include "src/net/internal/headers.h"
#include "src/net/tls.h"

namespace hyperslice::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// What Stop() needs of a live connection.
using SteadyClock = std::chrono::steady_clock;
constexpr int64_t kNoDeadline = INT64_MAX;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
      .count();
}

// An HTTP/1.x response as bytes: status line, the handler's headers (CR/LF removed; Content-Length
// and Connection are ours), Content-Type defaulting to application/json, then the body. Written as
// one buffer: Beast's serializer walks a buffer sequence per write and its SSL stream adapter
// copies it into one flat buffer first, a measurable share of a small keep-alive answer's cost.
std::string SerializeResponse(int status, unsigned version, bool keep_alive, const Headers& headers,
                              std::string_view body) {
  auto clean = [](std::string_view v, std::string& out) {
    for (char c : v) {
      if (c != '\r' && c != '\n') out += c;
    }
  };
  std::string out;
  out.reserve(160 + body.size());
  out += version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += http::obsolete_reason(static_cast<http::status>(status));
  out += "\r\nServer: hyperslice\r\n";
  bool has_type = false;
  for (const auto& [k, v] : headers) {
    std::string name = AsciiLower(k);
    if (name == "content-length" || name == "connection" || name == "transfer-encoding") continue;
    if (name == "content-type") has_type = true;
    clean(k, out);
    out += ": ";
    clean(v, out);
    out += "\r\n";
  }
  if (!has_type) out += "Content-Type: application/json\r\n";
  out += "Content-Length: ";
  out += std::to_string(body.size());
  out += "\r\n";
  if (!keep_alive && version != 10) out += "Connection: close\r\n";
  if (keep_alive && version == 10) out += "Connection: keep-alive\r\n";
  out += "\r\n";
  out += body;
  return out;
}

class SessionBase {
 public:
  virtual ~SessionBase() = default;
  // Closes the socket; only on the session's executor, or once no I/O thread runs.
  virtual void Close() = 0;
  // Closes the connection from any thread when its deadline has passed (the sweep).
  virtual void CloseIfExpired(int64_t now_ns) = 0;
};

// Shared by the server, its sessions and outstanding responders; owns the io_context so that it
// outlives every socket.
struct State {
  explicit State(HttpServer::Options o)
      : options(std::move(o)),
        // One thread: asio skips the cross-thread wake-ups it otherwise does on every post.
        ioc(std::max(1, options.threads) == 1 ? 1 : BOOST_ASIO_CONCURRENCY_HINT_DEFAULT),
        sweep(ioc) {}

  HttpServer::Options options;
  Handler handler;
  asio::io_context ioc;
  asio::steady_timer sweep;  // enforces the sessions' deadlines
  std::atomic<bool> stopping{false};
  std::atomic<int> in_flight{0};  // requests handed to the handler and not yet answered
  std::mutex mu;
  std::condition_variable idle_cv;

  // TLS key pair, swapped when the files change.
  std::mutex tls_mu;
  std::shared_ptr<ssl::context> tls_ctx;
  std::pair<timespec, timespec> tls_mtimes{};
  std::chrono::steady_clock::time_point tls_checked{};
  std::atomic<int> tls_generation{0};

  std::shared_ptr<ssl::context> CurrentTls() {
    std::lock_guard lock(tls_mu);
    auto now = std::chrono::steady_clock::now();
    if (now - tls_checked >= std::chrono::seconds(1)) {
      tls_checked = now;
      if (auto st = MaybeReloadLocked(); !st.ok()) {
        log::Warn("TLS key pair not reloaded; serving the previous one",
                  {{"error", st.error().message}});
      }
    }
    return tls_ctx;
  }

  // Reloads when either file's mtime changed and the new pair loads; a half-written pair keeps
  // the previous context (the next check retries).
  Status MaybeReloadLocked() {
    struct stat cs {
    }, ks{};
    if (stat(options.tls->cert_file.c_str(), &cs) != 0 ||
        stat(options.tls->key_file.c_str(), &ks) != 0) {
      return Error::Make(
          Error::Code::kInvalidArgument,
          "TLS files not readable: " + options.tls->cert_file + ", " + options.tls->key_file);
    }
    auto same = [](const timespec& a, const timespec& b) {
      return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
    };
    if (tls_ctx && same(cs.st_mtim, tls_mtimes.first) && same(ks.st_mtim, tls_mtimes.second)) {
      return OkStatus();
    }
    auto ctx = internal::MakeServerContext(options.tls->cert_file, options.tls->key_file);
    if (!ctx.ok()) return ctx.error();
    if (options.client_ca_pem) internal::RequestClientCertificate((*ctx)->native_handle());
    tls_ctx = *ctx;
    tls_mtimes = {cs.st_mtim, ks.st_mtim};
    tls_generation++;
    return OkStatus();
  }

  // Client CA (Options::client_ca_pem), replaced by SetClientCa.
  std::mutex ca_mu;
  internal::CaStore client_ca;

  internal::CaStore CurrentClientCa() {
    std::lock_guard lock(ca_mu);
    return client_ca;
  }

  // Live connections, so Stop() can close idle keep-alive ones: their pending reads hold the
  // session, which holds this state, which owns the io_context — a cycle until the socket closes.
  std::mutex sessions_mu;
  std::vector<std::weak_ptr<SessionBase>> sessions;

  void Track(const std::shared_ptr<SessionBase>& s) {
    std::lock_guard lock(sessions_mu);
    if (sessions.size() >= 64 && (sessions.size() & (sessions.size() - 1)) == 0) {
      std::erase_if(sessions, [](const auto& w) { return w.expired(); });
    }
    sessions.push_back(s);
  }

  std::chrono::milliseconds SweepPeriod() const {
    auto shortest = std::min(options.idle_timeout, options.read_timeout);
    return std::clamp(shortest / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  }

  // Every SweepPeriod(): closes the connections past their deadline and forgets closed ones.
  static void ArmSweep(const std::shared_ptr<State>& self) {
    self->sweep.expires_after(self->SweepPeriod());
    self->sweep.async_wait([weak = std::weak_ptr<State>(self)](error_code ec) {
      auto s = weak.lock();
      if (ec || !s || s->stopping) return;
      int64_t now = NowNs();
      std::vector<std::shared_ptr<SessionBase>> live;
      {
        std::lock_guard lock(s->sessions_mu);
        std::erase_if(s->sessions, [&](const std::weak_ptr<SessionBase>& w) {
          auto session = w.lock();
          if (!session) return true;
          live.push_back(std::move(session));
          return false;
        });
      }
      for (auto& session : live) session->CloseIfExpired(now);
      ArmSweep(s);
    });
  }

  void CloseAll() {
    std::vector<std::weak_ptr<SessionBase>> all;
    {
      std::lock_guard lock(sessions_mu);
      all.swap(sessions);
    }
    for (auto& w : all) {
      if (auto s = w.lock()) s->Close();
    }
  }

  void RequestDone() {
    if (in_flight.fetch_sub(1) == 1) {
      std::lock_guard lock(mu);
      idle_cv.notify_all();
    }
  }
};

template <typename Derived>
class Session;

template <typename Derived>
class ResponderImpl final : public Responder {
 public:
  ResponderImpl(std::shared_ptr<Derived> session, bool keep_alive, unsigned version)
      : session_(std::move(session)), keep_alive_(keep_alive), version_(version) {}
  ~ResponderImpl() override {
    if (!sent_.exchange(true)) Deliver(500, "request dropped without an answer\n", {});
  }
  void Send(int status, std::string body, Headers headers) override {
    if (sent_.exchange(true)) return;
    Deliver(status, body, headers);
  }
  void Abort() override {
    if (sent_.exchange(true)) return;
    auto session = session_;
    asio::dispatch(session->Stream().get_executor(), [session] {
      session->state()->RequestDone();
      session->Close();
    });
  }
  bool ClientGone() const override { return session_->state()->stopping.load(); }
  void Hijack(HijackHandler take) override {
    if (sent_.exchange(true)) return;
    auto session = session_;
    asio::dispatch(session->Stream().get_executor(), [session, take = std::move(take)] {
      session->state()->RequestDone();
      HijackedConnection conn;
      session->Release(conn);
      take(conn);
    });
  }

 private:
  void Deliver(int status, std::string_view body, const Headers& headers) {
    auto session = session_;
    bool keep_alive = keep_alive_ && !session->state()->stopping;
    auto out = std::make_shared<std::string>(
        SerializeResponse(status, version_, keep_alive, headers, body));
    // Inline when answered from the handler on the session's own strand (the common case: no
    // queueing, no wake-up of another I/O thread); queued onto the strand from any other thread.
    asio::dispatch(session->Stream().get_executor(), [session, out, keep_alive]() mutable {
      session->Write(std::move(out), !keep_alive);
    });
  }

  std::shared_ptr<Derived> session_;
  bool keep_alive_;
  unsigned version_;
  std::atomic<bool> sent_{false};
};

template <typename Derived>
class Session {
 public:
  explicit Session(std::shared_ptr<State> state) : state_(std::move(state)) {
    // Room for a whole TLS record (16 KiB) per read. Beast sizes each read by the buffer's free
    // capacity (at least 512 bytes), and the parser consumes as it goes, so a small buffer reads a
    // 3 KiB body in many pieces; over TLS each piece already decrypted completes "immediately",
    // which asio's SSL stream turns into a zero-byte socket read and a trip through the scheduler
    // (7 per admission before this; 1 now).
    buffer_.reserve(size_t{16} * 1024);
  }
  const std::shared_ptr<State>& state() const { return state_; }

  Derived& self() { return static_cast<Derived&>(*this); }

  // The connection is closed by the sweep once `timeout` has passed, unless the deadline is moved.
  void ExpiresAfter(std::chrono::milliseconds timeout) {
    deadline_ns_.store(
        NowNs() + std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count(),
        std::memory_order_relaxed);
  }
  void ExpiresNever() { deadline_ns_.store(kNoDeadline, std::memory_order_relaxed); }
  void CloseIfPastDeadline(int64_t now_ns) {
    if (now_ns < deadline_ns_.load(std::memory_order_relaxed)) return;
    ExpiresNever();
    asio::dispatch(self().Stream().get_executor(), [s = self().shared_from_this()] { s->Close(); });
  }

  void DoRead() {
    parser_.emplace();
    parser_->body_limit(state_->options.max_body_bytes);
    parser_->header_limit(64 * 1024);
    ExpiresAfter(state_->options.idle_timeout);
    http::async_read(self().Stream(), buffer_, *parser_,
                     [s = self().shared_from_this()](error_code ec, size_t) { s->OnRead(ec); });
  }

  void OnRead(error_code ec) {
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::operation_aborted || ec == beast::error::timeout ||
        ec == asio::error::connection_reset) {
      return self().Close();
    }
    if (ec) {
      int status = 400;
      std::string reason = "malformed HTTP request: " + ec.message();
      if (ec == http::error::body_limit) {
        status = 413;
        reason =
            "request body larger than " + std::to_string(state_->options.max_body_bytes) + " bytes";
      } else if (ec == http::error::header_limit) {
        status = 431;
        reason = "request headers too large";
      }
      state_->in_flight++;
      return Write(std::make_shared<std::string>(SerializeResponse(
                       status, 11, false, {{"Content-Type", "text/plain"}}, reason + "\n")),
                   /*close=*/true);
    }
    auto msg = parser_->release();
    ServerRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    auto url = boost::urls::parse_origin_form(req.target);
    if (url) {
      req.path = std::string(url->path());
      for (auto p : url->params()) req.query.emplace(std::string(p.key), std::string(p.value));
    } else {
      req.path = req.target;
    }
    req.headers.reserve(static_cast<size_t>(std::distance(msg.base().begin(), msg.base().end())));
    for (const auto& f : msg.base()) {
      req.headers.emplace_back(AsciiLower(f.name_string()), std::string(f.value()));
    }
    req.body = std::move(msg.body());
    if (!remote_address_) {  // once per connection, not a getpeername per request
      error_code rec;
      auto ep = beast::get_lowest_layer(self().Stream()).socket().remote_endpoint(rec);
      remote_address_ = rec ? std::string() : ep.address().to_string();
    }
    req.remote_address = *remote_address_;
    req.client = client_;
    // While a request is pending the connection is not read; a slow handler must not be cut by
    // the idle timer.
    ExpiresNever();
    state_->in_flight++;
    auto responder = std::make_shared<ResponderImpl<Derived>>(self().shared_from_this(),
                                                              msg.keep_alive(), msg.version());
    try {
      state_->handler(req, responder);
    } catch (const std::exception& e) {
      log::Error("HTTP handler threw", {{"path", req.path}, {"error", e.what()}});
      responder->Send(500, std::string("internal error\n"), {{"Content-Type", "text/plain"}});
    }
  }

  // Writes a serialized response (one buffer: one TLS record and one send for a small answer).
  void Write(std::shared_ptr<std::string> out, bool close) {
    ExpiresAfter(state_->options.read_timeout);
    const std::string& bytes = *out;
    asio::async_write(
        self().Stream(), asio::buffer(bytes),
        [s = self().shared_from_this(), out = std::move(out), close](error_code ec, size_t) {
          s->state()->RequestDone();
          if (ec || close || s->state()->stopping) return s->self().Close();
          s->DoRead();
        });
  }

 protected:
  std::shared_ptr<State> state_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<std::string> remote_address_;
  std::optional<ClientIdentity> client_;  // verified once per connection (TLS with a client CA)
  std::atomic<int64_t> deadline_ns_{kNoDeadline};  // steady clock; read by the sweep
  // Set once the stream was handed over (Hijack): Close() then leaves it to its new owner.
  std::atomic<bool> hijacked_{false};
};

class PlainSession final : public Session<PlainSession>,
                           public SessionBase,
                           public std::enable_shared_from_this<PlainSession> {
 public:
  PlainSession(tcp::socket&& socket, std::shared_ptr<State> state)
      : Session(std::move(state)), stream_(std::move(socket)) {}
  beast::tcp_stream& Stream() { return stream_; }
  void Start() { DoRead(); }
  void CloseIfExpired(int64_t now_ns) override { CloseIfPastDeadline(now_ns); }
  void Close() override {
    if (hijacked_) return;
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }
  // On the session's executor.
  void Release(HijackedConnection& conn) {
    hijacked_ = true;
    conn.owner = state_;
    conn.plain.emplace(std::move(stream_));
    conn.buffer = std::move(buffer_);
  }

 private:
  beast::tcp_stream stream_;
};

class TlsSession final : public Session<TlsSession>,
                         public SessionBase,
                         public std::enable_shared_from_this<TlsSession> {
 public:
  TlsSession(tcp::socket&& socket, std::shared_ptr<ssl::context> ctx, std::shared_ptr<State> state)
      : Session(std::move(state)), ctx_(std::move(ctx)), stream_(std::move(socket), *ctx_) {
    // Asio sets SSL_MODE_RELEASE_BUFFERS, so OpenSSL frees its ~17 KiB read and write buffers
    // after every record and allocates them again for the next: on a keep-alive connection that
    // is two large malloc/free pairs per request. Keep them (34 KiB per connection; the apiserver
    // holds a few).
    SSL_clear_mode(stream_.native_handle(), SSL_MODE_RELEASE_BUFFERS);
  }
  beast::ssl_stream<beast::tcp_stream>& Stream() { return stream_; }
  void CloseIfExpired(int64_t now_ns) override { CloseIfPastDeadline(now_ns); }
  void Start() {
    ExpiresAfter(state_->options.read_timeout);
    stream_.async_handshake(ssl::stream_base::server, [s = shared_from_this()](error_code ec) {
      // Plain HTTP or a failed handshake just closes: nothing to answer.
      if (ec) return s->Close();
      if (auto ca = s->state_->CurrentClientCa()) {
        s->client_ = internal::VerifyClient(s->stream_.native_handle(), ca.get());
      }
      s->DoRead();
    });
  }
  void Close() override {
    if (hijacked_) return;
    error_code ec;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ec);
    beast::get_lowest_layer(stream_).close();
  }
  // On the session's executor.
  void Release(HijackedConnection& conn) {
    hijacked_ = true;
    conn.owner = std::make_shared<std::pair<std::shared_ptr<State>, std::shared_ptr<ssl::context>>>(
        state_, ctx_);
    conn.tls.emplace(std::move(stream_));
    conn.buffer = std::move(buffer_);
  }

 private:
  std::shared_ptr<ssl::context> ctx_;  // the key pair this connection started with
  beast::ssl_stream<beast::tcp_stream> stream_;
};

// Answers are written whole; Nagle would hold back a segment until the client ACKs the previous
// one, which it delays (request/response traffic on keep-alive connections).
void SetNoDelay(tcp::socket& s) {
  error_code ec;
  s.set_option(tcp::no_delay(true), ec);
}

class Server final : public HttpServer {
 public:
  explicit Server(std::shared_ptr<State> state)
      : state_(std::move(state)), acceptor_(asio::make_strand(state_->ioc)) {}

  ~Server() override { Stop(std::chrono::milliseconds(1000)); }

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
      return Error::Make(Error::Code::kUnavailable, "cannot listen on " + state_->options.address +
                                                        ":" + std::to_string(state_->options.port) +
                                                        ": " + ec.message());
    }
    port_ = acceptor_.local_endpoint().port();
    // Keeps the I/O threads alive while requests are pending in handlers (long polls, answers from
    // other threads) even after the acceptor is closed by Stop(); released once those are done.
    work_.emplace(state_->ioc.get_executor());
    DoAccept();
    State::ArmSweep(state_);
    int n = std::max(1, state_->options.threads);
    for (int i = 0; i < n; ++i) threads_.emplace_back([s = state_] { s->ioc.run(); });
    return OkStatus();
  }

  uint16_t port() const override { return port_; }
  int tls_generation() const override { return state_->tls_generation.load(); }

  Status SetClientCa(const std::string& pem) override {
    HS_ASSIGN_OR_RETURN(auto store, internal::LoadCaStore(pem));
    std::lock_guard lock(state_->ca_mu);
    state_->client_ca = std::move(store);
    return OkStatus();
  }

  void Stop(std::chrono::milliseconds grace) override {
    if (stopped_.exchange(true)) return;
    state_->stopping = true;
    asio::post(acceptor_.get_executor(), [this] {
      error_code ec;
      acceptor_.close(ec);
    });
    {
      std::unique_lock lock(state_->mu);
      state_->idle_cv.wait_for(lock, grace, [&] { return state_->in_flight.load() <= 0; });
    }
    work_.reset();
    state_->ioc.stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
    // Destroy pending handlers now (they hold sessions, which hold the state): closing the
    // acceptor's work and polling lets each finish with an error.
    error_code ec;
    acceptor_.close(ec);
    state_->sweep.cancel();
    state_->CloseAll();
    state_->ioc.restart();
    state_->ioc.poll();
  }

 private:
  void DoAccept() {
    // A session's handlers must not run concurrently: a strand each, unless one thread runs them
    // all (a strand then only adds a queue hop per completion).
    asio::any_io_executor ex = state_->options.threads <= 1
                                   ? asio::any_io_executor(state_->ioc.get_executor())
                                   : asio::any_io_executor(asio::make_strand(state_->ioc));
    acceptor_.async_accept(ex, [this](error_code ec, tcp::socket s) {
      if (ec) {
        if (ec == asio::error::operation_aborted || state_->stopping) return;
        log::Warn("accept failed", {{"error", ec.message()}});
      } else if (state_->options.tls) {
        SetNoDelay(s);
        auto ctx = state_->CurrentTls();
        auto session = std::make_shared<TlsSession>(std::move(s), std::move(ctx), state_);
        state_->Track(session);
        session->Start();
      } else {
        SetNoDelay(s);
        auto session = std::make_shared<PlainSession>(std::move(s), state_);
        state_->Track(session);
        session->Start();
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

std::string ServerRequest::Header(std::string_view name) const {
  return internal::HeaderValue(headers, name);
}

std::string ServerRequest::Query(std::string_view name) const {
  auto it = query.find(std::string(name));
  return it == query.end() ? std::string() : it->second;
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(Options options, Handler handler) {
  if (options.client_ca_pem && !options.tls) {
    return Error::Make(Error::Code::kInvalidArgument, "a client CA needs TLS");
  }
  auto state = std::make_shared<State>(std::move(options));
  state->handler = std::move(handler);
  if (state->options.client_ca_pem) {
    HS_ASSIGN_OR_RETURN(state->client_ca, internal::LoadCaStore(*state->options.client_ca_pem));
  }
  if (state->options.tls) {
    std::lock_guard lock(state->tls_mu);
    HS_RETURN_IF_ERROR(state->MaybeReloadLocked());
    state->tls_checked = std::chrono::steady_clock::now();
  }
  auto server = std::make_unique<Server>(state);
  HS_RETURN_IF_ERROR(server->Listen());
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace hyperslice::net
