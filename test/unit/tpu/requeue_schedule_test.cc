// The GCE child controllers' requeue schedule on a fake clock: growth and cap of the backoff, the
// failure gate, the drift check's jitter bounds and how each state resets the others.
#include "src/tpu/internal/requeue_schedule.h"

#include <chrono>

#include <gtest/gtest.h>

#include "src/base/fake_clock.h"

namespace hyperslice::tpu::internal {
namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

class RequeueScheduleTest : public ::testing::Test {
 protected:
  RequeueSchedule Make(double random = 0.5) {
    return RequeueSchedule({.backoff_initial = seconds(2),
                            .backoff_max = seconds(60),
                            .drift_check_interval = minutes(10),
                            .clock = &clock_,
                            .random = [random] { return random; }});
  }
  FakeClock clock_;
};

TEST_F(RequeueScheduleTest, BackoffDoublesUpToTheMaximum) {
  auto s = Make();
  for (auto want : {2, 4, 8, 16, 32, 60, 60}) EXPECT_EQ(s.Backoff("a"), seconds(want));
  EXPECT_EQ(s.Backoff("b"), seconds(2)) << "each key has its own count";
}

TEST_F(RequeueScheduleTest, FailedGatesUntilItsBackoffHasPassed) {
  auto s = Make();
  EXPECT_FALSE(s.RetryGate("a"));
  EXPECT_EQ(s.Failed("a"), seconds(2));
  clock_.Advance(milliseconds(500));
  ASSERT_TRUE(s.RetryGate("a"));
  EXPECT_EQ(*s.RetryGate("a"), milliseconds(1500));
  clock_.Advance(milliseconds(1500));
  EXPECT_FALSE(s.RetryGate("a"));
  EXPECT_EQ(s.Failed("a"), seconds(4)) << "a failure continues the backoff";
  EXPECT_FALSE(s.RetryGate("b"));
}

TEST_F(RequeueScheduleTest, DriftCheckResetsTheBackoffAndTheGate) {
  auto s = Make();
  s.Backoff("a");
  s.Failed("a");
  EXPECT_EQ(s.DriftCheck("a"), minutes(10));
  EXPECT_FALSE(s.RetryGate("a"));
  EXPECT_EQ(s.Backoff("a"), seconds(2));
}

TEST_F(RequeueScheduleTest, DriftCheckIsJitteredByTwentyPercent) {
  EXPECT_EQ(Make(0.0).DriftCheck("a"), minutes(8));
  EXPECT_EQ(Make(0.75).DriftCheck("a"), minutes(11));
}

TEST_F(RequeueScheduleTest, JitterStaysUnderTheUpperBoundAndAZeroIntervalStillRequeues) {
  EXPECT_LT(Make(0.999999).DriftCheck("a"), minutes(12));
  EXPECT_GT(Make(0.999999).DriftCheck("a"), minutes(11));
  RequeueSchedule zero({.drift_check_interval = Clock::Duration::zero(),
                        .clock = &clock_,
                        .random = [] { return 0.5; }});
  EXPECT_EQ(zero.DriftCheck("a"), milliseconds(1)) << "a zero requeue would mean none";
}

TEST_F(RequeueScheduleTest, OnlyAFailureGatesAndTheGateFollowsTheClock) {
  auto s = Make();
  EXPECT_EQ(s.Backoff("a"), seconds(2));
  EXPECT_FALSE(s.RetryGate("a")) << "not done yet is no failure: an event may look at once";
  EXPECT_EQ(s.Failed("a"), seconds(4));
  clock_.Advance(seconds(3));
  ASSERT_TRUE(s.RetryGate("a"));
  EXPECT_EQ(*s.RetryGate("a"), seconds(1));
  EXPECT_EQ(s.Failed("a"), seconds(8)) << "a failure while gated moves the gate";
  clock_.Advance(seconds(7));
  ASSERT_TRUE(s.RetryGate("a"));
  EXPECT_EQ(*s.RetryGate("a"), seconds(1));
  clock_.Advance(seconds(1));
  EXPECT_FALSE(s.RetryGate("a"));
  EXPECT_FALSE(s.RetryGate("a")) << "an opened gate stays open";
}

TEST_F(RequeueScheduleTest, UntilDriftCheckCountsDownAndABackoffCancelsIt) {
  auto s = Make();
  EXPECT_FALSE(s.UntilDriftCheck("a")) << "nothing scheduled";
  s.DriftCheck("a");
  clock_.Advance(minutes(4));
  ASSERT_TRUE(s.UntilDriftCheck("a"));
  EXPECT_EQ(*s.UntilDriftCheck("a"), minutes(6));
  clock_.Advance(minutes(6));
  EXPECT_FALSE(s.UntilDriftCheck("a")) << "due";
  s.DriftCheck("a");
  s.Backoff("a");
  EXPECT_FALSE(s.UntilDriftCheck("a")) << "something is not done: no settled sleep";
}

TEST_F(RequeueScheduleTest, ForgetDropsEverything) {
  auto s = Make();
  s.Failed("a");
  s.Failed("a");
  s.Forget("a");
  EXPECT_FALSE(s.RetryGate("a"));
  EXPECT_FALSE(s.UntilDriftCheck("a"));
  EXPECT_EQ(s.Backoff("a"), seconds(2));
}

}  // namespace
}  // namespace hyperslice::tpu::internal
