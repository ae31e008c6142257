// DeviceManager: the kubelet's device manager as a device plugin sees it (kubelet's
// pkg/kubelet/cm/devicemanager, v1beta1), for one simulated VM and for the device plugin's own
// tests of kubelet restarts (test/unit/deviceplugin/kubelet_restart_test.cc): one instance is one
// kubelet process.
//
//  - Start() removes every socket in the plugin folder (CleanupPluginDirectory) — the plugins'
//    included — and only then serves the Registration service on <plugin_dir>/kubelet.sock;
//  - Register dials the plugin's endpoint, reads its options and runs ListAndWatch in the
//    background; a second Register for a resource replaces (disconnects) the first client;
//  - a ListAndWatch stream that ends while the manager runs is "ListAndWatch ended unexpectedly":
//    as kubelet's runClient does, the client that is current for the resource *now* is
//    disconnected (the new, good one when a second registration raced the first stream's end) and
//    the resource's devices count as Unhealthy until the next registration (PluginDisconnected);
//  - Allocate() is admission of one container: it takes `count` free healthy devices, asks the
//    plugin's GetPreferredAllocation when it offers one, then Allocate, and remembers the devices
//    for the pod until Release().
// `on_change` lets the node status be reported at once on a change, as the kubelet's is.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::sim::kubelet {

struct ResourceDevices {
  int capacity = 0;                    // every device listed (kubelet's capacity)
  int allocatable = 0;                 // healthy ones (kubelet's allocatable)
  int allocated = 0;                   // healthy or not, held by admitted containers
  std::vector<std::string> unhealthy;  // ids, sorted
  bool connected = false;              // a plugin client is current for the resource
};

// What one manager (one kubelet process) has seen, for tests of a device plugin: a plugin must
// register once per kubelet start and never end its stream. Final once the manager stopped.
struct DeviceManagerReport {
  int registrations = 0;     // Register calls received, refused ones included
  int replaced_clients = 0;  // Register for a resource that already had a client
  int unexpected_ends = 0;   // "ListAndWatch ended unexpectedly"
  int lists = 0;             // ListAndWatch responses received, all clients
  std::string authority;     // :authority of the latest Register
  std::vector<std::string> errors;
};

struct DeviceManagerOptions {
  std::string plugin_dir;  // required
  // Runs (on a manager thread, without its lock held) whenever a resource's device list or
  // health changed, or a device was released; may be empty.
  std::function<void()> on_change;
  // false: the folder is left as it is at start (kubelets before CleanupPluginDirectory).
  bool cleanup = true;
  // Between the cleanup and the listen (tests vary it to shuffle the order in which a plugin
  // sees the two).
  std::chrono::microseconds listen_delay{0};
};

struct ContainerAllocation {
  std::vector<std::string> device_ids;  // in the order the plugin preferred
  std::map<std::string, std::string> envs;
  std::vector<std::string> device_paths;  // host paths of the DeviceSpecs
};

class DeviceManager {
 public:
  virtual ~DeviceManager() = default;  // Stop()

  static Result<std::unique_ptr<DeviceManager>> Start(DeviceManagerOptions options);

  // Every registered resource (also those whose plugin disconnected: capacity kept, 0 healthy).
  virtual std::map<std::string, ResourceDevices> Resources() const = 0;
  virtual DeviceManagerReport report() const = 0;

  // kResourceExhausted with kubelet's message when fewer than `count` healthy devices are free;
  // kUnavailable when the plugin does not answer.
  virtual Result<ContainerAllocation> Allocate(const std::string& resource,
                                               const std::string& pod_uid,
                                               const std::string& container, int count) = 0;
  // Frees every device held by the pod's containers.
  virtual void Release(const std::string& pod_uid) = 0;

  // The kubelet process ends: connections to plugins close and kubelet.sock is removed. Crash()
  // leaves kubelet.sock in place, as a killed kubelet does. Either is idempotent.
  virtual void Stop() = 0;
  virtual void Crash() = 0;
};

}  // namespace hyperslice::sim::kubelet
