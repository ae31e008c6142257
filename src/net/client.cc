// HttpClient on Boost.Beast. Each call runs its connection's own io_context on the calling thread
// until the operation completes or the stream's timer fires: blocking semantics for callers,
// Beast's timeouts and cancellation underneath. Idle connections are pooled (keep-alive).
#include <atomic>
#include <mutex>
#include <optional>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/url/parse.hpp>

#include "src/base/strings.h"
#include "src/net/http.h"
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

constexpr uint64_t kMaxBodyBytes = 1ULL << 30;  // a list of 10k fat Nodes is ~100 MiB

Headers CollectHeaders(const http::fields& fields) {
  Headers out;
  for (const auto& f : fields)
    out.emplace_back(AsciiLower(f.name_string()), std::string(f.value()));
  return out;
}

Error TransportError(const error_code& ec, const std::string& what) {
  if (ec == beast::error::timeout) {
    return Error::Make(Error::Code::kTimeout, what + ": timed out");
  }
  if (ec == asio::error::operation_aborted) {
    return Error::Make(Error::Code::kCancelled, what + ": cancelled");
  }
  return Error::Make(Error::Code::kUnavailable, what + ": " + ec.message());
}

// One TCP (optionally TLS) connection with its own io_context.
class Connection {
 public:
  Connection(const std::shared_ptr<ssl::context>& tls_ctx, std::string server_name)
      : server_name_(std::move(server_name)) {
    if (tls_ctx) {
      tls_ = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ioc_, *tls_ctx);
    } else {
      plain_ = std::make_unique<beast::tcp_stream>(ioc_);
    }
  }

  // Runs `start(handler)` to completion on this thread.
  template <typename Start>
  error_code Run(Start&& start) {
    error_code result;
    ioc_.restart();
    start([&result](error_code ec, auto&&...) { result = ec; });
    ioc_.run();
    return result;
  }

  error_code Connect(const std::string& host, const std::string& port,
                     std::chrono::milliseconds timeout, bool insecure) {
    tcp::resolver resolver(ioc_);
    error_code ec;
    auto results = resolver.resolve(host, port, ec);
    if (ec) return ec;
    Tcp().expires_after(timeout);
    ec = Run([&](auto h) {
      Tcp().async_connect(results, [h](error_code e, const tcp::endpoint&) mutable { h(e); });
    });
    if (ec || !tls_) return ec;
    error_code addr_ec;
    asio::ip::make_address(server_name_, addr_ec);
    bool is_ip = !addr_ec;
    if (!is_ip && !SSL_set_tlsext_host_name(tls_->native_handle(), server_name_.c_str())) {
      return error_code(static_cast<int>(::ERR_get_error()), asio::error::get_ssl_category());
    }
    if (!insecure) tls_->set_verify_callback(ssl::host_name_verification(server_name_));
    Tcp().expires_after(timeout);
    return Run([&](auto h) { tls_->async_handshake(ssl::stream_base::client, h); });
  }

  template <typename Message>
  error_code Write(Message& msg, std::chrono::milliseconds timeout) {
    Tcp().expires_after(timeout);
    if (tls_) return Run([&](auto h) { http::async_write(*tls_, msg, h); });
    return Run([&](auto h) { http::async_write(*plain_, msg, h); });
  }

  template <typename Parser>
  error_code ReadHeader(Parser& p, std::chrono::milliseconds timeout) {
    Tcp().expires_after(timeout);
    if (tls_) return Run([&](auto h) { http::async_read_header(*tls_, buffer_, p, h); });
    return Run([&](auto h) { http::async_read_header(*plain_, buffer_, p, h); });
  }

  template <typename Parser>
  error_code Read(Parser& p, std::chrono::milliseconds timeout) {
    Tcp().expires_after(timeout);
    if (tls_) return Run([&](auto h) { http::async_read(*tls_, buffer_, p, h); });
    return Run([&](auto h) { http::async_read(*plain_, buffer_, p, h); });
  }

  template <typename Parser>
  error_code ReadSome(Parser& p, std::chrono::milliseconds timeout) {
    Tcp().expires_after(timeout);
    if (tls_) return Run([&](auto h) { http::async_read_some(*tls_, buffer_, p, h); });
    return Run([&](auto h) { http::async_read_some(*plain_, buffer_, p, h); });
  }

  // Thread-safe: aborts whatever operation is pending or next started on this connection.
  void CancelFromAnyThread() {
    asio::post(ioc_, [this] {
      error_code ignored;
      Tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
      Tcp().cancel();
    });
  }

  bool reused = false;

 private:
  beast::tcp_stream& Tcp() { return tls_ ? beast::get_lowest_layer(*tls_) : *plain_; }

  asio::io_context ioc_{1};
  std::unique_ptr<beast::tcp_stream> plain_;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls_;
  beast::flat_buffer buffer_;
  std::string server_name_;
};

class Stream;

class Client final : public HttpClient, public std::enable_shared_from_this<Client> {
 public:
  Client(Options options, std::shared_ptr<ssl::context> ctx, std::string host, std::string port,
         std::string prefix)
      : options_(std::move(options)),
        ctx_(std::move(ctx)),
        host_(std::move(host)),
        port_(std::move(port)),
        prefix_(std::move(prefix)) {}

  const Options& options() const override { return options_; }

  Result<Response> Do(const Request& request) override {
    auto req = Build(request);
    for (int attempt = 0;; ++attempt) {
      HS_ASSIGN_OR_RETURN(auto conn,
                          Acquire(request.timeout, attempt > 0 || request.fresh_connection));
      bool reused = conn->reused;
      error_code ec = conn->Write(req, request.timeout);
      http::response_parser<http::string_body> parser;
      parser.body_limit(kMaxBodyBytes);
      parser.header_limit(64 * 1024);
      if (!ec) ec = conn->Read(parser, request.timeout);
      if (ec) {
        // A pooled connection the server closed while idle fails on first use; retry on a new one.
        if (reused && attempt == 0 && !request.fresh_connection &&
            (ec == http::error::end_of_stream || ec == asio::error::eof ||
             ec == asio::error::connection_reset || ec == asio::error::broken_pipe)) {
          continue;
        }
        return TransportError(ec, request.method + " " + request.target);
      }
      auto res = parser.release();
      Response out;
      out.status = static_cast<int>(res.result_int());
      out.headers = CollectHeaders(res.base());
      out.body = std::move(res.body());
      if (res.keep_alive()) Release(std::move(conn));
      return out;
    }
  }

  Result<std::unique_ptr<ResponseStream>> Stream(const Request& request,
                                                 std::chrono::milliseconds idle_timeout) override;

  http::request<http::string_body> Build(const Request& r) const {
    http::request<http::string_body> req;
    req.method_string(r.method);
    req.target(prefix_ + r.target);
    req.version(11);
    req.set(http::field::host, host_ + ":" + port_);
    req.set(http::field::user_agent, options_.user_agent);
    for (const auto& [k, v] : r.headers) req.set(k, v);
    if (!r.body.empty() || r.method == "POST" || r.method == "PUT" || r.method == "PATCH") {
      req.body() = r.body;
      req.prepare_payload();
    }
    req.keep_alive(true);
    return req;
  }

  Result<std::unique_ptr<Connection>> Acquire(std::chrono::milliseconds timeout, bool fresh) {
    if (!fresh) {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        auto c = std::move(idle_.back());
        idle_.pop_back();
        c->reused = true;
        return c;
      }
    }
    auto server_name = options_.tls.server_name.empty() ? host_ : options_.tls.server_name;
    auto conn = std::make_unique<Connection>(ctx_, server_name);
    auto ec = conn->Connect(host_, port_, std::min(timeout, options_.connect_timeout),
                            options_.tls.insecure_skip_verify);
    if (ec) {
      std::string what = "connect to " + host_ + ":" + port_;
      Error err = ec.category() == asio::error::get_ssl_category()
                      ? Error::Make(Error::Code::kUnavailable,
                                    what + ": TLS handshake failed (" + ec.message() +
                                        "); check the server's certificate authority and name")
                      : TransportError(ec, what);
      err.reason = kReasonConnectFailed;
      return err;
    }
    return conn;
  }

  void Release(std::unique_ptr<Connection> conn) {
    std::lock_guard lock(mu_);
    if (idle_.size() < options_.max_idle_connections) idle_.push_back(std::move(conn));
  }

 private:
  Options options_;
  std::shared_ptr<ssl::context> ctx_;
  std::string host_, port_, prefix_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

class Stream final : public ResponseStream {
 public:
  Stream(std::unique_ptr<Connection> conn, std::chrono::milliseconds idle)
      : conn_(std::move(conn)), idle_(idle) {
    parser_.body_limit(boost::none);
    parser_.header_limit(64 * 1024);
  }

  error_code Start(http::request<http::string_body>& req, std::chrono::milliseconds timeout) {
    error_code ec = conn_->Write(req, timeout);
    if (ec) return ec;
    ec = conn_->ReadHeader(parser_, timeout);
    if (ec) return ec;
    status_ = static_cast<int>(parser_.get().result_int());
    headers_ = CollectHeaders(parser_.get().base());
    return {};
  }

  int status() const override { return status_; }
  const Headers& headers() const override { return headers_; }

  Result<std::string> Next() override {
    char buf[16 * 1024];
    while (true) {
      if (cancelled_) return Error::Make(Error::Code::kCancelled, "stream cancelled");
      if (parser_.is_done()) return std::string();
      parser_.get().body().data = buf;
      parser_.get().body().size = sizeof(buf);
      error_code ec = conn_->ReadSome(parser_, idle_);
      if (ec == http::error::need_buffer) ec = {};
      size_t n = sizeof(buf) - parser_.get().body().size;
      if (n > 0) return std::string(buf, n);
      if (cancelled_) return Error::Make(Error::Code::kCancelled, "stream cancelled");
      if (ec == http::error::end_of_stream || ec == asio::error::eof ||
          ec == http::error::partial_message) {
        if (parser_.is_done()) return std::string();
        return Error::Make(Error::Code::kUnavailable,
                           "connection closed in the middle of the body");
      }
      if (ec) return TransportError(ec, "reading response body");
    }
  }

  void Cancel() override {
    cancelled_ = true;
    conn_->CancelFromAnyThread();
  }

 private:
  std::unique_ptr<Connection> conn_;
  std::chrono::milliseconds idle_;
  http::response_parser<http::buffer_body> parser_;
  int status_ = 0;
  Headers headers_;
  std::atomic<bool> cancelled_{false};
};

Result<std::unique_ptr<ResponseStream>> Client::Stream(const Request& request,
                                                       std::chrono::milliseconds idle_timeout) {
  auto req = Build(request);
  // Streams never come from the pool: a watch must not fail on a stale connection.
  HS_ASSIGN_OR_RETURN(auto conn, Acquire(request.timeout, /*fresh=*/true));
  auto stream = std::make_unique<class Stream>(std::move(conn), idle_timeout);
  if (auto ec = stream->Start(req, request.timeout)) {
    return TransportError(ec, request.method + " " + request.target);
  }
  return std::unique_ptr<ResponseStream>(std::move(stream));
}

}  // namespace

std::string internal::HeaderValue(const Headers& headers, std::string_view name) {
  std::string lower = AsciiLower(name);
  for (const auto& [k, v] : headers) {
    if (k == lower) return v;
  }
  return {};
}

std::string Response::Header(std::string_view name) const {
  return internal::HeaderValue(headers, name);
}

std::string UrlEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Result<std::shared_ptr<HttpClient>> HttpClient::Create(Options options) {
  auto url = boost::urls::parse_absolute_uri(options.base_url);
  if (!url) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "invalid server URL \"" + options.base_url + "\": " + url.error().message());
  }
  std::string scheme(url->scheme());
  if (scheme != "https" && scheme != "http") {
    return Error::Make(Error::Code::kInvalidArgument,
                       "unsupported URL scheme \"" + scheme + "\" in " + options.base_url);
  }
  std::string host(url->host_address());
  if (host.empty()) {
    return Error::Make(Error::Code::kInvalidArgument, "no host in URL " + options.base_url);
  }
  std::string port(url->port());
  if (port.empty()) port = scheme == "https" ? "443" : "80";
  std::string prefix(url->encoded_path());
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  std::shared_ptr<ssl::context> ctx;
  if (scheme == "https") {
    HS_ASSIGN_OR_RETURN(ctx, internal::MakeClientContext(options.tls));
  }
  return std::shared_ptr<HttpClient>(std::make_shared<Client>(
      std::move(options), std::move(ctx), std::move(host), std::move(port), std::move(prefix)));
}

}  // namespace hyperslice::net
