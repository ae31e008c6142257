// Runner placement on plain data: fits, best fit, policies, whole slices, and which refusals are
// final.
#include "src/runners/controlnode/placement.h"

#include <gtest/gtest.h>

namespace hyperslice::runners::controlnode {
namespace {

RunnerCandidate R(std::string name, int64_t cpu_milli, int64_t gpus = 0, std::string slice = "",
                  int index = 0) {
  RunnerCandidate r;
  r.name = std::move(name);
  r.healthy = true;
  r.capacity = {{"cpu", cpu_milli}, {"memory", 64LL << 30}, {"pods", 110000}};
  if (gpus > 0) r.capacity["nvidia.com/gpu"] = gpus * 1000;
  r.slice = std::move(slice);
  r.slice_index = index;
  return r;
}

TEST(Placement, FitsCountsUsedAndMissingResourcesAsZero) {
  EXPECT_TRUE(Fits({{"cpu", 2000}}, {{"cpu", 4000}}, {{"cpu", 2000}}));
  EXPECT_FALSE(Fits({{"cpu", 2001}}, {{"cpu", 4000}}, {{"cpu", 2000}}));
  EXPECT_FALSE(Fits({{"nvidia.com/gpu", 1000}}, {{"cpu", 4000}}, {}));
}

TEST(Placement, BestFitLeavesTheBigRunnerFree) {
  PodNeeds p;
  p.requests = {{"cpu", 2000}};
  auto d = Place(p, {R("big", 32000), R("small", 4000)});
  ASSERT_EQ(d.runners.size(), 1u);
  EXPECT_EQ(d.runners[0], "small");
}

TEST(Placement, GpuPodGoesToTheGpuRunner) {
  PodNeeds p;
  p.requests = {{"nvidia.com/gpu", 1000}};
  auto d = Place(p, {R("cpu-only", 4000), R("gpu", 8000, 1)});
  ASSERT_EQ(d.runners.size(), 1u);
  EXPECT_EQ(d.runners[0], "gpu");
}

TEST(Placement, TooBigForEveryRunnerIsFinalButBusyIsWaiting) {
  PodNeeds p;
  p.requests = {{"cpu", 6000}};
  auto d = Place(p, {R("a", 4000), R("b", 4000)});
  EXPECT_TRUE(d.runners.empty());
  EXPECT_EQ(d.reason, "NoRunnerFits");
  EXPECT_TRUE(d.permanent);

  auto busy = R("a", 8000);
  busy.used = {{"cpu", 4000}};
  auto w = Place(p, {busy});
  EXPECT_EQ(w.reason, "InsufficientRunnerCapacity");
  EXPECT_FALSE(w.permanent);
}

TEST(Placement, UnhealthyRunnersTakeNothingAndMakeItWait) {
  PodNeeds p;
  p.requests = {{"cpu", 1000}};
  auto a = R("a", 4000);
  a.healthy = false;
  auto d = Place(p, {a});
  EXPECT_TRUE(d.runners.empty());
  EXPECT_EQ(d.reason, "NoHealthyRunner");
  EXPECT_FALSE(d.permanent);
}

TEST(Placement, PoliciesRefuseHostNetworkAndTags) {
  PodNeeds hn;
  hn.host_network = true;
  auto d = Place(hn, {R("a", 4000)});
  EXPECT_EQ(d.reason, "HostNetworkForbidden");
  EXPECT_TRUE(d.permanent);
  auto allow = R("b", 4000);
  allow.allow_host_network = true;
  EXPECT_EQ(Place(hn, {R("a", 4000), allow}).runners, std::vector<std::string>{"b"});

  PodNeeds tag;
  tag.images_by_digest = false;
  EXPECT_EQ(Place(tag, {R("a", 4000)}).reason, "ImageNotByDigest");
  auto tags_ok = R("c", 4000);
  tags_ok.require_digest = false;
  EXPECT_EQ(Place(tag, {R("a", 4000), tags_ok}).runners, std::vector<std::string>{"c"});
}

TEST(Placement, SlicePodGetsHostsOfOneSliceInIndexOrder) {
  PodNeeds p;
  p.hosts = 2;
  p.requests = {{"nvidia.com/gpu", 8000}};  // total over the slice: 4 per host
  auto d = Place(p, {R("x1", 8000, 4, "x", 1), R("y0", 8000, 4, "y", 0), R("x0", 8000, 4, "x", 0),
                     R("lonely", 8000, 8)});
  ASSERT_EQ(d.runners.size(), 2u);
  EXPECT_EQ(d.runners[0], "x0");
  EXPECT_EQ(d.runners[1], "x1");
}

TEST(Placement, SliceTooSmallIsFinalAndBusySliceWaits) {
  PodNeeds p;
  p.hosts = 3;
  p.requests = {{"nvidia.com/gpu", 3000}};
  auto d = Place(p, {R("x0", 8000, 1, "x", 0), R("x1", 8000, 1, "x", 1)});
  EXPECT_EQ(d.reason, "NoRunnerFits");
  EXPECT_TRUE(d.permanent);

  auto x2 = R("x2", 8000, 1, "x", 2);
  x2.healthy = false;
  auto w = Place(p, {R("x0", 8000, 1, "x", 0), R("x1", 8000, 1, "x", 1), x2});
  EXPECT_EQ(w.reason, "InsufficientRunnerCapacity");
  EXPECT_FALSE(w.permanent);
}

TEST(Placement, PerHostShareRoundsUp) {
  auto s = PerHostShare({{"cpu", 1000}}, 3);
  EXPECT_EQ(s["cpu"], 334);
}

TEST(Placement, DigestReferences) {
  EXPECT_TRUE(IsDigestReference(
      "r.io/a@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
  EXPECT_FALSE(IsDigestReference("r.io/a:latest"));
  EXPECT_FALSE(IsDigestReference("r.io/a@sha256:0123"));
  EXPECT_FALSE(IsDigestReference(
      "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
}

}  // namespace
}  // namespace hyperslice::runners::controlnode
