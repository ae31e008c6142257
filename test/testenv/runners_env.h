// The runners e2e environment: what every runners end-to-end test runs before its first
// assertion, as `hyperslice operator --runners` composes it on the shared control plane
// (kube-apiserver + kube-scheduler + kube-controller-manager): the runners CRDs, a test
// namespace, a temp folder, a local registry with the test image, the runners CA, the
// control-node controllers probing fast enough for a test (probe 500 ms, unhealthy after 4 s,
// Lease every 2 s) and the runner servers (link, kubelet API).
//
// Teardown order is the caller's half of the contract: stop the agents (RunnerAgent) after
// their pods are gone (WaitNoPods), then destroy the environment, which stops the servers and
// controllers, the registry, unmounts whatever a failed test left mounted below dir() and
// removes it.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/result.h"
#include "src/kube/client.h"
#include "src/kube/manager.h"
#include "src/kube/resource.h"
#include "src/runners/controlnode/controlnode.h"
#include "src/runners/controlnode/servers.h"
#include "test/testenv/registry.h"
#include "test/testenv/runner_agent.h"

namespace hyperslice::testenv {

class RunnersEnv;

struct RunnersEnvOptions {
  std::string name = "runners-e2e";  // the folder is /tmp/hs-<name>-XXXXXX
  std::string image = "hs/hstest";   // the test image's repository in the registry
  bool audit_log = false;            // the apiserver's audit log (Cluster().audit_log_path())
  // CRDs beyond ControlNode and Runner: the file under deploy/crds and its resource.
  std::vector<std::pair<std::string, kube::Resource>> extra_crds;
  // Called after the CA exists and before the controllers register: a test's own operator
  // options (gce, token issuer) and server options (addresses, CSR timeout).
  std::function<Status(RunnersEnv&, runners::controlnode::OperatorOptions&,
                       runners::controlnode::ServersOptions&)>
      configure;
};

class RunnersEnv {
 public:
  static Result<std::unique_ptr<RunnersEnv>> Start(const RunnersEnvOptions& options);
  ~RunnersEnv();
  RunnersEnv(const RunnersEnv&) = delete;
  RunnersEnv& operator=(const RunnersEnv&) = delete;

  const std::shared_ptr<kube::Client>& client() const { return client_; }
  const std::string& ns() const { return ns_; }
  const std::string& dir() const { return dir_; }
  const std::string& image() const { return image_; }  // by digest
  LocalRegistry& registry() const { return *registry_; }
  const runners::controlnode::RunnersCa& ca() const { return ca_; }
  const std::string& ca_file() const { return ca_file_; }  // the runners CA certificate
  runners::controlnode::RunnerServers& servers() const { return *servers_; }
  int kubelet_port() const { return kubelet_port_; }

  // A ControlNode whose kubelet API is this environment's.
  Status CreateControlNode(const std::string& name) const;
  Status Create(const kube::Resource& r, const std::string& ns, const std::string& body) const;
  std::optional<boost::json::object> Get(const kube::Resource& r, const std::string& ns,
                                         const std::string& name) const;
  std::string RunnerPhase(const std::string& runner) const;
  // The milli-units of `resource` in the Node's status.<which> (capacity, allocatable); -1 when
  // there is no such Node or quantity.
  int64_t NodeMilli(const std::string& node, const std::string& which,
                    const std::string& resource) const;
  // A Runner of `control_node` placed by spec.<placement> (gce, marketplace, host) = `spec_json`.
  Status CreateRunner(const std::string& name, const std::string& control_node,
                      const std::string& placement, const std::string& spec_json) const;
  // "<status>/<reason>" of the Runner's condition `type` ("" when it has none); its message goes
  // to `message` when given.
  std::string RunnerCondition(const std::string& runner, const std::string& type,
                              std::string* message = nullptr) const;
  // Whether a Warning Event about the object named `involved` (Events of cluster-scoped objects
  // are in "default") has `reason` and a message containing `text`.
  bool WarningEvent(const std::string& involved, const std::string& reason,
                    const std::string& text) const;
  // From now until the environment goes, every join token the controllers mint, read as the admin
  // could (the token Secrets, every 50 ms): the tokens tests look for in every log line.
  void WatchJoinTokens();
  std::set<std::string> MintedJoinTokens() const;
  // Waits for the one-time join token the controllers mint for `runner`.
  Result<std::string> JoinToken(const std::string& runner, std::chrono::seconds timeout) const;
  // Waits until the namespace has no pods; false on timeout.
  bool WaitNoPods(std::chrono::seconds timeout) const;
  // Finished Runner reconciles that requeued, all Runners together (each Runner's health refresh,
  // every unhealthy_after/2, does): a negative check waits for a few more of them, each of which
  // would have done the wrong thing, instead of a fixed window.
  static double RunnerReconciles();

 private:
  RunnersEnv() = default;
  Status Init(const RunnersEnvOptions& options);

  std::shared_ptr<kube::Client> client_;
  std::string ns_, dir_, image_, ca_file_;
  runners::controlnode::RunnersCa ca_;
  int kubelet_port_ = 0;
  std::unique_ptr<LocalRegistry> registry_;
  std::unique_ptr<kube::Manager> mgr_;
  std::unique_ptr<runners::controlnode::RunnerServers> servers_;
  std::thread run_;
  mutable std::mutex tokens_mu_;
  std::set<std::string> tokens_;
  std::atomic<bool> stop_tokens_{false};
  std::thread token_watch_;
};

// The string at `key` of the object at the dotted path in `o` ("" when absent).
std::string StringAt(const boost::json::object& o, std::string_view dotted, std::string_view key);

}  // namespace hyperslice::testenv
