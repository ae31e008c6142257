#include "src/kube/metrics.h"

#include <gtest/gtest.h>

namespace hyperslice::kube::metrics {
namespace {

TEST(Metrics, TextFormatHasHelpTypeAndLabelledSamples) {
  Registry reg;
  reg.GetCounter("demo_requests_total", "Requests served.", {{"code", "200"}}).Inc(3);
  reg.GetCounter("demo_requests_total", "Requests served.", {{"code", "500"}}).Inc();
  reg.GetGauge("demo_temperature", "Current temperature.").Set(-1.5);
  std::string text = reg.Expose();
  EXPECT_NE(text.find("# HELP demo_requests_total Requests served.\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE demo_requests_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("demo_requests_total{code=\"200\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("demo_requests_total{code=\"500\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE demo_temperature gauge\n"), std::string::npos);
  EXPECT_NE(text.find("demo_temperature -1.5\n"), std::string::npos) << text;
}

TEST(Metrics, HistogramHasCumulativeBucketsSumAndCount) {
  Registry reg;
  auto& h = reg.GetHistogram("demo_seconds", "Latency.", {{"op", "get"}}, {0.1, 1, 10});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(0.7);
  h.Observe(20);
  EXPECT_EQ(h.Count(), 4u);
  EXPECT_DOUBLE_EQ(h.Sum(), 21.25);
  std::string text = reg.Expose();
  for (const char* want : {
           "# TYPE demo_seconds histogram\n",
           "demo_seconds_bucket{op=\"get\",le=\"0.1\"} 1\n",
           "demo_seconds_bucket{op=\"get\",le=\"1\"} 3\n",
           "demo_seconds_bucket{op=\"get\",le=\"10\"} 3\n",
           "demo_seconds_bucket{op=\"get\",le=\"+Inf\"} 4\n",
           "demo_seconds_sum{op=\"get\"} 21.25\n",
           "demo_seconds_count{op=\"get\"} 4\n",
       }) {
    EXPECT_NE(text.find(want), std::string::npos) << "missing: " << want << "\n" << text;
  }
}

TEST(Metrics, SameSeriesIsTheSameHandle) {
  Registry reg;
  auto& a = reg.GetCounter("x_total", "X.", {{"k", "v"}});
  auto& b = reg.GetCounter("x_total", "X.", {{"k", "v"}});
  EXPECT_EQ(&a, &b);
  a.Inc();
  EXPECT_EQ(b.Value(), 1);
}

TEST(Metrics, LabelValuesAreEscaped) {
  Registry reg;
  reg.GetCounter("esc_total", "E.", {{"path", "a\"b\\c\nd"}}).Inc();
  EXPECT_NE(reg.Expose().find(R"(esc_total{path="a\"b\\c\nd"} 1)"), std::string::npos)
      << reg.Expose();
}

TEST(Metrics, BucketHelpersMatchClientGolang) {
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(LinearBuckets(1, 0.5, 3), (std::vector<double>{1, 1.5, 2}));
  EXPECT_EQ(DefaultBuckets().front(), 0.005);
  EXPECT_EQ(DefaultBuckets().back(), 10);
}

TEST(MetricsDeathTest, OneNameHasOneType) {
  Registry reg;
  reg.GetCounter("dup", "D.");
  EXPECT_DEATH(reg.GetGauge("dup", "D."), "");
}

}  // namespace
}  // namespace hyperslice::kube::metrics
