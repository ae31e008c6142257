// A real Tailscale mesh on one machine, for the GPU join tests and `hyperslice dev --example gpu`
// (as src/localcluster is the real control plane for both): headscale (the coordination server)
// on the host's loopback, and userspace tailscaleds each in a network namespace of its own. The
// binaries come from scripts/build-mesh.sh ($HYPERSLICE_MESH_BIN).
//
// The network, and why it is shaped so:
//   - headscale listens on 127.0.0.1 of the host only (API, gRPC, metrics, embedded DERP's STUN):
//     the product's client under test reaches it on loopback like any local simulator.
//   - every machine is a namespace (`ip netns add`) with lo up and one veth whose far end is on a
//     bridge in a "switch" namespace; the machine's end has an address from 192.0.2.0/24
//     (TEST-NET-1). tailscaled waits for a non-loopback IPv4 address on an up interface before it
//     does anything, and two machines reach each other directly over that bridge. No interface
//     of the host is created or touched, no namespace has a route anywhere else, so nothing a
//     machine sends can leave it except through the relay below.
//   - inside each machine, 127.0.0.1:<headscale port> is a relay (LoopbackRelay) to the host's
//     headscale: a listening socket created in the machine's namespace by this process, whose
//     connections are forwarded to the host's loopback. So every tailscaled uses the same login
//     server URL as the host (http://127.0.0.1:<port>, headscale's server_url), and tailnet
//     addresses (100.64.0.0/10) are only ever dialed by tailscaled inside its namespace.
// Everything is torn down by the destructors: processes killed, namespaces deleted.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/base/command.h"
#include "src/base/result.h"

namespace hyperslice::localmesh {

// $HYPERSLICE_MESH_BIN when it holds headscale, tailscaled and tailscale; "" otherwise.
std::string MeshBinDir();
// Why the mesh cannot run here ("" when they can): no binaries, not root, no `ip netns`.
std::string MeshUnavailableReason();

// A child process with its output in a log file; killed (TERM, then KILL) on destruction, and by
// the kernel when this process dies (PR_SET_PDEATHSIG, which fires when the *thread* that started
// it exits: start processes from a test's own thread, not a short-lived one).
class Process {
 public:
  static Result<std::unique_ptr<Process>> Start(const std::vector<std::string>& argv,
                                                const std::string& log_path);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  bool Running();
  void Stop();
  const std::string& log_path() const { return log_path_; }

 private:
  Process(int pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  int pid_;
  std::string log_path_;
};

// `ip netns add <name>` with lo up; `ip netns del` on destruction.
class NetNamespace {
 public:
  static Result<std::unique_ptr<NetNamespace>> Create(std::string name);
  ~NetNamespace();
  NetNamespace(const NetNamespace&) = delete;
  NetNamespace& operator=(const NetNamespace&) = delete;
  const std::string& name() const { return name_; }
  std::string path() const { return "/run/netns/" + name_; }
  // Runs argv inside the namespace (`ip netns exec`).
  CommandResult Run(const std::vector<std::string>& argv) const;

 private:
  explicit NetNamespace(std::string name) : name_(std::move(name)) {}
  std::string name_;
};

// Listens on 127.0.0.1:`port` inside a namespace and forwards each connection to 127.0.0.1:`port`
// of the namespace this process runs in (the host's). Stops, closing every connection, on
// destruction.
class LoopbackRelay {
 public:
  static Result<std::unique_ptr<LoopbackRelay>> Start(const std::string& netns_path, uint16_t port);
  ~LoopbackRelay();
  LoopbackRelay(const LoopbackRelay&) = delete;
  LoopbackRelay& operator=(const LoopbackRelay&) = delete;

 private:
  LoopbackRelay(int listen_fd, int wake_fd, uint16_t port);
  void Accept();
  void Pump(int a, int b) const;

  int listen_fd_;
  int wake_fd_;  // an eventfd: readable once stopping, which every poll() also waits on
  uint16_t port_;
  std::mutex mu_;
  std::vector<std::thread> pumps_;
  std::thread acceptor_;
};

// headscale on the host's loopback: sqlite, noise and DERP keys in `dir`; the embedded DERP
// server (required: headscale refuses to start with an empty DERP map) with its STUN socket on
// loopback; no update check, no log upload, no DNS; one API key.
class Headscale {
 public:
  static Result<std::unique_ptr<Headscale>> Start(const std::string& bin_dir,
                                                  const std::string& dir);
  ~Headscale();
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  uint16_t port() const { return port_; }
  // Never logged by the tests; handed to the client under test.
  const std::string& api_key() const { return api_key_; }
  // `headscale -c <config> <args>` (the CLI talks to the server over its unix socket).
  CommandResult Cli(const std::vector<std::string>& args) const;
  std::string Log() const;

 private:
  Headscale() = default;
  std::string bin_;
  std::string config_;
  uint16_t port_ = 0;
  std::string api_key_;
  std::unique_ptr<Process> process_;
};

// The machines' LAN: a switch namespace with a bridge. AddMachine makes a namespace on it with
// address 192.0.2.<10 + n>/24.
class MeshLan {
 public:
  // Namespaces are named "hs<pid>-<n>-sw" and "hs<pid>-<n>-<machine>" (the pid keeps concurrent
  // test binaries apart, and lets a later run delete what a killed one left).
  static Result<std::unique_ptr<MeshLan>> Create();
  ~MeshLan();
  Result<std::unique_ptr<NetNamespace>> AddMachine(const std::string& name);

 private:
  explicit MeshLan(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string prefix_;
  std::unique_ptr<NetNamespace> switch_;
  int next_ = 0;
};

// A userspace tailscaled in a machine namespace, its state and socket in `dir`, with a relay to
// headscale so it can log in at headscale's own URL.
class Tailscaled {
 public:
  static Result<std::unique_ptr<Tailscaled>> Start(const std::string& bin_dir,
                                                   const NetNamespace& ns,
                                                   const Headscale& headscale,
                                                   const std::string& dir);
  ~Tailscaled();
  // `tailscale up --login-server <headscale> --auth-key <key> --hostname <name>`, inside the
  // namespace, waiting at most `timeout_seconds` for the node to be running.
  CommandResult Up(const std::string& auth_key, const std::string& hostname,
                   int timeout_seconds = 60) const;
  // `tailscale --socket <socket> <args>` inside the namespace.
  CommandResult Cli(const std::vector<std::string>& args) const;
  std::string Log() const;

 private:
  Tailscaled() = default;
  std::string bin_dir_;
  const NetNamespace* ns_ = nullptr;
  std::string socket_;
  std::string login_server_;
  std::unique_ptr<LoopbackRelay> relay_;
  std::unique_ptr<Process> process_;
};

}  // namespace hyperslice::localmesh
