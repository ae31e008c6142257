// JsonDifferences (src/tpu/internal/json_diff.h): the drift comparison between a child's spec and
// what GCE returns.
#include "src/tpu/internal/json_diff.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

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

}  // namespace
}  // namespace hyperslice::tpu::internal
