// The base of the agent tests that run in a network namespace of their own (podnet_test.cc,
// cri_test.cc; the binaries link test/testenv/own_netns.cc): each test skips, saying why, when the
// process has no namespace of its own or the shared Env (fixture.h) cannot start.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "test/integration/runners_agent/fixture.h"
#include "test/testenv/own_netns.h"

namespace hyperslice::runners::testing {

class OwnNetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string& why = testenv::OwnNetworkNamespaceError(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    std::string why;
    env_ = Shared(&why);
    if (env_ == nullptr) GTEST_SKIP() << why;
  }

  Env* env_ = nullptr;
};

}  // namespace hyperslice::runners::testing
