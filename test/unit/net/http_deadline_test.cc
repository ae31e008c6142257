// The deadlines of net::HttpServer (the webhook relies on them) (idle keep-alive connections and
// slow requests are closed; a request in its handler is not), now enforced by the server's periodic
// sweep instead of per-operation Beast timers. Raw loopback sockets, so the test sees exactly when
// the server closes.
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "src/net/server.h"
#include "test/testenv/raw_exchange.h"

namespace hyperslice::net {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<HttpServer> StartServer(std::chrono::milliseconds idle, Handler handler) {
  HttpServer::Options o;
  o.idle_timeout = idle;
  o.read_timeout = 30s;
  o.threads = 1;
  auto server = HttpServer::Start(o, std::move(handler));
  EXPECT_TRUE(server.ok()) << server.error().ToString();
  return std::move(server).value();
}

using testenv::Received;

Received SendAndRead(uint16_t port, const std::string& bytes, std::chrono::seconds wait) {
  return testenv::RawExchange(port, bytes, wait);
}

void Echo(const ServerRequest& req, const std::shared_ptr<Responder>& r) { r->Send(200, req.path); }

TEST(HttpDeadlines, IdleKeepAliveConnectionIsClosedAfterTheIdleTimeout) {
  auto server = StartServer(200ms, Echo);
  // One keep-alive request answered, then silence: the server closes the connection long before
  // our own 10 s receive timeout.
  Received r = SendAndRead(server->port(), "GET /first HTTP/1.1\r\nHost: x\r\n\r\n", 10s);
  EXPECT_NE(r.bytes.find("200 OK"), std::string::npos) << r.bytes;
  EXPECT_NE(r.bytes.find("/first"), std::string::npos) << r.bytes;
  EXPECT_TRUE(r.closed_by_server);
}

TEST(HttpDeadlines, ConnectionThatNeverSendsIsClosed) {
  auto server = StartServer(200ms, Echo);
  Received r = SendAndRead(server->port(), "", 10s);
  EXPECT_EQ(r.bytes, "");
  EXPECT_TRUE(r.closed_by_server);
}

TEST(HttpDeadlines, RequestThatNeverCompletesIsClosed) {
  auto server = StartServer(200ms, Echo);
  Received r = SendAndRead(
      server->port(), "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\npart", 10s);
  EXPECT_EQ(r.bytes.find("200"), std::string::npos) << r.bytes;
  EXPECT_TRUE(r.closed_by_server);
}

TEST(HttpDeadlines, RequestInItsHandlerIsNotCutByTheIdleTimeout) {
  // The handler answers after five idle timeouts have passed (simulated slow work on another
  // thread); the connection must stay open for the answer.
  auto server =
      StartServer(100ms, [](const ServerRequest& req, const std::shared_ptr<Responder>& r) {
        std::thread([r, path = req.path] {
          std::this_thread::sleep_for(500ms);
          r->Send(200, "late " + path);
        }).detach();
      });
  Received r = SendAndRead(server->port(),
                           "GET /held HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 10s);
  EXPECT_NE(r.bytes.find("late /held"), std::string::npos) << r.bytes;
  EXPECT_TRUE(r.closed_by_server);
}

}  // namespace
}  // namespace hyperslice::net
