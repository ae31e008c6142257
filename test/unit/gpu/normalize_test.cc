// The normalisation tables are data users select on: every entry is pinned here, and a change of
// a normalised value must change this test and kTablesVersion together.
#include "src/gpu/normalize.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "src/gpu/provider.h"

namespace hyperslice::gpu {
namespace {

TEST(Normalize, TablesVersion) { EXPECT_STREQ(kTablesVersion, "2026-11-24.1"); }

TEST(Normalize, OneRtx4090FromEveryProvider) {
  struct Case {
    const char* provider;
    const char* name;
  };
  for (const auto& c :
       {Case{kRunPod, "NVIDIA GeForce RTX 4090"}, Case{kLambda, "RTX 4090 (24 GB PCIe)"},
        Case{kPaperspace, "RTX4090"}, Case{kVast, "RTX 4090"}, Case{kVast, "RTX_4090"},
        Case{kRunPod, "GeForce RTX 4090"}}) {
    auto n = NormalizeGpu(c.provider, c.name, 24);
    EXPECT_TRUE(n.known) << c.provider << " " << c.name;
    EXPECT_EQ(n.name, "RTX4090") << c.provider << " " << c.name;
  }
}

TEST(Normalize, A100MemoryDecidesTheType) {
  EXPECT_EQ(NormalizeGpu(kVast, "A100 SXM4", 80).name, "A100-80GB");
  EXPECT_EQ(NormalizeGpu(kVast, "A100 SXM4", 40).name, "A100-40GB");
  EXPECT_EQ(NormalizeGpu(kVast, "A100 PCIE", 79.2).name, "A100-80GB");
  EXPECT_EQ(NormalizeGpu(kRunPod, "NVIDIA A100-SXM4-80GB", 0).name, "A100-80GB");
  EXPECT_EQ(NormalizeGpu(kRunPod, "NVIDIA A100 80GB PCIe", 0).name, "A100-80GB");
  EXPECT_EQ(NormalizeGpu(kLambda, "A100 (40 GB SXM4)", 0).name, "A100-40GB");
  EXPECT_EQ(NormalizeGpu(kPaperspace, "A100-80G", 0).name, "A100-80GB");
  EXPECT_EQ(NormalizeGpu(kPaperspace, "A100", 0).name, "A100-40GB");
  // Without any memory figure an A100 cannot be told apart: kept, reported unknown.
  auto n = NormalizeGpu(kVast, "A100X", 0);
  EXPECT_FALSE(n.known);
  EXPECT_EQ(n.name, "A100X");
}

TEST(Normalize, H100Variants) {
  EXPECT_EQ(NormalizeGpu(kRunPod, "NVIDIA H100 80GB HBM3", 80).name, "H100-SXM");
  EXPECT_EQ(NormalizeGpu(kRunPod, "NVIDIA H100 PCIe", 80).name, "H100-PCIe");
  EXPECT_EQ(NormalizeGpu(kRunPod, "NVIDIA H100 NVL", 94).name, "H100-NVL");
  EXPECT_EQ(NormalizeGpu(kLambda, "H100 (80 GB SXM5)", 80).name, "H100-SXM");
  EXPECT_EQ(NormalizeGpu(kVast, "H100 SXM", 80).name, "H100-SXM");
  EXPECT_EQ(NormalizeGpu(kVast, "H100 PCIE", 80).name, "H100-PCIe");
}

TEST(Normalize, ModelDigitsAreNotMemory) {
  EXPECT_EQ(NormalizeGpu(kVast, "A10G", 0).name, "A10G");
  EXPECT_EQ(NormalizeGpu(kVast, "A10", 24).name, "A10");
  EXPECT_EQ(NormalizeGpu(kVast, "RTX A6000", 48).name, "A6000");
  EXPECT_EQ(NormalizeGpu(kRunPod, "NVIDIA RTX 6000 Ada Generation", 48).name, "RTX6000-Ada");
  EXPECT_EQ(NormalizeGpu(kLambda, "RTX 6000 (24 GB)", 24).name, "RTX6000");
}

TEST(Normalize, UnknownGpuIsKeptAndReported) {
  auto n = NormalizeGpu(kVast, "Radeon VII Pro Max", 16);
  EXPECT_FALSE(n.known);
  EXPECT_EQ(n.name, "Radeon VII Pro Max");
}

TEST(Normalize, EveryNormalizedGpuIsListed) {
  const auto& known = KnownGpuTypes();
  for (const char* name :
       {"NVIDIA GeForce RTX 4090", "NVIDIA H100 80GB HBM3", "A100 SXM4", "L40S", "RTX 3090"}) {
    auto n = NormalizeGpu(kVast, name, 80);
    ASSERT_TRUE(n.known) << name;
    EXPECT_NE(std::find(known.begin(), known.end(), n.name), known.end()) << n.name;
  }
}

TEST(Normalize, Regions) {
  struct Case {
    const char* provider;
    const char* region;
    const char* want;
  };
  for (const auto& c : {
           Case{kLambda, "us-west-1", "us-west"},
           Case{kLambda, "us-east-1", "us-east"},
           Case{kLambda, "us-midwest-1", "us-central"},
           Case{kLambda, "europe-central-1", "eu-central"},
           Case{kLambda, "asia-northeast-1", "asia-northeast"},
           Case{kRunPod, "US-CA-2", "us-west"},
           Case{kRunPod, "US-TX-3", "us-south"},
           Case{kRunPod, "US-GA-1", "us-east"},
           Case{kRunPod, "US-KS-2", "us-central"},
           Case{kRunPod, "CA-MTL-1", "ca-east"},
           Case{kRunPod, "EU-RO-1", "eu-east"},
           Case{kRunPod, "EU-SE-1", "eu-north"},
           Case{kRunPod, "EUR-IS-1", "eu-north"},
           Case{kPaperspace, "East Coast (NY2)", "us-east"},
           Case{kPaperspace, "West Coast (CA1)", "us-west"},
           Case{kPaperspace, "Europe (AMS1)", "eu-west"},
           Case{kVast, "California, US", "us-west"},
           Case{kVast, "Texas, US", "us-south"},
           Case{kVast, "New York, US", "us-east"},
           Case{kVast, "Quebec, CA", "ca-east"},
           Case{kVast, "Sweden, SE", "eu-north"},
           Case{kVast, "Germany, DE", "eu-central"},
           Case{kVast, "JP", "asia-northeast"},
       }) {
    auto n = NormalizeRegion(c.provider, c.region);
    EXPECT_TRUE(n.known) << c.provider << " " << c.region;
    EXPECT_EQ(n.name, c.want) << c.provider << " " << c.region;
    const auto& known = KnownRegions();
    EXPECT_NE(std::find(known.begin(), known.end(), n.name), known.end()) << n.name;
  }
}

TEST(Normalize, UnknownRegionIsKept) {
  auto n = NormalizeRegion(kVast, "Atlantis, XX");
  EXPECT_FALSE(n.known);
  EXPECT_EQ(n.name, "Atlantis, XX");
  EXPECT_FALSE(NormalizeRegion(kLambda, "mars-north-1").known);
}

}  // namespace
}  // namespace hyperslice::gpu
