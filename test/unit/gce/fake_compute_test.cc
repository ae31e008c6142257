// The in-memory gce::Compute of the controllers' unit tests (test/testenv/fake_compute.h): what
// the controllers rely on it for: effects at completion, operations on command and on the clock,
// injected errors, failed operations, the metadata fingerprint, and the counters.
#include "test/testenv/fake_compute.h"

#include <chrono>

#include <gtest/gtest.h>

#include "src/base/fake_clock.h"
#include "src/base/json.h"

namespace hyperslice::testenv {
namespace {

namespace json = boost::json;
using std::chrono::seconds;

json::object Policy(const char* name) { return gce::HighThroughputWorkloadPolicy(name, "2x2x2"); }

TEST(FakeCompute, InsertTakesEffectWhenItsOperationCompletes) {
  FakeCompute compute;
  auto op = compute.InsertResourcePolicy("p", "us-east5", Policy("pol"));
  ASSERT_TRUE(op.ok()) << op.error().message;
  EXPECT_FALSE(op->done());
  EXPECT_EQ(op->ref.scope, gce::Scope::kRegion);
  EXPECT_EQ(compute.GetResourcePolicy("p", "us-east5", "pol").error().code, Error::Code::kNotFound);
  EXPECT_EQ(compute.InsertResourcePolicy("p", "us-east5", Policy("pol")).error().code,
            Error::Code::kAlreadyExists)
      << "an insert of the same name is pending";
  auto link = gce::ParseOperationLink(op->self_link);
  ASSERT_TRUE(link.ok());
  EXPECT_EQ(compute.Wait(*link, seconds(3)).error().reason, "operationNotDone");
  EXPECT_EQ(compute.CompleteOperations(), 1);
  EXPECT_TRUE(compute.Wait(*link, seconds(3)).ok());
  auto got = compute.GetResourcePolicy("p", "us-east5", "pol");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(jsonfield::StringField(*got, "selfLink"),
            "https://compute.googleapis.com/compute/v1/projects/p/regions/us-east5/"
            "resourcePolicies/pol");
  EXPECT_EQ(compute.Calls("resourcePolicies.insert"), 2u);
  EXPECT_EQ(compute.counters().Get("resourcePolicies.insert", "409"), 1u);
  EXPECT_EQ(compute.counters().Get("resourcePolicies.get", "404"), 1u);
  EXPECT_EQ(compute.Calls("regionOperations.wait"), 2u);
}

TEST(FakeCompute, OperationsCompleteOnTheClock) {
  FakeClock clock;
  FakeCompute compute(&clock);
  compute.SetOperationDuration(seconds(10));
  auto op = compute.InsertInstanceTemplate("p", json::object{{"name", "t"}});
  ASSERT_TRUE(op.ok());
  EXPECT_EQ(compute.Wait(op->ref, seconds(3)).error().code, Error::Code::kTimeout);
  clock.Advance(seconds(8));
  EXPECT_TRUE(compute.Wait(op->ref, seconds(3)).ok()) << "due within the long-poll";
  EXPECT_TRUE(compute.GetInstanceTemplate("p", "t").ok());

  auto del = compute.DeleteInstanceTemplate("p", "t");
  ASSERT_TRUE(del.ok());
  clock.Advance(seconds(10));
  EXPECT_EQ(compute.GetInstanceTemplate("p", "t").error().code, Error::Code::kNotFound)
      << "any call settles due operations";
  EXPECT_EQ(compute.PendingOperations(), 0u);
}

TEST(FakeCompute, InjectedErrorsAndFailedOperations) {
  FakeCompute compute;
  compute.SetOperationDuration(seconds(0));
  compute.InjectError("instanceGroupManagers.get",
                      Error::Make(Error::Code::kUnavailable, "backend", "backendError"), 2);
  EXPECT_EQ(compute.GetInstanceGroupManager("p", "z", "m").error().reason, "backendError");
  EXPECT_EQ(compute.GetInstanceGroupManager("p", "z", "m").error().reason, "backendError");
  EXPECT_EQ(compute.GetInstanceGroupManager("p", "z", "m").error().code, Error::Code::kNotFound);
  EXPECT_EQ(compute.counters().Get("instanceGroupManagers.get", "503"), 2u);

  compute.FailNextOperation(
      "instanceGroupManagers.insert",
      Error::Make(Error::Code::kUnavailable, "no capacity", "ZONE_RESOURCE_POOL_EXHAUSTED"));
  auto op =
      compute.InsertInstanceGroupManager("p", "z", json::object{{"name", "m"}, {"targetSize", 2}});
  ASSERT_TRUE(op.ok());
  EXPECT_TRUE(op->done());
  auto waited = compute.Wait(op->ref, seconds(3));
  ASSERT_FALSE(waited.ok());
  EXPECT_EQ(waited.error().reason, "ZONE_RESOURCE_POOL_EXHAUSTED");
  auto got = compute.GetOperation(op->ref);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->error);
  EXPECT_FALSE(compute.Find("instanceGroupManagers", "p", "z", "m")) << "no effect";
}

TEST(FakeCompute, MetadataFingerprintIsChecked) {
  FakeCompute compute;
  compute.SetOperationDuration(seconds(0));
  compute.Put(
      "instances", "p", "z",
      json::object{{"name", "vm"},
                   {"metadata", json::object{{"fingerprint", "f0"}, {"items", json::array{}}}}});
  auto stale = compute.SetInstanceMetadata("p", "z", "vm", json::object{{"fingerprint", "old"}});
  EXPECT_EQ(stale.error().code, Error::Code::kConflict);
  auto updated = compute.UpdateInstanceMetadata("p", "z", "vm", [](gce::MetadataItems& items) {
    items["k"] = "v";
    return true;
  });
  ASSERT_TRUE(updated.ok()) << updated.error().message;
  auto vm = compute.GetInstance("p", "z", "vm");
  ASSERT_TRUE(vm.ok());
  EXPECT_EQ(gce::MetadataItemsOf(vm->at("metadata").as_object()).at("k"), "v");
}

TEST(FakeCompute, ResizeAndManagedInstances) {
  FakeCompute compute;
  compute.Put("instanceGroupManagers", "p", "z", json::object{{"name", "m"}, {"targetSize", 1}});
  compute.SetManagedInstances("p", "z", "m", {json::object{{"name", "m-a"}}});
  auto op = compute.ResizeInstanceGroupManager("p", "z", "m", 4);
  ASSERT_TRUE(op.ok());
  compute.CompleteOperations();
  EXPECT_EQ(compute.GetInstanceGroupManager("p", "z", "m")->at("targetSize").as_int64(), 4);
  EXPECT_EQ(compute.ListManagedInstances("p", "z", "m", {})->size(), 1u);
  EXPECT_EQ(compute.ListManagedInstances("p", "z", "other", {}).error().code,
            Error::Code::kNotFound);
  EXPECT_EQ(compute.Count("instanceGroupManagers"), 1u);
}

}  // namespace
}  // namespace hyperslice::testenv
