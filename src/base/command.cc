#include "src/base/command.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/select.h>

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

}  // namespace hyperslice
