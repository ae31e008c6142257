// A test binary whose whole process runs in a network namespace of its own (link
// test/testenv/own_netns.cc into it, as tsan_options.cc is linked): before main, while the
// process has one thread, it leaves the host's network namespace for a new one with only its
// loopback up. Everything the binary starts (control plane, registry, runner agents and what they
// create: bridges, veths) lives there and goes when the process ends; nothing touches the host's
// network.
#pragma once

#include <string>

namespace hyperslice::testenv {

// Empty when the binary runs in its own network namespace; else why not (not root, no
// CAP_SYS_ADMIN): its tests should skip with that reason.
const std::string& OwnNetworkNamespaceError();

}  // namespace hyperslice::testenv
