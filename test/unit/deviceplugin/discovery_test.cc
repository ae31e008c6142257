#include "src/deviceplugin/discovery.h"

#include <gtest/gtest.h>

#include "test/unit/deviceplugin/fake_node.h"

namespace hyperslice::deviceplugin {
namespace {

using testing::FakeNode;

TEST(Discover, AccelChipsAreOrderedByIndexWithNumaAndPciAddress) {
  FakeNode node;
  node.AddAccelChip(1, 0);
  node.AddAccelChip(0, 0);
  node.AddAccelChip(10, 1);
  FakeNode::Write(node.root() + "/dev/accelerator", "");  // not a chip
  auto inv = Discover(node.root(), Mode::kAuto);
  ASSERT_TRUE(inv.ok()) << inv.error().message;
  EXPECT_EQ(inv->mode, Mode::kAccel);
  ASSERT_EQ(inv->chips.size(), 3u);
  EXPECT_EQ(inv->chips[0].id, "accel0");
  EXPECT_EQ(inv->chips[1].id, "accel1");
  EXPECT_EQ(inv->chips[2].id, "accel10");
  EXPECT_EQ(inv->chips[2].index, 10);
  EXPECT_EQ(inv->chips[2].numa_node, 1);
  EXPECT_EQ(inv->chips[2].pci_address, "0000:00:14.0");
  EXPECT_EQ(inv->chips[0].device_paths, std::vector<std::string>{"/dev/accel0"});
}

TEST(Discover, VfioGroupsAreMatchedToTpuPciFunctionsThroughIommuGroups) {
  FakeNode node;
  node.AddVfioFunction("0000:00:05.0", 17, 1);
  node.AddVfioFunction("0000:00:04.0", 12, 0);
  node.AddVfioFunction("0000:00:06.0", 30, 0, "0x10de");  // another vendor's device
  auto inv = Discover(node.root(), Mode::kAuto);
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->mode, Mode::kVfio);
  ASSERT_EQ(inv->chips.size(), 2u);
  EXPECT_EQ(inv->chips[0].id, "vfio12");
  EXPECT_EQ(inv->chips[0].index, 0);
  EXPECT_EQ(inv->chips[0].numa_node, 0);
  EXPECT_EQ(inv->chips[0].device_paths, std::vector<std::string>{"/dev/vfio/12"});
  EXPECT_EQ(inv->chips[1].id, "vfio17");
  EXPECT_EQ(inv->chips[1].index, 1);
  EXPECT_EQ(inv->chips[1].numa_node, 1);
  EXPECT_EQ(inv->chips[1].pci_address, "0000:00:05.0");
}

TEST(Discover, VfioChipWithoutItsGroupNodeIsFoundButUnhealthy) {
  FakeNode node;
  node.AddVfioFunction("0000:00:04.0", 12, 0, "0x1ae0", /*with_dev_node=*/false);
  auto inv = Discover(node.root(), Mode::kVfio);
  ASSERT_TRUE(inv.ok());
  ASSERT_EQ(inv->chips.size(), 1u);
  EXPECT_FALSE(ProbeHealthy(node.root(), inv->chips[0], Mode::kVfio));
  FakeNode::Write(node.VfioPath(12), "");
  EXPECT_TRUE(ProbeHealthy(node.root(), inv->chips[0], Mode::kVfio));
  std::filesystem::remove(node.root() + "/dev/vfio/vfio");
  EXPECT_FALSE(ProbeHealthy(node.root(), inv->chips[0], Mode::kVfio))
      << "without /dev/vfio/vfio no group can be used";
}

TEST(Discover, EmptyNodeIsAnEmptyInventoryAndABadRootIsAnError) {
  FakeNode node;
  auto inv = Discover(node.root(), Mode::kAuto);
  ASSERT_TRUE(inv.ok());
  EXPECT_TRUE(inv->chips.empty());
  EXPECT_EQ(inv->mode, Mode::kAuto);
  EXPECT_FALSE(Discover(node.root() + "/nope", Mode::kAuto).ok());
}

TEST(ProbeHealthy, AccelNodeThatCannotBeOpenedIsUnhealthy) {
  FakeNode node;
  node.AddAccelChip(0, 0);
  auto inv = Discover(node.root(), Mode::kAccel);
  ASSERT_TRUE(inv.ok());
  ASSERT_EQ(inv->chips.size(), 1u);
  EXPECT_TRUE(ProbeHealthy(node.root(), inv->chips[0], Mode::kAccel));
  // A dangling symlink: the name is there, opening fails.
  std::filesystem::remove(node.AccelPath(0));
  std::filesystem::create_symlink(node.root() + "/dev/.gone", node.AccelPath(0));
  EXPECT_FALSE(ProbeHealthy(node.root(), inv->chips[0], Mode::kAccel));
}

TEST(ParseMode, KnownNamesOnly) {
  EXPECT_EQ(*ParseMode("vfio"), Mode::kVfio);
  EXPECT_EQ(*ParseMode("accel"), Mode::kAccel);
  EXPECT_EQ(*ParseMode("auto"), Mode::kAuto);
  EXPECT_FALSE(ParseMode("gpu").ok());
}

}  // namespace
}  // namespace hyperslice::deviceplugin
