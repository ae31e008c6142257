// The pods of one runner: admission of RunPodRequests against the runner's policy, one worker
// thread per pod that pulls images, prepares the sandbox (network namespace, volumes) and drives
// init containers then containers with the restart policy, status kept on disk so a restarted
// agent adopts what its shims still run, and deletion that leaves nothing behind.
//
// Thread-safe. Workers never throw across threads (every step returns a Result).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "src/base/result.h"
#include "src/runners/agent.pb.h"
#include "src/runners/agent/bundle.h"
#include "src/runners/agent/container_runtime.h"
#include "src/runners/agent/image_store.h"
#include "src/runners/agent/logs.h"
#include "src/runners/policy/policy.h"

namespace hyperslice::runners::agent {

namespace v1 = ::hyperslice::runners::v1;

struct PodManagerOptions {
  std::string state_dir;  // pods live in <state_dir>/pods/<uid>
  // Runs the pods' sandboxes and containers (runc_runtime.h or cri_runtime.h); outlives the
  // manager.
  ContainerRuntime* runtime = nullptr;
  bool allow_host_network = false;
  bool require_digest = true;
  std::map<std::string, std::vector<DeviceNode>> devices;  // resource -> nodes
  std::string host_ip;                              // reported as pod IP for host-network pods
  std::chrono::milliseconds restart_backoff{2000};  // doubled per restart, at most 5 min
  // Sealed runners: every RunPod is checked against this policy (signatures read through
  // `signatures`); both outlive the manager.
  const policy::WorkloadPolicy* workload_policy = nullptr;
  policy::SignatureSource* signatures = nullptr;
  // Sealed runners: called before each start of a container (after its image is pulled); measures
  // it and returns the directories to bind into it (container path -> host dir). An error keeps
  // the container from starting (the step is retried).
  std::function<Result<std::map<std::string, std::string>>(
      const v1::RunPodRequest& pod, const v1::Container& container, const Image& image)>
      before_start;
};

// Error::reason values of admission refusals (the gRPC service maps kFailedPrecondition-like
// policy refusals to FAILED_PRECONDITION).
inline constexpr char kReasonPolicy[] = "RunnerPolicy";

class PodManager {
 public:
  explicit PodManager(PodManagerOptions options);
  ~PodManager();
  PodManager(const PodManager&) = delete;
  PodManager& operator=(const PodManager&) = delete;

  // Adopts the pods in the state dir (after an agent restart): their shims and containers run on.
  Status Recover();
  // Admits and starts the pod; idempotent by uid. Errors: kInvalidArgument (malformed spec),
  // kForbidden with reason kReasonPolicy (policy: host network, tags, devices) or a
  // policy::kReason* (the workload policy of a sealed runner).
  Result<v1::PodStatus> Run(const v1::RunPodRequest& request);
  // SIGTERM, `grace` (or the pod's), SIGKILL, runtime delete, unmount, netns, directory.
  Status Delete(const std::string& uid, std::optional<std::chrono::seconds> grace);
  std::vector<v1::PodStatus> List();

  // A subscription to status changes (each change of any pod, and deletions).
  class Watch {
   public:
    // Waits up to `timeout`; nullopt when nothing came or the manager shut down.
    std::optional<v1::PodStatus> Next(std::chrono::milliseconds timeout);

   private:
    friend class PodManager;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<v1::PodStatus> queue_;
    bool closed_ = false;
  };
  std::shared_ptr<Watch> Subscribe();

  struct LogTarget {
    std::string path;
    std::function<bool()> finished;
  };
  Result<LogTarget> Log(const std::string& uid, const std::string& container, bool previous);
  // Exec in a running container of a pod (the stream's start message already read): kNotFound /
  // kConflict (not running) as errors, else the runtime serves the stream.
  grpc::Status Exec(const v1::ExecInput::ExecStart& start, grpc::ServerContext* ctx,
                    grpc::ServerReaderWriter<v1::ExecOutput, v1::ExecInput>* stream);

  // Stops the workers without touching containers (agent shutdown).
  void Shutdown();

 private:
  struct Pod;
  void Work(const std::shared_ptr<Pod>& pod);
  Status Step(Pod& pod, bool& done);
  Status EnsureSandbox(Pod& pod);
  Status StartContainer(Pod& pod, const v1::Container& c, bool init, int attempt);
  void Observe(Pod& pod);
  void Publish(Pod& pod);  // persists status and notifies watchers; mu_ held
  Status Admit(const v1::RunPodRequest& r);
  Result<std::map<std::string, std::vector<DeviceNode>>> Allocate(const v1::RunPodRequest& r);
  void StartWorker(const std::shared_ptr<Pod>& pod);
  static PodRef RefOf(const Pod& pod);

  PodManagerOptions o_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Pod>> pods_;  // by uid
  std::set<std::string> used_devices_;                // host paths
  std::vector<std::weak_ptr<Watch>> watches_;
  bool shutdown_ = false;
};

}  // namespace hyperslice::runners::agent
