// Starts a LocalCluster (with kube-controller-manager), prints "PIDS <pid>..." on stdout, and waits
// to be killed. Used by NoProcessOutlivesKilledOwner: the test kill -9s this process and checks
// that every control-plane process died with it.
//   localcluster_owner_helper <work_dir>
#include <unistd.h>

#include <cstdio>

#include "src/localcluster/localcluster.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <work_dir>\n", argv[0]);
    return 2;
  }
  hyperslice::localcluster::Options options;
  options.work_dir = argv[1];
  options.controller_manager = true;
  auto cluster = hyperslice::localcluster::LocalCluster::Start(options);
  if (!cluster.ok()) {
    std::printf("ERROR %s\n", cluster.error().ToString().c_str());
    return 1;
  }
  std::printf("PIDS");
  for (int pid : (*cluster)->Pids()) std::printf(" %d", pid);
  std::printf("\n");
  std::fflush(stdout);
  for (;;) pause();
}
