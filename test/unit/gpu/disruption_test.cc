#include "src/gpu/disruption.h"
#include "src/gpu/drain.h"
#include "src/kube/object_helpers.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace hyperslice::gpu {
namespace {

namespace bj = boost::json;
using std::chrono::seconds;

bj::object Pod(const std::string& phase, bool daemon = false, bool gpu = true,
               bool do_not_disrupt = false) {
  bj::object meta{{"name", "p"}};
  if (daemon)
    meta["ownerReferences"] = bj::array{bj::object{{"kind", "DaemonSet"}, {"name", "ds"}}};
  if (do_not_disrupt) meta["annotations"] = bj::object{{kAnnotationDoNotDisrupt, "true"}};
  bj::object res;
  if (gpu) res["limits"] = bj::object{{"nvidia.com/gpu", 1}};
  return {{"metadata", meta},
          {"spec", bj::object{{"containers", bj::array{bj::object{{"resources", res}}}}}},
          {"status", bj::object{{"phase", phase}}}};
}

TEST(Disruption, DurationsAndNever) {
  EXPECT_EQ(ParseDisruptionDuration("30s")->value(), seconds(30));
  EXPECT_EQ(ParseDisruptionDuration("1h30m")->value(), seconds(5400));
  EXPECT_FALSE(ParseDisruptionDuration("Never")->has_value());
  for (const char* bad : {"", "5", "m", "5d", "1.5h"})
    EXPECT_FALSE(ParseDisruptionDuration(bad).ok()) << bad;
}

TEST(Disruption, SpecDefaultsAndFields) {
  auto d = ParseDisruption(bj::object{{"spec", bj::object{}}});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->policy, ConsolidationPolicy::kWhenEmpty);
  EXPECT_EQ(d->consolidate_after, seconds(30));
  ASSERT_EQ(d->budgets.size(), 1u);
  EXPECT_EQ(d->budgets[0].nodes, "10%");
  EXPECT_FALSE(d->expire_after.has_value());
  EXPECT_EQ(d->expire_policy, ExpirePolicy::kReplace);
  auto idle = ParseDisruption(bj::parse(R"({"spec":{"disruption":{
      "consolidationPolicy":"WhenIdle","consolidateAfter":"Never",
      "budgets":[{"nodes":"2"},{"nodes":"0","schedule":"0 9 * * 1-5","duration":"8h"}]}}})")
                                  .as_object());
  ASSERT_TRUE(idle.ok());
  EXPECT_EQ(idle->policy, ConsolidationPolicy::kWhenIdle);
  EXPECT_FALSE(idle->consolidate_after.has_value());
  ASSERT_EQ(idle->budgets.size(), 2u);
  EXPECT_EQ(idle->budgets[0].nodes, "2");
  EXPECT_FALSE(idle->budgets[0].schedule.has_value());
  EXPECT_EQ(idle->budgets[1].nodes, "0");
  EXPECT_TRUE(idle->budgets[1].schedule.has_value());
  EXPECT_EQ(idle->budgets[1].duration, std::chrono::hours(8));
  auto expiring = ParseDisruption(bj::parse(R"({"spec":{"disruption":{
      "expireAfter":"1h","expirePolicy":"Return","budgets":[{"nodes":"1","reasons":["Expired"]}]}}})")
                                      .as_object());
  ASSERT_TRUE(expiring.ok());
  EXPECT_EQ(expiring->expire_after, seconds(3600));
  EXPECT_EQ(expiring->expire_policy, ExpirePolicy::kReturn);
  EXPECT_EQ(expiring->budgets[0].reasons, std::vector<std::string>{"Expired"});
  for (
      const char* broken :
      {R"({"spec":{"disruption":{"budgets":[{"nodes":"1","schedule":"0 9 * * 1-5"}]}}})",
       R"({"spec":{"disruption":{"budgets":[{"nodes":"1","schedule":"0 25 * * *","duration":"1h"}]}}})",
       R"({"spec":{"disruption":{"expirePolicy":"Later"}}})",
       R"({"spec":{"disruption":{"expireAfter":"1d"}}})"}) {
    auto r = ParseDisruption(bj::parse(broken).as_object());
    EXPECT_FALSE(r.ok()) << broken;
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find("spec.disruption."), std::string::npos);
    }
  }
  auto bad = ParseDisruption(
      bj::parse(R"({"spec":{"disruption":{"consolidateAfter":"soon"}}})").as_object());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("consolidateAfter"), std::string::npos);
}

TEST(Disruption, EmptyIdleAndDoNotDisrupt) {
  bj::object claim{{"metadata", bj::object{{"name", "c"}}}};
  auto running = Pod("Running"), done = Pod("Succeeded"), daemon = Pod("Running", true, false);
  auto cpu_only = Pod("Running", false, false), held = Pod("Succeeded", false, true, true);
  using P = ConsolidationPolicy;
  EXPECT_EQ(Consolidatable(P::kWhenEmpty, claim, nullptr, {}), "empty");
  EXPECT_EQ(Consolidatable(P::kWhenEmpty, claim, nullptr, {&done, &daemon}), "empty");
  EXPECT_EQ(Consolidatable(P::kWhenEmpty, claim, nullptr, {&running}), "");
  EXPECT_EQ(Consolidatable(P::kWhenEmpty, claim, nullptr, {&cpu_only}), "");
  EXPECT_EQ(Consolidatable(P::kWhenIdle, claim, nullptr, {&cpu_only, &done}), "idle");
  EXPECT_EQ(Consolidatable(P::kWhenIdle, claim, nullptr, {&running}), "");
  // do-not-disrupt on a pod (even a finished one still on the node), the claim or the Node.
  EXPECT_EQ(Consolidatable(P::kWhenEmpty, claim, nullptr, {&held}), "");
  bj::object marked{
      {"metadata", bj::object{{"annotations", bj::object{{kAnnotationTgpDoNotDisrupt, "true"}}}}}};
  EXPECT_EQ(Consolidatable(P::kWhenEmpty, marked, nullptr, {}), "");
  EXPECT_EQ(Consolidatable(P::kWhenEmpty, claim, &marked, {}), "");
}

std::vector<DisruptionBudget> Budgets(std::initializer_list<const char*> nodes) {
  std::vector<DisruptionBudget> out;
  for (const char* n : nodes) out.push_back(DisruptionBudget{.nodes = n});
  return out;
}

std::chrono::system_clock::time_point Utc(const char* rfc3339) { return *kube::ParseTime(rfc3339); }

TEST(Disruption, Budgets) {
  const auto now = Utc("2026-11-26T10:00:00Z");
  EXPECT_EQ(DisruptionsAllowed(Budgets({"10%"}), "empty", now, 5, 0), 1);  // rounded up
  EXPECT_EQ(DisruptionsAllowed(Budgets({"10%"}), "empty", now, 30, 1), 2);
  EXPECT_EQ(DisruptionsAllowed(Budgets({"1"}), "empty", now, 5, 1), 0);
  EXPECT_EQ(DisruptionsAllowed(Budgets({"3", "50%"}), "empty", now, 4, 0), 2);  // smallest wins
  EXPECT_EQ(DisruptionsAllowed(Budgets({"0"}), "empty", now, 4, 0), 0);
  EXPECT_EQ(DisruptionsAllowed({}, "empty", now, 4, 1), 3);
}

TEST(Disruption, BudgetReasonsAndSchedules) {
  // Karpenter's example: no disruption for empty/idle machines on weekdays 09:00-17:00 UTC; at
  // most one expired machine at a time, always.
  auto spec = ParseDisruption(bj::parse(R"({"spec":{"disruption":{"budgets":[
      {"nodes":"0","schedule":"0 9 * * mon-fri","duration":"8h","reasons":["Empty","Idle"]},
      {"nodes":"1","reasons":["Expired"]}]}}})")
                                  .as_object());
  ASSERT_TRUE(spec.ok()) << spec.error().ToString();
  const auto thursday_noon = Utc("2026-11-26T12:00:00Z"),
             thursday_night = Utc("2026-11-26T17:00:00Z");
  const auto saturday_noon = Utc("2026-11-28T12:00:00Z"),
             thursday_early = Utc("2026-11-26T08:59:59Z");
  EXPECT_EQ(DisruptionsAllowed(spec->budgets, "empty", thursday_noon, 10, 0), 0);
  EXPECT_EQ(DisruptionsAllowed(spec->budgets, "idle", thursday_noon, 10, 0), 0);
  EXPECT_EQ(DisruptionsAllowed(spec->budgets, "empty", thursday_night, 10, 0), 10);  // window over
  EXPECT_EQ(DisruptionsAllowed(spec->budgets, "empty", thursday_early, 10, 0), 10);
  EXPECT_EQ(DisruptionsAllowed(spec->budgets, "empty", saturday_noon, 10, 0), 10);
  EXPECT_EQ(DisruptionsAllowed(spec->budgets, "expired", thursday_noon, 10, 0), 1);
  EXPECT_EQ(DisruptionsAllowed(spec->budgets, "expired", saturday_noon, 10, 1), 0);
}

TEST(Disruption, Expiry) {
  auto spec =
      ParseDisruption(bj::parse(R"({"spec":{"disruption":{"expireAfter":"30m"}}})").as_object());
  ASSERT_TRUE(spec.ok());
  const auto created = Utc("2026-11-26T10:00:00Z");
  EXPECT_FALSE(Expired(*spec, created, created + std::chrono::minutes(29)));
  EXPECT_TRUE(Expired(*spec, created, created + std::chrono::minutes(30)));
  auto never = ParseDisruption(bj::object{{"spec", bj::object{}}});
  EXPECT_FALSE(Expired(*never, created, created + std::chrono::hours(10000)));
}

TEST(Cron, FieldsRangesStepsNamesAndMacros) {
  auto every_15 = CronSchedule::Parse("*/15 * * * *");
  ASSERT_TRUE(every_15.ok());
  EXPECT_TRUE(every_15->Fires(Utc("2026-11-26T10:45:00Z")));
  EXPECT_FALSE(every_15->Fires(Utc("2026-11-26T10:46:00Z")));
  auto daily = CronSchedule::Parse("@daily");
  ASSERT_TRUE(daily.ok());
  EXPECT_TRUE(daily->Fires(Utc("2026-11-26T00:00:30Z")));
  EXPECT_FALSE(daily->Fires(Utc("2026-11-26T00:01:00Z")));
  // Day of month and day of week both restricted: either matches (the 1st, or any Sunday).
  auto either = CronSchedule::Parse("0 0 1 * SUN");
  ASSERT_TRUE(either.ok());
  EXPECT_TRUE(either->Fires(Utc("2026-11-29T00:00:00Z")));   // a Sunday
  EXPECT_TRUE(either->Fires(Utc("2026-12-01T00:00:00Z")));   // a Tuesday, the 1st
  EXPECT_FALSE(either->Fires(Utc("2026-12-02T00:00:00Z")));  // neither
  auto sunday7 = CronSchedule::Parse("0 0 * jan-dec 7");
  ASSERT_TRUE(sunday7.ok());
  EXPECT_TRUE(sunday7->Fires(Utc("2026-11-29T00:00:00Z")));
  // Active within duration after a firing, not before it nor after.
  auto nine = CronSchedule::Parse("0 9 * * *");
  ASSERT_TRUE(nine.ok());
  EXPECT_TRUE(nine->ActiveAt(Utc("2026-11-26T09:00:00Z"), std::chrono::hours(1)));
  EXPECT_TRUE(nine->ActiveAt(Utc("2026-11-26T09:59:59Z"), std::chrono::hours(1)));
  EXPECT_FALSE(nine->ActiveAt(Utc("2026-11-26T10:00:00Z"), std::chrono::hours(1)));
  EXPECT_FALSE(nine->ActiveAt(Utc("2026-11-26T08:59:59Z"), std::chrono::hours(1)));
  // Past midnight: the window of the day before.
  auto late = CronSchedule::Parse("0 22 * * *");
  EXPECT_TRUE(late->ActiveAt(Utc("2026-11-27T01:00:00Z"), std::chrono::hours(4)));
  for (const char* bad : {"", "* * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *",
                          "* * * * 8", "5-1 * * * *", "*/0 * * * *", "* * * FOO *", "@often"}) {
    auto r = CronSchedule::Parse(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
}

TEST(Drain, WhatLeavesAndWhatStays) {
  EXPECT_EQ(ClassifyForDrain(Pod("Running")), DrainAction::kEvict);
  EXPECT_EQ(ClassifyForDrain(Pod("Pending")), DrainAction::kEvict);
  EXPECT_EQ(ClassifyForDrain(Pod("Succeeded")), DrainAction::kIgnore);
  EXPECT_EQ(ClassifyForDrain(Pod("Failed")), DrainAction::kIgnore);
  EXPECT_EQ(ClassifyForDrain(Pod("Running", true)), DrainAction::kIgnore);  // DaemonSet
  EXPECT_EQ(ClassifyForDrain(Pod("Running", false, true, true)), DrainAction::kHold);
  auto terminating = Pod("Running");
  terminating["metadata"].as_object()["deletionTimestamp"] = "2026-11-26T10:00:00Z";
  EXPECT_EQ(ClassifyForDrain(terminating), DrainAction::kWait);
  auto mirror = Pod("Running");
  mirror["metadata"].as_object()["annotations"] =
      bj::object{{"kubernetes.io/config.mirror", "abc"}};
  EXPECT_EQ(ClassifyForDrain(mirror), DrainAction::kIgnore);
  auto tolerant = Pod("Running");
  tolerant["spec"].as_object()["tolerations"] =
      bj::array{bj::object{{"key", kTaintDisrupted}, {"operator", "Exists"}}};
  EXPECT_EQ(ClassifyForDrain(tolerant), DrainAction::kIgnore);
  auto everything = Pod("Running");
  everything["spec"].as_object()["tolerations"] = bj::array{bj::object{{"operator", "Exists"}}};
  EXPECT_EQ(ClassifyForDrain(everything), DrainAction::kIgnore);
}

}  // namespace
}  // namespace hyperslice::gpu
