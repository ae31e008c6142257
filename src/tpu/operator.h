// The TPU operator (`hyperslice operator`): the TPUNodeGroup controller, its ResourcePolicy,
// InstanceTemplate and ManagedInstanceGroup child controllers, the pull-model bootstrap, Node
// labelling, the device-plugin DaemonSet and the orphan sweep, registered on one kube::Manager.
// ARCHITECTURE.md §5; the API is in api.h.
//
// Usage (the composition root, src/cmd/roles_operator.cc):
//   auto mgr = kube::Manager::Create({.client = client, .leader_election = true, ...});
//   HS_RETURN_IF_ERROR(tpu::RegisterOperator(**mgr, options));
//   return (*mgr)->Run();
// Thread-safety: RegisterOperator before Manager::Run(); everything it adds is thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "src/base/clock.h"
#include "src/base/result.h"

namespace hyperslice::kube {
class Client;
class Manager;
class EventRecorder;
}  // namespace hyperslice::kube
namespace hyperslice::gce {
class Compute;
}

namespace hyperslice::tpu {

struct OperatorOptions {
  std::shared_ptr<kube::Client> client;   // required
  std::shared_ptr<gce::Compute> compute;  // required; one per process (thread-safe)
  // Written as the hyperslice-cluster label on every GCE resource so two clusters sharing a
  // project never adopt or sweep each other's resources. Empty: the uid of kube-system.
  std::string cluster_id;
  // Where the device-plugin DaemonSet lives and which image it runs.
  std::string device_plugin_namespace = "tpu-node-group";
  std::string device_plugin_image = "hyperslice:latest";
  // The cluster CA (PEM) whose hash joins VMs verify. Empty: kube-public/cluster-info, else the
  // client's configured CA.
  std::string cluster_ca_pem;
  int workers = 4;  // concurrent reconciles per controller
  // How often a Ready GCE resource is re-read to detect drift (with ±20 % jitter). This is the
  // only GCE traffic of a settled group: its budget is 3 GETs per group per interval.
  Clock::Duration drift_check_interval = std::chrono::minutes(10);
  // Orphan sweep period (0 disables it).
  Clock::Duration orphan_sweep_interval = std::chrono::minutes(5);
  Clock* clock = nullptr;  // nullptr = RealClock()
};

// Adds every controller of the operator (and the informers they share) to `mgr`.
Status RegisterOperator(kube::Manager& mgr, OperatorOptions options);

}  // namespace hyperslice::tpu
