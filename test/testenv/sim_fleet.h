// The simulated TPU VMs (sim/kubelet's Fleet) of a test, with a kubelet's timings shortened so
// that heartbeats, status reports and retries happen within a test's patience; shared by the join
// test (test/integration/sim_kubelet) and the slice end to end (test/e2e/tpu_slice). Header-only;
// a test that includes it links hs_sim_kubelet.
#pragma once

#include <chrono>
#include <string>

#include "sim/gce/simulator.h"
#include "sim/kubelet/fleet.h"

namespace hyperslice::testenv {

// Agents on every instance of `simulator` (which must outlive the fleet) that reach the
// apiserver at `apiserver_url` (a QuickJoiningClusterOptions cluster's server_url()): Lease of
// 10 s renewed every second, node status posted every second and reported every 5 s, join steps
// retried every 200 ms, metadata polled every second. Pods are run only if the test sets
// agent.run_pods.
inline sim::kubelet::FleetOptions QuickFleetOptions(sim::gce::Simulator* simulator,
                                                    const std::string& apiserver_url) {
  using namespace std::chrono_literals;
  sim::kubelet::FleetOptions fo;
  fo.simulator = simulator;
  fo.apiserver_url = apiserver_url;
  fo.agent.lease_renew_interval = 1s;
  fo.agent.lease_duration_seconds = 10;
  fo.agent.node_status_update_interval = 1s;
  fo.agent.node_status_report_interval = 5s;
  fo.agent.retry_interval = 200ms;
  fo.agent.metadata_wait = 1s;
  return fo;
}

}  // namespace hyperslice::testenv
