// What the pod manager asks of the runtime that runs a pod's containers (src/runners/README.md
// "Runtimes"): the runc CLI with the agent's own shim (runc_runtime.h, the default), or
// containerd through the CRI API as a kubelet drives it (cri_runtime.h, with
// --container-runtime-endpoint). The pod manager keeps admission, the restart policy, the pod's
// status and its state dir; a runtime keeps the pod's sandbox and containers and finds them again
// after an agent restart by pod uid, container name and attempt — never by memory alone.
//
// Thread-safety: every method may be called from any pod's worker and the gRPC threads at once.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/sync_stream.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/base/result.h"
#include "src/runners/agent.grpc.pb.h"
#include "src/runners/agent/bundle.h"
#include "src/runners/agent/image_store.h"
#include "src/runners/agent/runtime.h"

namespace hyperslice::runners::agent {

// One pod as a runtime sees it.
struct PodRef {
  const ::hyperslice::runners::v1::RunPodRequest* spec = nullptr;
  // <state-dir>/pods/<uid>: the pod's volumes (written by the pod manager under volumes/<name>
  // before the first container starts) and whatever the runtime keeps per container.
  std::string dir;
  const std::map<std::string, std::vector<DeviceNode>>* devices = nullptr;  // by container
  const std::string& uid() const { return spec->pod().uid(); }
};

// What a runtime knows of one attempt of a container.
struct AttemptState {
  bool known = false;  // the runtime has (or had) this attempt: it was started
  std::optional<StartRecord> started;
  std::optional<ExitRecord> exit;
};

// The pod's containers an operation applies to: name and current attempt.
using ContainerAttempts = std::vector<std::pair<std::string, int>>;

class ContainerRuntime {
 public:
  virtual ~ContainerRuntime() = default;
  // Pulls (or finds) the image; `image` names its registry and, per the agent's policy, a digest.
  virtual Result<Image> Pull(const std::string& image) = 0;
  // The pod's sandbox (network namespace, and its network where the runtime has one); idempotent,
  // also after an agent restart. Returns the pod IP, "" when the pod has none of its own.
  virtual Result<std::string> EnsureSandbox(const PodRef& pod) = 0;
  // Creates and starts `attempt` of the container (an earlier attempt's container is replaced;
  // its log stays). `agent_binds`: container path -> host directory, bound read-only.
  virtual Status Start(const PodRef& pod, const ::hyperslice::runners::v1::Container& container,
                       const Image& image, int attempt,
                       const std::map<std::string, std::string>& agent_binds) = 0;
  virtual AttemptState Observe(const PodRef& pod, const std::string& container, int attempt) = 0;
  // The attempt's log in the kubelet's CRI format (logs.h reads it).
  virtual std::string LogPath(const PodRef& pod, const std::string& container, int attempt) = 0;
  // SIGTERM, up to `grace`, then SIGKILL; a grace of 0 is SIGKILL at once. Returns when they
  // have exited (or could not be killed: an error).
  virtual Status Stop(const PodRef& pod, const ContainerAttempts& containers,
                      std::chrono::seconds grace) = 0;
  // Removes everything the runtime made for the pod (containers, mounts, sandbox, network);
  // idempotent, so a retry after a partial failure does the remaining steps. The pod manager
  // removes the pod's directory afterwards and then calls Forget.
  virtual Status Remove(const PodRef& pod, const ContainerAttempts& containers) = 0;
  // The pod's directory is gone: release what must outlive it (the runc path's pod address).
  virtual void Forget(const PodRef& pod) = 0;
  // Exec in a running container: the RunnerAgent Exec stream after its start message.
  virtual grpc::Status Exec(
      const PodRef& pod, const std::string& container, int attempt,
      const ::hyperslice::runners::v1::ExecInput::ExecStart& start, grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<::hyperslice::runners::v1::ExecOutput,
                               ::hyperslice::runners::v1::ExecInput>* stream) = 0;
  // Removes the runtime's containers (and sandboxes) of this agent that none of `pods` owns: left
  // by a crash between the runtime's create and the pod's record, or a pod dir removed by hand.
  virtual void CollectOrphans(const std::vector<::hyperslice::runners::v1::PodStatus>& pods) = 0;
  // "" when healthy, else why not (Info's health_message).
  virtual std::string Health() = 0;
};

// Ends an exec whose command could not be started: the call succeeds with exit code -1 and `why`.
inline grpc::Status ExecFailed(
    grpc::ServerReaderWriter<::hyperslice::runners::v1::ExecOutput,
                             ::hyperslice::runners::v1::ExecInput>* stream,
    const std::string& why) {
  ::hyperslice::runners::v1::ExecOutput out;
  out.mutable_exit()->set_code(-1);
  out.mutable_exit()->set_error(why);
  stream->Write(out);
  return grpc::Status::OK;
}

}  // namespace hyperslice::runners::agent
