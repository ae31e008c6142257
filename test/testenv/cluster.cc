// The shared LocalCluster of a test binary. Kept apart from client.cc so that a binary using only
// Cluster() does not need the kube client runtime linked in.
#include "test/testenv/testenv.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include <gtest/gtest.h>

#include "src/base/log.h"

namespace hyperslice::testenv {
namespace {

std::mutex g_mu;
localcluster::LocalCluster* g_cluster = nullptr;  // owned; deleted by StopCluster at exit
localcluster::Options g_options;

void StopCluster() {
  std::lock_guard<std::mutex> lock(g_mu);
  delete g_cluster;
  g_cluster = nullptr;
}

}  // namespace

void ConfigureCluster(localcluster::Options options) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_options = std::move(options);
}

localcluster::LocalCluster& Cluster() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_cluster != nullptr) return *g_cluster;
  // The logger's statics must exist before the exit handler is registered, so that they are
  // destroyed after it runs.
  log::Info("testenv: starting the shared control plane");
  auto started = localcluster::LocalCluster::Start(g_options);
  if (!started.ok()) {
    // Every test of the binary needs the control plane; there is nothing to run without it.
    std::fprintf(stderr, "testenv: the control plane did not start: %s\n",
                 started.error().ToString().c_str());
    std::fflush(stderr);
    ADD_FAILURE() << "the control plane did not start: " << started.error().ToString();
    std::exit(1);
  }
  g_cluster = started->release();
  std::atexit(StopCluster);
  return *g_cluster;
}

}  // namespace hyperslice::testenv
