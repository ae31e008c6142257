// hyperslice: one binary, one role per subcommand (ARCHITECTURE.md, top table).
// This file is the composition root: the only place that knows every module.
#include <cstdio>
#include <functional>
#include <map>
#include <string>

#include <CLI/CLI.hpp>

#include "src/base/log.h"
#include "src/cmd/roles.h"

int main(int argc, char** argv) {
  using hyperslice::cmd::Role;
  CLI::App app{"hyperslice: accelerator capacity as Kubernetes capacity on self-managed clusters"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug|info|warn|error")->capture_default_str();

  std::map<CLI::App*, Role*> roles;
  for (Role& role : hyperslice::cmd::AllRoles()) {
    CLI::App* sub = app.add_subcommand(role.name, role.help);
    sub->allow_extras(role.allow_extras);
    if (role.setup) role.setup(*sub);
    roles[sub] = &role;
  }
  CLI11_PARSE(app, argc, argv);
  hyperslice::log::SetLevel(log_level);
  for (auto& [sub, role] : roles) {
    if (sub->parsed()) return role->run(*sub);
  }
  return 2;
}
