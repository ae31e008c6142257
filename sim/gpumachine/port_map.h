// A published container port of a simulated machine: what a provider's port mapping (RunPod
// `ports`, Vast `-p`) is on a real one — the machine's public address and a port the provider
// chose, forwarded to the container's own address and port. Here both are loopback addresses (the
// host dials nothing else), and the forwarding is a user-space TCP relay: bytes pass untouched,
// a closed side closes the other.
//
// Thread-safe. Threads: one acceptor, two pumps per open connection; the destructor closes every
// socket and joins them all.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::sim::gpumachine {

class PortMap {
 public:
  // Listens on public_ip:public_port (kUnavailable, reason "AddressInUse", when taken) and
  // relays each connection to target_ip:target_port (refused there: the connection is closed).
  static Result<std::unique_ptr<PortMap>> Start(const std::string& public_ip, int public_port,
                                                std::string target_ip, int target_port);
  ~PortMap();
  PortMap(const PortMap&) = delete;
  PortMap& operator=(const PortMap&) = delete;

  // Connections accepted on the public side so far (what dialed the published port).
  uint64_t connections() const { return accepted_.load(); }

 private:
  struct Conn;
  PortMap(int listen_fd, std::string target_ip, int target_port);
  void AcceptLoop();

  int listen_fd_;
  std::string target_ip_;
  int target_port_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> accepted_{0};
  std::mutex mu_;
  std::vector<std::shared_ptr<Conn>> conns_;
  std::vector<std::thread> pumps_;
  std::thread acceptor_;
};

}  // namespace hyperslice::sim::gpumachine
