// The bootstrap phase's GCE side (src/tpu/internal/bootstrap.h: WriteJoinValues, ClearJoinValues)
// on the in-memory gce::Compute: the join values written and removed with one setMetadata each,
// nothing called when the VM already is as wanted, an operation still running reported as not
// settled, a VM that is gone as kNotFound, and the VM's other metadata kept.
#include <chrono>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/base/fake_clock.h"
#include "src/gce/compute.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/bootstrap.h"
#include "test/testenv/fake_compute.h"

namespace hyperslice::tpu::internal {
namespace {

namespace json = boost::json;
using std::chrono::seconds;

constexpr char kProject[] = "p";
constexpr char kZone[] = "us-central1-c";
constexpr char kVm[] = "g-a";
constexpr char kSetMetadata[] = "instances.setMetadata";

class JoinMetadataTest : public ::testing::Test {
 protected:
  JoinMetadataTest() : compute_(&clock_) {
    compute_.SetOperationDuration(Clock::Duration::zero());
    compute_.Put(
        "instances", kProject, kZone,
        json::object{{"name", kVm},
                     {"status", "RUNNING"},
                     {"metadata",
                      json::object{{"fingerprint", "fp-0"},
                                   {"items", json::array{json::object{{"key", "startup-script"},
                                                                      {"value", "#!/bin/sh"}}}}}}});
  }

  gce::MetadataItems Items() const {
    auto vm = compute_.Find("instances", kProject, kZone, kVm);
    if (!vm) return {};
    const auto* md = vm->if_contains("metadata");
    return md && md->is_object() ? gce::MetadataItemsOf(md->as_object()) : gce::MetadataItems{};
  }

  const gce::MetadataItems want_ = {{kMetaJoinToken, "abcdef.0123456789abcdef"},
                                    {kMetaCaHash, "sha256:00"},
                                    {kMetaControlPlane, "10.0.0.1:6443"}};
  FakeClock clock_;
  testenv::FakeCompute compute_;
};

TEST_F(JoinMetadataTest, WritesTheJoinValuesOnceAndKeepsTheOtherKeys) {
  auto w = WriteJoinValues(compute_, kProject, kZone, kVm, want_, seconds(20));
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  EXPECT_TRUE(w->changed);
  EXPECT_TRUE(w->settled);
  EXPECT_EQ(compute_.Calls(kSetMetadata), 1u);
  gce::MetadataItems items = Items();
  for (const auto& [k, v] : want_) EXPECT_EQ(items[k], v) << k;
  EXPECT_EQ(items["startup-script"], "#!/bin/sh");

  // Already as wanted: read, no write.
  auto again = WriteJoinValues(compute_, kProject, kZone, kVm, want_, seconds(20));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->changed);
  EXPECT_TRUE(again->settled);
  EXPECT_EQ(compute_.Calls(kSetMetadata), 1u);

  // A replaced token: one more write, of that key's new value.
  gce::MetadataItems next = want_;
  next[kMetaJoinToken] = "zyxwvu.0123456789abcdef";
  auto replaced = WriteJoinValues(compute_, kProject, kZone, kVm, next, seconds(20));
  ASSERT_TRUE(replaced.ok());
  EXPECT_TRUE(replaced->changed);
  EXPECT_EQ(compute_.Calls(kSetMetadata), 2u);
  EXPECT_EQ(Items()[kMetaJoinToken], "zyxwvu.0123456789abcdef");
}

TEST_F(JoinMetadataTest, ClearRemovesOnlyTheJoinKeys) {
  ASSERT_TRUE(WriteJoinValues(compute_, kProject, kZone, kVm, want_, seconds(20)).ok());
  auto c = ClearJoinValues(compute_, kProject, kZone, kVm, seconds(20));
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_TRUE(c->changed);
  EXPECT_TRUE(c->settled);
  gce::MetadataItems items = Items();
  EXPECT_EQ(items.size(), 1u);
  EXPECT_EQ(items["startup-script"], "#!/bin/sh");
  EXPECT_EQ(compute_.Calls(kSetMetadata), 2u);

  auto again = ClearJoinValues(compute_, kProject, kZone, kVm, seconds(20));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->changed) << "nothing to remove: no call";
  EXPECT_EQ(compute_.Calls(kSetMetadata), 2u);
}

TEST_F(JoinMetadataTest, AnOperationStillRunningIsNotSettledAndADoneOneIs) {
  compute_.SetOperationDuration(seconds(60));
  auto w = WriteJoinValues(compute_, kProject, kZone, kVm, want_, seconds(20));
  ASSERT_TRUE(w.ok()) << w.error().ToString();
  EXPECT_TRUE(w->changed);
  EXPECT_FALSE(w->settled) << "the operation runs longer than the wait";
  EXPECT_EQ(compute_.PendingOperations(), 1u);

  // Due within the wait: waited for, settled.
  compute_.SetOperationDuration(seconds(5));
  auto c = ClearJoinValues(compute_, kProject, kZone, kVm, seconds(20));
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_TRUE(c->settled);
}

TEST_F(JoinMetadataTest, AFailedOperationIsItsErrorAndAGoneVmIsNotFound) {
  compute_.FailNextOperation(kSetMetadata,
                             Error::Make(Error::Code::kForbidden, "denied", "PERMISSION_DENIED"));
  auto w = WriteJoinValues(compute_, kProject, kZone, kVm, want_, seconds(20));
  ASSERT_FALSE(w.ok()) << "a write whose operation failed is that failure";
  EXPECT_EQ(w.error().reason, "PERMISSION_DENIED");

  compute_.Erase("instances", kProject, kZone, kVm);
  auto gone = ClearJoinValues(compute_, kProject, kZone, kVm, seconds(20));
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, Error::Code::kNotFound);
  EXPECT_EQ(compute_.Calls(kSetMetadata), 1u) << "no write to a VM that is gone";
}

}  // namespace
}  // namespace hyperslice::tpu::internal
