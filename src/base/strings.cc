#include "src/base/strings.h"

#include <cctype>

namespace hyperslice {

std::string TrimSpace(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) {
    s.remove_prefix(1);
  }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.remove_suffix(1);
  return std::string(s);
}

std::optional<std::pair<std::string, std::string>> SplitKeyValue(std::string_view s) {
  const size_t eq = s.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == s.size()) return std::nullopt;
  return std::pair(std::string(s.substr(0, eq)), std::string(s.substr(eq + 1)));
}

}  // namespace hyperslice
