// The instance a spec.gce Runner gets: its name, labels and instances.insert body, and the
// spec.gce fields ParseRunner reads. (Creation against sim/gce: test/e2e/runners, gce_runners.)
#include "src/runners/controlnode/gce_runner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <regex>
#include <string>

#include <boost/json.hpp>

#include "src/base/fake_clock.h"
#include "src/base/json.h"
#include "src/gce/compute.h"
#include "test/testenv/fake_compute.h"

namespace hyperslice::runners::controlnode {
namespace {

namespace json = boost::json;

bool GceName(const std::string& s) {
  static const std::regex kRule("[a-z]([-a-z0-9]{0,61}[a-z0-9])?");
  return std::regex_match(s, kRule);
}

TEST(GceInstanceName, IsDeterministicAndFollowsGcesRule) {
  EXPECT_EQ(GceInstanceName("runner-eu"), "hs-runner-runner-eu");
  EXPECT_EQ(GceInstanceName("tpu.v4.host-0"), "hs-runner-tpu-v4-host-0");
  const std::string long_a(80, 'a');
  const std::string long_b = std::string(79, 'a') + "b";
  const std::string a = GceInstanceName(long_a), b = GceInstanceName(long_b);
  EXPECT_EQ(a.size(), 63u);
  EXPECT_EQ(a, GceInstanceName(long_a)) << "same Runner, same instance";
  EXPECT_NE(a, b) << "names that share their first 54 characters stay distinct";
  for (const auto& n : {GceInstanceName("x"), GceInstanceName("a.b.c"), a, b,
                        GceInstanceName(std::string(253, '9'))}) {
    EXPECT_TRUE(GceName(n)) << n;
  }
}

TEST(GceLabelValue, KeepsGcesLabelCharacters) {
  EXPECT_EQ(GceLabelValue("runner-eu"), "runner-eu");
  EXPECT_EQ(GceLabelValue("a.b"), "a_b");
  EXPECT_EQ(GceLabelValue("0c9a3b52-7d1e-4f7a-9c1e-2b4c9f0a1d33"),
            "0c9a3b52-7d1e-4f7a-9c1e-2b4c9f0a1d33");
  EXPECT_EQ(GceLabelValue(std::string(100, 'x')).size(), 63u);
}

GceBoot Boot() {
  return GceBoot{.runner_name = "gpu.eu",
                 .runner_uid = "uid-1",
                 .link_endpoint = "10.0.0.5:10251",
                 .ca_bundle_pem = "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n",
                 .join_token = std::string(64, 'f')};
}

TEST(GceInstanceBody, CarriesMachineAcceleratorsMetadataAndLabels) {
  RunnerSpec::Gce spec{.project = "p",
                       .zone = "europe-west4-a",
                       .machine_type = "a2-highgpu-1g",
                       .accelerator_type = "nvidia-tesla-a100",
                       .accelerator_count = 1};
  GceProvisionerOptions o;
  o.startup_script = "#!/bin/sh\nhyperslice runner-agent --gce-metadata\n";
  json::object b = GceInstanceBody(spec, Boot(), o);
  EXPECT_EQ(jsonfield::StringField(b, "name"), "hs-runner-gpu-eu");
  EXPECT_EQ(jsonfield::StringField(b, "machineType"),
            "zones/europe-west4-a/machineTypes/a2-highgpu-1g");
  const auto* acc = jsonfield::ArrayField(b, "guestAccelerators");
  ASSERT_NE(acc, nullptr);
  ASSERT_EQ(acc->size(), 1u);
  EXPECT_EQ(jsonfield::StringField((*acc)[0].as_object(), "acceleratorType"),
            "zones/europe-west4-a/acceleratorTypes/nvidia-tesla-a100");
  EXPECT_EQ(jsonfield::IntField((*acc)[0].as_object(), "acceleratorCount"), 1);
  // GCE refuses live migration for accelerator VMs.
  EXPECT_EQ(jsonfield::StringField(*jsonfield::ObjectField(b, "scheduling"), "onHostMaintenance"),
            "TERMINATE");

  auto items = gce::MetadataItemsOf(*jsonfield::ObjectField(b, "metadata"));
  EXPECT_EQ(items[kMetadataRunnerName], "gpu.eu");
  EXPECT_EQ(items[kMetadataLinkEndpoint], "10.0.0.5:10251");
  EXPECT_EQ(items[kMetadataRunnersCa], Boot().ca_bundle_pem);
  EXPECT_EQ(items[kMetadataJoinToken], std::string(64, 'f'));
  EXPECT_EQ(items["startup-script"], o.startup_script);
  EXPECT_EQ(items.size(), 5u);

  const auto* labels = jsonfield::ObjectField(b, "labels");
  ASSERT_NE(labels, nullptr);
  EXPECT_EQ(jsonfield::StringField(*labels, kLabelRunner), "gpu_eu");
  EXPECT_EQ(jsonfield::StringField(*labels, kLabelRunnerUid), "uid-1");

  // One auto-deleted boot disk from the image; diskSizeGb is an int64, a string in GCE's JSON.
  const auto* disks = jsonfield::ArrayField(b, "disks");
  ASSERT_TRUE(disks != nullptr && disks->size() == 1);
  const auto& d = (*disks)[0].as_object();
  EXPECT_EQ(jsonfield::BoolField(d, "boot"), true);
  EXPECT_EQ(jsonfield::BoolField(d, "autoDelete"), true);
  const auto* init = jsonfield::ObjectField(d, "initializeParams");
  ASSERT_NE(init, nullptr);
  EXPECT_EQ(jsonfield::StringField(*init, "sourceImage"), o.boot_image);
  EXPECT_EQ(jsonfield::StringField(*init, "diskSizeGb"), "20");
  // A private address only: no accessConfigs (no external IP).
  const auto* nics = jsonfield::ArrayField(b, "networkInterfaces");
  ASSERT_TRUE(nics != nullptr && nics->size() == 1);
  EXPECT_EQ(jsonfield::StringField((*nics)[0].as_object(), "network"), "global/networks/default");
  EXPECT_FALSE((*nics)[0].as_object().contains("accessConfigs"));
}

TEST(GceInstanceBody, WithoutAcceleratorsMigratesAndHasNoStartupScriptUnlessGiven) {
  RunnerSpec::Gce spec{.project = "p", .zone = "us-central2-b", .machine_type = "ct4p-hightpu-4t"};
  json::object b = GceInstanceBody(spec, Boot(), GceProvisionerOptions{});
  EXPECT_FALSE(b.contains("guestAccelerators"));
  EXPECT_EQ(jsonfield::StringField(*jsonfield::ObjectField(b, "scheduling"), "onHostMaintenance"),
            "MIGRATE");
  auto items = gce::MetadataItemsOf(*jsonfield::ObjectField(b, "metadata"));
  EXPECT_EQ(items.count("startup-script"), 0u);
  EXPECT_EQ(items.size(), 4u);
}

json::object RunnerWithGce(const std::string& gce) {
  return json::parse(R"({"metadata":{"name":"r"},"spec":{"controlNode":"cn","gce":)" + gce + "}}")
      .as_object();
}

TEST(ParseRunner, ReadsSpecGce) {
  auto r = ParseRunner(
      RunnerWithGce(R"({"project":"p","zone":"europe-west4-a","machineType":"a2-highgpu-1g",)"
                    R"("acceleratorType":"nvidia-tesla-a100","acceleratorCount":2})"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->placement, RunnerSpec::Placement::kGce);
  EXPECT_EQ(r->gce.project, "p");
  EXPECT_EQ(r->gce.zone, "europe-west4-a");
  EXPECT_EQ(r->gce.machine_type, "a2-highgpu-1g");
  EXPECT_EQ(r->gce.accelerator_type, "nvidia-tesla-a100");
  EXPECT_EQ(r->gce.accelerator_count, 2);
  EXPECT_EQ(r->region, "europe-west4");
}

TEST(ParseRunner, RefusesAZoneOutsideItsRegion) {
  auto r = ParseRunner(RunnerWithGce(
      R"({"project":"p","region":"us-central2","zone":"europe-west4-a","machineType":"m"})"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("not in spec.gce.region"), std::string::npos)
      << r.error().message;
  EXPECT_FALSE(ParseRunner(RunnerWithGce(R"({"project":"p","zone":"z"})")).ok())
      << "machineType is required";
}

// --- the lifecycle, on the in-memory Compute (test/testenv/fake_compute.h) --------------------

// status.instance as the API would hold it after the provisioner's merge patches.
struct FakeStore {
  json::object instance;
  int records = 0;
  std::optional<std::string> token = std::string(64, 'a');
  GceRunnerProvisioner::Store Make() {
    GceRunnerProvisioner::Store s;
    s.record = [this](const std::string&, const json::object& patch) -> Status {
      ++records;
      for (const auto& [k, v] : patch) {
        if (v.is_null()) {
          instance.erase(k);
        } else {
          instance[k] = v;
        }
      }
      return OkStatus();
    };
    s.join_token = [this](const std::string&) -> Result<std::optional<std::string>> {
      return token;
    };
    return s;
  }
  json::object RunnerStatus() const { return json::object{{"instance", instance}}; }
};

class Lifecycle : public ::testing::Test {
 protected:
  Lifecycle() {
    runner_ = json::parse(R"({"metadata":{"name":"tpu-us","uid":"uid-1"},"spec":{"controlNode":)"
                          R"("cn","gce":{"project":"p","zone":"us-central2-b",)"
                          R"("machineType":"ct4p-hightpu-4t"}}})")
                  .as_object();
    spec_ = *ParseRunner(runner_);
    options_.compute = std::shared_ptr<gce::Compute>(&compute_, [](gce::Compute*) {});
    options_.link_endpoint = "10.0.0.5:10251";
    options_.retry_initial = std::chrono::milliseconds(50);
    options_.retry_max = std::chrono::milliseconds(100);
    options_.clock = &clock_;
  }
  GceRunnerProvisioner Provisioner() { return GceRunnerProvisioner(options_, store_.Make()); }
  ProvisionOutcome Reconcile(GceRunnerProvisioner& p) {
    json::object status = store_.RunnerStatus();
    auto r = p.Reconcile(runner_, spec_, status);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : ProvisionOutcome{};
  }
  bool Finalize(GceRunnerProvisioner& p) {
    json::object status = store_.RunnerStatus();
    auto r = p.Finalize(runner_, status);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() && *r;
  }
  // The instance as the fake holds it, made RUNNING (the fake has no boot).
  void Boot() {
    auto got = compute_.Find("instances", "p", "us-central2-b", "hs-runner-tpu-us");
    ASSERT_TRUE(got.has_value());
    (*got)["status"] = "RUNNING";
    compute_.Put("instances", "p", "us-central2-b", *got);
  }

  FakeClock clock_;  // the backoff's time: moves only when a test advances it
  testenv::FakeCompute compute_;
  FakeStore store_;
  GceProvisionerOptions options_;
  json::object runner_;
  RunnerSpec spec_;
};

TEST_F(Lifecycle, TheOperationIsRecordedBeforeItIsWaitedForAndAResumedOneIsNotInsertedAgain) {
  auto first = Provisioner();
  ProvisionOutcome o = Reconcile(first);
  EXPECT_FALSE(o.ready);
  EXPECT_EQ(o.reason, "InstanceOperationPending");
  EXPECT_EQ(compute_.Calls("instances.insert"), 1u);
  const std::string op(jsonfield::StringField(store_.instance, "operation"));
  EXPECT_NE(op.find("/zones/us-central2-b/operations/"), std::string::npos) << op;

  // A restarted operator: a new provisioner reading the recorded status.
  auto second = Provisioner();
  EXPECT_EQ(Reconcile(second).reason, "InstanceOperationPending");
  EXPECT_EQ(compute_.Calls("instances.insert"), 1u) << "resumed, not inserted again";

  EXPECT_EQ(compute_.CompleteOperations(), 1);
  Boot();
  o = Reconcile(second);
  EXPECT_TRUE(o.ready) << o.reason << ": " << o.message;
  EXPECT_EQ(o.reason, "InstanceRunning");
  EXPECT_FALSE(store_.instance.contains("operation")) << "a finished operation leaves status";
  EXPECT_EQ(compute_.Calls("instances.insert"), 1u);
  // Observing a running instance makes no GCE mutation and no wait.
  const uint64_t waits = compute_.Calls("zoneOperations.wait");
  EXPECT_TRUE(Reconcile(second).ready);
  EXPECT_EQ(compute_.Calls("zoneOperations.wait"), waits);
}

TEST_F(Lifecycle, AFailedInsertIsRecordedAndRetriedOnlyAfterItsBackoff) {
  auto p = Provisioner();
  compute_.FailNextOperation(
      "instances.insert",
      Error::Make(Error::Code::kUnavailable, "The zone does not have enough resources",
                  "ZONE_RESOURCE_POOL_EXHAUSTED"));
  EXPECT_EQ(Reconcile(p).reason, "InstanceOperationPending");
  compute_.CompleteOperations();
  ProvisionOutcome o = Reconcile(p);
  EXPECT_FALSE(o.ready);
  EXPECT_TRUE(o.warning);
  EXPECT_EQ(o.reason, "ZONE_RESOURCE_POOL_EXHAUSTED");
  ASSERT_TRUE(o.requeue_after.has_value());
  const auto* last = jsonfield::ObjectField(store_.instance, "lastError");
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(jsonfield::IntField(*last, "failures"), 1);
  EXPECT_EQ(compute_.Count("instances"), 0u) << "a failed insert leaves nothing";

  EXPECT_EQ(*o.requeue_after, std::chrono::milliseconds(50)) << "the first backoff";

  // Woken again before the backoff ends (a status write, an agent event): no new insert, no new
  // warning, a requeue for the rest of it.
  clock_.Advance(std::chrono::milliseconds(49));
  o = Reconcile(p);
  EXPECT_EQ(o.reason, "ZONE_RESOURCE_POOL_EXHAUSTED");
  EXPECT_FALSE(o.warning);
  ASSERT_TRUE(o.requeue_after.has_value());
  EXPECT_LE(*o.requeue_after, std::chrono::milliseconds(2));
  EXPECT_EQ(compute_.Calls("instances.insert"), 1u);

  clock_.Advance(std::chrono::milliseconds(1));
  EXPECT_EQ(Reconcile(p).reason, "InstanceOperationPending");
  EXPECT_EQ(compute_.Calls("instances.insert"), 2u) << "retried after the backoff";
  compute_.CompleteOperations();
  Boot();
  EXPECT_TRUE(Reconcile(p).ready);
  EXPECT_FALSE(store_.instance.contains("lastError"));
}

TEST_F(Lifecycle, TheUsedJoinTokenLeavesTheMetadataAndOtherItemsStay) {
  auto p = Provisioner();
  Reconcile(p);
  compute_.CompleteOperations();
  Boot();
  EXPECT_TRUE(Reconcile(p).ready);
  EXPECT_EQ(compute_.Calls("instances.setMetadata"), 0u) << "not before the token is used";
  auto items = [&] {
    auto got = compute_.Find("instances", "p", "us-central2-b", "hs-runner-tpu-us");
    return gce::MetadataItemsOf(*jsonfield::ObjectField(*got, "metadata"));
  };
  ASSERT_TRUE(items().contains(kMetadataJoinToken));

  // The link consumed it, and someone else added an item since the instance was created: the
  // removal is written against the current fingerprint and keeps that item.
  runner_["metadata"].as_object()["annotations"] =
      json::object{{kJoinTokenConsumedAnnotation, "2026-11-26T00:00:00Z"}};
  ASSERT_TRUE(compute_
                  .UpdateInstanceMetadata("p", "us-central2-b", "hs-runner-tpu-us",
                                          [](gce::MetadataItems& m) {
                                            m["ssh-keys"] = "admin:key";
                                            return true;
                                          })
                  .ok());
  compute_.CompleteOperations();
  ProvisionOutcome o = Reconcile(p);
  EXPECT_TRUE(o.ready) << "the removal never makes a running instance not ready: " << o.reason;
  compute_.CompleteOperations();
  Reconcile(p);
  auto after = items();
  EXPECT_FALSE(after.contains(kMetadataJoinToken));
  EXPECT_EQ(after["ssh-keys"], "admin:key");
  EXPECT_EQ(after[kMetadataRunnerName], "tpu-us");
  EXPECT_FALSE(store_.instance.contains("operation"));
  // Gone: no further setMetadata however often it is reconciled.
  const uint64_t sets = compute_.Calls("instances.setMetadata");
  EXPECT_TRUE(Reconcile(p).ready);
  EXPECT_EQ(compute_.Calls("instances.setMetadata"), sets);
  EXPECT_EQ(sets, 2u) << "the test's own write and the removal";
}

TEST(ParseRunner, ReadsSpecMarketplace) {
  auto r = ParseRunner(json::parse(R"({"metadata":{"name":"r"},"spec":{"controlNode":"cn",)"
                                   R"("marketplace":{"gpuNodeClass":"c","gpuType":"RTX4090",)"
                                   R"("gpuCount":2,"regions":["eu-ro"],"maxHourlyPrice":"1.50",)"
                                   R"("spot":true}}})")
                           .as_object());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->placement, RunnerSpec::Placement::kMarketplace);
  EXPECT_EQ(r->market.gpu_node_class, "c");
  EXPECT_EQ(r->market.gpu_type, "RTX4090");
  EXPECT_EQ(r->market.gpu_count, 2);
  EXPECT_EQ(r->market.regions, std::vector<std::string>{"eu-ro"});
  EXPECT_EQ(r->market.max_hourly_price, "1.50");
  EXPECT_TRUE(r->market.spot);
  EXPECT_FALSE(ParseRunner(json::parse(R"({"metadata":{"name":"r"},"spec":{"controlNode":"cn",)"
                                       R"("marketplace":{"claimName":"x"}}})")
                               .as_object())
                   .ok())
      << "gpuNodeClass is required";
}

TEST_F(Lifecycle, AnotherRunnersInstanceIsNeitherAdoptedNorDeleted) {
  compute_.Put("instances", "p", "us-central2-b",
               json::object{{"name", "hs-runner-tpu-us"},
                            {"status", "RUNNING"},
                            {"labels", json::object{{kLabelRunnerUid, "someone-else"}}}});
  auto p = Provisioner();
  ProvisionOutcome o = Reconcile(p);
  EXPECT_FALSE(o.ready);
  EXPECT_EQ(o.reason, "InstanceNameTaken");
  EXPECT_NE(o.message.find("someone-else"), std::string::npos) << o.message;
  EXPECT_TRUE(Finalize(p)) << "the Runner may go; the instance is not its own";
  EXPECT_EQ(compute_.Calls("instances.delete"), 0u);
  EXPECT_EQ(compute_.Count("instances"), 1u);
}

TEST_F(Lifecycle, FinalizeDeletesTheInstanceAndWaitsForIt) {
  auto p = Provisioner();
  Reconcile(p);
  compute_.CompleteOperations();
  Boot();
  ASSERT_TRUE(Reconcile(p).ready);
  EXPECT_FALSE(Finalize(p)) << "the delete is running";
  EXPECT_EQ(compute_.Calls("instances.delete"), 1u);
  EXPECT_TRUE(store_.instance.contains("operation"));
  EXPECT_FALSE(Finalize(p));
  EXPECT_EQ(compute_.Calls("instances.delete"), 1u) << "the recorded delete is waited for";
  compute_.CompleteOperations();
  EXPECT_TRUE(Finalize(p));
  EXPECT_EQ(compute_.Count("instances"), 0u);
}

TEST_F(Lifecycle, WithoutAJoinTokenNothingIsCreated) {
  store_.token = std::nullopt;
  auto p = Provisioner();
  EXPECT_EQ(Reconcile(p).reason, "JoinTokenUnavailable");
  EXPECT_EQ(compute_.Calls("instances.insert"), 0u);
}

}  // namespace
}  // namespace hyperslice::runners::controlnode
