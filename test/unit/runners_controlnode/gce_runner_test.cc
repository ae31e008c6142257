// The instance a spec.gce Runner gets: its name, labels and instances.insert body, and the
// spec.gce fields ParseRunner reads. (Creation against sim/gce: test/e2e/runners, gce_runners.)
#include "src/runners/controlnode/gce_runner.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/gce/compute.h"

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

}  // namespace
}  // namespace hyperslice::runners::controlnode
