// Fleet: simulated TPU VMs for a sim::gce::Simulator. One Agent (agent.h) per RUNNING instance,
// joining the real control plane as kubeadm + kubelet would.
//
// Event-driven: subscribes to the simulator's instance changes (Simulator::SubscribeInstances).
//   - an instance becomes RUNNING          → an Agent starts (a new VM: joins from scratch)
//   - it leaves RUNNING (STOPPING, TERMINATED — e.g. /control/instances/kill mode "stop")
//                                          → its Agent vanishes (keeps its "disk")
//   - RUNNING again with the same id (/control/instances/restore)
//                                          → the same Agent boots again with its credentials
//   - deleted or vanished (kill mode "vanish"); re-created under the same name with a new id
//                                          → the old Agent is dropped, a new one joins
// Agent-level failures without touching GCE: StopHeartbeating / Restore / Vanish by instance.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/kubelet/agent.h"
#include "src/base/result.h"

namespace hyperslice::sim::gce {
class Simulator;
}

namespace hyperslice::sim::kubelet {

struct FleetOptions {
  gce::Simulator* simulator = nullptr;  // required; must outlive the Fleet
  // The control plane as the VMs reach it: AgentOptions::discovery_endpoint of every agent
  // (e.g. LocalCluster::server_url()). Empty: the address in each VM's kubeadm-control-plane-ip.
  std::string apiserver_url;
  // Timings and node shape of every agent; project/zone/instance/machine_type/metadata_host/
  // discovery_endpoint are filled in per instance.
  AgentOptions agent;
  // Which instances get an agent (default: all). E.g. only TPU machine types.
  std::function<bool(const std::string& project, const std::string& zone, const std::string& name,
                     const std::string& machine_type)>
      filter;
};

struct InstanceAgent {
  std::string project, zone, name;
  std::string instance_id;      // GCE instance id
  std::string instance_status;  // last status the simulator reported ("" = deleted)
  AgentState agent;             // the agent's state (kStopped when the VM is not RUNNING)
};

class Fleet {
 public:
  virtual ~Fleet() = default;  // stops every agent and unsubscribes

  static Result<std::unique_ptr<Fleet>> Start(FleetOptions options);

  // Every instance that has (or had, while it still exists) an agent, sorted by project/zone/name.
  virtual std::vector<InstanceAgent> agents() const = 0;
  virtual std::optional<InstanceAgent> agent(const std::string& project, const std::string& zone,
                                             const std::string& name) const = 0;

  // Agent-level failure modes (kNotFound when the instance has no agent).
  virtual Status StopHeartbeating(const std::string& project, const std::string& zone,
                                  const std::string& name) = 0;
  virtual Status Restore(const std::string& project, const std::string& zone,
                         const std::string& name) = 0;
  virtual Status Vanish(const std::string& project, const std::string& zone,
                        const std::string& name) = 0;

  virtual void Stop() = 0;  // idempotent
};

}  // namespace hyperslice::sim::kubelet
