// StartupScript (internal/bootstrap.h): src/tpu/startup-script.sh, embedded at build time
// (embed_script.cmake), with the group's Kubernetes version filled in.
#include <string>
#include <string_view>

#include "src/tpu/internal/bootstrap.h"

namespace hyperslice::tpu::internal {

extern const char kStartupScriptText[];  // generated: startup_script_text.cc

std::string StartupScript(std::string_view kubernetes_version) {
  static constexpr std::string_view kPlaceholder = "@KUBERNETES_VERSION@";
  // The version lands inside a double-quoted shell word: only characters that cannot end it or
  // expand there are kept (the script itself rejects what is not a version).
  std::string version;
  for (char c : kubernetes_version) {
    bool safe = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                c == '.' || c == '-' || c == '+';
    if (safe) version.push_back(c);
  }
  std::string script = kStartupScriptText;
  for (size_t at = script.find(kPlaceholder); at != std::string::npos;
       at = script.find(kPlaceholder, at + version.size())) {
    script.replace(at, kPlaceholder.size(), version);
  }
  return script;
}

}  // namespace hyperslice::tpu::internal
