// The orphan sweep against the real kube-apiserver (TPUNodeGroup CRD from deploy/crds) and the GCE
// simulator over HTTP. GCE resources are made directly with the compute client, the way a
// controller that died half-way (or a group deleted while the operator was down) leaves them:
// orphans of this cluster, resources of a live group, another cluster's, and hand-made ones.
// Deletion order is proved by the simulator itself: the orphan MIG uses the orphan template and
// policy, and the simulator refuses to delete a template or policy a MIG still uses (the MIG's
// delete only takes effect when its operation is DONE, so waiting is proved too).
#include <algorithm>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>

#include "src/gce/compute.h"
#include "src/kube/client.h"
#include "src/kube/manager.h"
#include "src/kube/metrics.h"
#include "src/kube/yaml.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/orphans.h"
#include "test/integration/gce/sim_fixture.h"
#include "test/testenv/namespaced_test.h"
#include "test/testenv/testenv.h"

namespace hyperslice::tpu::internal {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;
using gce::testing::Control;
using gce::testing::Eventually;

constexpr char kProject[] = "my-gcp-project";
constexpr char kRegion[] = "us-central1";
constexpr char kZoneA[] = "us-central1-a";
constexpr char kZoneB[] = "us-central1-b";
constexpr char kCluster[] = "cluster-a";
constexpr char kOtherCluster[] = "cluster-b";

using kube::YamlToJson;

Status InstallCrd(kube::Client& client) {
  json::object crd =
      YamlToJson(YAML::LoadFile(HS_DEPLOY_DIR "/crds/tpu.google.com_tpunodegroups.yaml"))
          .as_object();
  auto created = client.Create(kube::resources::CustomResourceDefinitions(), "", crd);
  if (!created.ok() && created.error().code != Error::Code::kAlreadyExists) return created.error();
  if (!Eventually([&] { return client.List(TPUNodeGroups(), "default").ok(); }, 60s)) {
    return Error::Make(Error::Code::kTimeout, "TPUNodeGroup CRD not served");
  }
  return OkStatus();
}

std::string Str(const json::object& o, std::string_view k) {
  const auto* v = o.if_contains(k);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

std::string Marker(const std::string& uid, const std::string& cluster) {
  return "TPU slice; hyperslice owner=ns/some-group uid=" + uid + " cluster=" + cluster;
}

json::object OwnerLabels(const std::string& uid, const std::string& cluster) {
  return {{kGceLabelManaged, "true"},
          {kGceLabelCluster, cluster},
          {kGceLabelGroupUid, uid},
          {kGceLabelGroup, "ns-some-group"}};
}

class OrphanSweep : public testenv::NamespacedTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(NamespacedTest::SetUp());
    ASSERT_TRUE(InstallCrd(*client_).ok());

    sim::gce::Options o;
    o.regions = {kRegion};
    o.operation_latency = 150ms;  // deletes are not instant: waiting matters
    auto s = sim::gce::Simulator::Start(o);
    ASSERT_TRUE(s.ok()) << s.error().ToString();
    sim_ = std::move(s).value();
    control_ = std::make_unique<Control>(sim_->control_endpoint());
    gce::ComputeOptions co;
    co.endpoint = sim_->api_endpoint();
    co.tokens = gce::StaticTokenSource(control_->NewToken());
    auto c = gce::Compute::Create(co);
    ASSERT_TRUE(c.ok()) << c.error().ToString();
    compute_ = std::shared_ptr<gce::Compute>(std::move(c).value());
    options_.client = client_;
    options_.compute = compute_;
    options_.cluster_id = kCluster;
  }
  void TearDown() override {
    compute_.reset();
    if (sim_) sim_->Stop();
  }

  // A TPUNodeGroup as a user would apply it (seed 000's shape); returns its uid.
  std::string CreateGroup(const std::string& name, const std::string& zone = kZoneA) {
    json::object group{
        {"apiVersion", kApiVersion},
        {"kind", "TPUNodeGroup"},
        {"metadata", json::object{{"name", name}, {"namespace", ns_}}},
        {"spec",
         json::object{{"project", kProject},
                      {"nodeLocation", zone},
                      {"nodeCount", 2},
                      {"topology", "2x2x2"},
                      {"targetSizePolicyMode", "BULK"},
                      {"instanceConfig", json::object{{"machineType", "tpu7x-standard-4t"},
                                                      {"provisioningModel", "RESERVATION_BOUND"},
                                                      {"reservation", "my-tpu-reservation"}}}}}};
    auto created = client_->Create(TPUNodeGroups(), ns_, group);
    EXPECT_TRUE(created.ok()) << created.error().ToString();
    return created.ok() ? Str(created->at("metadata").as_object(), "uid") : "";
  }

  void Done(const Result<gce::Operation>& op) {
    ASSERT_TRUE(op.ok()) << op.error().ToString();
    auto done = compute_->Wait(op->ref, 30s);
    ASSERT_TRUE(done.ok()) << done.error().ToString();
  }

  std::string MakePolicy(const std::string& name, const std::string& description) {
    auto op = compute_->InsertResourcePolicy(
        kProject, kRegion, gce::HighThroughputWorkloadPolicy(name, "2x2x2", description));
    Done(op);
    return op.ok() ? op->target_link : "";
  }

  std::string MakeTemplate(const std::string& name, const json::object& labels,
                           const std::string& description) {
    json::object body = json::parse(R"json({
      "properties": {
        "machineType": "tpu7x-standard-4t",
        "disks": [{"boot": true, "autoDelete": true, "type": "PERSISTENT",
                   "initializeParams": {
                     "sourceImage": "projects/debian-cloud/global/images/family/debian-12",
                     "diskSizeGb": "100"}}],
        "networkInterfaces": [{"network": "global/networks/default"}],
        "scheduling": {"onHostMaintenance": "TERMINATE"}
      }})json")
                            .as_object();
    body["name"] = name;
    if (!description.empty()) body["description"] = description;
    if (!labels.empty()) body["properties"].as_object()["labels"] = labels;
    auto op = compute_->InsertInstanceTemplate(kProject, body);
    Done(op);
    return op.ok() ? op->target_link : "";
  }

  std::string MakeMig(const std::string& zone, const std::string& name,
                      const std::string& template_link, const std::string& policy_link,
                      const std::string& description) {
    json::object body{{"name", name},
                      {"baseInstanceName", name},
                      {"instanceTemplate", template_link},
                      {"targetSize", 0},
                      {"targetSizePolicy", json::object{{"mode", "BULK"}}}};
    if (!description.empty()) body["description"] = description;
    if (!policy_link.empty()) {
      body["resourcePolicies"] = json::object{{"workloadPolicy", policy_link}};
    }
    auto op = compute_->InsertInstanceGroupManager(kProject, zone, body);
    Done(op);
    return op.ok() ? op->target_link : "";
  }

  std::set<std::string> Names(const Result<std::vector<json::object>>& list) {
    EXPECT_TRUE(list.ok()) << list.error().ToString();
    std::set<std::string> out;
    if (list.ok()) {
      for (const auto& o : *list) out.insert(Str(o, "name"));
    }
    return out;
  }
  std::set<std::string> Migs() {
    std::set<std::string> out = Names(compute_->ListInstanceGroupManagers(kProject, kZoneA, {}));
    out.merge(Names(compute_->ListInstanceGroupManagers(kProject, kZoneB, {})));
    return out;
  }
  std::set<std::string> Templates() { return Names(compute_->ListInstanceTemplates(kProject, {})); }
  std::set<std::string> Policies() {
    return Names(compute_->ListResourcePolicies(kProject, kRegion, {}));
  }

  std::unique_ptr<sim::gce::Simulator> sim_;
  std::unique_ptr<Control> control_;
  std::shared_ptr<gce::Compute> compute_;
  OperatorOptions options_;
};

TEST_F(OrphanSweep, DeletesExactlyTheOrphansMigsFirstAndNothingTheSecondTime) {
  // Orphans of this cluster: a whole slice (policy, template, MIG using both) and, in another
  // zone, a template and MIG of a second gone group.
  const std::string gone1 = "0b9d6c2e-1111-4a3b-9c1d-2f5e6a7b8c90";
  const std::string gone2 = "0b9d6c2e-2222-4a3b-9c1d-2f5e6a7b8c90";
  std::string wp1 = MakePolicy("orphan-wp", Marker(gone1, kCluster));
  std::string it1 =
      MakeTemplate("orphan-it", OwnerLabels(gone1, kCluster), Marker(gone1, kCluster));
  std::string mig1 = MakeMig(kZoneA, "orphan-mig", it1, wp1, Marker(gone1, kCluster));
  std::string it2 = MakeTemplate("orphan2-it", OwnerLabels(gone2, kCluster), "");
  std::string mig2 = MakeMig(kZoneB, "orphan2-mig", it2, "", Marker(gone2, kCluster));

  // A live group's slice: kept.
  std::string live = CreateGroup("live");
  ASSERT_FALSE(live.empty());
  std::string wp_live = MakePolicy("live-wp", Marker(live, kCluster));
  std::string it_live =
      MakeTemplate("live-it", OwnerLabels(live, kCluster), Marker(live, kCluster));
  MakeMig(kZoneA, "live-mig", it_live, wp_live, Marker(live, kCluster));

  // Another cluster's orphans (its group is not in our apiserver): kept.
  std::string wp_other = MakePolicy("other-wp", Marker(gone1, kOtherCluster));
  std::string it_other =
      MakeTemplate("other-it", OwnerLabels(gone1, kOtherCluster), Marker(gone1, kOtherCluster));
  MakeMig(kZoneA, "other-mig", it_other, wp_other, Marker(gone1, kOtherCluster));

  // Hand-made: no labels, no marker, or a marker/labels without a uid: kept.
  std::string wp_hand = MakePolicy("hand-wp", "made by hand; mentions hyperslice");
  std::string it_hand = MakeTemplate("hand-it", {}, "");
  MakeMig(kZoneA, "hand-mig", it_hand, wp_hand, "");
  json::object no_uid = OwnerLabels(gone1, kCluster);
  no_uid.erase(kGceLabelGroupUid);
  MakeTemplate("no-uid-it", no_uid, "");
  json::object unmanaged = OwnerLabels(gone1, kCluster);
  unmanaged[kGceLabelManaged] = "false";
  MakeTemplate("unmanaged-it", unmanaged, "");
  ASSERT_FALSE(HasFailure());

  auto report = SweepOrphans(options_, kCluster, {kProject}, {kZoneA, kZoneB});
  ASSERT_TRUE(report.ok()) << report.error().ToString();
  EXPECT_TRUE(report->errors.empty()) << report->errors.front();
  // MIGs, then templates, then the policy (the simulator enforced it, see the top of the file).
  std::vector<std::string> expected_order_kinds = {"instanceGroupManagers", "instanceGroupManagers",
                                                   "instanceTemplates", "instanceTemplates",
                                                   "resourcePolicies"};
  ASSERT_EQ(report->deleted.size(), expected_order_kinds.size());
  for (size_t i = 0; i < report->deleted.size(); ++i) {
    EXPECT_NE(report->deleted[i].find("/" + expected_order_kinds[i] + "/"), std::string::npos)
        << i << ": " << report->deleted[i];
  }
  EXPECT_EQ(std::set<std::string>(report->deleted.begin(), report->deleted.end()),
            (std::set<std::string>{wp1, it1, mig1, it2, mig2}));

  EXPECT_EQ(Migs(), (std::set<std::string>{"live-mig", "other-mig", "hand-mig"}));
  EXPECT_EQ(Templates(),
            (std::set<std::string>{"live-it", "other-it", "hand-it", "no-uid-it", "unmanaged-it"}));
  EXPECT_EQ(Policies(), (std::set<std::string>{"live-wp", "other-wp", "hand-wp"}));
  EXPECT_EQ(control_->Counter("compute.instanceGroupManagers.delete"), 2);
  EXPECT_EQ(control_->Counter("compute.instanceTemplates.delete"), 2);
  EXPECT_EQ(control_->Counter("compute.resourcePolicies.delete"), 1);

  auto again = SweepOrphans(options_, kCluster, {kProject}, {kZoneA, kZoneB});
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  EXPECT_TRUE(again->deleted.empty());
  EXPECT_TRUE(again->errors.empty());
  EXPECT_EQ(control_->Counter("compute.instanceGroupManagers.delete"), 2);
  EXPECT_EQ(control_->Counter("compute.instanceTemplates.delete"), 2);
  EXPECT_EQ(control_->Counter("compute.resourcePolicies.delete"), 1);
}

TEST_F(OrphanSweep, RefusesToRunWithoutAClusterId) {
  auto report = SweepOrphans(options_, "", {kProject}, {kZoneA});
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.error().code, Error::Code::kInvalidArgument);
}

// The periodic runnable: it finds the zone from the live group, and once that group is deleted
// (no operator runs here, so nothing tore its resources down) it still sweeps the zone it
// remembers and deletes what the group left behind.
TEST_F(OrphanSweep, PeriodicSweepRemembersLocationsOfDeletedGroups) {
  std::string uid = CreateGroup("short-lived", kZoneB);
  ASSERT_FALSE(uid.empty());
  std::string wp = MakePolicy("short-wp", Marker(uid, kCluster));
  std::string it = MakeTemplate("short-it", OwnerLabels(uid, kCluster), Marker(uid, kCluster));
  MakeMig(kZoneB, "short-mig", it, wp, Marker(uid, kCluster));
  ASSERT_FALSE(HasFailure());

  kube::metrics::Registry registry;
  auto mgr = kube::Manager::Create({.client = client_, .registry = &registry});
  ASSERT_TRUE(mgr.ok()) << mgr.error().ToString();
  options_.orphan_sweep_interval = 200ms;
  ASSERT_TRUE(RegisterOrphanSweep(**mgr, options_).ok());
  std::thread run([&] { (void)(*mgr)->Run(); });
  auto& sweeps =
      registry.GetCounter("hyperslice_tpu_orphan_sweeps_total", "", {{"result", "success"}});
  auto& deleted = registry.GetCounter("hyperslice_tpu_orphans_deleted_total", "");
  // Several sweeps with the group alive delete nothing.
  EXPECT_TRUE(Eventually([&] { return sweeps.Value() >= 2; }, 30s));
  EXPECT_EQ(deleted.Value(), 0);
  EXPECT_EQ(Migs(), (std::set<std::string>{"short-mig"}));

  ASSERT_TRUE(client_->Delete(TPUNodeGroups(), ns_, "short-lived").ok());
  // The sweep adds to the counter once its deletions have completed, so the counter is the signal
  // to wait for; the resources are gone by then. (Waiting for the resources to disappear and then
  // reading the counter raced the sweep's bookkeeping on a loaded machine.)
  EXPECT_TRUE(Eventually([&] { return deleted.Value() >= 3; }, 30s)) << deleted.Value();
  EXPECT_EQ(deleted.Value(), 3);
  EXPECT_TRUE(Migs().empty());
  EXPECT_TRUE(Templates().empty());
  EXPECT_TRUE(Policies().empty());
  (*mgr)->Stop();
  run.join();
}

}  // namespace
}  // namespace hyperslice::tpu::internal
