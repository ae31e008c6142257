// Running the real clients a user runs (kubectl, the providers' CLIs) from a test: one helper
// instead of a copy per test.
#pragma once

#include <string>
#include <vector>

#include "src/base/command.h"

namespace hyperslice::testenv {

// RunCommand and CommandResult live in src/base/command.h (the local mesh uses them too).
using hyperslice::CommandResult;
using hyperslice::RunCommand;

// $KUBECTL, else "kubectl" from PATH; HaveKubectl() tells whether it runs.
std::string KubectlPath();
bool HaveKubectl();

// kubectl against the binary's shared cluster (testenv::Cluster()'s admin kubeconfig).
CommandResult Kubectl(const std::vector<std::string>& args);
// `kubectl apply -f` of `yaml` (e.g. testenv::Example's), as a user applies a file, against the
// shared cluster; the file is written to the cluster's folder and removed afterwards.
CommandResult KubectlApply(const std::string& yaml);

}  // namespace hyperslice::testenv
