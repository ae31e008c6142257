// `hyperslice device-plugin`: the kubelet device plugin for google.com/tpu, run by the DaemonSet in
// deploy/device-plugin. Serves until SIGTERM/SIGINT, then removes its socket and exits 0.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "src/base/log.h"
#include "src/cmd/roles.h"
#include "src/deviceplugin/deviceplugin.h"

namespace hyperslice::cmd {
namespace {

struct DevicePluginFlags {
  deviceplugin::Options options;
  std::string mode = "auto";
  int rescan_seconds = 5;
};

DevicePluginFlags& Flags() {
  static DevicePluginFlags flags;
  return flags;
}

}  // namespace

void SetupDevicePlugin(CLI::App& app) {
  DevicePluginFlags& f = Flags();
  app.add_option("--root", f.options.root,
                 "where the node's filesystem is visible (its /dev and /sys are read below it)")
      ->capture_default_str();
  app.add_option("--plugin-dir", f.options.plugin_dir,
                 "kubelet's device plugin folder (holds kubelet.sock)")
      ->capture_default_str();
  app.add_option("--socket-name", f.options.socket_name,
                 "file name of this plugin's socket in --plugin-dir")
      ->capture_default_str();
  app.add_option("--mode", f.mode, "chip driver model: auto, accel (/dev/accel*) or vfio")
      ->check(CLI::IsMember({"auto", "accel", "vfio"}))
      ->capture_default_str();
  app.add_option("--expected-chips", f.options.expected_chips,
                 "the node's cloud.google.com/gke-accelerator-count; a shortfall is listed as "
                 "Unhealthy devices (-1: no check)")
      ->envname("HYPERSLICE_EXPECTED_CHIPS")
      ->capture_default_str();
  app.add_option("--rescan-interval", f.rescan_seconds,
                 "seconds between backstop re-scans (changes are seen at once through inotify)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

int RunDevicePlugin(CLI::App&) {
  DevicePluginFlags& f = Flags();
  Result<deviceplugin::Mode> mode = deviceplugin::ParseMode(f.mode);
  if (!mode.ok()) {
    log::Error("bad --mode", {{"error", mode.error().message}});
    return 2;
  }
  f.options.mode = *mode;
  f.options.rescan_interval = std::chrono::seconds(f.rescan_seconds);

  // Block the stop signals before any thread starts, so only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto plugin = deviceplugin::DevicePlugin::Start(f.options);
  if (!plugin.ok()) {
    log::Error("device plugin could not start", {{"error", plugin.error().message}});
    return 1;
  }
  deviceplugin::PluginStatus s = (*plugin)->CurrentStatus();
  log::Info("device plugin started", {{"mode", deviceplugin::ModeName(s.mode)},
                                      {"chips", s.chips},
                                      {"healthy", s.healthy},
                                      {"socket", s.socket_path}});
  int sig = 0;
  sigwait(&stop_signals, &sig);
  log::Info("device plugin stopping", {{"signal", sig}});
  (*plugin)->Stop();
  return 0;
}

}  // namespace hyperslice::cmd
