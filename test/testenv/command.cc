#include "test/testenv/command.h"

#include <cstdlib>

#include "test/testenv/testenv.h"

namespace hyperslice::testenv {

std::string KubectlPath() {
  const char* env = std::getenv("KUBECTL");
  return env != nullptr && *env != '\0' ? env : "kubectl";
}

bool HaveKubectl() { return RunCommand({KubectlPath(), "version", "--client"}).exit_code == 0; }

CommandResult Kubectl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {KubectlPath(), "--kubeconfig", Cluster().kubeconfig_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

}  // namespace hyperslice::testenv
