// A program a test starts and reads as it runs (`hyperslice dev` printing its progress, a helper
// printing pids): fork and exec with its stdout, and its stderr when asked, into a pipe whose read
// end the test polls and closes. The child is the test's own (a subreaper reaps its orphans), so
// it is signalled and waited for with the plain calls. Header-only. ChildProcess
// (child_process.h) is for a program whose output goes to a log file over restarts.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <string>
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

}  // namespace hyperslice::testenv
