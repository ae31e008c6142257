// The providers' own clients that scripts/gpu-clients.sh installs (the runpod SDK, the vastai
// CLI), found through HYPERSLICE_GPU_CLIENTS as scripts/test.sh exports it. Header-only.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace hyperslice::testenv {

// HYPERSLICE_GPU_CLIENTS/`relative` (e.g. "vastai/bin/vastai"); "" with `why` set when the
// variable is unset or the file is missing: the test skips with `why`.
inline std::string GpuClient(const std::string& relative, std::string& why) {
  const char* dir = std::getenv("HYPERSLICE_GPU_CLIENTS");
  if (dir == nullptr || *dir == '\0') {
    why =
        "HYPERSLICE_GPU_CLIENTS is not set: run `bash scripts/gpu-clients.sh` and export its "
        "output (scripts/test.sh does) to test " +
        relative;
    return {};
  }
  std::string path = std::string(dir) + "/" + relative;
  if (!std::filesystem::exists(path)) {
    why = path + " does not exist: scripts/gpu-clients.sh's install is incomplete";
    return {};
  }
  return path;
}

}  // namespace hyperslice::testenv
