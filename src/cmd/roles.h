// The roles of the hyperslice binary. Each role registers its flags on a CLI11 subcommand and
// runs when chosen; a role not built yet says so and exits non-zero.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace hyperslice::cmd {

struct Role {
  std::string name;
  std::string help;
  std::function<void(CLI::App&)> setup;  // adds flags; may be empty
  std::function<int(CLI::App&)> run;     // exit code
  bool allow_extras = false;
};

std::vector<Role>& AllRoles();

// Exit code and message for a role that does not exist yet.
int NotAvailableYet(const std::string& role);

// Blocks SIGTERM and SIGINT in the calling thread and every thread it starts afterwards, so that
// only WaitForStopSignal() receives them. Call before starting any thread.
void BlockStopSignals();
// Waits for SIGTERM or SIGINT (after BlockStopSignals) and returns it.
int WaitForStopSignal();

}  // namespace hyperslice::cmd
