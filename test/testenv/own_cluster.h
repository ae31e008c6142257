// A control plane of a test's own shape, with an admin client on it, for the tests that cannot use
// the binary's shared one (testenv.h): e.g. one without the watch cache, whose watches etcd serves
// so that compaction makes an old resourceVersion 410 Gone. It stops when the test drops it.
// Header-only.
#pragma once

#include <memory>
#include <utility>

#include "src/base/result.h"
#include "src/kube/client.h"
#include "src/localcluster/localcluster.h"

namespace hyperslice::testenv {

struct OwnCluster {
  std::unique_ptr<localcluster::LocalCluster> cluster;
  std::shared_ptr<kube::Client> client;  // admin
};

inline Result<OwnCluster> StartOwnCluster(const localcluster::Options& options) {
  OwnCluster out;
  HS_ASSIGN_OR_RETURN(out.cluster, localcluster::LocalCluster::Start(options));
  HS_ASSIGN_OR_RETURN(out.client, kube::Client::Create(out.cluster->AdminConfig()));
  return out;
}

}  // namespace hyperslice::testenv
