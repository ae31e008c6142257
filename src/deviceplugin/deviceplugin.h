// The kubelet device plugin for `google.com/tpu` (kubelet device plugin API v1beta1 over gRPC on
// unix sockets; ARCHITECTURE.md §7).
//
// Lifecycle. Start() discovers the chips, serves the DevicePlugin service on
// `<plugin_dir>/<socket_name>`, then registers with `<plugin_dir>/kubelet.sock` (version
// "v1beta1", endpoint = socket_name, resource google.com/tpu, GetPreferredAllocation available).
// A background thread then watches, with inotify:
//  - the device folders (`<root>/dev`, `<root>/dev/vfio`): any change re-probes the chips, and a
//    health change is pushed to every ListAndWatch stream at once; a periodic re-scan
//    (rescan_interval) is the backstop for what inotify cannot see (e.g. a driver wedging);
//  - the plugin folder: when kubelet.sock is (re-)created — a kubelet restart — or the plugin's own
//    socket disappears (kubelet deletes every socket there when it starts), the plugin restarts its
//    server and registers again. Registration failures are retried with backoff while
//    kubelet.sock exists.
// Chips once seen stay listed: a chip whose node disappears or cannot be opened is "Unhealthy"
// (kubelet then stops counting it as allocatable) and "Healthy" again when it is back.
//
// Expected chip count (the node label cloud.google.com/gke-accelerator-count, given by flag or
// environment since the plugin has no API access): when fewer chips are found, the shortfall is
// listed as Unhealthy placeholder devices "missing-<k>", so the Node's capacity shows the expected
// count and its allocatable the usable one; a warning is logged. More chips than expected: a
// warning, and all are served.
//
// Stop() (and the destructor) stops serving and removes the plugin's socket. Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "src/base/result.h"
#include "src/deviceplugin/discovery.h"

namespace hyperslice::deviceplugin {

inline constexpr char kApiVersion[] = "v1beta1";
inline constexpr char kResourceName[] = "google.com/tpu";
inline constexpr char kHealthy[] = "Healthy";
inline constexpr char kUnhealthy[] = "Unhealthy";

struct Options {
  std::string root = "/";
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  std::string socket_name = "hyperslice-tpu.sock";
  std::string kubelet_socket_name = "kubelet.sock";
  std::string resource_name = kResourceName;
  Mode mode = Mode::kAuto;
  int expected_chips = -1;  // -1: no cross-check
  std::chrono::milliseconds rescan_interval{5000};
  std::chrono::milliseconds register_timeout{5000};
};

// A snapshot for logs, tests and benchmarks.
struct PluginStatus {
  Mode mode = Mode::kAuto;
  int chips = 0;  // real chips known (healthy or not)
  int healthy = 0;
  int missing = 0;           // placeholders for the expected-count shortfall
  int serve_generation = 0;  // 1 after Start, +1 on each restart of the server
  int registrations = 0;     // successful Register calls
  std::string socket_path;
};

class DevicePlugin {
 public:
  virtual ~DevicePlugin() = default;

  // Starts serving and the watcher thread. Registration happens in the background (kubelet may not
  // be up yet). Errors when the folders cannot be watched or the socket cannot be served.
  static Result<std::unique_ptr<DevicePlugin>> Start(Options options);

  // Stops serving, ends ListAndWatch streams, removes the socket. Idempotent.
  virtual void Stop() = 0;
  virtual PluginStatus CurrentStatus() const = 0;
};

}  // namespace hyperslice::deviceplugin
