#include "test/testenv/examples.h"

#include <fstream>
#include <iterator>

#include "src/base/envsubst.h"

namespace hyperslice::testenv {

std::string Example(const std::string& file, const std::string& env_file,
                    const std::map<std::string, std::string>& overrides) {
  const std::string dir = std::string(HS_DEPLOY_DIR) + "/examples/";
  std::ifstream env(dir + env_file);
  std::ifstream in(dir + file);
  if (!env || !in) return "";
  std::map<std::string, std::string> vars = ParseEnvFile(
      std::string((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>()));
  for (const auto& [k, v] : overrides) vars[k] = v;
  auto out = Envsubst(
      std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), vars);
  return out.ok() ? *out : "";
}

}  // namespace hyperslice::testenv
