// Each phase of a GCE child reconcile (src/tpu/internal/child_phases.h) on the in-memory
// gce::Compute and a fake clock: what it calls in GCE, what it writes in the status (and when the
// operation record is written), and how it ends the reconcile.
#include "src/tpu/internal/child_phases.h"

#include <chrono>
#include <memory>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "src/base/fake_clock.h"
#include "src/base/json.h"
#include "src/kube/object_helpers.h"
#include "src/tpu/api.h"
#include "test/testenv/fake_compute.h"

namespace hyperslice::tpu::internal {
namespace {

namespace json = boost::json;
using std::chrono::seconds;
using ::testing::HasSubstr;
using Next = Step::Next;
using jsonfield::StringValue;

constexpr char kProject[] = "p";
constexpr char kRegion[] = "us-east5";
constexpr char kZone[] = "us-east5-a";
constexpr char kPolicy[] = "g-policy";

json::object Meta(int64_t generation) {
  return json::object{{"name", "g"},
                      {"namespace", "ns"},
                      {"uid", "child-uid"},
                      {"generation", generation},
                      {"ownerReferences", json::array{json::object{{"apiVersion", kApiVersion},
                                                                   {"kind", "TPUNodeGroup"},
                                                                   {"name", "g"},
                                                                   {"uid", "group-uid"},
                                                                   {"controller", true}}}}};
}

json::object PolicySpec() {
  return json::object{{"project", kProject},
                      {"region", kRegion},
                      {"name", kPolicy},
                      {"workloadPolicy", json::object{{"type", "HIGH_THROUGHPUT"},
                                                      {"acceleratorTopology", "2x2x2"}}}};
}

json::object MigSpec(int64_t target) {
  return json::object{{"project", kProject},
                      {"zone", kZone},
                      {"name", "g-mig"},
                      {"baseInstanceName", "g"},
                      {"instanceTemplate", "global/instanceTemplates/g"},
                      {"targetSize", target}};
}

std::string ReadyReason(const ChildCtx& ctx) {
  auto c = kube::FindCondition(kube::Object{{"status", ctx.status}}, kCondReady);
  return c ? c->reason : "";
}

class ChildPhasesTest : public ::testing::Test {
 protected:
  ChildPhasesTest()
      : compute_(&clock_),
        schedule_({.clock = &clock_, .random = [] { return 0.5; }}),
        policy_kind_(NewResourcePolicyKind()),
        mig_kind_(NewManagedInstanceGroupKind()) {}

  ChildPhases Phases(const GceChildKind& kind) {
    return ChildPhases({.compute = &compute_,
                        .kind = &kind,
                        .schedule = &schedule_,
                        .cluster_id = "cluster-1",
                        .operation_wait = seconds(3),
                        .record = [this](ChildCtx& ctx) {
                          records_.push_back(ctx.status);
                          ctx.written = ctx.status;
                          return OkStatus();
                        }});
  }
  ChildCtx Ctx(json::object spec, int64_t generation = 1) {
    ChildCtx ctx;
    ctx.key = "ns/g";
    ctx.ns = "ns";
    ctx.name = "g";
    ctx.cr = json::object{{"metadata", Meta(generation)}, {"spec", spec}};
    ctx.spec = std::move(spec);
    ctx.gce_name = StringValue(ctx.spec, "name");
    return ctx;
  }
  // A policy in GCE carrying `description` (an owner marker, or none when made by hand).
  void PutPolicy(const std::string& description) {
    json::object p = gce::HighThroughputWorkloadPolicy(kPolicy, "2x2x2", description);
    compute_.Put("resourcePolicies", kProject, kRegion, std::move(p));
  }
  std::string StartedOperationLink() {
    auto op = compute_.InsertInstanceTemplate(kProject, json::object{{"name", "other"}});
    EXPECT_TRUE(op.ok());
    return op.ok() ? op->self_link : "";
  }

  FakeClock clock_;
  testenv::FakeCompute compute_;
  RequeueSchedule schedule_;
  std::unique_ptr<GceChildKind> policy_kind_, mig_kind_;
  std::vector<json::object> records_;  // status at each operation record
};

// --- Admit ---------------------------------------------------------------------------------------

TEST_F(ChildPhasesTest, AdmitStopsAnInvalidSpecWithoutCallingGce) {
  json::object spec = PolicySpec();
  spec.erase("region");
  ChildCtx ctx = Ctx(spec);
  Step s = Phases(*policy_kind_).Admit(ctx);
  EXPECT_EQ(s.next, Next::kWaitForChange);
  EXPECT_EQ(ReadyReason(ctx), "InvalidSpec");
  EXPECT_EQ(ctx.status.at("observedGeneration").as_int64(), 1);
  EXPECT_EQ(compute_.Calls(), 0u);
}

TEST_F(ChildPhasesTest, AdmitTellsANewGenerationFromARepeat) {
  ChildCtx same = Ctx(PolicySpec(), 2);
  same.status["observedGeneration"] = 2;
  EXPECT_FALSE(Phases(*policy_kind_).Admit(same).done());
  EXPECT_FALSE(same.spec_changed);
  ChildCtx changed = Ctx(PolicySpec(), 3);
  changed.status["observedGeneration"] = 2;
  Phases(*policy_kind_).Admit(changed);
  EXPECT_TRUE(changed.spec_changed);
}

// --- SettledFor ----------------------------------------------------------------------------------

TEST_F(ChildPhasesTest, ASettledChildSleepsUntilItsDriftCheck) {
  ChildCtx ctx = Ctx(PolicySpec());
  ctx.status["selfLink"] = "https://example/resourcePolicies/g-policy";
  ctx.cr["status"] = json::object{
      {"conditions", json::array{json::object{
                         {"type", kCondReady}, {"status", "True"}, {"observedGeneration", 1}}}}};
  auto phases = Phases(*policy_kind_);
  EXPECT_FALSE(phases.SettledFor(ctx)) << "no drift check scheduled yet";
  schedule_.DriftCheck(ctx.key);
  clock_.Advance(std::chrono::minutes(1));
  ASSERT_TRUE(phases.SettledFor(ctx));
  EXPECT_EQ(*phases.SettledFor(ctx), std::chrono::minutes(9));
  ctx.spec_changed = true;
  EXPECT_FALSE(phases.SettledFor(ctx)) << "a spec change is acted on at once";
}

// --- ResumeOperation -----------------------------------------------------------------------------

TEST_F(ChildPhasesTest, ResumeOperationWaitsThenClearsTheRecord) {
  ChildCtx ctx = Ctx(PolicySpec());
  ctx.status["operation"] = StartedOperationLink();
  auto phases = Phases(*policy_kind_);
  EXPECT_EQ(phases.ResumeOperation(ctx).next, Next::kBackoff) << "not DONE within the wait";
  EXPECT_TRUE(ctx.status.contains("operation"));
  compute_.CompleteOperations();
  EXPECT_FALSE(phases.ResumeOperation(ctx).done());
  EXPECT_FALSE(ctx.status.contains("operation"));
  EXPECT_TRUE(ctx.ours) << "an operation before any selfLink was our insert";
  EXPECT_EQ(compute_.Calls("globalOperations.wait"), 2u);
  EXPECT_TRUE(records_.empty());
}

TEST_F(ChildPhasesTest, ResumeOperationReportsAFailedOperation) {
  compute_.FailNextOperation("instanceTemplates.insert",
                             Error::Make(Error::Code::kUnavailable, "quota", "QUOTA_EXCEEDED"));
  ChildCtx ctx = Ctx(PolicySpec());
  ctx.status["operation"] = StartedOperationLink();
  compute_.CompleteOperations();
  EXPECT_EQ(Phases(*policy_kind_).ResumeOperation(ctx).next, Next::kFailed);
  EXPECT_EQ(ReadyReason(ctx), "QUOTA_EXCEEDED");
  EXPECT_FALSE(ctx.status.contains("operation"));
}

TEST_F(ChildPhasesTest, ResumeOperationForgetsAnOperationGceNoLongerKnows) {
  ChildCtx ctx = Ctx(PolicySpec());
  ctx.status["operation"] =
      "https://compute.googleapis.com/compute/v1/projects/p/global/operations/gone";
  EXPECT_FALSE(Phases(*policy_kind_).ResumeOperation(ctx).done());
  EXPECT_FALSE(ctx.status.contains("operation"));
}

// --- RetryGate -----------------------------------------------------------------------------------

TEST_F(ChildPhasesTest, RetryGateHoldsGceCallsUntilTheFailureBackoffPassed) {
  ChildCtx ctx = Ctx(PolicySpec());
  auto phases = Phases(*policy_kind_);
  EXPECT_FALSE(phases.RetryGate(ctx).done());
  schedule_.Failed(ctx.key);
  Step s = phases.RetryGate(ctx);
  EXPECT_EQ(s.next, Next::kRequeueAfter);
  EXPECT_EQ(s.after, seconds(2));
  clock_.Advance(seconds(2));
  EXPECT_FALSE(phases.RetryGate(ctx).done());
}

// --- Provision -----------------------------------------------------------------------------------

TEST_F(ChildPhasesTest, ProvisionRecordsTheInsertBeforeWaitingForIt) {
  ChildCtx ctx = Ctx(PolicySpec());
  Step s = *Phases(*policy_kind_).Provision(ctx);
  EXPECT_EQ(s.next, Next::kBackoff);
  ASSERT_EQ(records_.size(), 1u);
  EXPECT_THAT(StringValue(records_[0], "operation"), HasSubstr("/regions/us-east5/operations/"));
  EXPECT_EQ(ReadyReason(ctx), "Creating");
  EXPECT_EQ(compute_.Calls("resourcePolicies.get"), 1u);
  EXPECT_EQ(compute_.Calls("resourcePolicies.insert"), 1u);
  EXPECT_EQ(compute_.Calls("regionOperations.wait"), 1u);
  auto made = compute_.InsertResourcePolicy(kProject, kRegion, PolicySpec());
  EXPECT_EQ(made.error().code, Error::Code::kAlreadyExists) << "the insert is in flight";
}

TEST_F(ChildPhasesTest, ProvisionReadsWhatItCreatedMarkedWithTheOwner) {
  compute_.SetOperationDuration(seconds(1));  // done within the bounded wait
  ChildCtx ctx = Ctx(PolicySpec());
  Step s = *Phases(*policy_kind_).Provision(ctx);
  EXPECT_FALSE(s.done());
  ASSERT_TRUE(ctx.resource);
  EXPECT_TRUE(ctx.ours);
  EXPECT_FALSE(ctx.status.contains("operation"));
  EXPECT_FALSE(ctx.status.at("adopted").as_bool());
  EXPECT_THAT(StringValue(*ctx.resource, "description"),
              HasSubstr("hyperslice owner=ns/g uid=group-uid cluster=cluster-1"));
  EXPECT_EQ(compute_.Calls("resourcePolicies.get"), 2u);
}

TEST_F(ChildPhasesTest, ProvisionAdoptsWhenAnEarlierInsertLanded) {
  PutPolicy("");
  compute_.InjectError("resourcePolicies.get",
                       Error::Make(Error::Code::kNotFound, "not yet", "notFound"));
  ChildCtx ctx = Ctx(PolicySpec());
  EXPECT_FALSE(Phases(*policy_kind_).Provision(ctx)->done());
  ASSERT_TRUE(ctx.resource);
  EXPECT_FALSE(ctx.ours);
  EXPECT_TRUE(records_.empty()) << "no operation to record";
  EXPECT_EQ(compute_.counters().Get("resourcePolicies.insert", "409"), 1u);
}

TEST_F(ChildPhasesTest, ProvisionFailsWithGcesReason) {
  compute_.FailNextOperation(
      "resourcePolicies.insert",
      Error::Make(Error::Code::kUnavailable, "no", "ZONE_RESOURCE_POOL_EXHAUSTED"));
  compute_.SetOperationDuration(seconds(0));
  ChildCtx ctx = Ctx(PolicySpec());
  EXPECT_EQ(Phases(*policy_kind_).Provision(ctx)->next, Next::kFailed);
  EXPECT_EQ(ReadyReason(ctx), "ZONE_RESOURCE_POOL_EXHAUSTED");
  EXPECT_FALSE(ctx.status.contains("operation"));

  compute_.InjectError("resourcePolicies.get",
                       Error::Make(Error::Code::kForbidden, "denied", "forbidden"));
  ChildCtx read = Ctx(PolicySpec());
  EXPECT_EQ(Phases(*policy_kind_).Provision(read)->next, Next::kFailed);
  EXPECT_EQ(ReadyReason(read), "forbidden");
}

// --- CheckOwner ----------------------------------------------------------------------------------

TEST_F(ChildPhasesTest, CheckOwnerLeavesAnotherClustersResourceAlone) {
  PutPolicy("hyperslice owner=ns/g uid=group-uid cluster=cluster-2");
  ChildCtx ctx = Ctx(PolicySpec());
  ctx.resource = compute_.Find("resourcePolicies", kProject, kRegion, kPolicy);
  EXPECT_EQ(Phases(*policy_kind_).CheckOwner(ctx).next, Next::kDriftCheck);
  EXPECT_EQ(ReadyReason(ctx), "NameConflict");
  EXPECT_FALSE(ctx.status.contains("selfLink"));
}

TEST_F(ChildPhasesTest, CheckOwnerAdoptsAResourceMadeByHand) {
  PutPolicy("made by hand");
  ChildCtx ctx = Ctx(PolicySpec());
  ctx.resource = compute_.Find("resourcePolicies", kProject, kRegion, kPolicy);
  EXPECT_FALSE(Phases(*policy_kind_).CheckOwner(ctx).done());
  EXPECT_TRUE(ctx.status.at("adopted").as_bool());
  EXPECT_THAT(StringValue(ctx.status, "selfLink"), HasSubstr("/resourcePolicies/g-policy"));
}

// --- Compare -------------------------------------------------------------------------------------

TEST_F(ChildPhasesTest, CompareReportsDriftAndReadiness) {
  auto phases = Phases(*policy_kind_);
  ChildCtx ctx = Ctx(PolicySpec());
  ctx.status["adopted"] = false;
  ctx.resource = gce::HighThroughputWorkloadPolicy(kPolicy, "2x2x2");
  Step ready = *phases.Compare(ctx);
  EXPECT_EQ(ready.next, Next::kDriftCheck);
  EXPECT_EQ(ReadyReason(ctx), "Created");
  EXPECT_FALSE(ctx.status.at("driftDetected").as_bool());

  ctx.resource = gce::HighThroughputWorkloadPolicy(kPolicy, "4x4x4");
  EXPECT_EQ(phases.Compare(ctx)->next, Next::kDriftCheck);
  EXPECT_EQ(ReadyReason(ctx), "Drifted");
  EXPECT_TRUE(ctx.status.at("driftDetected").as_bool());
  EXPECT_EQ(compute_.Calls(), 0u) << "a policy is compared, never corrected";
}

TEST_F(ChildPhasesTest, CompareResizesAMigAndRecordsTheOperation) {
  compute_.Put("instanceGroupManagers", kProject, kZone, MigSpec(1));
  auto phases = Phases(*mig_kind_);
  ChildCtx ctx = Ctx(MigSpec(2));
  ctx.resource = compute_.Find("instanceGroupManagers", kProject, kZone, "g-mig");
  EXPECT_EQ(phases.Compare(ctx)->next, Next::kBackoff);
  ASSERT_EQ(records_.size(), 1u);
  EXPECT_TRUE(records_[0].contains("operation"));
  EXPECT_EQ(ReadyReason(ctx), "Drifted") << "changed behind our back";
  EXPECT_EQ(compute_.Calls("instanceGroupManagers.resize"), 1u);

  ChildCtx asked = Ctx(MigSpec(2));
  asked.spec_changed = true;
  asked.resource = ctx.resource;
  EXPECT_EQ(phases.Compare(asked)->next, Next::kBackoff);
  EXPECT_EQ(ReadyReason(asked), "Updating") << "the user's own change is no drift";
}

TEST_F(ChildPhasesTest, CompareWaitsForTheMigsInstances) {
  compute_.Put("instanceGroupManagers", kProject, kZone, MigSpec(2));
  compute_.SetManagedInstances(
      kProject, kZone, "g-mig",
      {json::object{{"name", "g-a"}, {"instanceStatus", "RUNNING"}, {"currentAction", "NONE"}},
       json::object{
           {"name", "g-b"}, {"instanceStatus", "PROVISIONING"}, {"currentAction", "CREATING"}}});
  ChildCtx ctx = Ctx(MigSpec(2));
  ctx.resource = compute_.Find("instanceGroupManagers", kProject, kZone, "g-mig");
  EXPECT_EQ(Phases(*mig_kind_).Compare(ctx)->next, Next::kBackoff);
  EXPECT_EQ(ReadyReason(ctx), "InstancesNotRunning");
  EXPECT_EQ(ctx.status.at("instances").as_array().size(), 2u);
}

// --- Teardown ------------------------------------------------------------------------------------

TEST_F(ChildPhasesTest, TeardownDeletesWaitsAndLetsGoOnceGone) {
  PutPolicy("hyperslice owner=ns/g uid=group-uid cluster=cluster-1");
  auto phases = Phases(*policy_kind_);
  ChildCtx ctx = Ctx(PolicySpec());
  EXPECT_EQ(phases.Teardown(ctx)->next, Next::kBackoff) << "delete not DONE within the wait";
  ASSERT_EQ(records_.size(), 1u);
  EXPECT_EQ(ReadyReason(ctx), "Deleting");
  compute_.CompleteOperations();
  EXPECT_EQ(phases.Teardown(ctx)->next, Next::kRemoveFinalizer);
  EXPECT_EQ(compute_.Calls("resourcePolicies.delete"), 1u);
  EXPECT_EQ(compute_.Count("resourcePolicies"), 0u);
}

TEST_F(ChildPhasesTest, TeardownReleasesWhatIsNotOursWithoutDeleting) {
  PutPolicy("hyperslice owner=ns/g uid=someone-else cluster=cluster-1");
  ChildCtx ctx = Ctx(PolicySpec());
  EXPECT_EQ(Phases(*policy_kind_).Teardown(ctx)->next, Next::kRemoveFinalizer);
  EXPECT_EQ(compute_.Calls("resourcePolicies.delete"), 0u);
  EXPECT_EQ(compute_.Count("resourcePolicies"), 1u);

  compute_.Erase("resourcePolicies", kProject, kRegion, kPolicy);
  ChildCtx gone = Ctx(PolicySpec());
  EXPECT_EQ(Phases(*policy_kind_).Teardown(gone)->next, Next::kRemoveFinalizer);
}

TEST_F(ChildPhasesTest, TeardownReportsAFailedDelete) {
  PutPolicy("");
  compute_.SetOperationDuration(seconds(0));
  compute_.FailNextOperation(
      "resourcePolicies.delete",
      Error::Make(Error::Code::kConflict, "in use", "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE"));
  ChildCtx ctx = Ctx(PolicySpec());
  EXPECT_EQ(Phases(*policy_kind_).Teardown(ctx)->next, Next::kFailed);
  EXPECT_EQ(ReadyReason(ctx), "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE");
  EXPECT_FALSE(ctx.status.contains("operation"));
  EXPECT_EQ(compute_.Count("resourcePolicies"), 1u);
}

}  // namespace
}  // namespace hyperslice::tpu::internal
