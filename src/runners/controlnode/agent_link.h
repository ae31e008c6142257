// AgentLink: the control node's connection to one runner's agent (RunnerAgent over gRPC; mutual
// TLS with credentials injected from outside, or insecure ones in tests).
//
// Two threads per runner:
//  - the prober calls Info every probe_interval (deadline = probe_interval, at most 5 s). The
//    runner is healthy while the last successful Info that said healthy is at most
//    unhealthy_after old; a runner that never answered is not healthy. A new boot id (the agent
//    restarted) is reported as a change.
//  - the watcher opens WatchPods, then lists (ListPods) to know every pod the agent has
//    (pods_synced), and applies each streamed PodStatus; on a broken stream it reconnects after
//    a short backoff. While the runner is unhealthy the stream is cancelled and reopened once it
//    answers again, so a hung agent never holds a stale stream.
// Callbacks (on_change: health, info, boot id or sync changed; on_pod: a status arrived) run on
// those threads and must be quick (they enqueue work).
//
// Thread-safety: every method from any thread. Stop() joins the threads (idempotent; the
// destructor calls it).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/runners/agent.grpc.pb.h"
#include "src/runners/link/link.h"

namespace hyperslice::runners::controlnode {

// The credentials a control node presents to a runner's agent (its client certificate and the
// runners CA in production; grpc::InsecureChannelCredentials() against a test double).
using AgentCredentials =
    std::function<Result<std::shared_ptr<grpc::ChannelCredentials>>(const std::string& runner)>;

// The agent's certificate as seen on the TLS session (empty fields over insecure channels).
struct AgentIdentity {
  std::string serial;       // hex
  std::string not_after;    // RFC 3339
  std::string fingerprint;  // SHA-256 of the DER, hex
};

struct AgentSnapshot {
  bool answered = false;  // some Info succeeded since the link was made
  bool healthy = false;
  std::chrono::system_clock::time_point last_seen{};
  std::string last_error;
  std::optional<v1::RunnerInfo> info;
  bool pods_synced = false;                   // `pods` is the agent's full set (listed + watched)
  std::map<std::string, v1::PodStatus> pods;  // by uid
  AgentIdentity identity;
};

struct AgentLinkOptions {
  std::string runner;   // the Runner's name (TLS: the agent certificate's name)
  std::string address;  // host:port
  AgentCredentials credentials;
  bool verify_runner_name = true;  // TLS target name override = runner (address may be an IP)
  std::chrono::milliseconds probe_interval{10000};
  std::chrono::milliseconds unhealthy_after{40000};
  std::chrono::milliseconds rpc_timeout{30000};  // RunPod / DeletePod deadline
  std::function<void()> on_change;
  std::function<void(const v1::PodStatus&)> on_pod;
};

class AgentLink {
 public:
  explicit AgentLink(AgentLinkOptions options);
  ~AgentLink();
  AgentLink(const AgentLink&) = delete;
  AgentLink& operator=(const AgentLink&) = delete;

  Status Start();  // builds the channel (credentials errors surface here) and starts the threads
  void Stop();

  // With `with_pods` false the pods map is left empty (cheap health/info reads).
  AgentSnapshot Snapshot(bool with_pods = true) const;
  // The agent's status of one pod, and the uids it holds under a namespace/name.
  std::optional<v1::PodStatus> Pod(const std::string& uid) const;
  std::vector<std::string> UidsNamed(const std::string& ns, const std::string& name) const;
  const std::string& address() const { return options_.address; }

  // Idempotent by uid on the agent. Errors: the gRPC status as kUnavailable/kInvalidArgument/...
  Result<v1::PodStatus> RunPod(const v1::RunPodRequest& req);
  Status DeletePod(const std::string& uid, int64_t grace_seconds);
  // For the kubelet API (logs, exec): the stub on this link's channel.
  std::shared_ptr<v1::RunnerAgent::StubInterface> stub() const { return stub_; }

  // Counters for tests and metrics.
  uint64_t run_pod_calls() const;

 private:
  void ProbeLoop();
  void WatchLoop();
  void SetHealthLocked(bool healthy, std::chrono::system_clock::time_point now);
  bool SleepFor(std::chrono::milliseconds d);  // false when stopping
  void Notify();

  AgentLinkOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<v1::RunnerAgent::StubInterface> stub_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  AgentSnapshot snap_;
  grpc::ClientContext* watch_ctx_ = nullptr;  // the open WatchPods call, cancelled on Stop
  uint64_t run_pod_calls_ = 0;
  std::thread prober_, watcher_;
};

// Error code for a gRPC status: link::FromGrpc (src/runners/link/link.h).
using ::hyperslice::runners::link::FromGrpc;

}  // namespace hyperslice::runners::controlnode
