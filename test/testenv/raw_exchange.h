// Raw bytes to a loopback server and what comes back, for tests that must see exactly what a
// server answers to a malformed or plain-text request, or when it closes. Header-only: unit tests
// use it without linking hs_testenv.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace hyperslice::testenv {

struct Received {
  std::string bytes;  // "connect failed" when the connection was refused
  // The server closed the connection (EOF) before `wait` passed without data.
  bool closed_by_server = false;
};

// Connects to 127.0.0.1:`port`, sends `bytes` (none when empty) and reads until the server closes
// the connection or `wait` passes without data.
inline Received RawExchange(uint16_t port, const std::string& bytes, std::chrono::seconds wait) {
  Received r;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    r.bytes = "connect failed";
    return r;
  }
  timeval tv{static_cast<time_t>(wait.count()), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (!bytes.empty()) (void)!write(fd, bytes.data(), bytes.size());
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      r.bytes.append(buf, static_cast<size_t>(n));
      continue;
    }
    r.closed_by_server = n == 0;  // -1: the receive timeout, the server kept the connection
    break;
  }
  close(fd);
  return r;
}

}  // namespace hyperslice::testenv
