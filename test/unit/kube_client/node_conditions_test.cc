// A kubelet's Node conditions (src/kube/node_conditions.h): transition times kept while nothing
// changes, the Ready heartbeat that makes a post due, and a changed condition that does.
#include "src/kube/node_conditions.h"

#include <chrono>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/kube/object_helpers.h"

namespace hyperslice::kube {
namespace {

namespace json = boost::json;
using std::chrono::seconds;

const std::vector<NodeCondition> kWant = {
    {"MemoryPressure", "False", "KubeletHasSufficientMemory", "enough memory"},
    {"Ready", "True", "KubeletReady", "posting ready status"},
};

Object NodeWith(const json::array& conditions) {
  return Object{{"metadata", json::object{{"name", "n"}}},
                {"status", json::object{{"conditions", conditions}}}};
}

TEST(KubeletNodeConditions, AFirstPostSetsEveryConditionNow) {
  const auto now = std::chrono::system_clock::now();
  NodeConditionsUpdate u = KubeletNodeConditions(Object{}, kWant, now, seconds(60));
  EXPECT_TRUE(u.changed);
  ASSERT_EQ(u.conditions.size(), 2u);
  const auto& ready = u.conditions[1].as_object();
  EXPECT_EQ(ready.at("type"), "Ready");
  EXPECT_EQ(ready.at("status"), "True");
  EXPECT_EQ(ready.at("reason"), "KubeletReady");
  EXPECT_EQ(ready.at("message"), "posting ready status");
  EXPECT_EQ(ready.at("lastHeartbeatTime"), json::value(FormatTime(now)));
  EXPECT_EQ(ready.at("lastTransitionTime"), json::value(FormatTime(now)));
}

TEST(KubeletNodeConditions, UnchangedKeepsTransitionTimesAndWaitsForTheHeartbeat) {
  const auto posted = std::chrono::system_clock::now() - seconds(600);
  const auto now = posted + seconds(30);
  NodeConditionsUpdate first = KubeletNodeConditions(Object{}, kWant, posted, seconds(60));
  Object node = NodeWith(first.conditions);
  NodeConditionsUpdate early = KubeletNodeConditions(node, kWant, now, seconds(60));
  EXPECT_FALSE(early.changed) << "nothing changed and the heartbeat is 30 s of 60 s old";
  EXPECT_EQ(early.conditions[1].at("lastTransitionTime"), json::value(FormatTime(posted)));
  EXPECT_EQ(early.conditions[1].at("lastHeartbeatTime"), json::value(FormatTime(now)));

  NodeConditionsUpdate due = KubeletNodeConditions(node, kWant, posted + seconds(60), seconds(60));
  EXPECT_TRUE(due.changed) << "Ready's heartbeat is a report interval old";
  EXPECT_EQ(due.conditions[1].at("lastTransitionTime"), json::value(FormatTime(posted)));
}

TEST(KubeletNodeConditions, AChangedStatusOrReasonIsPostedWithANewTransitionTime) {
  const auto posted = std::chrono::system_clock::now() - seconds(600);
  const auto now = posted + seconds(5);
  json::array had = KubeletNodeConditions(Object{}, kWant, posted, seconds(60)).conditions;
  had[0].as_object()["status"] = "True";  // memory pressure, as the apiserver last saw it
  NodeConditionsUpdate u = KubeletNodeConditions(NodeWith(had), kWant, now, seconds(60));
  EXPECT_TRUE(u.changed);
  EXPECT_EQ(u.conditions[0].at("lastTransitionTime"), json::value(FormatTime(now)));
  EXPECT_EQ(u.conditions[1].at("lastTransitionTime"), json::value(FormatTime(posted)))
      << "Ready did not change";

  had = KubeletNodeConditions(Object{}, kWant, posted, seconds(60)).conditions;
  had[1].as_object()["reason"] = "KubeletNotReady";
  EXPECT_TRUE(KubeletNodeConditions(NodeWith(had), kWant, now, seconds(60)).changed);
  had[1].as_object()["reason"] = "KubeletReady";
  had[1].as_object().erase("lastHeartbeatTime");
  EXPECT_TRUE(KubeletNodeConditions(NodeWith(had), kWant, now, seconds(60)).changed)
      << "a Ready without a heartbeat is due";
}

}  // namespace
}  // namespace hyperslice::kube
