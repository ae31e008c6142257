#include "src/kube/internal/informer_object.h"

#include <gtest/gtest.h>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace hyperslice::kube {
namespace {

constexpr const char* kNode = R"({
  "apiVersion":"v1","kind":"Node",
  "metadata":{"name":"node-with-a-long-name-0001","resourceVersion":"12345",
    "labels":{"kubernetes.io/hostname":"node-with-a-long-name-0001",
              "topology.kubernetes.io/zone":"us-central2-b"},
    "managedFields":[{"manager":"kubelet","operation":"Update","fieldsV1":{"f:status":{}}}]},
  "status":{"capacity":{"cpu":"96","memory":"394529416Ki"},
    "images":[{"names":["registry.example/very/long/image/name@sha256:0123456789abcdef"],
               "sizeBytes":123456789}]}})";

TEST(InformerObjectTest, PackedObjectEqualsOriginal) {
  auto original = boost::json::parse(kNode).as_object();
  auto packed = PackObject(original);
  EXPECT_EQ(*packed, original);
  EXPECT_EQ(boost::json::serialize(*packed), boost::json::serialize(original));
  EXPECT_GT(PackedSize(original), 0u);
}

TEST(InformerObjectTest, CopiesOfAPackedObjectAreIndependentAndMutable) {
  auto packed = PackObject(boost::json::parse(kNode).as_object());
  Object plain = *packed;  // shares the sealed arena's resource: allocations go to the heap
  plain["metadata"].as_object()["labels"].as_object()["added"] =
      "a value long enough to need a heap allocation";
  plain["status"].as_object()["images"].as_array().clear();
  Object deep = DeepCopy(*packed);
  deep["metadata"].as_object()["name"] = "renamed-renamed-renamed";
  // The cached object is untouched.
  EXPECT_EQ(*packed, boost::json::parse(kNode).as_object());
  EXPECT_NE(plain, *packed);
  EXPECT_EQ(MetaString(deep, "name"), "renamed-renamed-renamed");
  EXPECT_TRUE(deep.storage().is_shared() == false);
}

TEST(InformerObjectTest, DropManagedFieldsRemovesOnlyManagedFields) {
  auto obj = boost::json::parse(kNode).as_object();
  DropManagedFields(obj);
  EXPECT_EQ(obj.at("metadata").as_object().if_contains("managedFields"), nullptr);
  EXPECT_EQ(MetaString(obj, "resourceVersion"), "12345");
  Object empty;
  DropManagedFields(empty);  // no metadata: no-op
  EXPECT_TRUE(empty.empty());
}

}  // namespace
}  // namespace hyperslice::kube
