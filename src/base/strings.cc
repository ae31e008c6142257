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

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  while (true) {
    const size_t at = s.find(sep);
    out.emplace_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

std::vector<std::string> SplitNonEmpty(std::string_view s, char sep) {
  std::vector<std::string> out = Split(s, sep);
  std::erase_if(out, [](const std::string& piece) { return piece.empty(); });
  return out;
}

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string QuoteForMessage(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  constexpr size_t kMax = 80;
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMax) out += "...";
  return out + "\"";
}

}  // namespace hyperslice
