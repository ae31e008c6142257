// Reading a whole file in a test (fixtures, rendered manifests, logs): one helper instead of a
// copy per test. Header-only, so unit tests use it without linking hs_testenv.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace hyperslice::testenv {

// The file's bytes; "" when it cannot be read (the test's assertion on the content then fails).
inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace hyperslice::testenv
