#include "src/gpu/disruption.h"

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
  EXPECT_EQ(d->budgets, std::vector<std::string>{"10%"});
  auto idle = ParseDisruption(bj::parse(R"({"spec":{"disruption":{
      "consolidationPolicy":"WhenIdle","consolidateAfter":"Never",
      "budgets":[{"nodes":"2"},{"nodes":"0","schedule":"0 9 * * 1-5","duration":"8h"}]}}})")
                                  .as_object());
  ASSERT_TRUE(idle.ok());
  EXPECT_EQ(idle->policy, ConsolidationPolicy::kWhenIdle);
  EXPECT_FALSE(idle->consolidate_after.has_value());
  EXPECT_EQ(idle->budgets, std::vector<std::string>{"2"});
  EXPECT_EQ(idle->scheduled_budgets_ignored, 1);
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

TEST(Disruption, Budgets) {
  EXPECT_EQ(DisruptionsAllowed({"10%"}, 5, 0), 1);  // rounded up
  EXPECT_EQ(DisruptionsAllowed({"10%"}, 30, 1), 2);
  EXPECT_EQ(DisruptionsAllowed({"1"}, 5, 1), 0);
  EXPECT_EQ(DisruptionsAllowed({"3", "50%"}, 4, 0), 2);  // the smallest wins
  EXPECT_EQ(DisruptionsAllowed({"0"}, 4, 0), 0);
  EXPECT_EQ(DisruptionsAllowed({}, 4, 1), 3);
}

}  // namespace
}  // namespace hyperslice::gpu
