// The pure parts of the GCE-child lifecycle: owner marks on GCE resources and the drift
// comparison between a child's spec and what GCE returns.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/tpu/api.h"
#include "src/tpu/internal/gce_child.h"

namespace hyperslice::tpu::internal {
namespace {

namespace json = boost::json;

std::vector<std::string> Diff(const char* desired, const char* actual) {
  std::vector<std::string> out;
  JsonDifferences(json::parse(desired), json::parse(actual), "", out);
  return out;
}

TEST(JsonDifferences, FieldsOnlyInGceAreIgnored) {
  EXPECT_TRUE(Diff(R"({"a":"x"})", R"({"a":"x","kind":"compute#thing","id":"123"})").empty());
}

TEST(JsonDifferences, NamesTheDifferingFieldPaths) {
  EXPECT_EQ(Diff(R"({"p":{"machineType":"a","disks":[{"boot":true}]},"n":1})",
                 R"({"p":{"machineType":"b","disks":[{"boot":false}]},"n":2})"),
            (std::vector<std::string>{"p.machineType", "p.disks", "n"}));
}

TEST(JsonDifferences, MissingFieldIsADifferenceUnlessEmpty) {
  EXPECT_EQ(Diff(R"({"a":"x","b":[],"c":{},"d":""})", R"({})"), (std::vector<std::string>{"a"}));
}

TEST(JsonDifferences, Int64AsStringEqualsTheNumber) {
  EXPECT_TRUE(Diff(R"({"diskSizeGb":"100"})", R"({"diskSizeGb":100})").empty());
  EXPECT_TRUE(Diff(R"({"targetSize":2})", R"({"targetSize":"2"})").empty());
  EXPECT_FALSE(Diff(R"({"targetSize":2})", R"({"targetSize":3})").empty());
}

TEST(JsonDifferences, PartialUrlEqualsTheFullOne) {
  EXPECT_TRUE(
      Diff(
          R"({"t":"projects/p/global/instanceTemplates/it"})",
          R"({"t":"https://compute.googleapis.com/compute/v1/projects/p/global/instanceTemplates/it"})")
          .empty());
  // A suffix that does not start at a path segment is another name.
  EXPECT_FALSE(
      Diff(R"({"t":"t/it"})", R"({"t":"projects/p/global/instanceTemplates/xit"})").empty());
}

TEST(JsonDifferences, ArraysMustHaveTheSameLength) {
  EXPECT_EQ(Diff(R"({"tags":["a","b"]})", R"({"tags":["a"]})"), (std::vector<std::string>{"tags"}));
}

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
