// The OCI runtime bundle's config.json for one container of a pod, built the way the kubelet
// would: process from the image's entrypoint/cmd overridden by the pod's command/args, env from
// the image then the pod, volumes as bind mounts, limits as linux.resources, accelerator device
// nodes, and namespaces pid/ipc/uts/mount plus the pod's network namespace (or the host's).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/base/result.h"
#include "src/runners/agent.pb.h"
#include "src/runners/agent/image_store.h"

namespace hyperslice::runners::agent {

struct DeviceNode {
  std::string host_path;
  std::string container_path;
};

struct BundleInput {
  const ::hyperslice::runners::v1::Container* container = nullptr;
  Image image;
  std::string hostname;
  std::string netns_path;                          // "" with host networking
  std::map<std::string, std::string> volume_dirs;  // volume name -> host directory
  std::vector<DeviceNode> devices;
  std::string cgroups_path;
  // Extra read-only-to-the-pod bind mounts the agent adds (container path -> host directory):
  // a sealed runner's token socket directory.
  std::map<std::string, std::string> agent_binds;
};

// The host directory a volume mount binds (its volume's directory, or the sub_path in it,
// created when missing). Errors: kInvalidArgument (unknown volume, sub_path escaping its volume,
// a relative container path).
Result<std::string> MountSource(const ::hyperslice::runners::v1::Container& c,
                                const ::hyperslice::runners::v1::Mount& m,
                                const std::map<std::string, std::string>& volume_dirs);

// A container's cpu and memory limits as cgroup values (0: no limit): cpu as a CFS quota over a
// 100 ms period (at least 1 ms). Errors: kInvalidArgument (not a quantity).
struct CpuMemoryLimits {
  int64_t memory_bytes = 0;
  int64_t cpu_quota = 0;
  int64_t cpu_period = 0;
};
Result<CpuMemoryLimits> LimitsOf(const ::hyperslice::runners::v1::Container& c);

// Errors: kInvalidArgument (bad quantity, sub_path escaping its volume, no command to run).
Result<std::string> RuntimeConfig(const BundleInput& in);

// Kubernetes' rule: command replaces the entrypoint (and drops cmd), args replace cmd.
std::vector<std::string> ProcessArgs(const std::vector<std::string>& entrypoint,
                                     const std::vector<std::string>& cmd,
                                     const std::vector<std::string>& command,
                                     const std::vector<std::string>& args);

}  // namespace hyperslice::runners::agent
