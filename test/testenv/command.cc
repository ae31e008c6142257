#include "test/testenv/command.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>

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

CommandResult KubectlApply(const std::string& yaml) {
  static std::atomic<int> applies{0};
  std::filesystem::path file = std::filesystem::path(Cluster().work_dir()) /
                               ("apply-" + std::to_string(applies.fetch_add(1)) + ".yaml");
  std::ofstream(file) << yaml;
  CommandResult r = Kubectl({"apply", "-f", file.string()});
  std::error_code ec;
  std::filesystem::remove(file, ec);
  return r;
}

}  // namespace hyperslice::testenv
