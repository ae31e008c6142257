// `hyperslice dev --example gpu` (roles_dev_gpu.cc): the ephemeral-GPU story, run by RunDev.
#pragma once

#include <signal.h>

#include <string>

namespace hyperslice::cmd {

struct DevGpuOptions {
  std::string work_dir, bin_dir, deploy_dir;
  int sim_latency_ms = 1000;  // each marketplace's pending→booting and booting→running delay
  int timeout_s = 600;        // for the whole story
  bool exit_when_done = false;
  bool log_to_stderr = false;
  sigset_t stop_signals{};  // blocked by the caller; SIGINT/SIGTERM stop the demo
};

// 0 when the story ran to its end (or a signal stopped it), non-zero on a failure.
int RunDevGpu(const DevGpuOptions& options);

}  // namespace hyperslice::cmd
