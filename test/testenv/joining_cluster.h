// The control plane that machines join as kubeadm + kubelet do: the rented GPU machines of the GPU
// e2e tests (gpu_join.h) and the simulated TPU VMs (sim/kubelet) of the join test
// (test/integration/sim_kubelet) and the slice end to end (test/e2e/tpu_slice), as
// sim/kubelet/README.md asks. Pass to ConfigureCluster (testenv.h) before the first Cluster().
// Header-only.
#pragma once

#include "src/localcluster/localcluster.h"

namespace hyperslice::testenv {

// kube-scheduler, kube-controller-manager (bootstrapsigner, CSR approval and signing, node
// lifecycle) and kubeadm's bootstrap RBAC: what a joining machine's kubelet needs.
inline localcluster::Options JoiningClusterOptions() {
  localcluster::Options o;
  o.scheduler = true;
  o.controller_manager = true;
  o.kubeadm_bootstrap = true;
  return o;
}

// JoiningClusterOptions with the node lifecycle quickened: a Node that stops heartbeating goes
// Unknown after 8 s (checked every second), within a test's patience.
inline localcluster::Options QuickJoiningClusterOptions() {
  localcluster::Options o = JoiningClusterOptions();
  o.extra_controller_manager_flags = {"--node-monitor-grace-period=8s", "--node-monitor-period=1s"};
  return o;
}

}  // namespace hyperslice::testenv
