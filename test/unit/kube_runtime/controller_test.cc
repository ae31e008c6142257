#include "src/kube/controller.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
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

ControllerOptions Opts(const std::string& name, Clock* clock, metrics::Registry* reg,
                       int workers = 1) {
  ControllerOptions o;
  o.name = name;
  o.clock = clock;
  o.registry = reg;
  o.max_concurrent_reconciles = workers;
  return o;
}

double Total(metrics::Registry& reg, const std::string& c, const std::string& result) {
  return reg
      .GetCounter("controller_runtime_reconcile_total", "", {{"controller", c}, {"result", result}})
      .Value();
}

// The acceptance test: a key added 1,000 times while its reconcile runs is reconciled at most
// twice (the running reconcile, then once more for everything that arrived meanwhile).
TEST(Controller, KeyAddedThousandTimesWhileInFlightIsReconciledAtMostTwice) {
  metrics::Registry reg;
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> calls{0}, concurrent{0}, max_concurrent{0};
  Controller c(Opts("dedup", nullptr, &reg, /*workers=*/4), [&](const std::string&) {
    int now = ++concurrent;
    max_concurrent = std::max(max_concurrent.load(), now);
    if (++calls == 1) {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return release; });
    }
    --concurrent;
    return Result<ReconcileResult>(ReconcileResult{});
  });
  ASSERT_TRUE(c.Start().ok());
  c.Enqueue("ns/obj");
  ASSERT_TRUE(Eventually([&] { return calls.load() == 1; }));
  std::vector<std::thread> adders;
  adders.reserve(4);
  for (int t = 0; t < 4; ++t) {
    adders.emplace_back([&] {
      for (int i = 0; i < 250; ++i) c.Enqueue("ns/obj");
    });
  }
  for (auto& t : adders) t.join();
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(Eventually([&] { return Total(reg, "dedup", "success") == 2; }));
  // Nothing queued, in flight or delayed: no third reconcile can start without a new Enqueue.
  ASSERT_TRUE(Eventually([&] {
    return c.queue().Len() == 0 && c.queue().NumProcessing() == 0 && c.queue().NumWaiting() == 0;
  }));
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(max_concurrent.load(), 1) << "one key reconciled by two workers at once";
  c.Stop(seconds(5));
}

TEST(Controller, ErrorsRequeueWithExponentialBackoffOnTheClock) {
  FakeClock clock;
  metrics::Registry reg;
  std::mutex mu;
  std::vector<Clock::TimePoint> at;
  Controller c(Opts("failing", &clock, &reg), [&](const std::string&) -> Result<ReconcileResult> {
    std::lock_guard lock(mu);
    at.push_back(clock.Now());
    return Error::Make(Error::Code::kUnavailable, "cloud is down");
  });
  ASSERT_TRUE(c.Start().ok());
  c.Enqueue("k");
  auto count = [&] {
    std::lock_guard lock(mu);
    return at.size();
  };
  ASSERT_TRUE(Eventually([&] { return count() == 1; }));
  for (int64_t expect_ms : {5, 10, 20, 40, 80, 160}) {
    size_t before = count();
    // The failed key is re-added by the worker after Reconcile returns; wait until it waits.
    ASSERT_TRUE(Eventually([&] { return c.queue().NumWaiting() == 1; }));
    clock.Advance(milliseconds(expect_ms - 1));
    ASSERT_TRUE(DelaysChecked(c.queue(), clock));
    ASSERT_EQ(c.queue().NumWaiting(), 1u) << "retried before " << expect_ms << " ms";
    ASSERT_EQ(count(), before) << "retried before " << expect_ms << " ms";
    clock.Advance(milliseconds(1));
    ASSERT_TRUE(Eventually([&] { return count() == before + 1; }));
  }
  // The error metrics are counted after Reconcile returns, so the 7th call seen above does not
  // mean its error is counted yet: wait for the counter itself.
  ASSERT_TRUE(Eventually([&] { return Total(reg, "failing", "error") >= 7; }));
  std::lock_guard lock(mu);
  std::vector<int64_t> gaps;
  for (size_t i = 1; i < at.size(); ++i) {
    gaps.push_back(std::chrono::duration_cast<milliseconds>(at[i] - at[i - 1]).count());
  }
  EXPECT_EQ(gaps, (std::vector<int64_t>{5, 10, 20, 40, 80, 160}));
  EXPECT_EQ(Total(reg, "failing", "error"), 7);
  EXPECT_EQ(
      reg.GetCounter("controller_runtime_reconcile_errors_total", "", {{"controller", "failing"}})
          .Value(),
      7);
}

TEST(Controller, RequeueAfterWaitsThatLongAndResetsBackoff) {
  FakeClock clock;
  metrics::Registry reg;
  std::atomic<int> calls{0};
  Controller c(Opts("periodic", &clock, &reg), [&](const std::string&) -> Result<ReconcileResult> {
    ++calls;
    return ReconcileResult{false, seconds(30)};
  });
  ASSERT_TRUE(c.Start().ok());
  c.Enqueue("k");
  ASSERT_TRUE(Eventually([&] { return calls.load() == 1 && c.queue().NumWaiting() == 1; }));
  clock.Advance(seconds(29));
  ASSERT_TRUE(DelaysChecked(c.queue(), clock));
  EXPECT_EQ(c.queue().NumWaiting(), 1u);
  EXPECT_EQ(calls.load(), 1);
  clock.Advance(seconds(1));
  ASSERT_TRUE(Eventually([&] { return calls.load() == 2; }));
  EXPECT_EQ(c.queue().NumRequeues("k"), 0);
  // Counted after the key is re-added (and after Reconcile returns): wait for the counter itself.
  EXPECT_TRUE(Eventually([&] { return Total(reg, "periodic", "requeue_after") >= 2; }));
}

TEST(Controller, ThrowingReconcilerIsAnErrorNotACrash) {
  FakeClock clock;
  metrics::Registry reg;
  std::atomic<int> calls{0};
  Controller c(Opts("thrower", &clock, &reg), [&](const std::string&) -> Result<ReconcileResult> {
    if (++calls == 1) throw std::runtime_error("boom");
    return ReconcileResult{};
  });
  ASSERT_TRUE(c.Start().ok());
  c.Enqueue("k");
  ASSERT_TRUE(Eventually([&] { return c.queue().NumWaiting() == 1; }));
  clock.Advance(milliseconds(5));
  ASSERT_TRUE(Eventually([&] { return Total(reg, "thrower", "success") == 1; }));
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(
      reg.GetCounter("controller_runtime_reconcile_panics_total", "", {{"controller", "thrower"}})
          .Value(),
      1);
}

TEST(Controller, StopLetsTheRunningReconcileFinishAndDropsQueuedKeys) {
  metrics::Registry reg;
  std::atomic<bool> in_reconcile{false}, finish{false};
  std::atomic<int> calls{0};
  Controller c(Opts("stopper", nullptr, &reg), [&](const std::string&) -> Result<ReconcileResult> {
    ++calls;
    in_reconcile = true;
    while (!finish) std::this_thread::sleep_for(milliseconds(1));
    in_reconcile = false;
    return ReconcileResult{};
  });
  ASSERT_TRUE(c.Start().ok());
  c.Enqueue("a");
  ASSERT_TRUE(Eventually([&] { return in_reconcile.load(); }));
  c.Enqueue("b");
  c.Enqueue("c");
  // Stop waits for the running reconcile up to its grace period: with a reconcile that does not
  // end, it returns no earlier than the grace (a Stop that did not wait would return at once).
  const auto grace = milliseconds(300);
  const auto stop_started = std::chrono::steady_clock::now();
  c.Stop(grace);
  EXPECT_GE(std::chrono::steady_clock::now() - stop_started, grace)
      << "Stop returned while a reconcile was running, before its grace period";
  EXPECT_TRUE(in_reconcile.load());
  // Once the reconcile ends, Stop returns as soon as the workers have exited.
  finish = true;
  c.Stop(seconds(10));
  EXPECT_FALSE(in_reconcile.load()) << "Stop returned before the reconcile finished";
  EXPECT_EQ(calls.load(), 1) << "queued keys must not start after Stop";
  EXPECT_EQ(Total(reg, "stopper", "success"), 1);
}

TEST(Controller, LeaderGateStopsNewReconciles) {
  metrics::Registry reg;
  std::atomic<bool> leader{false};
  std::atomic<int> calls{0};
  Controller c(Opts("gated", nullptr, &reg), [&](const std::string&) -> Result<ReconcileResult> {
    ++calls;
    return ReconcileResult{};
  });
  c.SetLeaderGate([&] { return leader.load(); });
  ASSERT_TRUE(c.Start().ok());
  c.Enqueue("a");
  // Handed out and done without a reconcile: calls cannot change any more for this Enqueue.
  ASSERT_TRUE(Eventually([&] {
    return c.queue().Len() == 0 && c.queue().NumProcessing() == 0 && c.queue().NumWaiting() == 0;
  }));
  EXPECT_EQ(calls.load(), 0);
  leader = true;
  c.Enqueue("a");
  ASSERT_TRUE(Eventually([&] { return calls.load() == 1; }));
}

TEST(Controller, ExposesControllerRuntimeMetrics) {
  metrics::Registry reg;
  Controller c(Opts("exposed", nullptr, &reg, 3),
               [&](const std::string&) { return Result<ReconcileResult>(ReconcileResult{}); });
  ASSERT_TRUE(c.Start().ok());
  c.Enqueue("ns/a");
  ASSERT_TRUE(Eventually([&] { return Total(reg, "exposed", "success") == 1; }));
  std::string text = reg.Expose();
  for (const char* want : {
           "# TYPE controller_runtime_reconcile_total counter",
           "controller_runtime_reconcile_total{controller=\"exposed\",result=\"success\"} 1",
           "controller_runtime_reconcile_total{controller=\"exposed\",result=\"error\"} 0",
           "# TYPE controller_runtime_reconcile_errors_total counter",
           "# TYPE controller_runtime_reconcile_time_seconds histogram",
           "controller_runtime_reconcile_time_seconds_count{controller=\"exposed\"} 1",
           "controller_runtime_max_concurrent_reconciles{controller=\"exposed\"} 3",
           "# TYPE controller_runtime_active_workers gauge",
           "workqueue_depth{controller=\"exposed\",name=\"exposed\"} 0",
           "workqueue_adds_total{controller=\"exposed\",name=\"exposed\"} 1",
           "# TYPE workqueue_queue_duration_seconds histogram",
           "# TYPE workqueue_work_duration_seconds histogram",
           "# TYPE workqueue_retries_total counter",
           "# TYPE workqueue_unfinished_work_seconds gauge",
           "# TYPE workqueue_longest_running_processor_seconds gauge",
       }) {
    EXPECT_NE(text.find(want), std::string::npos) << "missing: " << want << "\n" << text;
  }
}

TEST(Controller, KeysFollowClientGoConvention) {
  Object namespaced{{"metadata", boost::json::object{{"namespace", "ns"}, {"name", "a"}}}};
  Object cluster{{"metadata", boost::json::object{{"name", "node-1"}}}};
  EXPECT_EQ(Controller::KeyOf(namespaced), "ns/a");
  EXPECT_EQ(Controller::KeyOf(cluster), "node-1");
  EXPECT_EQ(Controller::SplitKey("ns/a"), (std::pair<std::string, std::string>{"ns", "a"}));
  EXPECT_EQ(Controller::SplitKey("node-1"), (std::pair<std::string, std::string>{"", "node-1"}));
}

}  // namespace
}  // namespace hyperslice::kube
