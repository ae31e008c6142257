// The agent's default ContainerRuntime: images from its own store (image_store.h), a named
// network namespace per pod (with --pod-cidr its veth on the agent's bridge, podnet.h), an
// overlay root filesystem and a bundle (bundle.h) per container, run by the runc CLI under the
// agent's shim (runtime.h), which outlives the agent and records start and exit in files.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/runners/agent/container_runtime.h"
#include "src/runners/agent/podnet.h"

namespace hyperslice::runners::agent {

struct RuncRuntimeOptions {
  Runtime* runtime = nullptr;          // the runc CLI; outlives this
  ImageStore* images = nullptr;        // outlives this
  std::vector<std::string> shim_argv;  // e.g. {"/proc/self/exe", "runner-agent", "shim"}
  std::string ip_binary = "ip";        // iproute2, for the pods' network namespaces
  // The pods' network (--pod-cidr); null: each pod's namespace has only its loopback and the pod
  // has no IP. Outlives this.
  PodNetwork* network = nullptr;
};

std::unique_ptr<ContainerRuntime> NewRuncRuntime(RuncRuntimeOptions options);

// The runc id of a pod's container: "hs-<uid>-<name>".
std::string RuncContainerId(const std::string& uid, const std::string& container);

// Exec in runc container `id` (runc_exec.cc): `runc exec` with pipes, or with a terminal in runc's
// foreground mode (src/runners/README.md "Agent").
grpc::Status ServeRuncExec(const Runtime& runtime, const std::string& id,
                           const ::hyperslice::runners::v1::ExecInput::ExecStart& start,
                           grpc::ServerContext* ctx,
                           grpc::ServerReaderWriter<::hyperslice::runners::v1::ExecOutput,
                                                    ::hyperslice::runners::v1::ExecInput>* stream);

}  // namespace hyperslice::runners::agent
