#include "src/cmd/roles.h"

#include <signal.h>

#include <cstdio>

#include <CLI/CLI.hpp>

namespace hyperslice::cmd {

int NotAvailableYet(const std::string& role) {
  std::fprintf(stderr,
               "hyperslice %s: not available yet in this build (see the project's open issues)\n",
               role.c_str());
  return 3;
}

// Each role's wiring lives in its own roles_<name>.cc and registers here.
int RunOperator(CLI::App&);
int RunWebhook(CLI::App&);
int RunDevicePlugin(CLI::App&);
int RunSim(CLI::App&);
int RunDev(CLI::App&);
void SetupDev(CLI::App&);
void SetupSim(CLI::App&);
void SetupWebhook(CLI::App&);
void SetupDevicePlugin(CLI::App&);
void SetupOperator(CLI::App&);
int RunRunnerAgent(CLI::App&);
void SetupRunnerAgent(CLI::App&);

namespace {
sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}
}  // namespace

void BlockStopSignals() {
  sigset_t set = StopSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForStopSignal() {
  sigset_t set = StopSignals();
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

std::vector<Role>& AllRoles() {
  static std::vector<Role> roles = {
      {"operator", "all controllers (TPU, GPU, runners), leader-elected", SetupOperator,
       RunOperator},
      {"webhook", "admission: TPU env injection and CR validation", SetupWebhook, RunWebhook},
      {"device-plugin", "kubelet device plugin for google.com/tpu", SetupDevicePlugin,
       RunDevicePlugin},
      {"runner-agent", "runs on a linked runner host", SetupRunnerAgent, RunRunnerAgent},
      {"sim", "cloud simulators (GCE, GPU marketplaces) for tests and the local demo", SetupSim,
       RunSim},
      {"dev", "the local default: control plane, simulators, operator and an example slice",
       SetupDev, RunDev},
  };
  return roles;
}

}  // namespace hyperslice::cmd
