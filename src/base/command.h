// Running a program and capturing what it prints: the real CLIs tests run (kubectl, the
// providers' clients), and the local mesh's headscale/tailscale/ip commands (src/localmesh).
// posix_spawn with both pipes drained together, so a child that fills stderr never hangs it.
#pragma once

#include <string>
#include <vector>

namespace hyperslice {

struct CommandResult {
  int exit_code = -1;  // -1: not started or killed by a signal
  std::string output;  // stdout
  std::string errors;  // stderr
};

// Runs argv (no shell interpretation of its words) with `env` ("NAME=value") added to the
// environment, and waits for it.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env = {});

}  // namespace hyperslice
