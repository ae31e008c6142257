// `hyperslice dev --example runners` (roles_dev_runners.cc): the linked-runners story, run by
// RunDev.
#pragma once

#include <signal.h>

#include <string>

namespace hyperslice::cmd {

struct DevRunnersOptions {
  std::string work_dir, bin_dir, deploy_dir;
  int timeout_s = 300;  // until the example Job's pod runs
  bool exit_when_ready = false;
  bool log_to_stderr = false;
  sigset_t stop_signals{};  // blocked by the caller; SIGINT/SIGTERM stop the demo
};

// 0 when the story ran (and a signal or --exit-when-ready stopped it), 2 when this machine cannot
// run it (not root, tools missing: the message says which), 1 on a failure.
int RunDevRunners(const DevRunnersOptions& options);

}  // namespace hyperslice::cmd
