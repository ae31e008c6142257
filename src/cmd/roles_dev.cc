// `hyperslice dev`: the local default. For now it brings up the local control plane (etcd,
// kube-apiserver, kube-controller-manager) and tells the user how to point kubectl at it; it runs
// until SIGINT/SIGTERM and then stops every process it started.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

#include "src/cmd/roles.h"
#include "src/localcluster/localcluster.h"

namespace hyperslice::cmd {
namespace {

struct DevFlags {
  std::string work_dir;
  std::string bin_dir;
  bool exit_after_ready = false;
};

DevFlags& Flags() {
  static DevFlags flags;
  return flags;
}

std::string DefaultWorkDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  std::string cache;
  if (xdg && *xdg) {
    cache = xdg;
  } else {
    const char* home = std::getenv("HOME");
    cache = std::string(home && *home ? home : "/tmp") + "/.cache";
  }
  return cache + "/hyperslice/dev";
}

}  // namespace

void SetupDev(CLI::App& app) {
  DevFlags& f = Flags();
  app.add_option(
      "--work-dir", f.work_dir,
      "folder for certificates, etcd data and logs (default: "
      "${XDG_CACHE_HOME:-~/.cache}/hyperslice/dev); wiped of old cluster state on start");
  app.add_option("--bin-dir", f.bin_dir,
                 "folder with kube-apiserver, kube-controller-manager and etcd (default: "
                 "$HYPERSLICE_CONTROLPLANE_BIN, else built by scripts/build-controlplane.sh)");
  app.add_flag("--exit-after-ready", f.exit_after_ready,
               "start, print how to connect, stop and exit 0 (for tests)");
}

int RunDev(CLI::App&) {
  const DevFlags& f = Flags();
  // Block the stop signals before any thread exists, so every thread inherits the mask and
  // sigwait() below is the only place they are received. Children get a clean mask at exec.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  localcluster::Options options;
  options.work_dir = f.work_dir.empty() ? DefaultWorkDir() : f.work_dir;
  options.bin_dir = f.bin_dir;
  options.controller_manager = true;
  auto cluster = localcluster::LocalCluster::Start(options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "hyperslice dev: the control plane did not start: %s\n",
                 cluster.error().ToString().c_str());
    return 1;
  }
  const auto& c = **cluster;
  std::printf(
      "hyperslice dev: control plane ready at %s (logs in %s)\n"
      "Point kubectl at it:\n"
      "  export KUBECONFIG=%s\n"
      "  kubectl get ns\n",
      c.server_url().c_str(), c.work_dir().c_str(), c.kubeconfig_path().c_str());
  if (f.exit_after_ready) {
    std::fflush(stdout);
    cluster->reset();
    return 0;
  }
  std::printf("Press Ctrl-C to stop.\n");
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::printf("hyperslice dev: stopping (signal %d)\n", sig);
  std::fflush(stdout);
  cluster->reset();  // stops kube-controller-manager, kube-apiserver, etcd, in that order
  return 0;
}

}  // namespace hyperslice::cmd
