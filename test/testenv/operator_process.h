// `hyperslice operator` (HS_HYPERSLICE_BIN) as a child process on the TPU operator's test
// environment (tpu_env.h), as deployed: the integration and chaos tests kill and restart it, the
// scale benchmark measures it. Apart from tpu_env.h so that a test running the operator in process
// (test/e2e/tpu_slice) needs no `hyperslice` binary. Header-only.
#pragma once

#include <sys/types.h>

#include <csignal>
#include <string>
#include <utility>
#include <vector>

#include "test/testenv/child_process.h"
#include "test/testenv/tpu_env.h"

namespace hyperslice::testenv::tpuenv {

// `hyperslice operator` (HS_HYPERSLICE_BIN) as a child process on an Env.
class OperatorProcess {
 public:
  // `extra` flags ("--name=value" or "--name", "value") are appended and replace the defaults
  // of the same name (leader election is off unless `extra` turns it on).
  void Start(const Env& env, const std::string& log_path,
             const std::vector<std::string>& extra = {}, const std::string& workers = "2") {
    const std::vector<std::pair<std::string, std::string>> defaults = {
        {"--kubeconfig", env.kubeconfig},
        {"--gce-endpoint", env.sim->api_endpoint()},
        {"--gce-access-token-file", env.token_file},
        {"--health-probe-port", "-1"},
        {"--orphan-sweep-interval", "0"},
        {"--drift-check-interval", "1h"},
        {"--device-plugin-namespace", kOperatorNs},
        {"--workers", workers},
        {"--leader-elect", "false"}};
    std::vector<std::string> args = {HS_HYPERSLICE_BIN, "operator"};
    for (const auto& [flag, value] : defaults) {
      bool overridden = false;
      for (const auto& e : extra) {
        overridden |= e == flag || e.rfind(flag + "=", 0) == 0;
      }
      if (overridden) continue;
      std::string arg = flag;
      arg += "=";
      arg += value;
      args.push_back(std::move(arg));
    }
    args.insert(args.end(), extra.begin(), extra.end());
    child_.Start(std::move(args), log_path);
  }
  bool running() const { return child_.running(); }
  pid_t pid() const { return child_.pid(); }
  void Kill() { child_.Kill(); }
  // SIGTERM; the exit code.
  int Terminate() { return child_.Stop(SIGTERM); }
  std::string Log() const { return child_.Log(); }
  std::string Tail(size_t n = 30) const { return child_.Tail(n); }

 private:
  ChildProcess child_;
};

}  // namespace hyperslice::testenv::tpuenv
