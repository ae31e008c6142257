// EventRecorder against the real apiserver: repeats aggregate into one Event with a count,
// different messages make different Events, and the per-object token bucket drops a flood.
#include "src/kube/events.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "test/testenv/namespaced_test.h"
#include "test/testenv/testenv.h"

namespace hyperslice::kube {
namespace {

using std::chrono::milliseconds;
namespace json = boost::json;

// Each test's admin client, namespace and recorder options (the component every Event names).
class Events : public testenv::NamespacedTest {
 protected:
  Object MakeConfigMap(const std::string& name) {
    Object cm{{"apiVersion", "v1"},
              {"kind", "ConfigMap"},
              {"metadata", json::object{{"name", name}, {"namespace", ns_}}}};
    auto created = client_->Create(resources::ConfigMaps(), ns_, cm);
    EXPECT_TRUE(created.ok()) << created.error().ToString();
    return created.ok() ? *created : cm;
  }

  std::vector<Object> EventsFor(const std::string& name) {
    ListOptions lo;
    lo.field_selector = "involvedObject.name=" + name;
    auto list = client_->List(resources::Events(), ns_, lo);
    EXPECT_TRUE(list.ok()) << list.error().ToString();
    return list.ok() ? list->items : std::vector<Object>{};
  }

  static EventRecorderOptions Options() {
    EventRecorderOptions o;
    o.component = "hyperslice-test";
    return o;
  }
};

TEST_F(Events, RepeatsAreAggregatedIntoOneEventWithACount) {
  Object cm = MakeConfigMap("events-aggregated");
  EventRecorderOptions o = Options();
  o.host = "test-host";
  EventRecorder rec(client_, o);
  for (int i = 0; i < 5; ++i) {
    rec.Event(cm, EventType::kWarning, "ProvisioningFailed", "zone us-east5-a is out of capacity");
  }
  rec.Event(cm, EventType::kNormal, "Provisioned", "all 4 VMs are running");
  ASSERT_TRUE(rec.Flush(milliseconds(20000)));
  auto stats = rec.stats();
  EXPECT_EQ(stats.created, 2u);
  EXPECT_EQ(stats.patched, 4u);
  EXPECT_EQ(stats.failed, 0u);

  auto events = EventsFor("events-aggregated");
  ASSERT_EQ(events.size(), 2u);
  const Object* warning = nullptr;
  for (const auto& e : events) {
    if (e.at("reason").as_string() == "ProvisioningFailed") warning = &e;
  }
  ASSERT_NE(warning, nullptr);
  const auto& w = *warning;
  EXPECT_EQ(w.at("count").as_int64(), 5);
  EXPECT_EQ(w.at("type").as_string(), "Warning");
  EXPECT_EQ(w.at("message").as_string(), "zone us-east5-a is out of capacity");
  EXPECT_EQ(w.at("source").at("component").as_string(), "hyperslice-test");
  EXPECT_EQ(w.at("source").at("host").as_string(), "test-host");
  EXPECT_EQ(w.at("reportingComponent").as_string(), "hyperslice-test");
  const auto& involved = w.at("involvedObject").as_object();
  EXPECT_EQ(involved.at("kind").as_string(), "ConfigMap");
  EXPECT_EQ(involved.at("name").as_string(), "events-aggregated");
  EXPECT_EQ(involved.at("uid"), cm.at("metadata").at("uid"));
  EXPECT_LE(std::string(w.at("firstTimestamp").as_string()),
            std::string(w.at("lastTimestamp").as_string()));
}

TEST_F(Events, AFloodAboutOneObjectIsRateLimited) {
  Object cm = MakeConfigMap("events-flood");
  Object other = MakeConfigMap("events-other");
  EventRecorderOptions o = Options();
  o.burst_per_object = 3;
  EventRecorder rec(client_, o);
  for (int i = 0; i < 10; ++i) {
    rec.Event(cm, EventType::kNormal, "Step", "step " + std::to_string(i));
  }
  rec.Event(other, EventType::kNormal, "Step", "another object has its own bucket");
  ASSERT_TRUE(rec.Flush(milliseconds(20000)));
  EXPECT_EQ(rec.stats().dropped_rate_limited, 7u);
  EXPECT_EQ(EventsFor("events-flood").size(), 3u);
  EXPECT_EQ(EventsFor("events-other").size(), 1u);
}

TEST_F(Events, EventNeverBlocksTheCaller) {
  Object cm = MakeConfigMap("events-bounded");
  EventRecorderOptions o = Options();
  o.max_queued = 5;
  o.burst_per_object = 1000;
  EventRecorder rec(client_, o);
  for (int i = 0; i < 200; ++i) {
    rec.Event(cm, EventType::kNormal, "Burst", "message " + std::to_string(i));
  }
  auto s = rec.stats();
  EXPECT_GT(s.dropped_queue_full, 0u) << "a bounded queue must drop, not grow or block";
  ASSERT_TRUE(rec.Flush(milliseconds(30000)));
  s = rec.stats();
  EXPECT_EQ(s.created + s.dropped_queue_full, 200u);
}

}  // namespace
}  // namespace hyperslice::kube
