// Running programs: waiting for one and capturing what it prints: the real CLIs tests run (kubectl,
// the providers' clients), and the local mesh's headscale/tailscale/ip commands (src/localmesh).
// posix_spawn with both pipes drained together, so a child that fills stderr never hangs it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "src/base/result.h"

namespace hyperslice {

struct CommandResult {
  int exit_code = -1;  // -1: not started or killed by a signal
  std::string output;  // stdout
  std::string errors;  // stderr
};

// Runs argv (no shell interpretation of its words) with `env` ("NAME=value") added to the
// environment, stdin from /dev/null and no other descriptor of the caller, and waits for it.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env = {});

// Starts argv in the background (looked up on PATH unless it has a '/'): stdin from /dev/null,
// stdout and stderr appended to `log_file`, no other descriptor of the caller, an empty signal mask
// (a caller that blocks SIGTERM to sigwait it would otherwise pass the block on, and stopping the
// child would hang) and a process group of its own (a terminal's Ctrl-C reaches the owner, which
// stops its children itself). Returns the child's pid; the caller reaps it.
Result<pid_t> StartBackground(const std::vector<std::string>& argv, const std::string& log_file);

// A TCP port free right now on the IPv4 loopback address `ip` (bind to port 0 and read it back),
// for servers that cannot listen on port 0 and report theirs. Errors: bad address, bind failure.
Result<int> FreeLoopbackPort(const std::string& ip = "127.0.0.1");

}  // namespace hyperslice
