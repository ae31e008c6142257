#include "src/tpu/topology.h"

#include <gtest/gtest.h>

namespace hyperslice::tpu {
namespace {

TEST(Topology, Tpu7x2x2x2IsTwoHostsOfFourChips) {
  auto s = MakeSlice("tpu7x-standard-4t", "2x2x2");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->chips, 8);
  EXPECT_EQ(s->hosts, 2);
  EXPECT_EQ(s->TopologyEnv(), "2x2x2");
  EXPECT_EQ(s->ChipsPerHostBoundsEnv(), "2,2,1");
  EXPECT_EQ(s->HostBoundsEnv(), "1,1,2");
  // Cores = chips x 2 for tpu7x (ARCHITECTURE §11: seed 000's "tpu7x-4" is wrong).
  EXPECT_EQ(s->AcceleratorTypeEnv(), "tpu7x-16");
  EXPECT_STREQ(AcceleratorLabel(s->machine_type.generation), "tpu7x");
}

TEST(Topology, Tpu7xLargerSlices) {
  struct Case {
    const char* topology;
    int hosts;
    const char* host_bounds;
    const char* accel;
  } cases[] = {{"2x2x1", 1, "1,1,1", "tpu7x-8"},
               {"2x2x4", 4, "1,1,4", "tpu7x-32"},
               {"2x4x4", 8, "1,2,4", "tpu7x-64"},
               {"4x4x4", 16, "2,2,4", "tpu7x-128"}};
  for (const Case& c : cases) {
    auto s = MakeSlice("tpu7x-standard-4t", c.topology);
    ASSERT_TRUE(s.ok()) << c.topology << ": " << s.error().message;
    EXPECT_EQ(s->hosts, c.hosts) << c.topology;
    EXPECT_EQ(s->HostBoundsEnv(), c.host_bounds) << c.topology;
    EXPECT_EQ(s->AcceleratorTypeEnv(), c.accel) << c.topology;
  }
}

TEST(Topology, V6eShapesPad2DTo3D) {
  auto one = MakeSlice("ct6e-standard-1t", "1x1");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->hosts, 1);
  EXPECT_EQ(one->ChipsPerHostBoundsEnv(), "1,1,1");
  EXPECT_EQ(one->AcceleratorTypeEnv(), "v6e-1");

  auto eight = MakeSlice("ct6e-standard-8t", "2x4");
  ASSERT_TRUE(eight.ok());
  EXPECT_EQ(eight->hosts, 1);
  EXPECT_EQ(eight->TopologyEnv(), "2x4x1");
  EXPECT_EQ(eight->ChipsPerHostBoundsEnv(), "2,4,1");
  EXPECT_EQ(eight->HostBoundsEnv(), "1,1,1");
  EXPECT_EQ(eight->AcceleratorTypeEnv(), "v6e-8");

  auto multi = MakeSlice("ct6e-standard-4t", "4x8");
  ASSERT_TRUE(multi.ok());
  EXPECT_EQ(multi->hosts, 8);
  EXPECT_EQ(multi->HostBoundsEnv(), "2,4,1");
  EXPECT_EQ(multi->AcceleratorTypeEnv(), "v6e-32");
  EXPECT_STREQ(AcceleratorLabel(multi->machine_type.generation), "tpu-v6e-slice");

  auto big = MakeSlice("ct6e-standard-4t", "16x16");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->hosts, 64);
}

TEST(Topology, RejectionsNameWhatIsAllowed) {
  auto wrong_rank = MakeSlice("tpu7x-standard-4t", "2x4");
  ASSERT_FALSE(wrong_rank.ok());
  EXPECT_EQ(wrong_rank.error().code, Error::Code::kInvalidArgument);
  EXPECT_NE(wrong_rank.error().message.find("3D"), std::string::npos);

  auto v6e_3d = MakeSlice("ct6e-standard-4t", "2x2x2");
  ASSERT_FALSE(v6e_3d.ok());
  EXPECT_NE(v6e_3d.error().message.find("2D"), std::string::npos);

  auto eight_multi = MakeSlice("ct6e-standard-8t", "4x4");
  ASSERT_FALSE(eight_multi.ok());
  EXPECT_NE(eight_multi.error().message.find("ct6e-standard-4t"), std::string::npos);

  auto odd = MakeSlice("ct6e-standard-4t", "2x8");
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().message.find("4x8"), std::string::npos) << odd.error().message;

  auto not_pow2 = MakeSlice("tpu7x-standard-4t", "2x2x3");
  ASSERT_FALSE(not_pow2.ok());
  auto unordered = MakeSlice("tpu7x-standard-4t", "4x2x2");
  ASSERT_FALSE(unordered.ok());
  EXPECT_NE(unordered.error().message.find("non-decreasing"), std::string::npos);

  auto unknown = MakeSlice("n2-standard-4", "2x2x2");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("tpu7x-standard-4t"), std::string::npos);
}

TEST(Topology, ParseRejectsGarbage) {
  for (const char* bad : {"", "2", "x2", "2x", "2x2x2x2", "0x2", "-1x2", "2xa", "2 x2", "2x2x"}) {
    EXPECT_FALSE(ParseTopology(bad).ok()) << bad;
  }
  auto t = ParseTopology("16x16");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->rank, 2);
  EXPECT_EQ(t->Chips(), 256);
  EXPECT_EQ(t->String(), "16x16");
  EXPECT_EQ(t->PaddedString(), "16x16x1");
}

TEST(Topology, InferSliceFromNodeCount) {
  auto s = InferSlice("2x2x2", 2);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->machine_type.name, "tpu7x-standard-4t");
  auto v6e = InferSlice("2x4", 1);
  ASSERT_TRUE(v6e.ok()) << v6e.error().message;
  EXPECT_EQ(v6e->machine_type.name, "ct6e-standard-8t");
  auto v6e_multi = InferSlice("2x4", 2);
  ASSERT_TRUE(v6e_multi.ok());
  EXPECT_EQ(v6e_multi->machine_type.name, "ct6e-standard-4t");
  EXPECT_FALSE(InferSlice("2x2x2", 3).ok());
  EXPECT_FALSE(InferSlice("2x2x2", 0).ok());
}

}  // namespace
}  // namespace hyperslice::tpu
