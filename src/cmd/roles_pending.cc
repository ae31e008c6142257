// Roles whose modules are not built yet. Each moves to its own roles_<name>.cc when it exists.
#include <CLI/CLI.hpp>

#include "src/cmd/roles.h"

namespace hyperslice::cmd {

void SetupOperator(CLI::App&) {}
int RunOperator(CLI::App&) { return NotAvailableYet("operator"); }

}  // namespace hyperslice::cmd
