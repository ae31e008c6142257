// PodRuntime: the part of a simulated VM's kubelet that runs pods (what kwok fakes, but with the
// real device-plugin protocol). With the VM's node credentials it:
//
//  - serves the kubelet API on the VM's own loopback address (127.A.B.1, port 10250 when free):
//    the Node reports it as its InternalIP and kubeletEndpoint, so `kubectl logs` reaches it
//    through the apiserver and nothing ever dials a private address. TLS with a self-signed
//    serving certificate (kube-apiserver does not verify kubelet certificates unless started with
//    --kubelet-certificate-authority);
//  - runs the kubelet's device manager (device_manager.h) on <vm>/var/lib/kubelet/device-plugins;
//  - watches the pods bound to its Node (fieldSelector spec.nodeName) and "runs" them:
//      * a container whose first argument is `device-plugin` (hyperslice's device-plugin role, as
//        the operator's DaemonSet runs it) is started for real, in process, with its flags and its
//        hostPath view of the VM (`--root=/` is the VM's root folder) — so the Node's
//        google.com/tpu capacity comes from the plugin's ListAndWatch;
//      * every other container is admitted as the kubelet does: extended resources it limits are
//        allocated through the device manager (GetPreferredAllocation, Allocate); too few healthy
//        devices fail the pod with UnexpectedAdmissionError as the kubelet does. Its environment
//        is resolved (env values with $(VAR) expansion, fieldRef, resourceFieldRef, configMap and
//        secret keys, envFrom, plus the Allocate response's envs; a value the user set wins over
//        the plugin's) and the container "runs", printing that environment, one KEY=VALUE
//        per line, as its log — read it with `kubectl logs`. It runs forever, except that a pod
//        that is not restarted (restartPolicy Never or OnFailure: a Job's) whose every container
//        runs `sleep N` (command and args, any path to sleep) exits 0 after the longest N
//        seconds: phase Succeeded, containers terminated with reason Completed, its devices
//        freed — the simulation's stand-in for a workload that finishes;
//      * status as the kubelet reports it: phase Running, conditions PodReadyToStartContainers,
//        Initialized, ContainersReady, Ready (PodScheduled kept), hostIP(s), podIP(s) from the
//        VM's loopback /24, startTime, containerStatuses with running.startedAt;
//  - a pod being deleted: its devices are freed, its in-process plugin stopped, and the pod is
//    deleted with grace period 0 (the kubelet's final delete).
//
// Thread-safe; the runtime has its own threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sim/kubelet/device_manager.h"
#include "src/base/result.h"

namespace hyperslice::kube {
class Client;
}

namespace hyperslice::sim::kubelet {

// The VM's loopback address and kubelet API port, chosen by binding the kubelet API server.
struct KubeletEndpoint {
  std::string ip;  // 127.A.B.1
  uint16_t port = 0;
};

struct PodRuntimeOptions {
  std::string node_name;
  std::string vm_root;  // the VM's "/" (device tree, kubelet folders); must exist
  std::shared_ptr<kube::Client> node_client;  // the node's own credentials
  bool run_pods = true;  // false: serve the kubelet API only (nodes without pods)
  std::function<void()> on_resources_changed;  // devices changed: report node status now
  // Extended resources the machine has without a device plugin running in process (a rented GPU
  // machine's nvidia.com/gpu: its NVIDIA device plugin is the cluster's DaemonSet, not simulated).
  // They are reported by Resources() and admitted by count: device ids "<prefix>-<n>", and the
  // environment the NVIDIA device plugin gives (NVIDIA_VISIBLE_DEVICES) for nvidia.com/gpu.
  std::map<std::string, int> static_devices;
};

// What a running container printed: its effective environment, in order.
struct ContainerRecord {
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> device_ids;
};

class PodRuntime {
 public:
  virtual ~PodRuntime() = default;  // Stop()

  // Binds the kubelet API (on a fresh 127.A.B.1) before anything else; then starts the device
  // manager and the pod watch when run_pods.
  static Result<std::unique_ptr<PodRuntime>> Start(PodRuntimeOptions options);

  virtual KubeletEndpoint endpoint() const = 0;
  // Extended resources from the device plugins (empty without run_pods).
  virtual std::map<std::string, ResourceDevices> Resources() const = 0;
  virtual int plugin_registrations() const = 0;
  // Running containers by "namespace/pod/container".
  virtual std::map<std::string, ContainerRecord> Containers() const = 0;

  virtual void Stop() = 0;  // idempotent; pods are left as they are (the VM went away)
};

}  // namespace hyperslice::sim::kubelet
