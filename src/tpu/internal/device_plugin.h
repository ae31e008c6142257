// The TPU device-plugin DaemonSet the operator deploys (seed 000): present while at least one
// TPUNodeGroup exists, removed when none does. Idempotent (server-side apply).
#pragma once

#include <memory>
#include <string>

#include "src/base/result.h"
#include "src/kube/resource.h"

namespace hyperslice::kube {
class Client;
}

namespace hyperslice::tpu::internal {

inline constexpr char kDevicePluginDaemonSetName[] = "tpu-device-plugin";

// The DaemonSet object: `hyperslice device-plugin` on nodes labelled
// cloud.google.com/gke-tpu-accelerator (node affinity), tolerating google.com/tpu:NoSchedule,
// hostPath /var/lib/kubelet/device-plugins and /dev, privileged.
kube::Object DevicePluginDaemonSet(const std::string& ns, const std::string& image);

// needed: apply the DaemonSet; !needed: delete it (absent is fine).
Status EnsureDevicePluginDaemonSet(kube::Client& client, const std::string& ns,
                                   const std::string& image, bool needed);

}  // namespace hyperslice::tpu::internal
