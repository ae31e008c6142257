#include "src/base/files.h"

#include <fstream>
#include <sstream>

namespace hyperslice {

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  if (in) ss << in.rdbuf();
  if (!in || in.bad()) return Error::Make(Error::Code::kNotFound, "cannot read " + path);
  return ss.str();
}

std::string ReadFileOrEmpty(const std::string& path) {
  auto text = ReadFile(path);
  return text.ok() ? std::move(text).value() : std::string();
}

}  // namespace hyperslice
