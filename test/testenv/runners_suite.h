// The static fixture the runners e2e suites share (GCE, marketplace, linked, sealed): the suite's
// one environment (env_, runners_env.h), why the whole suite is skipped (skip_, e.g.
// RunnerToolsMissing()), and the environment's reads and writes as the tests call them (a write
// that must succeed asserts). `Suite` is the test suite itself, so each suite has statics of its
// own; its SetUpTestSuite fills them and its TearDownTestSuite resets them in the order
// runners_env.h asks for.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <boost/json/object.hpp>

#include "src/kube/resource.h"
#include "test/testenv/runners_env.h"

namespace hyperslice::testenv {

template <typename Suite>
class RunnersSuite : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  static void Create(const kube::Resource& r, const std::string& ns, const std::string& body) {
    Status created = env_->Create(r, ns, body);
    ASSERT_TRUE(created.ok()) << created.error().message << "\n" << body;
  }
  static std::optional<boost::json::object> Get(const kube::Resource& r, const std::string& ns,
                                                const std::string& name) {
    return env_->Get(r, ns, name);
  }
  static std::string RunnerPhase(const std::string& name) { return env_->RunnerPhase(name); }
  // "<status>/<reason>" of the Runner's condition `type` (RunnersEnv::RunnerCondition).
  static std::string Condition(const std::string& runner, const std::string& type,
                               std::string* message = nullptr) {
    return env_->RunnerCondition(runner, type, message);
  }
  static bool WarningEvent(const std::string& involved, const std::string& reason,
                           const std::string& text) {
    return env_->WarningEvent(involved, reason, text);
  }

  // Milliseconds from `t` to now: the timings the tests print.
  static int64_t MsSince(std::chrono::steady_clock::time_point t) {
    const auto elapsed = std::chrono::steady_clock::now() - t;
    return std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count();
  }

  static inline std::string skip_;
  static inline std::unique_ptr<RunnersEnv> env_;
};

}  // namespace hyperslice::testenv
