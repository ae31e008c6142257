// Owner marks on GCE resources (src/tpu/internal/owner_marks.h): the description marker and the
// labels carry the same facts, and a resource of another cluster or group is foreign.
#include "src/tpu/internal/owner_marks.h"

#include <string>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/tpu/api.h"

namespace hyperslice::tpu::internal {
namespace {

namespace json = boost::json;

TEST(OwnerMarks, DescriptionRoundTrip) {
  GceOwner owner{"ns", "slice", "uid-1", "cluster-a"};
  std::string d = DescriptionWithOwner("TPU slice ns/slice", owner);
  EXPECT_EQ(d, "TPU slice ns/slice; hyperslice owner=ns/slice uid=uid-1 cluster=cluster-a");
  OwnerMarks m = OwnerMarksFromDescription(d);
  EXPECT_EQ(m.uid, "uid-1");
  EXPECT_EQ(m.cluster, "cluster-a");
  EXPECT_EQ(DescriptionWithOwner("", owner), OwnerDescription(owner));
  EXPECT_TRUE(ForeignOwnerMessage(m, owner).empty());
}

TEST(OwnerMarks, LabelsCarryTheSameFacts) {
  GceOwner owner{"ns", "Slice.One", "UID-1", "cluster-a"};
  auto labels = OwnerLabels(owner);
  EXPECT_EQ(labels[kGceLabelManaged], "true");
  EXPECT_EQ(labels[kGceLabelGroup], GceLabelValue("ns-Slice.One"));
  json::object as_json;
  for (const auto& [k, v] : labels) as_json[k] = v;
  OwnerMarks m = OwnerMarksFromLabels(as_json);
  EXPECT_EQ(m.uid, "uid-1");  // GCE label values are lower case
  EXPECT_TRUE(ForeignOwnerMessage(m, owner).empty());
}

TEST(OwnerMarks, AnotherClusterOrGroupIsForeign) {
  GceOwner owner{"ns", "slice", "uid-1", "cluster-a"};
  EXPECT_NE(ForeignOwnerMessage({"uid-1", "cluster-b"}, owner).find("cluster-b"),
            std::string::npos);
  EXPECT_NE(ForeignOwnerMessage({"uid-2", "cluster-a"}, owner).find("uid-2"), std::string::npos);
  // No marks: a resource made by hand, adopted by name.
  EXPECT_TRUE(ForeignOwnerMessage({}, owner).empty());
  EXPECT_TRUE(OwnerMarksFromDescription("made by hand").uid.empty());
}

}  // namespace
}  // namespace hyperslice::tpu::internal
