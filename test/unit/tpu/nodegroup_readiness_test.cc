// The TPUNodeGroup's readiness (AssessReadiness, a pure function): which condition names the
// problem a user must see first, and the nodeSummary.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/tpu/api.h"
#include "src/tpu/internal/nodegroup_phases.h"
#include "test/unit/tpu/two_host_spec.h"

namespace hyperslice::tpu::internal {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

ChildState Ready() { return {true, true, "Created", "created"}; }

ChildrenState AllReady() { return {Ready(), Ready(), Ready(), nullptr}; }

NodesObservation Hosts(int n, int ready) {
  NodesObservation o;
  for (int i = 0; i < n; ++i) {
    std::string name = "g-" + std::to_string(i);
    o.instances.push_back({"p", "us-central1-c", name, "RUNNING", "gce://p/us-central1-c/" + name});
    o.joined.insert("gce://p/us-central1-c/" + name);
  }
  o.running = n;
  o.ready = ready;
  return o;
}

TEST(NodeGroupReadiness, ASliceWithEveryNodeReadyIsReady) {
  Readiness r = AssessReadiness(TwoHostSpec("u-1"), AllReady(), Hosts(2, 2), {});
  EXPECT_TRUE(r.nodes_ready.status);
  EXPECT_EQ(r.nodes_ready.reason, "NodesReady");
  EXPECT_TRUE(r.ready.status);
  EXPECT_EQ(r.ready.reason, "SliceReady");
  EXPECT_THAT(r.ready.message, HasSubstr("slice 2x2x2 of 2 x tpu7x-standard-4t"));
  EXPECT_EQ(r.node_summary.at("desired").as_int64(), 2);
  EXPECT_EQ(r.node_summary.at("joined").as_int64(), 2);
  EXPECT_EQ(r.node_summary.at("ready").as_int64(), 2);
}

TEST(NodeGroupReadiness, NoVmsYetPointsAtTheMig) {
  ChildrenState c = AllReady();
  c.mig = {true, false, "ZONE_RESOURCE_POOL_EXHAUSTED", "no capacity"};
  Readiness r = AssessReadiness(TwoHostSpec("u-1"), c, NodesObservation{}, {});
  EXPECT_EQ(r.nodes_ready.reason, "WaitingForInstances");
  EXPECT_EQ(r.ready.reason, "ZONE_RESOURCE_POOL_EXHAUSTED");
  EXPECT_EQ(r.ready.message, "ManagedInstanceGroup: no capacity");
}

TEST(NodeGroupReadiness, APrerequisiteNamesItselfFirst) {
  ChildrenState c = AllReady();
  c.policy = {true, false, "NameConflict", "belongs to another cluster"};
  c.mig = {false, false, "WaitingForPrerequisites", "waiting"};
  Readiness r = AssessReadiness(TwoHostSpec("u-1"), c, NodesObservation{}, {});
  EXPECT_EQ(r.ready.reason, "NameConflict");
  EXPECT_EQ(r.ready.message, "ResourcePolicy: belongs to another cluster");
}

TEST(NodeGroupReadiness, ALostHostNamesItselfWhateverTheMigDoes) {
  ChildrenState c = AllReady();
  c.mig = {true, false, "InstancesNotRunning", "1 of 2 instances are RUNNING"};
  NodesObservation o = Hosts(2, 1);
  o.not_ready.push_back("node g-1 Ready=False (KubeletNotReady)");
  Readiness r = AssessReadiness(TwoHostSpec("u-1"), c, o, {});
  EXPECT_EQ(r.nodes_ready.reason, "NodeNotReady");
  EXPECT_EQ(r.ready.reason, "NodeNotReady");
  EXPECT_THAT(r.ready.message, HasSubstr("g-1"));
}

TEST(NodeGroupReadiness, MissingChipsAndUnjoinedVms) {
  NodesObservation chips = Hosts(2, 1);
  chips.chips_missing.push_back("node g-1 has 2 of 4 TPU chips allocatable");
  EXPECT_EQ(AssessReadiness(TwoHostSpec("u-1"), AllReady(), chips, {}).ready.reason,
            "TPUChipsUnavailable");

  NodesObservation unjoined = Hosts(2, 1);
  unjoined.not_joined.push_back("g-1");
  Readiness r = AssessReadiness(TwoHostSpec("u-1"), AllReady(), unjoined, {});
  EXPECT_EQ(r.nodes_ready.reason, "NodesNotJoined");
  EXPECT_EQ(r.nodes_ready.message, "1 of 2 VMs have no Node yet: g-1");
  EXPECT_EQ(r.ready.reason, "NodesNotJoined") << "Ready repeats NodesReady when nothing else";
}

TEST(NodeGroupReadiness, ErrorsOverrideEverything) {
  Readiness r = AssessReadiness(TwoHostSpec("u-1"), AllReady(), Hosts(2, 2),
                                {"InstanceTemplate: forbidden", "a", "b", "c"});
  EXPECT_FALSE(r.ready.status);
  EXPECT_EQ(r.ready.reason, "ApplyFailed");
  EXPECT_EQ(r.ready.message, "InstanceTemplate: forbidden, a, b and 1 more");
  EXPECT_TRUE(r.nodes_ready.status) << "the Nodes themselves are fine";
}

TEST(NodeGroupReadiness, AnInvalidSpecSetsEveryCondition) {
  auto conditions = InvalidSpecConditions("spec.topology: 3x3 is not a valid topology");
  ASSERT_EQ(conditions.size(), 5u);
  EXPECT_EQ(conditions[0].type, kCondReady);
  EXPECT_THAT(conditions[0].message, HasSubstr("3x3"));
  for (const auto& c : conditions) {
    EXPECT_FALSE(c.status);
    EXPECT_EQ(c.reason, "InvalidSpec");
  }
}

}  // namespace
}  // namespace hyperslice::tpu::internal
