// Installing the project's CRDs (deploy/crds/<file>) into the shared cluster (or another one), as
// `kubectl apply` would, and waiting until the apiserver serves them.
#pragma once

#include <string>
#include <vector>

#include "src/base/result.h"
#include "src/kube/client.h"
#include "src/kube/resource.h"

namespace hyperslice::testenv {

// `files` are paths of CRD YAML files; `served` the resources to wait for (a list must succeed).
Status InstallCrds(const std::vector<std::string>& files,
                   const std::vector<kube::Resource>& served);
// The same into the cluster `client` talks to (a test that starts a LocalCluster of its own).
Status InstallCrds(kube::Client& client, const std::vector<std::string>& files,
                   const std::vector<kube::Resource>& served);

// Installs <deploy_dir>/crds/tpu.google.com_{tpunodegroups,resourcepolicies,instancetemplates,
// managedinstancegroups}.yaml: the TPU operator's, which `hyperslice operator` watches even when
// a test runs it for the GPU controllers only.
Status InstallTpuCrds(const std::string& deploy_dir);

}  // namespace hyperslice::testenv
