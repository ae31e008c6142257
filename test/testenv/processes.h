// Finding the processes a test started, by what their command lines name (every process of a
// role names its work dir in a flag): the check that a role left no process behind. Header-only.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace hyperslice::testenv {

// PIDs of the live processes whose command line mentions `needle`. Zombies are left out: they
// have exited.
inline std::vector<pid_t> ProcessesMentioning(const std::string& needle) {
  namespace fs = std::filesystem;
  std::vector<pid_t> found;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(entry.path() / "cmdline", std::ios::binary);
    std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    if (args.find(needle) == std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string pid, comm, state;
    stat >> pid >> comm >> state;
    if (state != "Z") found.push_back(std::stoi(name));
  }
  return found;
}

}  // namespace hyperslice::testenv
