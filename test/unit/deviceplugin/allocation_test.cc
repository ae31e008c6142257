#include "src/deviceplugin/allocation.h"

#include <gtest/gtest.h>

namespace hyperslice::deviceplugin {
namespace {

using Ids = std::vector<std::string>;

// An 8-chip host: chips 0-3 on NUMA node 0, 4-7 on node 1.
std::vector<Candidate> EightChips() {
  std::vector<Candidate> out;
  for (int i = 0; i < 8; ++i) out.push_back({"accel" + std::to_string(i), i, i < 4 ? 0 : 1});
  return out;
}

std::vector<Candidate> Without(std::vector<Candidate> all, const Ids& gone) {
  std::erase_if(all, [&](const Candidate& c) {
    return std::find(gone.begin(), gone.end(), c.id) != gone.end();
  });
  return all;
}

TEST(ChoosePreferred, FourChipsComeFromOneNumaNode) {
  auto pick = ChoosePreferred(EightChips(), {}, 4);
  ASSERT_TRUE(pick.ok()) << pick.error().message;
  EXPECT_EQ(*pick, (Ids{"accel0", "accel1", "accel2", "accel3"}));
}

TEST(ChoosePreferred, FourChipsMoveToTheOtherNodeWhenTheFirstIsFragmented) {
  // Node 0 has only 3 free chips left; node 1 has all 4.
  auto pick = ChoosePreferred(Without(EightChips(), {"accel1"}), {}, 4);
  ASSERT_TRUE(pick.ok());
  EXPECT_EQ(*pick, (Ids{"accel4", "accel5", "accel6", "accel7"}));
}

TEST(ChoosePreferred, MustIncludeIsHonouredAndFilledOnItsNumaNode) {
  auto pick = ChoosePreferred(EightChips(), {"accel6"}, 2);
  ASSERT_TRUE(pick.ok());
  // Same NUMA node, contiguous, lowest: 5,6 (4 would leave a hole).
  EXPECT_EQ(*pick, (Ids{"accel5", "accel6"}));
}

TEST(ChoosePreferred, ContiguousChipsArePreferredOverLowerScatteredOnes) {
  // Free on node 0: 0, 2, 3. Two chips: {2,3} is contiguous, {0,2} is not.
  auto pick = ChoosePreferred(
      Without(EightChips(), {"accel1", "accel4", "accel5", "accel6", "accel7"}), {}, 2);
  ASSERT_TRUE(pick.ok());
  EXPECT_EQ(*pick, (Ids{"accel2", "accel3"}));
}

TEST(ChoosePreferred, SpansNumaNodesOnlyWhenItMust) {
  auto pick =
      ChoosePreferred(Without(EightChips(), {"accel0", "accel1", "accel6", "accel7"}), {}, 4);
  ASSERT_TRUE(pick.ok());
  EXPECT_EQ(*pick, (Ids{"accel2", "accel3", "accel4", "accel5"}));
}

TEST(ChoosePreferred, MustIncludeAcrossNodesIsKept) {
  auto pick = ChoosePreferred(EightChips(), {"accel0", "accel7"}, 4);
  ASSERT_TRUE(pick.ok());
  ASSERT_EQ(pick->size(), 4u);
  EXPECT_EQ(pick->front(), "accel0");
  EXPECT_EQ(pick->back(), "accel7");
}

TEST(ChoosePreferred, RejectsImpossibleRequests) {
  EXPECT_FALSE(ChoosePreferred(EightChips(), {}, 9).ok());
  EXPECT_FALSE(ChoosePreferred(EightChips(), {}, 0).ok());
  auto unknown = ChoosePreferred(EightChips(), {"accel9"}, 2);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, Error::Code::kInvalidArgument);
  EXPECT_FALSE(ChoosePreferred(EightChips(), {"accel0", "accel1", "accel2"}, 2).ok());
}

TEST(ChoosePreferred, LargeHostsUseTheGreedyFillOnOneNode) {
  std::vector<Candidate> many;
  for (int i = 0; i < 32; ++i) many.push_back({"c" + std::to_string(i), i, i / 8});
  auto pick = ChoosePreferred(many, {"c20"}, 4);
  ASSERT_TRUE(pick.ok());
  ASSERT_EQ(pick->size(), 4u);
  for (const std::string& id : *pick) {
    int i = std::stoi(id.substr(1));
    EXPECT_EQ(i / 8, 2) << id << " is not on c20's NUMA node";
  }
}

TEST(TpuEnv, BoundsFollowTheAllocationSize) {
  auto one = TpuEnv({3}, 8);
  EXPECT_EQ(one["TPU_VISIBLE_CHIPS"], "3");
  EXPECT_EQ(one["TPU_CHIPS_PER_PROCESS_BOUNDS"], "1,1,1");
  EXPECT_EQ(one["TPU_PROCESS_BOUNDS"], "1,1,1");
  auto two = TpuEnv({5, 4}, 8);
  EXPECT_EQ(two["TPU_VISIBLE_CHIPS"], "4,5");
  EXPECT_EQ(two["TPU_CHIPS_PER_PROCESS_BOUNDS"], "1,2,1");
  EXPECT_EQ(TpuEnv({0, 1, 2, 3}, 8)["TPU_CHIPS_PER_PROCESS_BOUNDS"], "2,2,1");
  EXPECT_EQ(TpuEnv({0, 1, 2, 3, 4, 5, 6, 7}, 16)["TPU_CHIPS_PER_PROCESS_BOUNDS"], "2,4,1");
}

TEST(TpuEnv, WholeHostAndOddSizesLeaveTheBoundsOut) {
  auto whole = TpuEnv({0, 1, 2, 3}, 4);
  EXPECT_EQ(whole["TPU_VISIBLE_CHIPS"], "0,1,2,3");
  EXPECT_EQ(whole.count("TPU_CHIPS_PER_PROCESS_BOUNDS"), 0u);
  EXPECT_EQ(whole.count("TPU_PROCESS_BOUNDS"), 0u);
  auto three = TpuEnv({0, 1, 2}, 8);
  EXPECT_EQ(three.count("TPU_CHIPS_PER_PROCESS_BOUNDS"), 0u);
}

}  // namespace
}  // namespace hyperslice::deviceplugin
