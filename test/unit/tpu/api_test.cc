// Names, label values and providerIDs of the TPU operator's API (src/tpu/api.h).
#include "src/tpu/api.h"

#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace hyperslice::tpu {
namespace {

const std::regex kGceNameRe("^[a-z]([-a-z0-9]*[a-z0-9])?$");

TEST(GceName, IsDeterministicAndCarriesRoleAndUidHash) {
  std::string a = GceName("my-tpu-node-group", kRoleMig, "0b5c2a3e-1111-2222-3333-444455556666");
  EXPECT_EQ(a, GceName("my-tpu-node-group", kRoleMig, "0b5c2a3e-1111-2222-3333-444455556666"));
  EXPECT_EQ(a.rfind("my-tpu-node-group-mig-", 0), 0U) << a;
  EXPECT_EQ(a.size(), std::string("my-tpu-node-group-mig-").size() + 8);
  EXPECT_NE(a, GceName("my-tpu-node-group", kRoleMig, "another-uid"));
  EXPECT_NE(a, GceName("my-tpu-node-group", kRoleTemplate, "0b5c2a3e-1111-2222-3333-444455556666"));
}

TEST(GceName, FitsGceSyntaxForAnyKubernetesName) {
  for (const std::string& name : std::vector<std::string>{
           "a", "9lives", "dotted.name.example", std::string(253, 'x'), "UPPER", "-x-", "x--"}) {
    std::string n = GceName(name, kRolePolicy, "uid");
    EXPECT_LE(n.size(), 63U) << n;
    EXPECT_TRUE(std::regex_match(n, kGceNameRe)) << n;
  }
  EXPECT_EQ(GceName("9lives", kRolePolicy, "uid").rfind("t9lives-wp-", 0), 0U);
}

TEST(LabelValues, LongValuesAreCutAndStayDistinct) {
  std::string ns(40, 'n'), a(40, 'a'), b = std::string(39, 'a') + "b";
  std::string va = NodeGroupLabelValue(ns, a), vb = NodeGroupLabelValue(ns, b);
  EXPECT_LE(va.size(), 63U);
  EXPECT_NE(va, vb);
  EXPECT_TRUE(IsValidLabelValue(va)) << va;
  EXPECT_EQ(NodeGroupLabelValue("default", "my-tpu-node-group"), "default-my-tpu-node-group");
  EXPECT_EQ(GceLabelValue("Default.My"), "default_my");
}

TEST(RegionOfZone, DropsTheZoneLetter) {
  EXPECT_EQ(*RegionOfZone("us-central1-c"), "us-central1");
  EXPECT_EQ(*RegionOfZone("europe-west4-a"), "europe-west4");
  EXPECT_FALSE(RegionOfZone("uscentral1").ok());
  EXPECT_FALSE(RegionOfZone("us-central1-").ok());
}

TEST(ProviderId, RoundTrips) {
  std::string id = ProviderId("my-gcp-project", "us-central1-c", "vm-1");
  EXPECT_EQ(id, "gce://my-gcp-project/us-central1-c/vm-1");
  Result<InstanceRef> ref = ParseProviderId(id);
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(ref->project, "my-gcp-project");
  EXPECT_EQ(ref->zone, "us-central1-c");
  EXPECT_EQ(ref->name, "vm-1");
  EXPECT_FALSE(ParseProviderId("aws:///us-east-1a/i-1").ok());
  EXPECT_FALSE(ParseProviderId("gce://p/z").ok());
  EXPECT_FALSE(ParseProviderId("gce://p//vm").ok());
}

TEST(KubeLabels, RenderSortedAndRejectInjection) {
  Result<std::string> out = RenderKubeLabels({{"cloud.google.com/gke-tpu-topology", "2x2x2"},
                                              {"cloud.google.com/gke-tpu-accelerator", "tpu7x"}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out,
            "cloud.google.com/gke-tpu-accelerator=tpu7x,cloud.google.com/gke-tpu-topology=2x2x2");
  EXPECT_FALSE(RenderKubeLabels({{"a", "b,c=d"}}).ok());
  EXPECT_FALSE(RenderKubeLabels({{"a", "x --register-with-taints=y"}}).ok());
  EXPECT_FALSE(RenderKubeLabels({{"a=b", "c"}}).ok());
  EXPECT_FALSE(RenderKubeLabels({{"Bad.Prefix/x", "c"}}).ok());
  EXPECT_TRUE(RenderKubeLabels({}).ok());
}

}  // namespace
}  // namespace hyperslice::tpu
