#include "src/base/command.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/select.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <tuple>

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX leaves it undeclared

namespace hyperslice {
namespace {

// Reads both pipes to the end without letting either fill up (a child blocked on a full stderr
// pipe while we wait on stdout would hang the test).
void Drain(int out_fd, int err_fd, std::string& out, std::string& err) {
  std::array<char, 8192> buf{};
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    fd_set fds;
    FD_ZERO(&fds);
    if (out_open) FD_SET(out_fd, &fds);
    if (err_open) FD_SET(err_fd, &fds);
    if (::select(std::max(out_fd, err_fd) + 1, &fds, nullptr, nullptr, nullptr) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (auto [fd, open, dest] : {std::tuple<int, bool*, std::string*>{out_fd, &out_open, &out},
                                  std::tuple<int, bool*, std::string*>{err_fd, &err_open, &err}}) {
      if (!*open || !FD_ISSET(fd, &fds)) continue;
      ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n > 0) {
        dest->append(buf.data(), static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        *open = false;
      }
    }
  }
}

}  // namespace

CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env) {
  CommandResult r;
  if (argv.empty()) return r;
  std::array<int, 2> out{-1, -1}, err{-1, -1};
  if (::pipe2(out.data(), O_CLOEXEC) != 0) return r;
  if (::pipe2(err.data(), O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return r;
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.insert(env_strings.end(), env.begin(), env.end());
  std::vector<char*> envp, args;
  envp.reserve(env_strings.size() + 1);
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  args.reserve(argv_copy.size() + 1);
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // Nothing but stdio: other threads' sockets (Asio opens them without close-on-exec) and pipes
  // must not live on in the child.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    r.errors = std::string("cannot start ") + argv[0] + ": " + std::strerror(rc);
    ::close(out[0]);
    ::close(err[0]);
    return r;
  }
  Drain(out[0], err[0], r.output, r.errors);
  ::close(out[0]);
  ::close(err[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

Result<pid_t> StartBackground(const std::vector<std::string>& argv, const std::string& log_file) {
  if (argv.empty()) return Error::Make(Error::Code::kInvalidArgument, "no program to start");
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  cargv.reserve(args.size() + 1);
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_file.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  // Nothing else of ours: a descriptor opened without O_CLOEXEC (an HTTP server's listening
  // socket, say) would otherwise live, and listen, in the child for as long as it runs.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, cargv[0], &actions, &attr, cargv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return Error::Make(Error::Code::kInternal,
                       "cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  return pid;
}

Result<int> FreeLoopbackPort(const std::string& ip) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) {
    return Error::Make(Error::Code::kInvalidArgument, "not an IPv4 address: " + ip);
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return Error::Make(Error::Code::kInternal, std::string("socket: ") + std::strerror(errno));
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    return Error::Make(Error::Code::kInternal, "bind " + ip + ":0: " + std::strerror(err));
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace hyperslice
