// `hyperslice dev --example runners` (roles_dev_runners.cc): the linked-runners story, run by
// RunDev.
#pragma once

#include "src/cmd/dev_support.h"

namespace hyperslice::cmd {

// 0 when the story ran (and a signal or --exit-when-ready stopped it), 2 when this machine cannot
// run it (not root, tools missing: the message says which), 1 on a failure. timeout_s: until the
// example Job's pod runs.
int RunDevRunners(const dev::StoryOptions& options);

}  // namespace hyperslice::cmd
