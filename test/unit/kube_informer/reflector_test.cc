#include "src/kube/internal/reflector.h"

#include <future>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "src/kube/store.h"
#include "test/testenv/line_log.h"
#include "test/unit/kube_informer/fake_client.h"

namespace hyperslice::kube {
namespace {

using namespace std::chrono_literals;
using testing::BlockUntilCancelled;
using testing::Bookmark;
using testing::EndOfStream;
using testing::Event;
using testing::GoneEvent;
using testing::MakeList;
using testing::MakeObject;
using testing::ScriptedClient;
using Type = WatchEvent::Type;

// Records what the reflector hands over, as "replace@rv:k1,k2" and "ADDED k@rv" lines.
class RecordingSink final : public ReflectorSink, public testenv::LineLog {
 public:
  ObjectPtr Convert(Object obj) override { return std::make_shared<const Object>(std::move(obj)); }
  void Replace(std::vector<ObjectPtr> items, const std::string& rv) override {
    std::string line = "replace@" + rv + ":";
    for (size_t i = 0; i < items.size(); ++i) {
      line += (i > 0 ? "," : "") + ObjectKey(*items[i]);
    }
    Push(std::move(line));
  }
  void Apply(Type type, Object obj) override {
    Push(std::string(WatchEventTypeName(type)) + " " + ObjectKey(obj) + "@" +
         std::string(ResourceVersionOf(obj)));
  }
};

// Waits of `initial` doubling up to `max`, each plus up to `jitter` times itself, on `clock`
// (nullptr: the real one).
ReflectorOptions Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max,
                         double jitter, Clock* clock = nullptr) {
  ReflectorOptions o;
  o.clock = clock;
  o.backoff.initial = initial;
  o.backoff.max = max;
  o.backoff.jitter = jitter;
  return o;
}

ReflectorOptions FastOptions() { return Backoff(1ms, 1ms, 0); }

// Runs the reflector on a thread; stops and joins it (with a hang guard) at scope exit.
class Running {
 public:
  explicit Running(Reflector& r) : r_(r), done_(std::async(std::launch::async, [&] { r.Run(); })) {}
  ~Running() { StopAndJoin(); }
  bool StopAndJoin() {
    r_.Stop();
    return done_.wait_for(10s) == std::future_status::ready;
  }

 private:
  Reflector& r_;
  std::future<void> done_;
};

// A reflector whose every List fails (nothing scripted) and whose backoff waits run on a fake
// clock the test advances; the client stamps each List with that clock (list_times()).
struct BackingOff {
  BackingOff(std::chrono::milliseconds initial, std::chrono::milliseconds max, double jitter)
      : reflector(client, resources::ConfigMaps(), Backoff(initial, max, jitter, &clock), &sink),
        run(reflector) {}

  testing::CountingFakeClock clock;
  std::shared_ptr<ScriptedClient> client = [this] {
    auto c = std::make_shared<ScriptedClient>();
    c->set_clock(&clock);
    return c;
  }();
  RecordingSink sink;
  Reflector reflector;
  Running run;
};

TEST(ReflectorTest, ListsPagedThenWatchesFromListVersionWithBookmarksAndRandomTimeout) {
  auto client = std::make_shared<ScriptedClient>();
  client->PushList(MakeList({MakeObject("ns", "a", "5"), MakeObject("ns", "b", "6")}, "10"));
  client->PushWatch({Event(Type::kAdded, MakeObject("ns", "c", "11"))});
  RecordingSink sink;
  auto opts = FastOptions();
  opts.ns = "ns";
  opts.label_selector = "app=x";
  opts.min_watch_timeout = 300s;
  Reflector r(client, resources::ConfigMaps(), opts, &sink);
  Running run(r);
  ASSERT_TRUE(sink.WaitFor(2));
  EXPECT_EQ(sink.lines(), (std::vector<std::string>{"replace@10:ns/a,ns/b", "ADDED ns/c@11"}));
  auto lists = client->list_calls();
  ASSERT_EQ(lists.size(), 1u);
  EXPECT_EQ(lists[0].limit, 500);
  EXPECT_EQ(lists[0].label_selector, "app=x");
  auto watches = client->watch_calls();
  ASSERT_EQ(watches.size(), 1u);
  EXPECT_EQ(watches[0].resource_version, "10");
  EXPECT_TRUE(watches[0].allow_watch_bookmarks);
  EXPECT_EQ(watches[0].label_selector, "app=x");
  ASSERT_TRUE(watches[0].timeout_seconds.has_value());
  EXPECT_GE(*watches[0].timeout_seconds, 300);
  EXPECT_LT(*watches[0].timeout_seconds, 600);
  // The sink sees an event before the reflector records its version: wait for it.
  for (int i = 0; i < 1000 && r.LastSyncResourceVersion() != "11"; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(r.LastSyncResourceVersion(), "11");
}

TEST(ReflectorTest, FollowsContinueTokensAndReplacesWithTheFirstPageVersion) {
  auto client = std::make_shared<ScriptedClient>();
  auto page1 = MakeList({MakeObject("ns", "a", "5"), MakeObject("ns", "b", "6")}, "10");
  page1.continue_token = "token-1";
  client->PushList(page1);
  client->PushList(MakeList({MakeObject("ns", "c", "7")}, "10"));
  client->PushWatch({BlockUntilCancelled{}});
  RecordingSink sink;
  auto opts = FastOptions();
  opts.page_size = 2;
  Reflector r(client, resources::ConfigMaps(), opts, &sink);
  Running run(r);
  ASSERT_TRUE(sink.WaitFor(1));
  EXPECT_EQ(sink.lines(), std::vector<std::string>{"replace@10:ns/a,ns/b,ns/c"});
  auto lists = client->list_calls();
  ASSERT_EQ(lists.size(), 2u);
  EXPECT_EQ(lists[0].limit, 2);
  EXPECT_EQ(lists[0].continue_token, "");
  EXPECT_EQ(lists[1].continue_token, "token-1");
  ASSERT_TRUE(client->WaitForWatches(1));
  EXPECT_EQ(client->watch_calls()[0].resource_version, "10");
}

TEST(ReflectorTest, ResumesFromLastEventOrBookmarkWhenStreamEndsOrBreaks) {
  auto client = std::make_shared<ScriptedClient>();
  client->PushList(MakeList({}, "10"));
  // Stream 1: an event, then a bookmark, then the server ends the watch.
  client->PushWatch(
      {Event(Type::kAdded, MakeObject("ns", "a", "11")), Bookmark("15"), EndOfStream{}});
  // Stream 2: an event, then the connection is cut mid-object.
  client->PushWatch({Event(Type::kModified, MakeObject("ns", "a", "16")),
                     Error::Make(Error::Code::kUnavailable, "watch stream cut mid-object")});
  // Stream 3: a delete.
  client->PushWatch({Event(Type::kDeleted, MakeObject("ns", "a", "17"))});
  RecordingSink sink;
  Reflector r(client, resources::ConfigMaps(), FastOptions(), &sink);
  Running run(r);
  ASSERT_TRUE(sink.WaitFor(4));
  ASSERT_TRUE(client->WaitForWatches(3));
  EXPECT_EQ(sink.lines(), (std::vector<std::string>{"replace@10:", "ADDED ns/a@11",
                                                    "MODIFIED ns/a@16", "DELETED ns/a@17"}));
  auto watches = client->watch_calls();
  EXPECT_EQ(watches[0].resource_version, "10");
  EXPECT_EQ(watches[1].resource_version, "15");  // the bookmark advanced it
  EXPECT_EQ(watches[2].resource_version, "16");
  EXPECT_EQ(client->list_calls().size(), 1u);  // resumed, never relisted
  auto stats = r.Stats();
  EXPECT_EQ(stats.bookmarks, 1);
  EXPECT_EQ(stats.watch_errors, 1);
  EXPECT_EQ(stats.last_error.code, Error::Code::kUnavailable);
  EXPECT_EQ(stats.last_error.message, "watch stream cut mid-object");
}

TEST(ReflectorTest, RelistsOnGoneErrorEventAndOnGoneWatchError) {
  auto client = std::make_shared<ScriptedClient>();
  client->PushList(MakeList({MakeObject("ns", "a", "5")}, "10"));
  client->PushWatch({GoneEvent()});
  client->PushList(MakeList({MakeObject("ns", "b", "30")}, "31"));
  client->PushWatchError(Error::Make(Error::Code::kGone, "too old", "Expired", 410));
  client->PushList(MakeList({MakeObject("ns", "c", "40")}, "41"));
  client->PushWatch({Event(Type::kAdded, MakeObject("ns", "d", "42"))});
  RecordingSink sink;
  Reflector r(client, resources::ConfigMaps(), FastOptions(), &sink);
  Running run(r);
  ASSERT_TRUE(sink.WaitFor(4));
  EXPECT_EQ(sink.lines(), (std::vector<std::string>{"replace@10:ns/a", "replace@31:ns/b",
                                                    "replace@41:ns/c", "ADDED ns/d@42"}));
  auto watches = client->watch_calls();
  ASSERT_GE(watches.size(), 3u);
  EXPECT_EQ(watches[0].resource_version, "10");
  EXPECT_EQ(watches[1].resource_version, "31");
  EXPECT_EQ(watches[2].resource_version, "41");
  EXPECT_EQ(r.Stats().gone, 2);
  for (const auto& l : client->list_calls()) EXPECT_EQ(l.resource_version, "");
}

TEST(ReflectorTest, UnavailableWatchIsRetriedFromSameVersionWithoutRelist) {
  auto client = std::make_shared<ScriptedClient>();
  client->PushList(MakeList({}, "10"));
  client->PushWatchError(Error::Make(Error::Code::kUnavailable, "connection refused"));
  client->PushWatchError(Error::Make(Error::Code::kUnavailable, "connection refused"));
  client->PushWatch({Event(Type::kAdded, MakeObject("ns", "a", "11"))});
  RecordingSink sink;
  Reflector r(client, resources::ConfigMaps(), FastOptions(), &sink);
  Running run(r);
  ASSERT_TRUE(sink.WaitFor(2));
  auto watches = client->watch_calls();
  ASSERT_EQ(watches.size(), 3u);
  for (const auto& w : watches) EXPECT_EQ(w.resource_version, "10");
  EXPECT_EQ(client->list_calls().size(), 1u);
}

// Waits are driven by an injected clock: no sleeps, exact bounds.
TEST(ReflectorTest, ListFailuresBackOffExponentiallyUpToTheCap) {
  BackingOff b(800ms, 3200ms, 0);
  auto& clock = b.clock;
  auto& client = b.client;
  // Every List fails (nothing scripted). Expected waits: 800, 1600, 3200, 3200 ms.
  const std::vector<std::chrono::milliseconds> expected = {800ms, 1600ms, 3200ms, 3200ms};
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_TRUE(client->WaitForLists(i + 1));
    ASSERT_TRUE(clock.WaitForWaits(static_cast<int>(i + 1)));
    clock.Advance(expected[i] - 1ms);
    // The reflector saw the new time and waits on; an early retry would have listed first.
    ASSERT_TRUE(clock.WaitForAWaitAt(clock.Now()));
    EXPECT_EQ(client->list_calls().size(), i + 1) << "retried before " << expected[i].count();
    clock.Advance(1ms);
    ASSERT_TRUE(client->WaitForLists(i + 2)) << "no retry after " << expected[i].count();
  }
  auto times = client->list_times();
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(times[i + 1] - times[i], expected[i]);
  }
}

TEST(ReflectorTest, JitterKeepsEachWaitWithinOneToTwoTimesTheStep) {
  BackingOff b(1000ms, 1000ms, 1.0);
  auto& clock = b.clock;
  auto& client = b.client;
  std::set<Clock::Duration> distinct;
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(client->WaitForLists(i + 1));
    ASSERT_TRUE(clock.WaitForWaits(i + 1));
    for (int step = 0; step < 40 && client->list_calls().size() < static_cast<size_t>(i) + 2;
         ++step) {
      clock.Advance(50ms);
      // Either it retried (and waits in the next backoff) or it waits on: both after a List due
      // at this time, so the count is read after the reflector acted on the step.
      ASSERT_TRUE(clock.WaitForAWaitAt(clock.Now()));
    }
    ASSERT_TRUE(client->WaitForLists(i + 2));
    auto times = client->list_times();
    auto waited = times[i + 1] - times[i];
    EXPECT_GE(waited, 1000ms);
    EXPECT_LE(waited, 2050ms);  // < 2 s, plus one 50 ms advance step of granularity
    distinct.insert(waited);
  }
  EXPECT_GT(distinct.size(), 1u) << "jitter produced identical waits";
}

TEST(ReflectorTest, StopCancelsABlockedWatchAndRunReturns) {
  auto client = std::make_shared<ScriptedClient>();
  client->PushList(MakeList({}, "10"));
  client->PushWatch({BlockUntilCancelled{}});
  RecordingSink sink;
  Reflector r(client, resources::ConfigMaps(), FastOptions(), &sink);
  Running run(r);
  ASSERT_TRUE(client->WaitForWatches(1));
  std::this_thread::sleep_for(50ms);  // let Run() block in Next()
  EXPECT_TRUE(run.StopAndJoin());
  EXPECT_EQ(client->watch_calls().size(), 1u);
}

TEST(ReflectorTest, StopDuringBackoffReturnsWithoutWaitingForTheClock) {
  testing::CountingFakeClock clock;  // never advanced
  auto client = std::make_shared<ScriptedClient>();
  RecordingSink sink;
  ReflectorOptions opts;
  opts.clock = &clock;
  Reflector r(client, resources::ConfigMaps(), opts, &sink);
  Running run(r);
  ASSERT_TRUE(clock.WaitForWaits(1));
  EXPECT_TRUE(run.StopAndJoin());
  EXPECT_EQ(client->list_calls().size(), 1u);
}

}  // namespace
}  // namespace hyperslice::kube
