#include "src/kube/internal/workqueue.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "src/base/fake_clock.h"
#include "test/testenv/eventually.h"
#include "test/unit/kube_runtime/queue_signals.h"

namespace hyperslice::kube {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testenv::Eventually;
using testing::DelaysChecked;

WorkQueueOptions Opts(FakeClock& clock, metrics::Registry* reg = nullptr,
                      const std::string& name = "") {
  WorkQueueOptions o;
  o.clock = &clock;
  o.registry = reg;
  o.name = name;
  return o;
}

// A queue with default options on a fake clock.
class WorkQueueTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  WorkQueue q_{Opts(clock_)};
};

TEST_F(WorkQueueTest, AddWhileQueuedIsDeduplicated) {
  q_.Add("a");
  q_.Add("b");
  q_.Add("a");
  q_.Add("a");
  EXPECT_EQ(q_.Len(), 2u);
  EXPECT_EQ(q_.Get(), "a");
  EXPECT_EQ(q_.Get(), "b");
  EXPECT_EQ(q_.Len(), 0u);
}

TEST_F(WorkQueueTest, AddWhileInFlightIsQueuedOnceAfterDone) {
  q_.Add("a");
  ASSERT_EQ(q_.Get(), "a");
  for (int i = 0; i < 1000; ++i) q_.Add("a");
  EXPECT_EQ(q_.Len(), 0u) << "an item in flight must not be handed out again";
  EXPECT_EQ(q_.NumProcessing(), 1u);
  q_.Done("a");
  EXPECT_EQ(q_.Len(), 1u);
  EXPECT_EQ(q_.Get(), "a");
  q_.Done("a");
  EXPECT_EQ(q_.Len(), 0u);
  EXPECT_EQ(q_.NumProcessing(), 0u);
}

TEST_F(WorkQueueTest, GetBlocksUntilAnAdd) {
  std::atomic<bool> got{false};
  std::thread t([&] {
    auto item = q_.Get();
    EXPECT_EQ(item, "x");
    got = true;
  });
  ASSERT_TRUE(Eventually([&] { return q_.NumBlocked() == 1; }));
  EXPECT_FALSE(got.load());
  q_.Add("x");
  t.join();
  EXPECT_TRUE(got.load());
}

TEST_F(WorkQueueTest, ShutDownHandsOutQueuedItemsThenEnds) {
  q_.Add("a");
  q_.Add("b");
  q_.AddAfter("later", seconds(1));
  q_.ShutDown();
  q_.Add("c");  // ignored after shutdown
  EXPECT_TRUE(q_.ShuttingDown());
  EXPECT_EQ(q_.Get(), "a");
  EXPECT_EQ(q_.Get(), "b");
  EXPECT_EQ(q_.Get(), std::nullopt);
  ASSERT_TRUE(Eventually([&] { return q_.NumWaiting() == 0; }))
      << "delayed items are dropped at shutdown";
  clock_.Advance(seconds(2));
  EXPECT_EQ(q_.Len(), 0u);
  EXPECT_EQ(q_.Get(), std::nullopt);
}

TEST_F(WorkQueueTest, ShutDownWakesBlockedGetters) {
  std::vector<std::thread> getters;
  getters.reserve(4);
  std::atomic<int> ended{0};
  for (int i = 0; i < 4; ++i) {
    getters.emplace_back([&] {
      if (!q_.Get()) ++ended;
    });
  }
  q_.ShutDown();
  for (auto& t : getters) t.join();
  EXPECT_EQ(ended.load(), 4);
}

TEST_F(WorkQueueTest, ShutDownWithDrainWaitsForInFlightItems) {
  q_.Add("a");
  ASSERT_EQ(q_.Get(), "a");
  std::atomic<bool> drained{false};
  std::thread t([&] {
    q_.ShutDownWithDrain();
    drained = true;
  });
  ASSERT_TRUE(Eventually([&] { return q_.NumBlocked() == 1; }))
      << "drain returned while an item was still in flight";
  EXPECT_FALSE(drained.load()) << "drain returned while an item was still in flight";
  q_.Done("a");
  t.join();
  EXPECT_TRUE(drained.load());
}

TEST_F(WorkQueueTest, AddAfterQueuesWhenDueAndEarliestDelayWins) {
  q_.AddAfter("a", seconds(10));
  q_.AddAfter("a", seconds(3));   // earlier: wins
  q_.AddAfter("a", seconds(20));  // later: ignored
  EXPECT_EQ(q_.NumWaiting(), 1u);
  clock_.Advance(milliseconds(2999));
  ASSERT_TRUE(DelaysChecked(q_, clock_));
  EXPECT_EQ(q_.Len(), 0u);
  EXPECT_EQ(q_.NumWaiting(), 1u);
  clock_.Advance(milliseconds(1));
  ASSERT_TRUE(Eventually([&] { return q_.Len() == 1; }));
  EXPECT_EQ(q_.Get(), "a");
  q_.Done("a");
  clock_.Advance(seconds(30));
  ASSERT_TRUE(DelaysChecked(q_, clock_));
  EXPECT_EQ(q_.Len(), 0u) << "superseded delays must not add the item again";
}

TEST_F(WorkQueueTest, AddAfterWithoutDelayAddsAtOnce) {
  q_.AddAfter("a", milliseconds(0));
  EXPECT_EQ(q_.Len(), 1u);
}

TEST(RateLimiter, ItemExponentialDoublesFromBaseAndCaps) {
  auto rl = NewItemExponentialFailureRateLimiter(milliseconds(5), seconds(1000));
  std::vector<milliseconds> want;
  for (int64_t ms = 5; ms <= 640; ms *= 2) want.emplace_back(ms);
  for (auto w : want) EXPECT_EQ(rl->When("k"), w);
  EXPECT_EQ(rl->NumRequeues("k"), static_cast<int>(want.size()));
  for (int i = 0; i < 60; ++i) (void)rl->When("k");
  EXPECT_EQ(rl->When("k"), seconds(1000)) << "capped at 1000 s";
  EXPECT_EQ(rl->When("other"), milliseconds(5)) << "per item";
  rl->Forget("k");
  EXPECT_EQ(rl->NumRequeues("k"), 0);
  EXPECT_EQ(rl->When("k"), milliseconds(5));
}

TEST(RateLimiter, DefaultCombinesPerItemBackoffWithOverallBucket) {
  FakeClock clock;
  auto rl = DefaultControllerRateLimiter(clock);
  // Burst of 100: the per-item 5 ms dominates for the first 100 distinct items.
  for (int i = 0; i < 100; ++i) EXPECT_EQ(rl->When("k" + std::to_string(i)), milliseconds(5));
  // Then 10 qps: each further token is 100 ms further away.
  EXPECT_EQ(rl->When("k100"), milliseconds(100));
  EXPECT_EQ(rl->When("k101"), milliseconds(200));
  clock.Advance(seconds(10));  // refills (capped at the burst)
  EXPECT_EQ(rl->When("k102"), milliseconds(5));
  // An item that failed often is bounded by its own backoff.
  for (int i = 0; i < 9; ++i) (void)rl->When("hot");
  EXPECT_EQ(rl->When("hot"), milliseconds(5 << 9));
}

// The acceptance test: a key that keeps failing is retried after 5, 10, 20, 40… ms, measured on
// the fake clock by when the queue hands it out again.
TEST(WorkQueue, FailingKeyBacksOffExponentiallyOnTheClock) {
  FakeClock clock;
  metrics::Registry reg;
  WorkQueue q(Opts(clock, &reg, "backoff"));
  q.Add("k");
  auto item = q.Get();
  ASSERT_EQ(item, "k");
  auto last = clock.Now();
  for (int64_t expect_ms : {5, 10, 20, 40, 80, 160, 320, 640}) {
    q.AddRateLimited("k");  // the reconcile failed
    q.Done("k");
    clock.Advance(milliseconds(expect_ms - 1));
    ASSERT_TRUE(DelaysChecked(q, clock));
    ASSERT_EQ(q.Len(), 0u) << "retried before " << expect_ms << " ms";
    clock.Advance(milliseconds(1));
    ASSERT_TRUE(Eventually([&] { return q.Len() == 1; }))
        << "not retried at " << expect_ms << " ms";
    ASSERT_EQ(q.Get(), "k");
    auto delay = std::chrono::duration_cast<milliseconds>(clock.Now() - last);
    EXPECT_EQ(delay.count(), expect_ms);
    last = clock.Now();
  }
  EXPECT_EQ(q.NumRequeues("k"), 8);
  q.Forget("k");
  EXPECT_EQ(q.NumRequeues("k"), 0);
  q.Done("k");
  EXPECT_EQ(reg.GetCounter("workqueue_retries_total", "",
                           {{"name", "backoff"}, {"controller", "backoff"}})
                .Value(),
            8);
}

TEST(WorkQueue, NoItemIsProcessedByTwoWorkersAtOnce) {
  WorkQueueOptions o;  // real clock: this is about threads
  WorkQueue q(std::move(o));
  constexpr int kKeys = 20;
  std::mutex mu;
  std::set<std::string> in_flight;
  std::atomic<int> violations{0}, processed{0};
  std::vector<std::thread> workers;
  workers.reserve(8);
  for (int w = 0; w < 8; ++w) {
    workers.emplace_back([&] {
      while (auto item = q.Get()) {
        {
          std::lock_guard lock(mu);
          if (!in_flight.insert(*item).second) ++violations;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        {
          std::lock_guard lock(mu);
          in_flight.erase(*item);
        }
        ++processed;
        q.Done(*item);
      }
    });
  }
  std::vector<std::thread> producers;
  producers.reserve(4);
  for (int p = 0; p < 4; ++p) {
    producers.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) q.Add("key-" + std::to_string(i % kKeys));
    });
  }
  for (auto& t : producers) t.join();
  ASSERT_TRUE(Eventually([&] { return q.Len() == 0 && q.NumProcessing() == 0; }));
  q.ShutDown();
  for (auto& t : workers) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GE(processed.load(), kKeys);
  EXPECT_LE(processed.load(), 8000);
}

TEST(WorkQueue, MetricsTrackDepthAddsAndDurations) {
  FakeClock clock;
  metrics::Registry reg;
  WorkQueue q(Opts(clock, &reg, "m"));
  metrics::Labels l{{"name", "m"}, {"controller", "m"}};
  q.Add("a");
  q.Add("b");
  q.Add("a");
  EXPECT_EQ(reg.GetGauge("workqueue_depth", "", l).Value(), 2);
  EXPECT_EQ(reg.GetCounter("workqueue_adds_total", "", l).Value(), 2);
  clock.Advance(milliseconds(250));
  ASSERT_EQ(q.Get(), "a");
  auto& queued = reg.GetHistogram("workqueue_queue_duration_seconds", "", l, {});
  EXPECT_EQ(queued.Count(), 1u);
  EXPECT_DOUBLE_EQ(queued.Sum(), 0.25);
  clock.Advance(seconds(2));
  ASSERT_TRUE(Eventually([&] {
    return reg.GetGauge("workqueue_longest_running_processor_seconds", "", l).Value() >= 2;
  })) << "the unfinished-work gauges are refreshed by the queue's own thread";
  q.Done("a");
  auto& work = reg.GetHistogram("workqueue_work_duration_seconds", "", l, {});
  EXPECT_EQ(work.Count(), 1u);
  EXPECT_DOUBLE_EQ(work.Sum(), 2.0);
  EXPECT_EQ(reg.GetGauge("workqueue_depth", "", l).Value(), 1);
}

}  // namespace
}  // namespace hyperslice::kube
