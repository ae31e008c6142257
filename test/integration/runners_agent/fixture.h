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

// One agent process.
class AgentProcess {
 public:
  AgentProcess(Env& env, std::string name, std::vector<std::string> extra_flags = {});
  ~AgentProcess();
  // Starts (or restarts with the same state dir, address and flags) and waits for it to serve.
  ::testing::AssertionResult Start();
  void Kill9();
  void Terminate();
  std::unique_ptr<v1::RunnerAgent::Stub> Stub(const net::pki::KeyPair& client) const;
  std::unique_ptr<v1::RunnerAgent::Stub> Stub() const { return Stub(env_.control_node); }
  const std::string& state_dir() const { return state_dir_; }
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  std::string RuntimeRoot() const { return state_dir_ + "/runtime"; }

 private:
  Env& env_;
  std::string name_;
  std::vector<std::string> extra_;
  std::string state_dir_;
  std::string token_file_;
  std::string address_;
  std::string log_file_;
  pid_t pid_ = -1;
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
// The runtime's containers (ids) under `root`.
std::vector<std::string> RuntimeList(const std::string& root);

}  // namespace hyperslice::runners::testing
