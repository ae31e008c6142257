// The ContainerRuntime of --container-runtime-endpoint: containerd (or any CRI runtime) driven
// through the CRI API (runtime.v1 RuntimeService + ImageService over its unix socket) as a
// kubelet drives it. One pod sandbox per pod (its network from the runtime's CNI configuration,
// the pod IP from PodSandboxStatus), one CRI container per container attempt; images pulled by
// the runtime (by digest, per the agent's policy); logs written by the runtime in the CRI format
// into the pod's directory; exit codes, reasons and times from ContainerStatus.
//
// Sandboxes and containers carry the labels runners.hyperslice.dev/{runner,pod-uid,container,
// attempt}, so a restarted agent finds them again with ListPodSandbox/ListContainers (no
// duplicates) and collects those of pods it no longer has.
#pragma once

#include <memory>
#include <string>

#include "src/runners/agent/container_runtime.h"

namespace hyperslice::runners::agent {

struct CriRuntimeOptions {
  std::string endpoint;     // "unix:///run/containerd/containerd.sock"
  std::string runner_name;  // the runner label: only this agent's sandboxes are its own
  std::chrono::seconds pull_timeout{300};
};

// Errors: kInvalidArgument (not a unix:// endpoint).
Result<std::unique_ptr<ContainerRuntime>> NewCriRuntime(CriRuntimeOptions options);

}  // namespace hyperslice::runners::agent
