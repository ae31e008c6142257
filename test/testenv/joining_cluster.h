// The control plane that simulated TPU VMs (sim/kubelet) join as kubeadm + kubelet do, for the
// tests of the join (test/integration/sim_kubelet) and of the slice end to end (test/e2e/
// tpu_slice): what sim/kubelet/README.md asks of it, with a short node-monitor grace period so a
// silent Node goes Unknown within a test's patience. Header-only.
#pragma once

#include "src/localcluster/localcluster.h"

namespace hyperslice::testenv {

// kube-controller-manager (bootstrapsigner, CSR approval and signing, node lifecycle with an 8 s
// grace period) with kubeadm's join objects, and kube-scheduler (pods are bound to the VMs). Pass
// to ConfigureCluster (testenv.h) before the first Cluster().
inline localcluster::Options JoiningClusterOptions() {
  localcluster::Options o;
  o.controller_manager = true;
  o.kubeadm_bootstrap = true;
  o.scheduler = true;
  o.extra_controller_manager_flags = {"--node-monitor-grace-period=8s",
                                      "--node-monitor-period=1s"};
  return o;
}

}  // namespace hyperslice::testenv
