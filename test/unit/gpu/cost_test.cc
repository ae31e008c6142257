// The cost collector's pure parts (cost_controller.h): claim phases, billing start, timestamps.
#include "src/gpu/cost_controller.h"

#include <gtest/gtest.h>

#include "src/kube/object_helpers.h"

#include <boost/json.hpp>

namespace hyperslice::gpu::cost {
namespace {

namespace bj = boost::json;
using std::chrono::microseconds;
using std::chrono::system_clock;

bj::object Claim(const std::string& json) { return bj::parse(json).as_object(); }

TEST(CostTime, MicroTimeRoundTripsAndSecondsParse) {
  auto t = system_clock::from_time_t(1795000000) + microseconds(123456);
  std::string s = kube::FormatMicroTime(t);
  EXPECT_EQ(s.size(), std::string("2026-11-18T07:06:40.123456Z").size()) << s;
  EXPECT_EQ(s.substr(19), ".123456Z");
  ASSERT_TRUE(kube::ParseTime(s));
  EXPECT_EQ(*kube::ParseTime(s), t);
  // Whole seconds (metav1.Time), and a shorter fraction.
  EXPECT_EQ(*kube::ParseTime(s.substr(0, 19) + "Z"), system_clock::from_time_t(1795000000));
  EXPECT_EQ(*kube::ParseTime(s.substr(0, 19) + ".5Z"),
            system_clock::from_time_t(1795000000) + microseconds(500000));
  // An offset is applied (kube_runtime's object_helpers_test covers it); garbage is refused.
  EXPECT_FALSE(kube::ParseTime("yesterday"));
  EXPECT_FALSE(kube::ParseTime(""));
}

TEST(CostClaim, BillingStartPrefersTheMicrosecondField) {
  EXPECT_FALSE(BillingStart(Claim(R"({"status":{}})")));
  EXPECT_FALSE(BillingStart(Claim(R"({"metadata":{"name":"c"}})")));
  auto seconds = BillingStart(Claim(R"({"status":{"launchedAt":"2026-11-26T07:00:01Z"}})"));
  ASSERT_TRUE(seconds);
  auto precise = BillingStart(Claim(
      R"({"status":{"launchedAt":"2026-11-26T07:00:01Z","billingStart":"2026-11-26T07:00:01.250000Z"}})"));
  ASSERT_TRUE(precise);
  EXPECT_EQ(*precise - *seconds, microseconds(250000));
}

TEST(CostClaim, PhaseIsTheFurthestTrueCondition) {
  EXPECT_EQ(Phase(Claim(R"({"metadata":{}})")), "Launching");
  EXPECT_EQ(Phase(Claim(R"({"status":{"instanceID":"i-1"}})")), "Launched");
  EXPECT_EQ(Phase(Claim(R"({"status":{"conditions":[
      {"type":"Launched","status":"True"},{"type":"Registered","status":"False"}]}})")),
            "Launched");
  EXPECT_EQ(Phase(Claim(R"({"status":{"conditions":[
      {"type":"Launched","status":"True"},{"type":"Registered","status":"True"}]}})")),
            "Registered");
  EXPECT_EQ(Phase(Claim(R"({"status":{"conditions":[{"type":"Launched","status":"True"},
      {"type":"Registered","status":"True"},{"type":"Initialized","status":"True"},
      {"type":"Ready","status":"True"}]}})")),
            "Ready");
  EXPECT_EQ(Phase(Claim(R"({"metadata":{"deletionTimestamp":"2026-11-26T07:00:01Z"},
      "status":{"conditions":[{"type":"Ready","status":"True"}]}})")),
            "Deleting");
}

}  // namespace
}  // namespace hyperslice::gpu::cost
