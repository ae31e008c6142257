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
//  - the plugin folder, for kubelet restarts. A starting kubelet removes every socket there (the
//    plugin's included), then listens on kubelet.sock; it must get exactly one Register, and the
//    ListAndWatch stream it then opens must not be ended by the plugin (kubelet marks every
//    device Unhealthy when a stream ends, and a second Register can make it drop the good
//    connection). So the plugin registers once per kubelet instance (identified by the
//    kubelet.sock file: device, inode, ctime), on a connection proven to reach that file; when
//    its own socket file is gone it serves the path on a new server and keeps the old one for the
//    connections it has, until a newer kubelet instance has registered. Folder events are
//    coalesced (20 ms quiet, 200 ms at most) and the state is looked at as a whole, so the order
//    of the events does not matter. Failed registrations are retried with backoff (100 ms → 5 s)
//    while the same kubelet.sock exists, and at once for a new one.
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
  int serve_generation = 0;  // 1 after Start, +1 each time the socket path is served again
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
