#include "sim/gpumachine/port_map.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hyperslice::sim::gpumachine {

namespace {

Result<sockaddr_in> Address(const std::string& ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) {
    return Error::Make(Error::Code::kInvalidArgument, "not an IPv4 address: " + ip);
  }
  return a;
}

}  // namespace

// One relayed connection: both sockets, closed when the last pump lets go of it.
struct PortMap::Conn {
  int client = -1;
  int server = -1;
  ~Conn() {
    if (client >= 0) ::close(client);
    if (server >= 0) ::close(server);
  }
  void Shutdown() const {
    ::shutdown(client, SHUT_RDWR);
    ::shutdown(server, SHUT_RDWR);
  }
};

Result<std::unique_ptr<PortMap>> PortMap::Start(const std::string& public_ip, int public_port,
                                                std::string target_ip, int target_port) {
  HS_ASSIGN_OR_RETURN(sockaddr_in addr, Address(public_ip, public_port));
  HS_RETURN_IF_ERROR(Address(target_ip, target_port));
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Error::Make(Error::Code::kInternal, std::string("socket: ") + strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 64) != 0) {
    int err = errno;
    ::close(fd);
    return Error::Make(Error::Code::kUnavailable,
                       public_ip + ":" + std::to_string(public_port) + ": " + strerror(err),
                       err == EADDRINUSE ? "AddressInUse" : "");
  }
  auto map = std::unique_ptr<PortMap>(new PortMap(fd, std::move(target_ip), target_port));
  PortMap* raw = map.get();
  map->acceptor_ = std::thread([raw] { raw->AcceptLoop(); });
  return map;
}

PortMap::PortMap(int listen_fd, std::string target_ip, int target_port)
    : listen_fd_(listen_fd), target_ip_(std::move(target_ip)), target_port_(target_port) {}

PortMap::~PortMap() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> pumps;
  {
    std::lock_guard lock(mu_);
    for (const auto& c : conns_) c->Shutdown();
    pumps.swap(pumps_);
    conns_.clear();
  }
  for (auto& t : pumps) t.join();
  ::close(listen_fd_);
}

void PortMap::AcceptLoop() {
  while (!stopping_.load()) {
    int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down
    }
    accepted_.fetch_add(1);
    auto conn = std::make_shared<Conn>();
    conn->client = client;
    conn->server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto target = Address(target_ip_, target_port_);
    if (conn->server < 0 || ::connect(conn->server, reinterpret_cast<const sockaddr*>(&*target),
                                      sizeof(*target)) != 0) {
      continue;  // nothing listens in the container: the dialer sees the connection close
    }
    // Copies one direction until its source ends, then ends that direction on the other side.
    auto pump = [conn](int from, int to) {
      char buf[16384];
      while (true) {
        ssize_t n = ::read(from, buf, sizeof(buf));
        if (n <= 0) break;
        for (ssize_t off = 0; off < n;) {
          ssize_t w = ::send(to, buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
          if (w <= 0) {
            conn->Shutdown();
            return;
          }
          off += w;
        }
      }
      ::shutdown(to, SHUT_WR);
    };
    std::lock_guard lock(mu_);
    if (stopping_.load()) return;
    conns_.push_back(conn);
    pumps_.emplace_back(pump, conn->client, conn->server);
    pumps_.emplace_back(pump, conn->server, conn->client);
  }
}

}  // namespace hyperslice::sim::gpumachine
