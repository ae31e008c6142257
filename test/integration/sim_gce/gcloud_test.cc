// The real gcloud CLI (on PATH) against the simulator: CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE
// points it at the API, an access-token file authenticates it (a static token the simulator was
// started with), --project names the project, and a throwaway CLOUDSDK_CONFIG keeps it away from
// the machine's own configuration. Update checks, usage reporting, prompts and the GCE metadata
// probe are off. Every command must exit 0 and show the simulator's resources.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "test/integration/sim_gce/sim_fixture.h"
#include "test/testenv/shell.h"

namespace hyperslice::sim::gce::testing {
namespace {

namespace fs = std::filesystem;

using GcloudRun = testenv::ShellRun;

class GcloudTest : public SimTest {
 protected:
  void SetUp() override {
    SimTest::SetUp();
    if (!sim_) return;
    char tmpl[] = "/tmp/hs-gcloud-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ + "/token") << kToken << "\n";
    fs::create_directories(dir_ + "/config");
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
    SimTest::TearDown();
  }

  // Runs `gcloud <args>` with the simulator's environment; stdout and stderr are captured.
  GcloudRun Gcloud(const std::string& args) {
    std::string env =
        "env -u GOOGLE_APPLICATION_CREDENTIALS -u CLOUDSDK_AUTH_ACCESS_TOKEN "
        "CLOUDSDK_CONFIG='" +
        dir_ + "/config' CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE='" + sim_->api_endpoint() +
        "' CLOUDSDK_AUTH_ACCESS_TOKEN_FILE='" + dir_ +
        "/token' CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK=1 "
        "CLOUDSDK_CORE_DISABLE_PROMPTS=1 CLOUDSDK_CORE_DISABLE_USAGE_REPORTING=true "
        "CLOUDSDK_CORE_CHECK_GCE_METADATA=false CLOUDSDK_SURVEY_DISABLE_PROMPTS=1 "
        "CLOUDSDK_CORE_SHOW_STRUCTURED_LOGS=never ";
    return testenv::ShellApart(env + "gcloud " + args + " --project=" + kProject + " --format=json",
                               dir_);
  }

  json::value Ok(const std::string& args) {
    GcloudRun r = Gcloud(args);
    EXPECT_EQ(r.exit_code, 0) << "gcloud " << args << "\nstderr:\n"
                              << r.err << "\nstdout:\n"
                              << r.out;
    boost::system::error_code ec;
    json::value v = json::parse(r.out, ec);
    EXPECT_FALSE(ec) << "gcloud " << args << " printed no JSON:\n" << r.out << "\n" << r.err;
    return ec ? json::value(json::object{}) : v;
  }

  std::string dir_;
};

// The value at a path of object keys, or null when any part is missing.
json::value At(const json::value& v, std::initializer_list<const char*> path) {
  const json::value* cur = &v;
  for (const char* k : path) {
    if (!cur->is_object() || !cur->as_object().contains(k)) return nullptr;
    cur = &cur->at(k);
  }
  return *cur;
}

bool HasName(const json::value& list, const std::string& name) {
  if (!list.is_array()) return false;
  for (const auto& item : list.as_array()) {
    if (item.is_object() && item.as_object().contains("name") &&
        item.at("name") == json::value(name)) {
      return true;
    }
  }
  return false;
}

TEST_F(GcloudTest, RealGcloudListsAndDescribesSimulatedResources) {
  if (std::system("command -v gcloud >/dev/null 2>&1") != 0) {
    GTEST_FAIL() << "gcloud is not on PATH; this test needs the real CLI";
  }
  // What the operator would have created: a workload policy, a template and a BULK MIG.
  Reply pol = Api("POST", "regions/us-central1/resourcePolicies",
                  json::object{{"name", "wp"},
                               {"workloadPolicy", json::object{{"type", "HIGH_THROUGHPUT"},
                                                               {"acceleratorTopology", "2x2x2"}}}});
  ASSERT_EQ(pol.status, 200) << pol.raw;
  WaitDone(pol.body);
  MakeTemplate("slice-tmpl", "tpu7x-standard-4t");
  json::object mig = MigBody("slice", "slice-tmpl", 2);
  mig["resourcePolicies"] =
      json::object{{"workloadPolicy", "regions/us-central1/resourcePolicies/wp"}};
  Reply ins = Api("POST", Zonal("instanceGroupManagers"), mig);
  ASSERT_EQ(ins.status, 200) << ins.raw;
  json::object mig_op = WaitDone(ins.body);
  ASSERT_TRUE(Eventually([&] {
    auto i = Instances();
    return i.size() == 2 && i[0].at("status") == "RUNNING" && i[1].at("status") == "RUNNING";
  }));
  std::string vm(Instances()[0].at("name").as_string());

  json::value templates = Ok("compute instance-templates list");
  EXPECT_TRUE(HasName(templates, "slice-tmpl")) << json::serialize(templates);
  json::value tmpl = Ok("compute instance-templates describe slice-tmpl");
  EXPECT_EQ(At(tmpl, {"properties", "machineType"}), "tpu7x-standard-4t");

  json::value migs = Ok("compute instance-groups managed list");
  EXPECT_TRUE(HasName(migs, "slice")) << json::serialize(migs);
  json::value described =
      Ok("compute instance-groups managed describe slice --zone=" + std::string(kZone));
  EXPECT_EQ(At(described, {"targetSize"}), 2);
  EXPECT_EQ(At(described, {"targetSizePolicy", "mode"}), "BULK");
  json::value members =
      Ok("compute instance-groups managed list-instances slice --zone=" + std::string(kZone));
  ASSERT_TRUE(members.is_array()) << json::serialize(members);
  EXPECT_EQ(members.as_array().size(), 2u);

  json::value policies = Ok("compute resource-policies list");
  EXPECT_TRUE(HasName(policies, "wp")) << json::serialize(policies);
  json::value policy = Ok("compute resource-policies describe wp --region=us-central1");
  EXPECT_EQ(At(policy, {"workloadPolicy", "acceleratorTopology"}), "2x2x2");

  json::value instances = Ok("compute instances list");
  EXPECT_TRUE(HasName(instances, vm)) << json::serialize(instances);
  json::value inst = Ok("compute instances describe " + vm + " --zone=" + std::string(kZone));
  EXPECT_EQ(At(inst, {"status"}), "RUNNING");

  json::value op = Ok("compute operations describe " + std::string(mig_op.at("name").as_string()) +
                      " --zone=" + std::string(kZone));
  EXPECT_EQ(At(op, {"status"}), "DONE");
  EXPECT_EQ(At(op, {"operationType"}), "insert");

  // gcloud was really talking to the simulator.
  Reply counters = Control("GET", "/control/counters");
  for (const char* method : {"compute.instanceGroupManagers.listManagedInstances",
                             "compute.zoneOperations.get", "compute.instanceTemplates.get"}) {
    json::value n = At(counters.body, {method});
    EXPECT_TRUE(n.is_int64() && n.as_int64() >= 1) << method << ": " << json::serialize(n);
  }
}

// `gcloud compute instances create`, as an admin would make a runner's VM by hand: the insert,
// its operation and the instance as gcloud prints it; GCE's refusals as gcloud reports them.
TEST_F(GcloudTest, RealGcloudCreatesAnInstance) {
  if (std::system("command -v gcloud >/dev/null 2>&1") != 0) {
    GTEST_FAIL() << "gcloud is not on PATH; this test needs the real CLI";
  }
  const std::string create =
      "compute instances create runner-vm --zone=" + std::string(kZone) +
      " --machine-type=n2-standard-4"
      " --image=projects/debian-cloud/global/images/debian-12-bookworm-v20250101"
      " --metadata=hyperslice-runner-name=runner-vm --labels=role=runner --no-address";
  json::value created = Ok(create);
  ASSERT_TRUE(created.is_array() && created.as_array().size() == 1) << json::serialize(created);
  const json::value& vm = created.as_array()[0];
  EXPECT_EQ(At(vm, {"name"}), "runner-vm");
  EXPECT_EQ(At(vm, {"labels", "role"}), "runner");
  std::string ip(At(vm, {"networkInterfaces"}).as_array()[0].at("networkIP").as_string());
  EXPECT_EQ(ip.rfind("10.128.", 0), 0u) << ip;
  json::value described = Ok("compute instances describe runner-vm --zone=" + std::string(kZone));
  EXPECT_EQ(At(described, {"status"}), "RUNNING");

  GcloudRun again = Gcloud(create);
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
  GcloudRun bad =
      Gcloud("compute instances create other-vm --zone=" + std::string(kZone) +
             " --machine-type=n2-imaginary"
             " --image=projects/debian-cloud/global/images/debian-12-bookworm-v20250101");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("Machine type with name 'n2-imaginary' does not exist"), std::string::npos)
      << bad.err;
  Reply counters = Control("GET", "/control/counters");
  EXPECT_EQ(At(counters.body, {"compute.instances.insert"}), 3) << json::serialize(counters.body);
}

// `gcloud compute instances add-metadata` / `remove-metadata`: gcloud reads the instance, sends
// setMetadata with the fingerprint it read and waits for the operation — what the runners'
// provisioner does when it drops a used join token.
TEST_F(GcloudTest, RealGcloudAddsAndRemovesInstanceMetadata) {
  if (std::system("command -v gcloud >/dev/null 2>&1") != 0) {
    GTEST_FAIL() << "gcloud is not on PATH; this test needs the real CLI";
  }
  const std::string zone = " --zone=" + std::string(kZone);
  (void)Ok("compute instances create md-vm" + zone +
           " --machine-type=n2-standard-4"
           " --image=projects/debian-cloud/global/images/debian-12-bookworm-v20250101"
           " --metadata=hyperslice-runner-name=md-vm --no-address");
  auto items = [&] {
    json::value d = Ok("compute instances describe md-vm" + zone);
    std::map<std::string, std::string> out;
    json::value list = At(d, {"metadata", "items"});
    if (!list.is_array()) return out;
    for (const auto& i : list.as_array()) {
      out[std::string(i.at("key").as_string())] = std::string(i.at("value").as_string());
    }
    return out;
  };
  GcloudRun add = Gcloud("compute instances add-metadata md-vm" + zone +
                         " --metadata=hyperslice-join-token=tok-1");
  ASSERT_EQ(add.exit_code, 0) << add.err;
  auto after_add = items();
  EXPECT_EQ(after_add["hyperslice-join-token"], "tok-1");
  EXPECT_EQ(after_add["hyperslice-runner-name"], "md-vm");
  GcloudRun remove =
      Gcloud("compute instances remove-metadata md-vm" + zone + " --keys=hyperslice-join-token");
  ASSERT_EQ(remove.exit_code, 0) << remove.err;
  auto after_remove = items();
  EXPECT_FALSE(after_remove.contains("hyperslice-join-token"));
  EXPECT_EQ(after_remove["hyperslice-runner-name"], "md-vm");
  Reply counters = Control("GET", "/control/counters");
  EXPECT_EQ(At(counters.body, {"compute.instances.setMetadata"}), 2)
      << json::serialize(counters.body);
}

}  // namespace
}  // namespace hyperslice::sim::gce::testing
