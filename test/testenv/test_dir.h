// A scratch directory of the running test's own (key pairs, rendered files): one per test, so that
// tests never see each other's files, and per process, so that binaries run in parallel do not
// either. Header-only; needs gtest.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace hyperslice::testenv {

// <temp>/<prefix>-<pid>-<test name>, created. The test removes it when done.
inline std::filesystem::path TestDir(const std::string& prefix) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              (prefix + "-" + std::to_string(::getpid()) + "-" +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace hyperslice::testenv
