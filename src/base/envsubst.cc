#include "src/base/envsubst.h"

#include <cctype>

namespace hyperslice {

std::map<std::string, std::string> ParseEnvFile(std::string_view text) {
  std::map<std::string, std::string> vars;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? nl : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    if (line.empty() || line[0] == '#') continue;
    auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    vars[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  return vars;
}

Result<std::string> Envsubst(std::string_view text,
                             const std::map<std::string, std::string>& vars) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '$') {
      out += text[i];
      continue;
    }
    const bool braced = i + 1 < text.size() && text[i + 1] == '{';
    const size_t start = i + (braced ? 2 : 1);
    size_t end = start;
    while (end < text.size() &&
           (std::isalnum(static_cast<unsigned char>(text[end])) != 0 || text[end] == '_'))
      ++end;
    std::string name(text.substr(start, end - start));
    auto it = vars.find(name);
    if (name.empty() || it == vars.end())
      return Error::Make(Error::Code::kInvalidArgument,
                         "the template uses $" + name + ", which its .env file does not set");
    out += it->second;
    i = end - 1 + (braced && end < text.size() && text[end] == '}' ? 1 : 0);
  }
  return out;
}

}  // namespace hyperslice
