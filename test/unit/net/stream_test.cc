// ResponseStream against a raw socket server that writes a chunked body piece by piece, stalls,
// or hangs up mid-body: what a watch connection to an apiserver can do.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "src/net/http.h"

namespace hyperslice::net {
namespace {

using namespace std::chrono_literals;

// Accepts one connection, reads the request head, then runs `script(fd)`.
class RawServer {
 public:
  explicit RawServer(std::function<void(int)> script) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    listen(listen_fd_, 4);
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, script = std::move(script)] {
      int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      std::string head;
      char c;
      while (head.find("\r\n\r\n") == std::string::npos && read(fd, &c, 1) == 1) head += c;
      script(fd);
      close(fd);
    });
  }
  ~RawServer() {
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    thread_.join();
  }
  uint16_t port() const { return port_; }

 private:
  int listen_fd_;
  uint16_t port_;
  std::thread thread_;
};

void Send(int fd, const std::string& s) { (void)!send(fd, s.data(), s.size(), MSG_NOSIGNAL); }
std::string Chunk(const std::string& s) {
  char size[32];
  snprintf(size, sizeof(size), "%zx\r\n", s.size());
  return size + s + "\r\n";
}
constexpr const char* kHead =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

std::unique_ptr<ResponseStream> Open(uint16_t port, std::chrono::milliseconds idle) {
  auto client = HttpClient::Create({.base_url = "http://127.0.0.1:" + std::to_string(port)});
  EXPECT_TRUE(client.ok());
  Request req;
  req.target = "/watch";
  auto s = (*client)->Stream(req, idle);
  EXPECT_TRUE(s.ok()) << s.error().ToString();
  return std::move(s).value();
}

TEST(Stream, PiecesArriveAsSentAndEndCleanly) {
  RawServer server([](int fd) {
    Send(fd, kHead);
    Send(fd, Chunk("{\"type\":\"ADDED\"}\n"));
    std::this_thread::sleep_for(50ms);
    Send(fd, Chunk("{\"type\":\"MODIFIED\"}\n"));
    Send(fd, "0\r\n\r\n");
  });
  auto s = Open(server.port(), 2s);
  EXPECT_EQ(s->status(), 200);
  std::string all;
  while (true) {
    auto piece = s->Next();
    ASSERT_TRUE(piece.ok()) << piece.error().ToString();
    if (piece->empty()) break;
    all += *piece;
  }
  EXPECT_EQ(all, "{\"type\":\"ADDED\"}\n{\"type\":\"MODIFIED\"}\n");
}

// The server sends the second piece only once the test has the first (or, for a stream that
// waits for more data before it delivers, after 10 s): no window to outrun.
TEST(Stream, FirstPieceIsDeliveredBeforeTheNextIsSent) {
  std::atomic<bool> second_sent{false};
  std::promise<void> got_first;
  std::future<void> first_seen = got_first.get_future();
  RawServer server([&](int fd) {
    Send(fd, kHead);
    Send(fd, Chunk("first\n"));
    first_seen.wait_for(10s);
    second_sent = true;
    Send(fd, Chunk("second\n"));
    Send(fd, "0\r\n\r\n");
  });
  auto s = Open(server.port(), 2s);
  auto piece = s->Next();
  ASSERT_TRUE(piece.ok());
  EXPECT_EQ(*piece, "first\n");
  EXPECT_FALSE(second_sent.load());  // delivered without waiting for more data
  got_first.set_value();
}

TEST(Stream, CutMidBodyIsUnavailable) {
  RawServer server([](int fd) {
    Send(fd, kHead);
    Send(fd, "40\r\n{\"type\":\"ADDED\",\"obj");  // chunk promises 64 bytes, then hang up
  });
  auto s = Open(server.port(), 2s);
  Result<std::string> piece = std::string("x");
  std::string all;
  while ((piece = s->Next()).ok() && !piece->empty()) all += *piece;
  ASSERT_FALSE(piece.ok()) << "a truncated body must not look like a clean end";
  EXPECT_EQ(piece.error().code, Error::Code::kUnavailable) << piece.error().ToString();
}

TEST(Stream, IdleTimeoutIsReported) {
  RawServer server([](int fd) {
    Send(fd, kHead);
    std::this_thread::sleep_for(600ms);
  });
  auto s = Open(server.port(), 100ms);
  auto piece = s->Next();
  ASSERT_FALSE(piece.ok());
  EXPECT_EQ(piece.error().code, Error::Code::kTimeout);
}

TEST(Stream, CancelFromAnotherThreadUnblocksNext) {
  RawServer server([](int fd) {
    Send(fd, kHead);
    std::this_thread::sleep_for(1500ms);
  });
  auto s = Open(server.port(), 10s);
  auto start = std::chrono::steady_clock::now();
  std::thread canceller([&] {
    std::this_thread::sleep_for(100ms);
    s->Cancel();
  });
  auto piece = s->Next();
  canceller.join();
  ASSERT_FALSE(piece.ok());
  EXPECT_EQ(piece.error().code, Error::Code::kCancelled) << piece.error().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

}  // namespace
}  // namespace hyperslice::net
