// The fixture most integration tests start from: an admin client for the binary's shared cluster
// (testenv.h) and a namespace of the test's own. A fixture that needs more calls
// NamespacedTest::SetUp() first (under ASSERT_NO_FATAL_FAILURE) and adds to it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "src/kube/client.h"
#include "test/testenv/testenv.h"

namespace hyperslice::testenv {

class NamespacedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_ = AdminClient();
    ASSERT_NE(client_, nullptr);
    ns_ = TestNamespace();
  }

  std::shared_ptr<kube::Client> client_;  // the cluster's admin
  std::string ns_;                        // this test's namespace
};

}  // namespace hyperslice::testenv
