// One `hyperslice runner-agent` process of a runners e2e test, on its own loopback address, with
// its state dir, join-token file and log under the test's folder. The destructor stops it (see
// StopWith), so a failed assertion never leaves an agent running.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace hyperslice::testenv {

// The ids of runc's containers under `root` (all, or those not stopped); none when runc fails.
std::vector<std::string> RuncContainers(const std::string& root, bool live_only = false);

// A simulated machine that is gone (a returned marketplace machine, a deleted GCE VM) takes with
// it what its agent made; on this shared host the test removes it after killing the agent: runc's
// containers under <state_dir>/runtime and each pod's named network namespace (hs-<pod uid>, one
// per folder under <state_dir>/pods). Without it every returned machine left its pods'
// namespaces in /run/netns.
void RemoveMachineRemains(const std::string& state_dir);

class RunnerAgent {
 public:
  // kSigkill: the destructor kills at once (a plain agent keeps its pods' state for a restart);
  // kSigterm: it asks first and kills after 10 s (a sealed agent closes its TPM session).
  enum class StopWith { kSigkill, kSigterm };
  // `dir` is the test's folder: <dir>/<name> (state), <name>.token, <name>.log.
  RunnerAgent(std::string name, const std::string& ip, const std::string& dir,
              StopWith stop = StopWith::kSigkill);
  ~RunnerAgent();
  RunnerAgent(const RunnerAgent&) = delete;
  RunnerAgent& operator=(const RunnerAgent&) = delete;

  const std::string& name() const { return name_; }
  const std::string& address() const { return address_; }
  const std::string& state_dir() const { return state_dir_; }
  std::string runtime_root() const { return state_dir_ + "/runtime"; }
  pid_t pid() const { return pid_; }
  // Writes the one-time join token the agent reads at start.
  void SetToken(const std::string& token) const;
  // Starts (or restarts with the same state dir and address) the agent linking to
  // 127.0.0.1:<link_port> with the runners CA in `ca_file`; `flags` follow the link flags.
  bool Start(int link_port, const std::string& ca_file, const std::vector<std::string>& flags);
  void Kill9();
  // SIGTERM, then SIGKILL after 10 s.
  void Terminate();
  // Whether the started process has exited (reaps it).
  bool Exited();
  std::string Log() const;
  // Pods the agent still holds (their directories go last in its DeletePod, after the
  // containers, mounts and network namespace).
  bool HoldsPods() const;
  // The runtime's containers of this agent: all of them, or those not stopped (a completed
  // pod's exited container stays, stopped, until its pod is deleted, as with a kubelet).
  std::vector<std::string> Containers(bool live_only = false) const {
    return RuncContainers(runtime_root(), live_only);
  }

 private:
  std::string name_, state_dir_, token_file_, log_file_, address_;
  StopWith stop_;
  pid_t pid_ = -1;
};

}  // namespace hyperslice::testenv
