// The shared control plane of one test binary (envtest-style). The first call starts it; it stops
// when the binary exits. Tests that need a different shape (controller-manager, no watch cache)
// start their own LocalCluster.
#pragma once

#include <memory>

#include "src/kube/client.h"
#include "src/localcluster/localcluster.h"

namespace hyperslice::testenv {

// The shape of the shared cluster (e.g. with kube-scheduler); call before the first Cluster().
void ConfigureCluster(localcluster::Options options);
// Starts (once) and returns the binary's shared cluster; fails the calling test if it cannot.
localcluster::LocalCluster& Cluster();
// A new admin client for the shared cluster.
std::shared_ptr<kube::Client> AdminClient();
// A namespace unique to the calling test, created on first use.
std::string TestNamespace();

}  // namespace hyperslice::testenv
