// `hyperslice dev --example gpu` (roles_dev_gpu.cc): the ephemeral-GPU story, run by RunDev.
#pragma once

#include "src/cmd/dev_support.h"

namespace hyperslice::cmd {

struct DevGpuOptions : dev::StoryOptions {
  int sim_latency_ms = 1000;  // each marketplace's pending→booting and booting→running delay
};

// 0 when the story ran to its end (or a signal stopped it), non-zero on a failure.
int RunDevGpu(const DevGpuOptions& options);

}  // namespace hyperslice::cmd
