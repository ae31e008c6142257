#include "test/integration/kube_informer/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hyperslice::testing {
namespace {

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "TcpProxy: %s: %s\n", what, std::strerror(errno));
  std::abort();
}

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

void TcpProxy::Conn::Close() {
  if (closed.exchange(true)) return;
  // shutdown() wakes both pumps blocked in recv(); the fds themselves are closed only by the
  // proxy's destructor, after the pumps are joined, so no pump can touch a reused fd.
  ::shutdown(client_fd, SHUT_RDWR);
  ::shutdown(server_fd, SHUT_RDWR);
}

TcpProxy::TcpProxy(int target_port) : target_port_(target_port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) Die("socket");
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a = Loopback(0);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Die("bind");
  if (::listen(listen_fd_, 128) != 0) Die("listen");
  socklen_t len = sizeof(a);
  if (::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) Die("getsockname");
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

TcpProxy::~TcpProxy() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    for (auto& c : conns_) c->Close();
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
  std::lock_guard lock(mu_);
  for (auto& c : conns_) {
    ::close(c->client_fd);
    ::close(c->server_fd);
  }
  ::close(listen_fd_);
}

void TcpProxy::AcceptLoop() {
  for (;;) {
    pollfd p{listen_fd_, POLLIN, 0};
    int r = ::poll(&p, 1, 100);
    if (stopping_) return;
    if (r <= 0) continue;
    int cfd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (cfd < 0) {
      if (stopping_) return;
      continue;
    }
    if (partitioned_) {
      ::close(cfd);
      continue;
    }
    int sfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = Loopback(target_port_);
    if (sfd < 0 || ::connect(sfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      if (sfd >= 0) ::close(sfd);
      ::close(cfd);
      continue;
    }
    int one = 1;
    ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ::setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto conn = std::make_shared<Conn>();
    conn->client_fd = cfd;
    conn->server_fd = sfd;
    ++accepted_;
    std::lock_guard lock(mu_);
    // Forget connections that are done (their fds are closed at destruction only, to keep the
    // pumps' fds valid; the count stays small in tests).
    conns_.push_back(conn);
    threads_.emplace_back([this, conn] { Pump(conn, /*to_client=*/true); });
    threads_.emplace_back([this, conn] { Pump(conn, /*to_client=*/false); });
  }
}

void TcpProxy::Pump(std::shared_ptr<Conn> conn, bool to_client) {
  int from = to_client ? conn->server_fd : conn->client_fd;
  int to = to_client ? conn->client_fd : conn->server_fd;
  std::vector<char> buf(16 * 1024);
  while (!conn->closed) {
    ssize_t n = ::recv(from, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    size_t len = static_cast<size_t>(n);
    bool cut_now = false;
    if (to_client) {
      uint64_t budget = conn->budget.load();
      if (budget != std::numeric_limits<uint64_t>::max()) {
        if (len >= budget) {
          len = static_cast<size_t>(budget);
          cut_now = true;
        }
        conn->budget.store(budget - len);
      }
    }
    if (len > 0 && !WriteAll(to, buf.data(), len)) break;
    if (cut_now) {
      ++cut_;
      break;
    }
  }
  conn->Close();
}

void TcpProxy::CutOpenConnectionsAfter(uint64_t bytes) {
  std::lock_guard lock(mu_);
  for (auto& c : conns_) {
    if (c->closed) continue;
    if (bytes == 0) {
      ++cut_;
      c->Close();
    } else {
      c->budget.store(bytes);
    }
  }
}

void TcpProxy::Partition() {
  partitioned_ = true;
  std::lock_guard lock(mu_);
  for (auto& c : conns_) {
    if (!c->closed) {
      ++cut_;
      c->Close();
    }
  }
}

void TcpProxy::Heal() { partitioned_ = false; }

}  // namespace hyperslice::testing
