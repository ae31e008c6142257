#include "src/kube/scheduling.h"

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "src/kube/quantity.h"

namespace hyperslice::kube {
namespace {

int64_t Milli(const char* s) {
  auto q = Quantity::Parse(s);
  EXPECT_TRUE(q.ok()) << s;
  return q.ok() ? q->MilliValue() : -1;
}

TEST(Quantity, ParsesWhatTheApiAccepts) {
  EXPECT_EQ(Milli("1"), 1000);
  EXPECT_EQ(Milli("500m"), 500);
  EXPECT_EQ(Milli("1.5"), 1500);
  EXPECT_EQ(Milli("0.1"), 100);
  EXPECT_EQ(Milli("16Gi"), 16LL * 1024 * 1024 * 1024 * 1000);
  EXPECT_EQ(Milli("1Ki"), 1024000);
  EXPECT_EQ(Milli("2k"), 2000000);
  EXPECT_EQ(Milli("1M"), 1000000000);
  EXPECT_EQ(Milli("2e3"), 2000000);
  EXPECT_EQ(Milli("1E-3"), 1);
  EXPECT_EQ(Milli("1n"), 1);  // below a milli-unit rounds up
  EXPECT_EQ(Milli("-1"), -1000);
  EXPECT_EQ(Milli("+4"), 4000);
  EXPECT_EQ(Quantity::Parse("1.5Gi")->Value(), 1610612736);
  EXPECT_EQ(Quantity::Parse("500m")->Value(), 1);
  EXPECT_EQ(Milli("8Ei"), std::numeric_limits<int64_t>::max());  // saturates
  for (const char* bad : {"", "Gi", "1Gb", "1.2.3", "1 Gi", "abc", "1e", "1e1000", "--1", "."}) {
    EXPECT_FALSE(Quantity::Parse(bad).ok()) << bad;
  }
}

TEST(Scheduling, TolerationSemantics) {
  Taint gpu{"gpu-node", "true", "NoSchedule"};
  EXPECT_TRUE(Tolerates({"gpu-node", "Equal", "true", "NoSchedule"}, gpu));
  EXPECT_TRUE(Tolerates({"gpu-node", "Equal", "true", ""}, gpu));
  EXPECT_TRUE(Tolerates({"gpu-node", "Exists", "", ""}, gpu));
  EXPECT_TRUE(Tolerates({"", "Exists", "", ""}, gpu));  // tolerates everything
  EXPECT_FALSE(Tolerates({"gpu-node", "Equal", "false", ""}, gpu));
  EXPECT_FALSE(Tolerates({"gpu-node", "Equal", "true", "NoExecute"}, gpu));
  EXPECT_FALSE(Tolerates({"", "Equal", "true", ""}, gpu));
  auto left = Untolerated({{"gpu-node", "Exists", "", ""}},
                          {gpu, {"other", "x", "NoExecute"}, {"soft", "", "PreferNoSchedule"}});
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].key, "other");
}

TEST(Scheduling, Requirements) {
  Labels l = {{"tgp.io/gpu-type", "RTX4090"}, {"tgp.io/gpu-count", "2"}};
  EXPECT_TRUE(Matches({"tgp.io/gpu-type", "In", {"RTX4090", "RTX3090"}}, l));
  EXPECT_FALSE(Matches({"tgp.io/gpu-type", "NotIn", {"RTX4090"}}, l));
  EXPECT_TRUE(Matches({"tgp.io/region", "NotIn", {"us-west"}}, l));
  EXPECT_TRUE(Matches({"tgp.io/gpu-type", "Exists", {}}, l));
  EXPECT_TRUE(Matches({"tgp.io/region", "DoesNotExist", {}}, l));
  EXPECT_TRUE(Matches({"tgp.io/gpu-count", "Gt", {"1"}}, l));
  EXPECT_FALSE(Matches({"tgp.io/gpu-count", "Lt", {"2"}}, l));
  EXPECT_FALSE(Matches({"tgp.io/gpu-type", "Gt", {"1"}}, l));  // not an integer
  EXPECT_FALSE(Matches({"tgp.io/gpu-type", "Bogus", {}}, l));
}

TEST(Scheduling, PlacementOfAPod) {
  auto pod = boost::json::parse(R"({
    "spec": {
      "nodeSelector": {"tgp.io/gpu-type": "RTX4090"},
      "tolerations": [{"key": "gpu-node", "operator": "Equal", "value": "true",
                       "effect": "NoSchedule"}],
      "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
          {"matchExpressions": [{"key": "tgp.io/region", "operator": "In",
                                 "values": ["us-west"]}]},
          {"matchExpressions": [{"key": "tgp.io/region", "operator": "In",
                                 "values": ["us-east"]}]}]}}},
      "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}],
      "containers": [
        {"name": "a", "resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": "1"}}},
        {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "8Gi"}}}],
      "overhead": {"memory": "1Gi"}
    }})")
                 .as_object();
  auto p = PlacementOf(pod);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->requests.at("nvidia.com/gpu").Value(), 2);
  EXPECT_EQ(p->requests.at("cpu").MilliValue(), 4000);  // the init container's 4 > 1
  EXPECT_EQ(p->requests.at("memory").Value(), 9LL * 1024 * 1024 * 1024);
  ASSERT_EQ(p->tolerations.size(), 1u);
  EXPECT_TRUE(NodeMatches(*p, {{"tgp.io/gpu-type", "RTX4090"}, {"tgp.io/region", "us-east"}}));
  EXPECT_FALSE(NodeMatches(*p, {{"tgp.io/gpu-type", "RTX4090"}, {"tgp.io/region", "eu-west"}}));
  EXPECT_FALSE(NodeMatches(*p, {{"tgp.io/gpu-type", "A100-80GB"}, {"tgp.io/region", "us-east"}}));
}

TEST(Scheduling, BadInputIsAnErrorNamingTheField) {
  auto pod =
      boost::json::parse(R"({"spec":{"containers":[{"resources":{"requests":{"cpu":"lots"}}}]}})")
          .as_object();
  auto p = PlacementOf(pod);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("spec.containers[0].resources.requests.cpu"), std::string::npos)
      << p.error().message;
  auto bad_op = boost::json::parse(R"({"spec":{"affinity":{"nodeAffinity":{
      "requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[
        {"matchExpressions":[{"key":"k","operator":"Near"}]}]}}}}})")
                    .as_object();
  EXPECT_FALSE(PlacementOf(bad_op).ok());
}

}  // namespace
}  // namespace hyperslice::kube
