// A program a test starts and reads as it runs (`hyperslice dev` printing its progress, a helper
// printing pids): fork and exec with its stdout, and its stderr when asked, into a pipe whose read
// end the test polls and closes. The child is the test's own (a subreaper reaps its orphans), so
// it is signalled and waited for with the plain calls. Header-only. ChildProcess
// (child_process.h) is for a program whose output goes to a log file over restarts.
#pragma once

#include <poll.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace hyperslice::testenv {

struct PipedChild {
  pid_t pid = -1;  // -1 when it could not start
  int out = -1;    // the pipe's read end: the caller closes it
};

// Runs argv[0] (a path) with `argv`; its stdout, and its stderr when `with_stderr`, into the pipe.
inline PipedChild SpawnPiped(std::vector<std::string> argv, bool with_stderr = false) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    if (with_stderr) ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    return {};
  }
  return {pid, fds[0]};
}

// Reads what the child writes to `fd` into *seen until *seen holds `want`, the pipe ends or
// `timeout` passes; the caller's assertion on *seen says which.
inline void ReadUntil(int fd, std::string* seen, std::string_view want,
                      std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (seen->find(want) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, 500) <= 0) continue;
    char chunk[512];
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n <= 0) break;
    seen->append(chunk, static_cast<size_t>(n));
  }
}

}  // namespace hyperslice::testenv
