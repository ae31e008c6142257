// Shared set-up of the runner agent tests: the runners CA, a RunnerLink server with in-memory
// join tokens, a local registry with the test image, and `hyperslice runner-agent` processes
// (the real binary: the shim is that binary too, and kill -9 must be able to hit it).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "src/runners/agent.grpc.pb.h"
#include "src/runners/agent/agent.h"
#include "src/runners/link/link.h"
#include "test/testenv/registry.h"
#include "test/testenv/runner_agent.h"

namespace hyperslice::runners::testing {

namespace v1 = ::hyperslice::runners::v1;

struct Env {
  ~Env();  // stops the link server and the registry, removes `dir`
  net::pki::KeyPair ca;
  net::pki::KeyPair control_node;  // O = control nodes
  std::string ca_file;
  link::MemoryJoinTokenStore tokens;
  std::unique_ptr<link::LinkServer> link;
  std::unique_ptr<testenv::LocalRegistry> registry;
  std::string image;  // by digest
  std::string dir;    // temp root of this binary
};
// Starts once per binary; nullptr (with `why`) when the machine cannot run these tests.
Env* Shared(std::string* why);

// One agent process (testenv::RunnerAgent on 127.0.0.1) linked to the Env's link server, with a
// join token of its own.
class AgentProcess {
 public:
  AgentProcess(Env& env, const std::string& name, std::vector<std::string> extra_flags = {});
  ~AgentProcess();  // deletes the pods it still runs, then terminates it
  // Starts (or restarts with the same state dir, address and flags) and waits for it to serve.
  ::testing::AssertionResult Start();
  void Kill9() { process_.Kill9(); }
  void Terminate() { process_.Terminate(); }
  std::unique_ptr<v1::RunnerAgent::Stub> Stub(const net::pki::KeyPair& client) const;
  std::unique_ptr<v1::RunnerAgent::Stub> Stub() const { return Stub(env_.control_node); }
  const std::string& state_dir() const { return process_.state_dir(); }
  const std::string& address() const { return process_.address(); }
  pid_t pid() const { return process_.pid(); }
  std::string RuntimeRoot() const { return process_.runtime_root(); }

 private:
  Env& env_;
  std::vector<std::string> extra_;
  testenv::RunnerAgent process_;
};

// A suite whose tests share one agent: the suite's SetUpTestSuite calls Launch (or sets started_
// to the failure that kept it from launching); every test skips when the machine cannot run
// agents and fails when the agent did not start. `Suite` keeps each suite's agent its own.
template <class Suite>
class OneAgentSuite : public ::testing::Test {
 protected:
  static void Launch(Env& env, const std::string& name, std::vector<std::string> flags) {
    agent_ = new AgentProcess(env, name, std::move(flags));
    started_ = agent_->Start();
  }
  static void TearDownTestSuite() {
    delete agent_;
    agent_ = nullptr;
  }
  void SetUp() override {
    std::string why;
    env_ = Shared(&why);
    if (env_ == nullptr) GTEST_SKIP() << why;
    ASSERT_TRUE(started_);
    stub_ = agent_->Stub();
  }

  static inline AgentProcess* agent_ = nullptr;
  static inline ::testing::AssertionResult started_ = ::testing::AssertionFailure();
  Env* env_ = nullptr;
  std::unique_ptr<v1::RunnerAgent::Stub> stub_;
};

// Pod helpers.
v1::RunPodRequest Pod(const std::string& uid, const std::string& image,
                      const std::vector<std::string>& args, const std::string& restart = "Never");
// Waits for a status of `uid` satisfying `pred` via ListPods (polling); nullopt on timeout.
std::optional<v1::PodStatus> WaitFor(v1::RunnerAgent::Stub& stub, const std::string& uid,
                                     const std::function<bool(const v1::PodStatus&)>& pred,
                                     std::chrono::seconds timeout = std::chrono::seconds(60));
std::string Logs(v1::RunnerAgent::Stub& stub, const std::string& uid, const std::string& container,
                 bool timestamps = false);
// RunPod with a 10 s deadline.
grpc::Status RunPod(v1::RunnerAgent::Stub& stub, const v1::RunPodRequest& r);
// DeletePod with a grace of 0.
grpc::Status DeleteNow(v1::RunnerAgent::Stub& stub, const std::string& uid);
// Runs the pod and waits until it runs with a pod IP ("" when it does not).
std::string RunWithIp(v1::RunnerAgent::Stub& stub, const v1::RunPodRequest& r);
struct ExecResult {
  std::string out;                       // stdout then stderr as they came
  std::string stdout_text, stderr_text;  // each stream alone (no order holds across them)
  int code = -100;
  std::string error;
};
// Exec in the pod's container "main". `input`: written after a moment (stdin on); with a
// terminal, `resize` (width, height) is sent first.
ExecResult ExecIn(v1::RunnerAgent::Stub& stub, const std::string& uid,
                  const std::vector<std::string>& command, bool tty = false,
                  const std::string& input = "", std::pair<int, int> resize = {0, 0});
// A command run with a terminal in pod `uid`'s container: it sees one and its exit code comes
// back; resized to 100x40, then `line` typed (echoed by the terminal) and read by the command.
void ExpectTerminalExec(v1::RunnerAgent::Stub& stub, const std::string& uid,
                        const std::string& line);
// The runtime's containers (ids) under `root`.
inline std::vector<std::string> RuntimeList(const std::string& root) {
  return testenv::RuncContainers(root);
}

}  // namespace hyperslice::runners::testing
