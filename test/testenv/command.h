// Running the real clients a user runs (kubectl, the providers' CLIs) from a test: one helper
// instead of a copy per test.
#pragma once

#include <string>
#include <vector>

namespace hyperslice::testenv {

struct CommandResult {
  int exit_code = -1;  // -1: not started or killed by a signal
  std::string output;  // stdout
  std::string errors;  // stderr
};

// Runs argv (no shell interpretation of its words) with `env` ("NAME=value") added to the
// environment, and waits for it.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env = {});

// $KUBECTL, else "kubectl" from PATH; HaveKubectl() tells whether it runs.
std::string KubectlPath();
bool HaveKubectl();

// kubectl against the binary's shared cluster (testenv::Cluster()'s admin kubeconfig).
CommandResult Kubectl(const std::vector<std::string>& args);

}  // namespace hyperslice::testenv
