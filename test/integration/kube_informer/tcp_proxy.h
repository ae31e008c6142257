// A loopback TCP forwarder placed between a client and the real apiserver, so a test can break the
// network the way production breaks it: cut every connection (optionally after N more bytes toward
// the client, i.e. in the middle of a watch event), or refuse connections for a while (a
// partition). It forwards TLS bytes untouched; it never looks at or answers HTTP itself.
//
// Thread-safe. Threads: one acceptor, two pumps per connection; all joined by the destructor.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hyperslice::testing {

class TcpProxy {
 public:
  // Listens on 127.0.0.1:<free port> and forwards to 127.0.0.1:target_port. Aborts the test
  // binary on socket failures (test infrastructure).
  explicit TcpProxy(int target_port);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return port_; }

  // Every open connection is closed once it has forwarded `bytes` more bytes toward the client
  // (0: at once). New connections are not affected.
  void CutOpenConnectionsAfter(uint64_t bytes);
  // Closes every open connection and refuses new ones until Heal().
  void Partition();
  void Heal();

  uint64_t connections_accepted() const { return accepted_.load(); }
  uint64_t connections_cut() const { return cut_.load(); }

 private:
  struct Conn {
    int client_fd = -1;
    int server_fd = -1;
    std::atomic<uint64_t> budget{std::numeric_limits<uint64_t>::max()};  // bytes toward client
    std::atomic<bool> closed{false};
    void Close();
  };
  void AcceptLoop();
  void Pump(std::shared_ptr<Conn> conn, bool to_client);

  int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> partitioned_{false};
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> cut_{0};
  std::mutex mu_;
  std::vector<std::shared_ptr<Conn>> conns_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

}  // namespace hyperslice::testing
