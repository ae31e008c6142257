// DeviceManager: the kubelet's device manager as a device plugin sees it (kubelet's
// pkg/kubelet/cm/devicemanager, v1beta1), for one simulated VM.
//
//  - Start() removes every socket in the plugin folder (CleanupPluginDirectory) and serves the
//    Registration service on <plugin_dir>/kubelet.sock;
//  - Register dials the plugin's endpoint, reads its options and runs ListAndWatch in the
//    background; a second Register for a resource replaces (disconnects) the first client;
//  - a ListAndWatch stream that ends while the manager runs marks the resource's devices
//    Unhealthy, as kubelet's PluginDisconnected does;
//  - Allocate() is admission of one container: it takes `count` free healthy devices, asks the
//    plugin's GetPreferredAllocation when it offers one, then Allocate, and remembers the devices
//    for the pod until Release().
// `on_change` runs (on a manager thread, without its lock held) whenever a resource's device list
// or health changed, so the node status can be reported at once as the kubelet's does.
//
// Thread-safe.
#pragma once

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
};

struct ContainerAllocation {
  std::vector<std::string> device_ids;  // in the order the plugin preferred
  std::map<std::string, std::string> envs;
  std::vector<std::string> device_paths;  // host paths of the DeviceSpecs
};

class DeviceManager {
 public:
  virtual ~DeviceManager() = default;  // Stop()

  static Result<std::unique_ptr<DeviceManager>> Start(std::string plugin_dir,
                                                      std::function<void()> on_change);

  // Every registered resource (also those whose plugin disconnected: capacity kept, 0 healthy).
  virtual std::map<std::string, ResourceDevices> Resources() const = 0;
  virtual int registrations() const = 0;

  // kResourceExhausted with kubelet's message when fewer than `count` healthy devices are free;
  // kUnavailable when the plugin does not answer.
  virtual Result<ContainerAllocation> Allocate(const std::string& resource,
                                               const std::string& pod_uid,
                                               const std::string& container, int count) = 0;
  // Frees every device held by the pod's containers.
  virtual void Release(const std::string& pod_uid) = 0;

  virtual void Stop() = 0;  // idempotent
};

}  // namespace hyperslice::sim::kubelet
