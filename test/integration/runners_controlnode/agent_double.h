// A test double of a remote runner agent: the RunnerAgent gRPC service in process, on a loopback
// port, with what a test needs to steer it (capacity, pod outcomes, death and restart with a new
// boot id) and to observe it (RunPod/DeletePod calls by uid, the last RunPod request). Containers
// are not run: RunPod answers Running at once; Finish() ends a pod.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "src/runners/agent.grpc.pb.h"

namespace hyperslice::testing {

class AgentDouble {
 public:
  struct Options {
    std::string runner;
    std::map<std::string, std::string> capacity;  // e.g. {"cpu","4"},{"memory","8Gi"}
    std::string region, zone, slice;
    int slice_index = 0;
    bool allow_host_network = false;
    bool require_digest = true;
    // Server credentials; null: insecure.
    std::shared_ptr<grpc::ServerCredentials> credentials;
  };
  explicit AgentDouble(Options o);
  ~AgentDouble();

  bool Start();  // first start: a free loopback port; later starts: the same port, new boot id
  void Kill();   // the process is gone: server shut down, streams cut
  std::string address() const;  // 127.0.0.1:<port>

  int RunPodCalls(const std::string& uid) const;
  int DeletePodCalls(const std::string& uid) const;
  int TotalRunPodCalls() const;
  std::optional<hyperslice::runners::v1::RunPodRequest> LastRequest(const std::string& uid) const;
  bool Has(const std::string& uid) const;
  size_t PodCount() const;
  // Ends a pod's containers with `exit_code` (0: Succeeded, else Failed).
  void Finish(const std::string& uid, int exit_code);
  void SetHealthy(bool healthy);

  class Service;

 private:
  Options o_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace hyperslice::testing
