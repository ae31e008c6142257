// Exec through the CRI (cri_exec.h): the runtime's Exec gives a URL on its streaming server; the
// agent connects to it as a client with WebSocket `v4.channel.k8s.io` (what containerd 1.6's
// streaming server speaks, channel-prefixed binary messages: 0 stdin, 1 stdout, 2 stderr,
// 3 the final metav1.Status, 4 resize) and bridges it to the RunnerAgent Exec stream.
#include "src/runners/agent/cri_exec.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <deque>
#include <thread>

#include "src/runners/agent/container_runtime.h"

namespace hyperslice::runners::agent {
namespace v1 = ::hyperslice::runners::v1;
namespace cri = ::runtime::v1;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace json = boost::json;

namespace {

constexpr char kProtocol[] = "v4.channel.k8s.io";
enum Channel : char { kStdin = 0, kStdout = 1, kStderr = 2, kError = 3, kResize = 4 };

// The exit code a v4 error channel's metav1.Status means: Success is 0, NonZeroExitCode carries
// it in details.causes[reason=ExitCode].message; anything else is an error (code -1).
std::pair<int, std::string> ExitOf(const std::string& status_json) {
  if (status_json.empty()) return {-1, "the runtime's stream ended without a status"};
  boost::system::error_code ec;
  json::value v = json::parse(status_json, ec);
  if (ec || !v.is_object()) return {-1, "the runtime's exec status is not JSON"};
  const auto& o = v.as_object();
  auto str = [](const json::object& obj, const char* key) -> std::string {
    const auto* f = obj.if_contains(key);
    return f != nullptr && f->is_string() ? std::string(f->as_string()) : "";
  };
  if (str(o, "status") == "Success") return {0, ""};
  if (const auto* details = o.if_contains("details"); details != nullptr && details->is_object()) {
    if (const auto* causes = details->as_object().if_contains("causes");
        causes != nullptr && causes->is_array()) {
      for (const auto& c : causes->as_array()) {
        if (c.is_object() && str(c.as_object(), "reason") == "ExitCode") {
          try {
            return {std::stoi(str(c.as_object(), "message")), ""};
          } catch (const std::exception&) {
            break;
          }
        }
      }
    }
  }
  return {-1, str(o, "message")};
}

// One WebSocket session on its own io_context: this thread runs the reads, writes are queued
// from the gRPC input thread through post (Beast allows one read and one write in flight).
class Session {
 public:
  using Stream = grpc::ServerReaderWriter<v1::ExecOutput, v1::ExecInput>;
  Session(Stream* stream) : stream_(stream), ws_(ioc_) {}

  Status Connect(const std::string& url) {
    auto u = boost::urls::parse_uri(url);
    if (!u || u->scheme() != "http") {
      return Error::Make(Error::Code::kInternal, "the runtime's exec URL is not http: " + url);
    }
    std::string host = u->host();
    std::string port = u->has_port() ? std::string(u->port()) : "80";
    std::string target = std::string(u->encoded_target());
    boost::system::error_code ec;
    asio::ip::tcp::resolver resolver(ioc_);
    auto endpoints = resolver.resolve(host, port, ec);
    if (!ec) beast::get_lowest_layer(ws_).connect(endpoints, ec);
    if (ec) {
      return Error::Make(Error::Code::kUnavailable,
                         "cannot reach the runtime's streaming server: " + ec.message());
    }
    ws_.set_option(websocket::stream_base::decorator([](websocket::request_type& req) {
      req.set(beast::http::field::sec_websocket_protocol, kProtocol);
    }));
    websocket::response_type res;
    ws_.handshake(res, host + ":" + port, target, ec);
    if (ec) {
      return Error::Make(Error::Code::kUnavailable,
                         "the runtime's streaming server refused the WebSocket: " + ec.message());
    }
    ws_.binary(true);
    return OkStatus();
  }

  // Queues a message for `channel` (any thread).
  void Send(Channel channel, const std::string& data) {
    asio::post(ioc_, [this, msg = std::string(1, channel) + data] {
      queue_.push_back(msg);
      if (queue_.size() == 1) WriteNext();
    });
  }
  // Ends the session (any thread): the read fails and Run returns.
  void Close() {
    asio::post(ioc_, [this] {
      boost::system::error_code ec;
      beast::get_lowest_layer(ws_).socket().close(ec);
    });
  }

  // Reads until the server closes; returns the error channel's text.
  std::string Run() {
    Read();
    ioc_.run();
    return status_;
  }

 private:
  void WriteNext() {
    ws_.async_write(asio::buffer(queue_.front()), [this](boost::system::error_code ec, size_t) {
      queue_.pop_front();
      if (ec) {
        queue_.clear();
        return;
      }
      if (!queue_.empty()) WriteNext();
    });
  }
  void Read() {
    ws_.async_read(buffer_, [this](boost::system::error_code ec, size_t) {
      if (ec) {
        boost::system::error_code ignored;
        beast::get_lowest_layer(ws_).socket().close(ignored);
        return;
      }
      std::string msg = beast::buffers_to_string(buffer_.data());
      buffer_.consume(buffer_.size());
      if (!msg.empty() && msg.size() > 1) {
        std::string data = msg.substr(1);
        v1::ExecOutput out;
        switch (msg[0]) {
          case kStdout:
            out.set_stdout(std::move(data));
            stream_->Write(out);
            break;
          case kStderr:
            out.set_stderr(std::move(data));
            stream_->Write(out);
            break;
          case kError:
            status_ += data;
            break;
          default:
            break;
        }
      }
      Read();
    });
  }

  Stream* stream_;
  asio::io_context ioc_;
  websocket::stream<beast::tcp_stream> ws_;
  beast::flat_buffer buffer_;
  std::deque<std::string> queue_;  // on ioc_'s thread only
  std::string status_;
};

}  // namespace

grpc::Status ServeCriExec(cri::RuntimeService::StubInterface& runtime, const std::string& id,
                          const v1::ExecInput::ExecStart& start, grpc::ServerContext* ctx,
                          grpc::ServerReaderWriter<v1::ExecOutput, v1::ExecInput>* stream) {
  cri::ExecRequest req;
  req.set_container_id(id);
  for (const auto& a : start.command()) req.add_cmd(a);
  req.set_tty(start.tty());
  req.set_stdin(start.stdin() || start.tty());
  req.set_stdout(true);
  req.set_stderr(!start.tty());  // a terminal merges stderr into stdout (CRI refuses both)
  cri::ExecResponse resp;
  {
    grpc::ClientContext call;
    call.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (auto st = runtime.Exec(&call, req, &resp); !st.ok()) {
      return ExecFailed(stream, "the container runtime's exec failed: " + st.error_message());
    }
  }
  Session session(stream);
  if (Status st = session.Connect(resp.url()); !st.ok()) {
    return ExecFailed(stream, st.error().message);
  }
  // The client's input on its own thread (the only reader of the stream); the session's thread
  // is the only writer until it ends.
  std::atomic<bool> finished{false};
  std::thread input([&] {
    v1::ExecInput msg;
    while (!finished && stream->Read(&msg)) {
      if (msg.has_stdin()) {
        session.Send(kStdin, msg.stdin());
      } else if (msg.has_resize() && msg.resize().width() > 0 && msg.resize().height() > 0) {
        session.Send(kResize, "{\"Width\":" + std::to_string(msg.resize().width()) +
                                  ",\"Height\":" + std::to_string(msg.resize().height()) + "}");
      } else if (msg.has_close_stdin() && msg.close_stdin() && start.tty()) {
        // v4 has no way to close stdin alone; a terminal says end of input with ^D.
        session.Send(kStdin, "\x04");
      }
    }
    // A client gone (not one that only half-closed) ends the command's stream.
    if (!finished && ctx->IsCancelled()) session.Close();
  });
  std::string status = session.Run();
  finished = true;
  auto [code, error] = ExitOf(status);
  v1::ExecOutput exit;
  exit.mutable_exit()->set_code(code);
  if (code < 0) exit.mutable_exit()->set_error(error);
  stream->Write(exit);
  // A client that never half-closes would keep Read() blocked: end the call for it.
  ctx->TryCancel();
  input.join();
  return grpc::Status::OK;
}

}  // namespace hyperslice::runners::agent
