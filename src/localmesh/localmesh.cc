#include "src/localmesh/localmesh.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "src/base/files.h"
#include "src/base/strings.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX leaves it undeclared

namespace hyperslice::localmesh {
namespace {

Error Fail(std::string message) { return Error::Make(Error::Code::kInternal, std::move(message)); }

std::string Describe(const std::vector<std::string>& argv, const CommandResult& r) {
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  return cmd + ": exit " + std::to_string(r.exit_code) + ": " + TrimSpace(r.errors + r.output);
}

Status RunOk(const std::vector<std::string>& argv) {
  auto r = RunCommand(argv);
  if (r.exit_code != 0) return Fail(Describe(argv, r));
  return OkStatus();
}

bool Executable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

// A loopback TCP socket (closed on destruction).
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// `n` distinct ports free on the host's loopback now (the kernel's choice; headscale binds them
// moments later). All are held until all are chosen, so no two are the same.
Result<std::vector<uint16_t>> FreePorts(size_t n) {
  std::vector<std::unique_ptr<Fd>> held;
  std::vector<uint16_t> ports;
  for (size_t i = 0; i < n; ++i) {
    held.push_back(std::make_unique<Fd>(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)));
    int s = held.back()->fd;
    if (s < 0) return Fail(std::string("socket: ") + std::strerror(errno));
    sockaddr_in a = Loopback(0);
    socklen_t len = sizeof a;
    if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||     // NOLINT
        ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {  // NOLINT
      return Fail(std::string("bind: ") + std::strerror(errno));
    }
    ports.push_back(ntohs(a.sin_port));
  }
  return ports;
}

bool CanConnect(uint16_t port) {
  Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a = Loopback(port);
  return s.fd >= 0 && ::connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;  // NOLINT
}

bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

std::string MeshBinDir() {
  const char* dir = std::getenv("HYPERSLICE_MESH_BIN");
  if (dir == nullptr || *dir == '\0') return {};
  std::string d = dir;
  for (const char* b : {"headscale", "tailscaled", "tailscale"}) {
    if (!Executable(d + "/" + b)) return {};
  }
  return d;
}

std::string MeshUnavailableReason() {
  if (MeshBinDir().empty()) {
    return "HYPERSLICE_MESH_BIN is not set to a folder with headscale, tailscaled and tailscale "
           "(scripts/test.sh builds them with scripts/build-mesh.sh)";
  }
  if (::geteuid() != 0) return "the mesh tests need root for `ip netns` (network namespaces)";
  if (RunCommand({"ip", "netns", "list"}).exit_code != 0) return "`ip netns` does not work here";
  return {};
}

// --- Process ---

Result<std::unique_ptr<Process>> Process::Start(const std::vector<std::string>& argv,
                                                const std::string& log_path) {
  if (argv.empty()) return Fail("no command");
  // Everything the child needs is prepared before fork(): between fork and exec in a threaded
  // process only async-signal-safe calls may run.
  std::string exe = argv[0];
  if (exe.find('/') == std::string::npos) {
    const char* path = std::getenv("PATH");
    std::stringstream dirs(path != nullptr ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
    for (std::string d; std::getline(dirs, d, ':');) {
      if (!d.empty() && Executable(d + "/" + argv[0])) {
        exe = d + "/" + argv[0];
        break;
      }
    }
  }
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  args.reserve(copy.size() + 1);
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  Fd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  Fd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  std::array<int, 2> status_pipe{-1, -1};  // carries exec's errno; closed by a successful exec
  if (log.fd < 0 || null.fd < 0 || ::pipe2(status_pipe.data(), O_CLOEXEC) != 0) {
    return Fail("cannot start " + argv[0] + ": " + std::strerror(errno));
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    // The child dies with this process even when it is killed outright (a ctest timeout), so a
    // crashed test leaves no headscale or tailscaled running. Kept across `ip netns exec`'s exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(null.fd, STDIN_FILENO);
    ::dup2(log.fd, STDOUT_FILENO);
    ::dup2(log.fd, STDERR_FILENO);
    ::execve(exe.c_str(), args.data(), environ);
    int err = errno;
    (void)::write(status_pipe[1], &err, sizeof err);
    ::_exit(127);
  }
  ::close(status_pipe[1]);
  if (pid < 0) {
    ::close(status_pipe[0]);
    return Fail("fork: " + std::string(std::strerror(errno)));
  }
  int err = 0;
  ssize_t n = ::read(status_pipe[0], &err, sizeof err);
  ::close(status_pipe[0]);
  if (n == sizeof err) {
    ::waitpid(pid, nullptr, 0);
    return Fail("cannot start " + argv[0] + ": " + std::strerror(err));
  }
  return std::unique_ptr<Process>(new Process(pid, log_path));
}

Process::~Process() { Stop(); }

bool Process::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

void Process::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  pid_ = -1;
}

// --- NetNamespace ---

Result<std::unique_ptr<NetNamespace>> NetNamespace::Create(std::string name) {
  if (auto s = RunOk({"ip", "netns", "add", name}); !s.ok()) return s.error();
  std::unique_ptr<NetNamespace> ns(new NetNamespace(std::move(name)));
  if (auto s = RunOk({"ip", "-n", ns->name_, "link", "set", "lo", "up"}); !s.ok()) return s.error();
  return ns;
}

NetNamespace::~NetNamespace() {
  // Deleting the name frees the namespace once nothing runs in it (the owners of the processes
  // inside stop them first); interfaces in it, veth ends included, go with it.
  (void)RunCommand({"ip", "netns", "del", name_});
}

CommandResult NetNamespace::Run(const std::vector<std::string>& argv) const {
  std::vector<std::string> full = {"ip", "netns", "exec", name_};
  full.insert(full.end(), argv.begin(), argv.end());
  return RunCommand(full);
}

// --- LoopbackRelay ---

Result<std::unique_ptr<LoopbackRelay>> LoopbackRelay::Start(const std::string& netns_path,
                                                            uint16_t port) {
  // A socket belongs to the network namespace of the thread that created it, for its whole life.
  // So a short-lived thread enters the machine's namespace, creates and binds the listener there,
  // and ends; the listener keeps accepting inside the namespace while every other thread of this
  // process (the acceptor that connects onwards included) stays in the host's.
  int listen_fd = -1;
  std::string error;
  std::thread([&] {
    Fd ns(::open(netns_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (ns.fd < 0 || ::setns(ns.fd, CLONE_NEWNET) != 0) {
      error = "enter " + netns_path + ": " + std::strerror(errno);
      return;
    }
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a = Loopback(port);
    if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||  // NOLINT
        ::listen(s, 64) != 0) {
      error = "listen on 127.0.0.1:" + std::to_string(port) + " in " + netns_path + ": " +
              std::strerror(errno);
      if (s >= 0) ::close(s);
      return;
    }
    listen_fd = s;
  }).join();
  if (listen_fd < 0) return Fail(error);
  int wake = ::eventfd(0, EFD_CLOEXEC);
  if (wake < 0) {
    ::close(listen_fd);
    return Fail(std::string("eventfd: ") + std::strerror(errno));
  }
  return std::unique_ptr<LoopbackRelay>(new LoopbackRelay(listen_fd, wake, port));
}

LoopbackRelay::LoopbackRelay(int listen_fd, int wake_fd, uint16_t port)
    : listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port) {
  acceptor_ = std::thread([this] { Accept(); });
}

LoopbackRelay::~LoopbackRelay() {
  uint64_t one = 1;
  (void)::write(wake_fd_, &one, sizeof one);  // level-triggered: wakes every poll() for good
  acceptor_.join();
  {
    std::lock_guard lock(mu_);
    for (auto& t : pumps_) t.join();
  }
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void LoopbackRelay::Accept() {
  while (true) {
    std::array<pollfd, 2> fds{pollfd{listen_fd_, POLLIN, 0}, pollfd{wake_fd_, POLLIN, 0}};
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if ((fds[1].revents & POLLIN) != 0) return;
    int in = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (in < 0) continue;
    int out = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = Loopback(port_);
    if (out < 0 || ::connect(out, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {  // NOLINT
      ::close(in);
      if (out >= 0) ::close(out);
      continue;
    }
    std::lock_guard lock(mu_);
    pumps_.emplace_back([this, in, out] { Pump(in, out); });
  }
}

// Copies both ways until both sides have finished sending (a half-close is passed on) or the relay
// stops.
void LoopbackRelay::Pump(int a, int b) const {
  std::array<char, 16384> buf{};
  bool a_open = true, b_open = true;
  while (a_open || b_open) {
    std::array<pollfd, 3> fds{pollfd{a_open ? a : -1, POLLIN, 0},
                              pollfd{b_open ? b : -1, POLLIN, 0}, pollfd{wake_fd_, POLLIN, 0}};
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if ((fds[2].revents & POLLIN) != 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].revents == 0) continue;
      int from = i == 0 ? a : b, to = i == 0 ? b : a;
      bool& open = i == 0 ? a_open : b_open;
      ssize_t n = ::recv(from, buf.data(), buf.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || !WriteAll(to, buf.data(), static_cast<size_t>(n))) {
        open = false;
        ::shutdown(to, SHUT_WR);
        if (n < 0) a_open = b_open = false;
      }
    }
  }
  ::close(a);
  ::close(b);
}

// --- Headscale ---

Result<std::unique_ptr<Headscale>> Headscale::Start(const std::string& bin_dir,
                                                    const std::string& dir) {
  std::unique_ptr<Headscale> hs(new Headscale());
  hs->bin_ = bin_dir + "/headscale";
  HS_ASSIGN_OR_RETURN(auto ports, FreePorts(4));
  hs->port_ = ports[0];
  uint16_t metrics_port = ports[1], grpc_port = ports[2], stun_port = ports[3];
  ::mkdir(dir.c_str(), 0700);
  hs->config_ = dir + "/config.yaml";
  const std::string lo = "127.0.0.1:";
  std::ofstream cfg(hs->config_);
  // Everything that could reach beyond this machine is off: the update check, DERP map downloads,
  // log upload, DNS pushed to clients. The embedded DERP server is on (headscale refuses an empty
  // DERP map) with STUN on loopback; the machines reach each other directly on their LAN anyway.
  cfg << "server_url: http://" << lo << hs->port_ << "\n"
      << "listen_addr: " << lo << hs->port_ << "\n"
      << "metrics_listen_addr: " << lo << metrics_port << "\n"
      << "grpc_listen_addr: " << lo << grpc_port << "\n"
      << "grpc_allow_insecure: false\n"
      << "noise:\n  private_key_path: " << dir << "/noise_private.key\n"
      << "prefixes:\n  v4: 100.64.0.0/10\n  v6: fd7a:115c:a1e0::/48\n  allocation: sequential\n"
      << "derp:\n"
      << "  server:\n"
      << "    enabled: true\n"
      << "    region_id: 999\n"
      << "    region_code: test\n"
      << "    region_name: test\n"
      << "    verify_clients: true\n"
      << "    stun_listen_addr: " << lo << stun_port << "\n"
      << "    private_key_path: " << dir << "/derp_server_private.key\n"
      << "    automatically_add_embedded_derp_region: true\n"
      << "    ipv4: 127.0.0.1\n"
      << "  urls: []\n"
      << "  paths: []\n"
      << "  auto_update_enabled: false\n"
      << "disable_check_updates: true\n"
      << "node:\n  expiry: 0\n  ephemeral:\n    inactivity_timeout: 30m\n"
      << "database:\n  type: sqlite\n  sqlite:\n    path: " << dir
      << "/db.sqlite\n    write_ahead_log: true\n"
      << "log:\n  level: info\n  format: text\n"
      << "policy:\n  mode: file\n  path: \"\"\n"
      << "dns:\n  magic_dns: false\n  override_local_dns: false\n"
      << "  nameservers:\n    global: []\n    split: {}\n  search_domains: []\n"
      << "  extra_records: []\n"
      << "unix_socket: " << dir << "/headscale.sock\n"
      << "unix_socket_permission: \"0700\"\n"
      << "logtail:\n  enabled: false\n"
      << "taildrop:\n  enabled: false\n";
  cfg.close();
  if (!cfg) return Fail("cannot write " + hs->config_);
  HS_ASSIGN_OR_RETURN(
      hs->process_, Process::Start({hs->bin_, "-c", hs->config_, "serve"}, dir + "/headscale.log"));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!CanConnect(hs->port_)) {
    if (!hs->process_->Running() || std::chrono::steady_clock::now() > deadline) {
      return Fail("headscale did not start listening on 127.0.0.1:" + std::to_string(hs->port_) +
                  "; its log:\n" + hs->Log());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // The API key for the client under test (printed alone on stdout). The CLI reaches the server
  // over its unix socket, which may open a moment after the TCP listener: retried until then.
  CommandResult r;
  while ((r = hs->Cli({"apikeys", "create", "--expiration", "1h"})).exit_code != 0) {
    if (!hs->process_->Running() || std::chrono::steady_clock::now() > deadline) {
      return Fail("headscale apikeys create: " + TrimSpace(r.errors + r.output) +
                  "; headscale's log:\n" + hs->Log());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  hs->api_key_ = TrimSpace(r.output);
  if (hs->api_key_.empty() || hs->api_key_.find_first_of(" \n") != std::string::npos) {
    return Fail("headscale apikeys create printed no single key");  // output not echoed: a key
  }
  return hs;
}

Headscale::~Headscale() = default;

CommandResult Headscale::Cli(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {bin_, "-c", config_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

std::string Headscale::Log() const { return process_ ? ReadFileOrEmpty(process_->log_path()) : ""; }

// --- MeshLan ---

// Namespaces a mesh test left behind when it was killed ("hs<pid>-..." whose process is gone):
// their daemons died with it (PR_SET_PDEATHSIG), so only the names remain to delete.
void RemoveStaleNamespaces() {
  std::stringstream list(RunCommand({"ip", "netns", "list"}).output);
  for (std::string line; std::getline(list, line);) {
    std::string name = line.substr(0, line.find(' '));
    if (name.rfind("hs", 0) != 0) continue;
    size_t dash = name.find('-');
    std::string pid = name.substr(2, dash == std::string::npos ? 0 : dash - 2);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (::kill(std::stoi(pid), 0) != 0 && errno == ESRCH) {
      (void)RunCommand({"ip", "netns", "del", name});
    }
  }
}

Result<std::unique_ptr<MeshLan>> MeshLan::Create() {
  static std::atomic<int> lans{0};
  RemoveStaleNamespaces();
  std::unique_ptr<MeshLan> lan(
      new MeshLan("hs" + std::to_string(::getpid()) + "-" + std::to_string(lans++)));
  HS_ASSIGN_OR_RETURN(lan->switch_, NetNamespace::Create(lan->prefix_ + "-sw"));
  const std::string& sw = lan->switch_->name();
  if (auto s = RunOk({"ip", "-n", sw, "link", "add", "br0", "type", "bridge"}); !s.ok()) {
    return s.error();
  }
  if (auto s = RunOk({"ip", "-n", sw, "link", "set", "br0", "up"}); !s.ok()) return s.error();
  return lan;
}

MeshLan::~MeshLan() = default;

Result<std::unique_ptr<NetNamespace>> MeshLan::AddMachine(const std::string& name) {
  int n = next_++;
  if (n >= 200) return Fail("a MeshLan holds at most 200 machines");
  HS_ASSIGN_OR_RETURN(auto ns, NetNamespace::Create(prefix_ + "-" + name));
  const std::string& sw = switch_->name();
  std::string port = "p" + std::to_string(n);  // the switch's end; the machine's is eth0
  std::string addr = "192.0.2." + std::to_string(10 + n) + "/24";
  for (const auto& argv : std::vector<std::vector<std::string>>{
           {"ip", "-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns",
            ns->name()},
           {"ip", "-n", sw, "link", "set", port, "master", "br0", "up"},
           {"ip", "-n", ns->name(), "addr", "add", addr, "dev", "eth0"},
           {"ip", "-n", ns->name(), "link", "set", "eth0", "up"}}) {
    if (auto s = RunOk(argv); !s.ok()) return s.error();
  }
  return ns;
}

// --- Tailscaled ---

Result<std::unique_ptr<Tailscaled>> Tailscaled::Start(const std::string& bin_dir,
                                                      const NetNamespace& ns,
                                                      const Headscale& headscale,
                                                      const std::string& dir) {
  std::unique_ptr<Tailscaled> ts(new Tailscaled());
  ts->bin_dir_ = bin_dir;
  ts->ns_ = &ns;
  ts->login_server_ = headscale.url();
  ::mkdir(dir.c_str(), 0700);
  ts->socket_ = dir + "/tailscaled.sock";
  HS_ASSIGN_OR_RETURN(ts->relay_, LoopbackRelay::Start(ns.path(), headscale.port()));
  // --no-logs-no-support: no log upload (there is no route out anyway, but it should not try).
  HS_ASSIGN_OR_RETURN(
      ts->process_,
      Process::Start(
          {"ip", "netns", "exec", ns.name(), bin_dir + "/tailscaled", "--tun=userspace-networking",
           "--statedir=" + dir, "--socket=" + ts->socket_, "--port=41641", "--no-logs-no-support"},
          dir + "/tailscaled.log"));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (::access(ts->socket_.c_str(), F_OK) != 0) {
    if (!ts->process_->Running() || std::chrono::steady_clock::now() > deadline) {
      return Fail("tailscaled in " + ns.name() + " did not open its socket; its log:\n" +
                  ts->Log());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return ts;
}

Tailscaled::~Tailscaled() {
  // The daemon first (it holds relay connections), then the relay.
  process_.reset();
  relay_.reset();
}

CommandResult Tailscaled::Up(const std::string& auth_key, const std::string& hostname,
                             int timeout_seconds) const {
  return Cli({"up", "--login-server=" + login_server_, "--auth-key=" + auth_key,
              "--hostname=" + hostname, "--accept-dns=false",
              "--timeout=" + std::to_string(timeout_seconds) + "s"});
}

CommandResult Tailscaled::Cli(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {bin_dir_ + "/tailscale", "--socket=" + socket_};
  argv.insert(argv.end(), args.begin(), args.end());
  return ns_->Run(argv);
}

std::string Tailscaled::Log() const {
  return process_ ? ReadFileOrEmpty(process_->log_path()) : "";
}

}  // namespace hyperslice::localmesh
