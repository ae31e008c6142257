// The child controllers of the TPU operator (ResourcePolicy, InstanceTemplate,
// ManagedInstanceGroup) on the real kube-apiserver with the CRDs of deploy/crds, against the
// in-process GCE simulator reached over HTTP by the real GCE client. What GCE received is read
// back from the simulator field by field; call counts come from its control endpoint.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "sim/gce/simulator.h"
#include "src/gce/auth.h"
#include "src/gce/compute.h"
#include "src/kube/manager.h"
#include "src/kube/object_helpers.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/children.h"
#include "test/testenv/crds.h"
#include "test/testenv/eventually.h"
#include "test/testenv/gce_control.h"
#include "test/testenv/namespaced_test.h"
#include "test/testenv/testenv.h"

namespace hyperslice::tpu {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;

constexpr char kProject[] = "my-gcp-project";
constexpr char kRegion[] = "us-central1";
constexpr char kZone[] = "us-central1-a";
constexpr char kMachineType[] = "tpu7x-standard-4t";
constexpr char kClusterId[] = "test-cluster";
constexpr char kToken[] = "children-test-token";

// --- JSON fields ------------------------------------------------------------------------------

std::string Str(const json::value& v) { return v.is_string() ? std::string(v.as_string()) : ""; }
std::string StrAt(const json::object& o, std::string_view k) {
  const auto* v = o.if_contains(k);
  return v ? Str(*v) : "";
}
// A value at a dotted path ("status.selfLink"), nullptr when absent.
const json::value* At(const json::object& o, const std::string& path) {
  const json::value* cur = nullptr;
  const json::object* obj = &o;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    if (obj == nullptr) return nullptr;
    cur = obj->if_contains(part);
    if (cur == nullptr) return nullptr;
    if (dot == std::string::npos) return cur;
    obj = cur->is_object() ? &cur->as_object() : nullptr;
    start = dot + 1;
  }
}
std::string StrPath(const json::object& o, const std::string& path) {
  const auto* v = At(o, path);
  return v ? Str(*v) : "";
}
int64_t IntPath(const json::object& o, const std::string& path) {
  const auto* v = At(o, path);
  if (v == nullptr) return -1;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64()) return static_cast<int64_t>(v->as_uint64());
  if (v->is_string()) return std::stoll(std::string(v->as_string()));
  return -1;
}

using testenv::Eventually;  // polls a condition until it holds or the timeout passes

// --- the CRDs, once per binary ---------------------------------------------------------------

class CrdEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    std::vector<std::string> files;
    for (const char* plural : {"resourcepolicies", "instancetemplates", "managedinstancegroups"}) {
      files.push_back(std::string(HS_DEPLOY_DIR "/crds/tpu.google.com_") + plural + ".yaml");
    }
    Status st = testenv::InstallCrds(
        files, {ResourcePolicies(), InstanceTemplates(), ManagedInstanceGroups()});
    ASSERT_TRUE(st.ok()) << st.error().ToString();
  }
};
const auto* const kCrds = ::testing::AddGlobalTestEnvironment(new CrdEnvironment);

// --- fixture: simulator + GCE client + manager running the child controllers ------------------

class ChildrenTest : public testenv::NamespacedTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(NamespacedTest::SetUp());

    sim::gce::Options so;
    so.operation_latency = 150ms;
    so.instance_boot_latency = 200ms;
    so.mig_retry_interval = 200ms;
    so.static_tokens = {kToken};
    so.seed = 7;
    CustomizeSim(so);
    auto sim = sim::gce::Simulator::Start(so);
    ASSERT_TRUE(sim.ok()) << sim.error().ToString();
    sim_ = std::move(sim).value();
    control_ = std::make_unique<testenv::GceControl>(sim_->control_endpoint());

    gce::ComputeOptions co;
    co.endpoint = sim_->api_endpoint();
    co.tokens = gce::StaticTokenSource(kToken);
    co.retry.initial_backoff = 20ms;
    co.retry.max_backoff = 200ms;
    co.retry.max_attempts = 8;
    co.min_wait_interval = 100ms;
    auto compute = gce::Compute::Create(co);
    ASSERT_TRUE(compute.ok()) << compute.error().ToString();
    compute_ = std::shared_ptr<gce::Compute>(std::move(compute).value());
    // A second client for the test's own reads and "by hand" changes, so the operator's call
    // counters are its own.
    auto hand = gce::Compute::Create(co);
    ASSERT_TRUE(hand.ok());
    hand_ = std::move(hand).value();

    StartOperator();
  }

  void TearDown() override {
    if (client_ && mgr_) {
      // Delete what the test left and let the controllers release it.
      for (const auto* r : {&ManagedInstanceGroups(), &InstanceTemplates(), &ResourcePolicies()}) {
        auto list = client_->List(*r, ns_);
        if (!list.ok()) continue;
        for (const auto& item : list->items) {
          (void)client_->Delete(*r, ns_, StrPath(item, "metadata.name"));
        }
      }
      for (const auto* r : {&ManagedInstanceGroups(), &InstanceTemplates(), &ResourcePolicies()}) {
        bool empty = Eventually(
            [&] {
              auto list = client_->List(*r, ns_);
              return list.ok() && list->items.empty();
            },
            20s);
        if (!empty) {  // do not leave finalizers behind for later tests
          auto list = client_->List(*r, ns_);
          for (auto item : list.ok() ? list->items : std::vector<kube::Object>{}) {
            kube::RemoveFinalizer(item, kGceResourceFinalizer);
            (void)client_->Update(*r, ns_, item);
          }
        }
      }
    }
    StopOperator();
    if (sim_) sim_->Stop();
  }

  virtual void CustomizeSim(sim::gce::Options&) {}

  void StartOperator() {
    kube::ManagerOptions mo;
    mo.client = client_;
    auto mgr = kube::Manager::Create(mo);
    ASSERT_TRUE(mgr.ok()) << mgr.error().ToString();
    mgr_ = std::move(mgr).value();
    OperatorOptions oo;
    oo.client = client_;
    oo.compute = compute_;
    oo.cluster_id = kClusterId;
    oo.workers = 2;
    oo.drift_check_interval = 1s;
    auto st = internal::RegisterChildControllers(*mgr_, oo);
    ASSERT_TRUE(st.ok()) << st.error().ToString();
    run_ = std::thread([this] { (void)mgr_->Run(); });
  }
  void StopOperator() {
    if (mgr_) mgr_->Stop();
    if (run_.joinable()) run_.join();
    mgr_.reset();
  }

  // --- objects ---

  kube::Object NewChild(const kube::Resource& r, const std::string& name, json::object spec) {
    return kube::Object{
        {"apiVersion", kApiVersion},
        {"kind", r.kind},
        {"metadata", json::object{{"name", name},
                                  {"namespace", ns_},
                                  {"ownerReferences",
                                   json::array{json::object{{"apiVersion", kApiVersion},
                                                            {"kind", "TPUNodeGroup"},
                                                            {"name", "slice"},
                                                            {"uid", group_uid_},
                                                            {"controller", true},
                                                            {"blockOwnerDeletion", true}}}}}},
        {"spec", std::move(spec)}};
  }
  kube::Object Create(const kube::Resource& r, const kube::Object& obj) {
    auto created = client_->Create(r, ns_, obj);
    EXPECT_TRUE(created.ok()) << created.error().ToString();
    return created.ok() ? *created : kube::Object{};
  }
  std::optional<kube::Object> Get(const kube::Resource& r, const std::string& name) {
    auto got = client_->Get(r, ns_, name);
    if (!got.ok()) return std::nullopt;
    return *got;
  }
  // Waits for the Ready condition with `status` (and `reason` when given); returns the object.
  kube::Object WaitReady(const kube::Resource& r, const std::string& name,
                         const std::string& status = "True", const std::string& reason = "",
                         std::chrono::milliseconds timeout = 30s) {
    kube::Object last;
    bool ok = Eventually(
        [&] {
          auto got = Get(r, name);
          if (!got) return false;
          last = *got;
          auto c = kube::FindCondition(last, kCondReady);
          return c && c->status == status && (reason.empty() || c->reason == reason);
        },
        timeout);
    auto c = kube::FindCondition(last, kCondReady);
    EXPECT_TRUE(ok) << r.kind << " " << name << " never became Ready=" << status << " " << reason
                    << "; last condition: "
                    << (c ? c->status + " " + c->reason + ": " + c->message : "none");
    return last;
  }
  bool WaitGone(const kube::Resource& r, const std::string& name,
                std::chrono::milliseconds timeout = 30s) {
    return Eventually([&] { return !Get(r, name).has_value(); }, timeout);
  }
  // Events about one object with a reason.
  // Waits until `name` is Ready=False for `reason` with `text` in the condition's message and a
  // Warning Event of that reason; returns the object.
  kube::Object WaitRefused(const kube::Resource& r, const std::string& name,
                           const std::string& reason, const std::string& text) {
    kube::Object cr = WaitReady(r, name, "False", reason);
    EXPECT_NE(kube::FindCondition(cr, kCondReady)->message.find(text), std::string::npos);
    EXPECT_TRUE(Eventually([&] { return CountEvents(name, reason, "Warning") >= 1; }));
    return cr;
  }
  int CountEvents(const std::string& name, const std::string& reason, const std::string& type) {
    auto list = client_->List(kube::resources::Events(), ns_);
    if (!list.ok()) return -1;
    int n = 0;
    for (const auto& e : list->items) {
      if (StrPath(e, "involvedObject.name") == name && StrAt(e, "reason") == reason &&
          StrAt(e, "type") == type) {
        ++n;
      }
    }
    return n;
  }

  static json::object PolicySpec(const std::string& gce_name, const std::string& topology) {
    return json::object{{"project", kProject},
                        {"region", kRegion},
                        {"name", gce_name},
                        {"description", "workload policy of default/slice"},
                        {"workloadPolicy", json::object{{"type", "HIGH_THROUGHPUT"},
                                                        {"acceleratorTopology", topology}}}};
  }
  static json::object TemplateProperties(bool reservation) {
    auto p = json::parse(R"json({
      "machineType": "tpu7x-standard-4t",
      "disks": [{"boot": true, "autoDelete": true, "type": "PERSISTENT",
                 "initializeParams": {
                   "sourceImage": "projects/debian-cloud/global/images/family/debian-12",
                   "diskSizeGb": "100", "diskType": "hyperdisk-balanced"}}],
      "networkInterfaces": [{"subnetwork": "projects/my-gcp-project/regions/us-central1/subnetworks/default"}],
      "scheduling": {"provisioningModel": "STANDARD", "onHostMaintenance": "TERMINATE",
                     "automaticRestart": true},
      "metadata": {"items": [{"key": "startup-script", "value": "#!/bin/bash\necho hello"},
                             {"key": "kube-labels", "value": "a=b,c=d"}]},
      "serviceAccounts": [{"email": "default",
                           "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}],
      "tags": {"items": ["tpu", "hyperslice"]},
      "labels": {"team": "ml"}
    })json")
                 .as_object();
    if (reservation) {
      p["reservationAffinity"] = json::object{{"consumeReservationType", "SPECIFIC_RESERVATION"},
                                              {"key", "compute.googleapis.com/reservation-name"},
                                              {"values", json::array{"tpu-reservation"}}};
      p["scheduling"].as_object()["provisioningModel"] = "RESERVATION_BOUND";
    }
    return p;
  }
  static json::object TemplateSpec(const std::string& gce_name, bool reservation = false) {
    return json::object{{"project", kProject},
                        {"name", gce_name},
                        {"description", "instance template of default/slice"},
                        {"properties", TemplateProperties(reservation)}};
  }
  static json::object MigSpec(const std::string& gce_name, const std::string& template_name,
                              const std::string& policy_name, int64_t size,
                              const std::string& mode = "BULK") {
    json::object spec{{"project", kProject},
                      {"zone", kZone},
                      {"name", gce_name},
                      {"description", "TPU slice default/slice"},
                      {"baseInstanceName", gce_name},
                      {"instanceTemplate", InstanceTemplateUrl(kProject, template_name)},
                      {"targetSize", size},
                      {"targetSizePolicy", json::object{{"mode", mode}}}};
    if (!policy_name.empty()) {
      spec["resourcePolicies"] =
          json::object{{"workloadPolicy", ResourcePolicyUrl(kProject, kRegion, policy_name)}};
    }
    return spec;
  }

  // GCE resources made by hand (not through a CR).
  void HandTemplate(const std::string& name, bool reservation = false) {
    json::object body{{"name", name}, {"properties", TemplateProperties(reservation)}};
    auto op = hand_->InsertInstanceTemplate(kProject, body);
    ASSERT_TRUE(op.ok()) << op.error().ToString();
    ASSERT_TRUE(hand_->Wait(op->ref, 30s).ok());
  }
  void HandPolicy(const std::string& name, const std::string& topology,
                  const std::string& description = "") {
    auto op = hand_->InsertResourcePolicy(
        kProject, kRegion, gce::HighThroughputWorkloadPolicy(name, topology, description));
    ASSERT_TRUE(op.ok()) << op.error().ToString();
    ASSERT_TRUE(hand_->Wait(op->ref, 30s).ok());
  }
  size_t InstancesInZone() {
    auto list = hand_->ListInstances(kProject, kZone, {});
    EXPECT_TRUE(list.ok()) << list.error().ToString();
    return list.ok() ? list->size() : 0;
  }

  std::string group_uid_ = "0a1b2c3d-1111-2222-3333-444455556666";
  std::unique_ptr<sim::gce::Simulator> sim_;
  std::unique_ptr<testenv::GceControl> control_;
  std::shared_ptr<gce::Compute> compute_;
  std::unique_ptr<gce::Compute> hand_;
  std::unique_ptr<kube::Manager> mgr_;
  std::thread run_;
};

// --- ResourcePolicy ------------------------------------------------------------------------------

TEST_F(ChildrenTest, ResourcePolicyIsCreatedAsSpecifiedAndDeletedBeforeTheCrGoes) {
  Create(ResourcePolicies(),
         NewChild(ResourcePolicies(), "slice", PolicySpec("slice-wp-1", "2x2x2")));
  auto cr = WaitReady(ResourcePolicies(), "slice", "True", "Created");
  EXPECT_TRUE(kube::HasFinalizer(cr, kGceResourceFinalizer));
  EXPECT_EQ(IntPath(cr, "status.observedGeneration"), kube::Generation(cr));
  EXPECT_FALSE(At(cr, "status.operation"));
  EXPECT_EQ(At(cr, "status.driftDetected")->as_bool(), false);
  EXPECT_EQ(At(cr, "status.adopted")->as_bool(), false);

  auto got = hand_->GetResourcePolicy(kProject, kRegion, "slice-wp-1");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(StrAt(*got, "name"), "slice-wp-1");
  EXPECT_EQ(StrPath(*got, "workloadPolicy.type"), "HIGH_THROUGHPUT");
  EXPECT_EQ(StrPath(*got, "workloadPolicy.acceleratorTopology"), "2x2x2");
  EXPECT_EQ(StrAt(*got, "description"),
            "workload policy of default/slice; hyperslice owner=" + ns_ +
                "/slice uid=" + group_uid_ + " cluster=" + kClusterId);
  EXPECT_EQ(StrPath(cr, "status.selfLink"), StrAt(*got, "selfLink"));
  EXPECT_EQ(control_->Counter("compute.resourcePolicies.insert"), 1);

  ASSERT_TRUE(client_->Delete(ResourcePolicies(), ns_, "slice").ok());
  // The finalizer holds the CR until the GCE resource is gone: whenever the CR is seen gone, the
  // policy must already be gone.
  bool cr_gone = false;
  ASSERT_TRUE(Eventually([&] {
    if (Get(ResourcePolicies(), "slice")) return false;
    cr_gone = true;
    return true;
  }));
  ASSERT_TRUE(cr_gone);
  auto after = hand_->GetResourcePolicy(kProject, kRegion, "slice-wp-1");
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.error().code, Error::Code::kNotFound);
  EXPECT_EQ(control_->Counter("compute.resourcePolicies.delete"), 1);
}

TEST_F(ChildrenTest, ExistingResourcePolicyIsAdoptedWithoutASecondInsert) {
  HandPolicy("slice-wp-2", "2x2x2");
  ASSERT_EQ(control_->Counter("compute.resourcePolicies.insert"), 1);
  Create(ResourcePolicies(),
         NewChild(ResourcePolicies(), "slice", PolicySpec("slice-wp-2", "2x2x2")));
  auto cr = WaitReady(ResourcePolicies(), "slice", "True", "Adopted");
  EXPECT_EQ(At(cr, "status.adopted")->as_bool(), true);
  EXPECT_FALSE(StrPath(cr, "status.selfLink").empty());
  EXPECT_EQ(control_->Counter("compute.resourcePolicies.insert"), 1);  // still only ours by hand
}

TEST_F(ChildrenTest, ForeignResourceOfTheSameNameIsLeftAlone) {
  HandPolicy("slice-wp-3", "2x2x2",
             "hyperslice owner=other/slice uid=ffff-other cluster=another-cluster");
  Create(ResourcePolicies(),
         NewChild(ResourcePolicies(), "slice", PolicySpec("slice-wp-3", "2x2x2")));
  WaitRefused(ResourcePolicies(), "slice", "NameConflict", "another-cluster");
  ASSERT_TRUE(client_->Delete(ResourcePolicies(), ns_, "slice").ok());
  ASSERT_TRUE(WaitGone(ResourcePolicies(), "slice"));
  EXPECT_TRUE(hand_->GetResourcePolicy(kProject, kRegion, "slice-wp-3").ok());
  EXPECT_EQ(control_->Counter("compute.resourcePolicies.delete"), 0);
}

TEST_F(ChildrenTest, DeletionCompletesWhenTheGceResourceWasDeletedByHand) {
  Create(ResourcePolicies(),
         NewChild(ResourcePolicies(), "slice", PolicySpec("slice-wp-4", "2x2x4")));
  WaitReady(ResourcePolicies(), "slice");
  auto op = hand_->DeleteResourcePolicy(kProject, kRegion, "slice-wp-4");
  ASSERT_TRUE(op.ok());
  ASSERT_TRUE(hand_->Wait(op->ref, 30s).ok());
  ASSERT_TRUE(client_->Delete(ResourcePolicies(), ns_, "slice").ok());
  EXPECT_TRUE(WaitGone(ResourcePolicies(), "slice"));
}

// --- InstanceTemplate
// ------------------------------------------------------------------------------

TEST_F(ChildrenTest, InstanceTemplateCarriesEveryPropertyAndTheOwnerLabels) {
  Create(InstanceTemplates(),
         NewChild(InstanceTemplates(), "slice", TemplateSpec("slice-it-1", /*reservation=*/true)));
  auto cr = WaitReady(InstanceTemplates(), "slice", "True", "Created");
  auto got = hand_->GetInstanceTemplate(kProject, "slice-it-1");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  const auto& p = got->at("properties").as_object();
  EXPECT_EQ(StrAt(p, "machineType"), "tpu7x-standard-4t");
  const auto& disk = p.at("disks").as_array().at(0).as_object();
  EXPECT_EQ(disk.at("boot").as_bool(), true);
  EXPECT_EQ(StrPath(disk, "initializeParams.sourceImage"),
            "projects/debian-cloud/global/images/family/debian-12");
  EXPECT_EQ(IntPath(disk, "initializeParams.diskSizeGb"), 100);
  EXPECT_EQ(StrPath(disk, "initializeParams.diskType"), "hyperdisk-balanced");
  EXPECT_EQ(StrAt(p.at("networkInterfaces").as_array().at(0).as_object(), "subnetwork"),
            "projects/my-gcp-project/regions/us-central1/subnetworks/default");
  EXPECT_EQ(StrPath(p, "scheduling.provisioningModel"), "RESERVATION_BOUND");
  EXPECT_EQ(StrPath(p, "scheduling.onHostMaintenance"), "TERMINATE");
  EXPECT_EQ(StrPath(p, "reservationAffinity.consumeReservationType"), "SPECIFIC_RESERVATION");
  EXPECT_EQ(Str(At(p, "reservationAffinity.values")->as_array().at(0)), "tpu-reservation");
  auto items = gce::MetadataItemsOf(p.at("metadata").as_object());
  EXPECT_EQ(items["startup-script"], "#!/bin/bash\necho hello");
  EXPECT_EQ(items["kube-labels"], "a=b,c=d");
  EXPECT_EQ(StrAt(p.at("serviceAccounts").as_array().at(0).as_object(), "email"), "default");
  EXPECT_EQ(At(p, "tags.items")->as_array().size(), 2u);
  const auto& labels = p.at("labels").as_object();
  EXPECT_EQ(StrAt(labels, "team"), "ml");
  EXPECT_EQ(StrAt(labels, kGceLabelManaged), "true");
  EXPECT_EQ(StrAt(labels, kGceLabelCluster), kClusterId);
  EXPECT_EQ(StrAt(labels, kGceLabelGroupUid), group_uid_);
  EXPECT_EQ(StrAt(labels, kGceLabelGroup), GceLabelValue(ns_ + "-slice"));
  EXPECT_NE(StrAt(*got, "description").find("uid=" + group_uid_), std::string::npos);
  EXPECT_EQ(StrPath(cr, "status.selfLink"), StrAt(*got, "selfLink"));

  // The spec is immutable, as a GCE template is.
  auto changed = cr;
  changed["spec"].as_object()["properties"].as_object()["machineType"] = "ct6e-standard-4t";
  auto upd = client_->Update(InstanceTemplates(), ns_, changed);
  ASSERT_FALSE(upd.ok());
  EXPECT_EQ(upd.error().code, Error::Code::kInvalidArgument) << upd.error().ToString();
}

TEST_F(ChildrenTest, TemplateReplacedBehindOurBackIsReportedAsDrift) {
  Create(InstanceTemplates(), NewChild(InstanceTemplates(), "slice", TemplateSpec("slice-it-2")));
  WaitReady(InstanceTemplates(), "slice", "True", "Created");
  // Someone deletes the template and makes another of the same name with another machine type.
  auto del = hand_->DeleteInstanceTemplate(kProject, "slice-it-2");
  ASSERT_TRUE(del.ok());
  ASSERT_TRUE(hand_->Wait(del->ref, 30s).ok());
  json::object body{{"name", "slice-it-2"}, {"properties", TemplateProperties(false)}};
  body["properties"].as_object()["machineType"] = "ct6e-standard-4t";
  auto ins = hand_->InsertInstanceTemplate(kProject, body);
  ASSERT_TRUE(ins.ok());
  ASSERT_TRUE(hand_->Wait(ins->ref, 30s).ok());

  auto cr = WaitRefused(InstanceTemplates(), "slice", "Drifted", "properties.machineType");
  EXPECT_EQ(At(cr, "status.driftDetected")->as_bool(), true);
  EXPECT_EQ(control_->Counter("compute.instanceTemplates.insert"), 2);  // ours + by hand only
}

// --- ManagedInstanceGroup ------------------------------------------------------------------------

TEST_F(ChildrenTest, BulkGroupIsCreatedAsSpecifiedAndReportsItsInstances) {
  HandTemplate("slice-it-3");
  HandPolicy("slice-wp-5", "2x2x2");
  Create(ManagedInstanceGroups(), NewChild(ManagedInstanceGroups(), "slice",
                                           MigSpec("slice-mig-1", "slice-it-3", "slice-wp-5", 2)));
  auto cr = WaitReady(ManagedInstanceGroups(), "slice", "True", "Created");

  auto got = hand_->GetInstanceGroupManager(kProject, kZone, "slice-mig-1");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(StrAt(*got, "baseInstanceName"), "slice-mig-1");
  EXPECT_EQ(IntPath(*got, "targetSize"), 2);
  EXPECT_EQ(StrPath(*got, "targetSizePolicy.mode"), "BULK");
  EXPECT_NE(StrAt(*got, "instanceTemplate")
                .find("projects/my-gcp-project/global/instanceTemplates/slice-it-3"),
            std::string::npos);
  EXPECT_NE(StrPath(*got, "resourcePolicies.workloadPolicy")
                .find("projects/my-gcp-project/regions/us-central1/resourcePolicies/slice-wp-5"),
            std::string::npos);
  EXPECT_EQ(StrAt(*got, "description"), "TPU slice default/slice; hyperslice owner=" + ns_ +
                                            "/slice uid=" + group_uid_ + " cluster=" + kClusterId);

  EXPECT_EQ(StrPath(cr, "status.selfLink"), StrAt(*got, "selfLink"));
  EXPECT_EQ(IntPath(cr, "status.targetSize"), 2);
  const auto& instances = At(cr, "status.instances")->as_array();
  ASSERT_EQ(instances.size(), 2u);
  for (const auto& i : instances) {
    const auto& o = i.as_object();
    EXPECT_EQ(StrAt(o, "instanceStatus"), "RUNNING");
    EXPECT_EQ(StrAt(o, "currentAction"), "NONE");
    EXPECT_EQ(StrAt(o, "zone"), kZone);
    EXPECT_EQ(StrAt(o, "providerID"), ProviderId(kProject, kZone, StrAt(o, "name")));
    EXPECT_TRUE(hand_->GetInstance(kProject, kZone, StrAt(o, "name")).ok());
  }
  EXPECT_EQ(At(cr, "status.bulkInstanceOperation.inProgress")->as_bool(), false);

  ASSERT_TRUE(client_->Delete(ManagedInstanceGroups(), ns_, "slice").ok());
  ASSERT_TRUE(WaitGone(ManagedInstanceGroups(), "slice"));
  auto after = hand_->GetInstanceGroupManager(kProject, kZone, "slice-mig-1");
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.error().code, Error::Code::kNotFound);
  EXPECT_EQ(InstancesInZone(), 0u);
}

TEST_F(ChildrenTest, SettledGroupCostsOneGetPerDriftCheck) {
  HandTemplate("slice-it-6");
  Create(ManagedInstanceGroups(),
         NewChild(ManagedInstanceGroups(), "slice", MigSpec("slice-mig-6", "slice-it-6", "", 2)));
  WaitReady(ManagedInstanceGroups(), "slice");
  auto gets = [&] { return control_->Counter("compute.instanceGroupManagers.get"); };
  auto lists = [&] {
    return control_->Counter("compute.instanceGroupManagers.listManagedInstances");
  };
  // Past the reconcile that the Ready status write itself triggers.
  int64_t g0 = gets();
  ASSERT_TRUE(Eventually([&] { return gets() >= g0 + 2; }));
  int64_t g1 = gets(), l1 = lists();
  // Three more drift checks (1 s interval here): each one GET, no instance listing.
  ASSERT_TRUE(Eventually([&] { return gets() >= g1 + 3; }));
  EXPECT_EQ(lists(), l1);
  EXPECT_EQ(control_->Counter("compute.instanceGroupManagers.insert"), 1);
  EXPECT_EQ(control_->Counter("compute.instanceGroupManagers.resize"), 0);
  auto cr = WaitReady(ManagedInstanceGroups(), "slice");
  EXPECT_EQ(At(cr, "status.instances")->as_array().size(), 2u);
}

class StockoutTest : public ChildrenTest {
 protected:
  void CustomizeSim(sim::gce::Options& o) override {
    o.capacity.push_back({kZone, kMachineType, 0});
  }
};

TEST_F(StockoutTest, BulkStockoutCreatesNoInstanceAndRecoversWhenCapacityArrives) {
  HandTemplate("slice-it-4");
  HandPolicy("slice-wp-6", "2x2x2");
  Create(ManagedInstanceGroups(), NewChild(ManagedInstanceGroups(), "slice",
                                           MigSpec("slice-mig-2", "slice-it-4", "slice-wp-6", 2)));
  auto cr = WaitReady(ManagedInstanceGroups(), "slice", "False", "ZONE_RESOURCE_POOL_EXHAUSTED");
  EXPECT_FALSE(kube::FindCondition(cr, kCondReady)->message.empty());
  EXPECT_EQ(InstancesInZone(), 0u);
  EXPECT_TRUE(Eventually(
      [&] { return CountEvents("slice", "ZONE_RESOURCE_POOL_EXHAUSTED", "Warning") >= 1; }));
  // One VM's worth of capacity: BULK still creates none, and the group is still not Ready.
  EXPECT_TRUE(control_
                  ->Call("POST", "/control/capacity",
                         {{"zone", kZone}, {"machineType", kMachineType}, {"instances", 1}})
                  .ok());
  cr = WaitReady(ManagedInstanceGroups(), "slice", "False", "ZONE_RESOURCE_POOL_EXHAUSTED");
  EXPECT_EQ(InstancesInZone(), 0u);

  EXPECT_TRUE(control_
                  ->Call("POST", "/control/capacity",
                         {{"zone", kZone}, {"machineType", kMachineType}, {"instances", 2}})
                  .ok());
  cr = WaitReady(ManagedInstanceGroups(), "slice", "True", "", 90s);
  EXPECT_EQ(InstancesInZone(), 2u);
  EXPECT_EQ(At(cr, "status.instances")->as_array().size(), 2u);
}

TEST_F(ChildrenTest, TargetSizeChangedBehindOurBackIsCorrected) {
  HandTemplate("slice-it-5");
  Create(ManagedInstanceGroups(),
         NewChild(ManagedInstanceGroups(), "slice",
                  MigSpec("slice-mig-3", "slice-it-5", "", 1, "INDIVIDUAL")));
  WaitReady(ManagedInstanceGroups(), "slice");
  auto op = hand_->ResizeInstanceGroupManager(kProject, kZone, "slice-mig-3", 3);
  ASSERT_TRUE(op.ok());
  ASSERT_TRUE(hand_->Wait(op->ref, 30s).ok());
  // The next drift check sees targetSize 3, reports it and resizes back to 1.
  EXPECT_TRUE(Eventually([&] { return CountEvents("slice", "Drifted", "Warning") >= 1; }));
  EXPECT_TRUE(Eventually([&] {
    auto got = hand_->GetInstanceGroupManager(kProject, kZone, "slice-mig-3");
    return got.ok() && IntPath(*got, "targetSize") == 1;
  }));
  EXPECT_GE(control_->Counter("compute.instanceGroupManagers.resize"), 2);
  auto cr = WaitReady(ManagedInstanceGroups(), "slice");
  EXPECT_EQ(IntPath(cr, "status.targetSize"), 1);
  EXPECT_TRUE(Eventually([&] {
    auto got = Get(ManagedInstanceGroups(), "slice");
    return got && At(*got, "status.instances")->as_array().size() == 1;
  }));
}

// --- all three under injected faults and across an operator restart ------------------------

TEST_F(ChildrenTest, ConvergesUnderInjected503s) {
  EXPECT_TRUE(
      control_->Call("POST", "/control/faults", {{"method", "*"}, {"rate", 0.3}, {"code", 503}})
          .ok());
  Create(ResourcePolicies(),
         NewChild(ResourcePolicies(), "slice", PolicySpec("slice-wp-7", "2x2x2")));
  Create(InstanceTemplates(), NewChild(InstanceTemplates(), "slice", TemplateSpec("slice-it-7")));
  Create(ManagedInstanceGroups(), NewChild(ManagedInstanceGroups(), "slice",
                                           MigSpec("slice-mig-7", "slice-it-7", "slice-wp-7", 2)));
  WaitReady(ResourcePolicies(), "slice", "True", "", 90s);
  WaitReady(InstanceTemplates(), "slice", "True", "", 90s);
  WaitReady(ManagedInstanceGroups(), "slice", "True", "", 90s);
  EXPECT_EQ(InstancesInZone(), 2u);
  // Faults were really injected: some calls were answered 503 and retried.
  EXPECT_GT(compute_->counters().Get("instanceGroupManagers.get", "503") +
                compute_->counters().Get("resourcePolicies.get", "503") +
                compute_->counters().Get("instanceTemplates.get", "503") +
                compute_->counters().Get("zoneOperations.wait", "503") +
                compute_->counters().Get("regionOperations.wait", "503") +
                compute_->counters().Get("globalOperations.wait", "503") +
                compute_->counters().Get("instanceGroupManagers.listManagedInstances", "503"),
            0u);

  // Teardown under faults too: MIG first, then template and policy (a template in use cannot go).
  ASSERT_TRUE(client_->Delete(ManagedInstanceGroups(), ns_, "slice").ok());
  ASSERT_TRUE(WaitGone(ManagedInstanceGroups(), "slice", 60s));
  ASSERT_TRUE(client_->Delete(InstanceTemplates(), ns_, "slice").ok());
  ASSERT_TRUE(client_->Delete(ResourcePolicies(), ns_, "slice").ok());
  ASSERT_TRUE(WaitGone(InstanceTemplates(), "slice", 60s));
  ASSERT_TRUE(WaitGone(ResourcePolicies(), "slice", 60s));
  EXPECT_TRUE(control_->Call("DELETE", "/control/faults").ok());
  // One logical insert each: a 503'd attempt is retried with the same requestId, and exactly one
  // attempt was accepted.
  EXPECT_EQ(compute_->counters().Get("instanceGroupManagers.insert", "200"), 1u);
  EXPECT_EQ(compute_->counters().Get("instanceTemplates.insert", "200"), 1u);
  EXPECT_EQ(compute_->counters().Get("resourcePolicies.insert", "200"), 1u);
  EXPECT_FALSE(hand_->GetInstanceTemplate(kProject, "slice-it-7").ok());
  EXPECT_FALSE(hand_->GetResourcePolicy(kProject, kRegion, "slice-wp-7").ok());
  EXPECT_EQ(InstancesInZone(), 0u);
}

TEST_F(ChildrenTest, RestartedOperatorResumesTheRecordedOperationInsteadOfInsertingAgain) {
  // Slow operations: the first operator records the insert's operation and is stopped while it
  // is still running.
  EXPECT_TRUE(control_->Call("POST", "/control/latency", {{"operationMs", 4000}}).ok());
  Create(ResourcePolicies(),
         NewChild(ResourcePolicies(), "slice", PolicySpec("slice-wp-8", "2x2x2")));
  ASSERT_TRUE(Eventually([&] {
    auto got = Get(ResourcePolicies(), "slice");
    return got && !StrPath(*got, "status.operation").empty();
  }));
  StopOperator();
  EXPECT_TRUE(control_->Call("POST", "/control/latency", {{"operationMs", 150}}).ok());
  StartOperator();
  auto cr = WaitReady(ResourcePolicies(), "slice", "True", "Created", 60s);
  EXPECT_FALSE(At(cr, "status.operation"));
  EXPECT_EQ(control_->Counter("compute.resourcePolicies.insert"), 1);
}

TEST_F(ChildrenTest, RestartDuringDeletionResumesTheDeleteOperation) {
  Create(ResourcePolicies(),
         NewChild(ResourcePolicies(), "slice", PolicySpec("slice-wp-9", "2x2x2")));
  WaitReady(ResourcePolicies(), "slice");
  EXPECT_TRUE(control_->Call("POST", "/control/latency", {{"operationMs", 4000}}).ok());
  ASSERT_TRUE(client_->Delete(ResourcePolicies(), ns_, "slice").ok());
  ASSERT_TRUE(Eventually([&] {
    auto got = Get(ResourcePolicies(), "slice");
    return got && StrPath(*got, "status.operation").find("/operations/") != std::string::npos &&
           kube::FindCondition(*got, kCondReady)->reason == "Deleting";
  }));
  StopOperator();
  // The delete is still running in GCE: the CR must still be there.
  ASSERT_TRUE(Get(ResourcePolicies(), "slice").has_value());
  EXPECT_TRUE(control_->Call("POST", "/control/latency", {{"operationMs", 150}}).ok());
  StartOperator();
  ASSERT_TRUE(WaitGone(ResourcePolicies(), "slice", 60s));
  EXPECT_EQ(control_->Counter("compute.resourcePolicies.delete"), 1);
  EXPECT_FALSE(hand_->GetResourcePolicy(kProject, kRegion, "slice-wp-9").ok());
}

TEST_F(ChildrenTest, TargetSizeChangedInTheSpecResizesWithoutReportingDrift) {
  HandTemplate("slice-it-10");
  Create(ManagedInstanceGroups(),
         NewChild(ManagedInstanceGroups(), "slice",
                  MigSpec("slice-mig-10", "slice-it-10", "", 1, "INDIVIDUAL")));
  auto cr = WaitReady(ManagedInstanceGroups(), "slice");
  cr["spec"].as_object()["targetSize"] = 2;
  ASSERT_TRUE(client_->Update(ManagedInstanceGroups(), ns_, cr).ok());
  EXPECT_TRUE(Eventually([&] {
    auto got = Get(ManagedInstanceGroups(), "slice");
    if (!got) return false;
    auto c = kube::FindCondition(*got, kCondReady);
    return c && c->status == "True" && c->observed_generation == kube::Generation(*got) &&
           IntPath(*got, "status.targetSize") == 2 &&
           At(*got, "status.instances")->as_array().size() == 2u;
  }));
  EXPECT_EQ(control_->Counter("compute.instanceGroupManagers.resize"), 1);
  EXPECT_EQ(CountEvents("slice", "Drifted", "Warning"), 0);
  EXPECT_EQ(InstancesInZone(), 2u);
}

TEST_F(ChildrenTest, FailedInsertOperationIsReportedAndRetried) {
  EXPECT_TRUE(control_
                  ->Call("POST", "/control/operation-failures",
                         {{"method", "compute.resourcePolicies.insert"},
                          {"code", "QUOTA_EXCEEDED"},
                          {"message", "Quota 'RESOURCE_POLICIES' exceeded."},
                          {"count", 1}})
                  .ok());
  Create(ResourcePolicies(),
         NewChild(ResourcePolicies(), "slice", PolicySpec("slice-wp-11", "2x2x2")));
  WaitRefused(ResourcePolicies(), "slice", "QUOTA_EXCEEDED", "Quota 'RESOURCE_POLICIES'");
  // Retried after the backoff; the failure was a one-off.
  WaitReady(ResourcePolicies(), "slice", "True", "Created");
  EXPECT_EQ(control_->Counter("compute.resourcePolicies.insert"), 2);
}

TEST_F(ChildrenTest, TemplateInUseKeepsItsFinalizerUntilTheDeleteSucceeds) {
  Create(InstanceTemplates(), NewChild(InstanceTemplates(), "slice", TemplateSpec("slice-it-12")));
  WaitReady(InstanceTemplates(), "slice");
  Create(ManagedInstanceGroups(),
         NewChild(ManagedInstanceGroups(), "slice",
                  MigSpec("slice-mig-12", "slice-it-12", "", 1, "INDIVIDUAL")));
  WaitReady(ManagedInstanceGroups(), "slice");
  // GCE refuses to delete a template a group uses: the CR stays, with GCE's reason.
  ASSERT_TRUE(client_->Delete(InstanceTemplates(), ns_, "slice").ok());
  auto cr = WaitReady(InstanceTemplates(), "slice", "False", "resourceInUseByAnotherResource");
  EXPECT_TRUE(kube::HasFinalizer(cr, kGceResourceFinalizer));
  EXPECT_TRUE(hand_->GetInstanceTemplate(kProject, "slice-it-12").ok());
  // Once the group is gone the template's delete succeeds and the CR goes.
  ASSERT_TRUE(client_->Delete(ManagedInstanceGroups(), ns_, "slice").ok());
  ASSERT_TRUE(WaitGone(ManagedInstanceGroups(), "slice"));
  ASSERT_TRUE(WaitGone(InstanceTemplates(), "slice", 90s));
  EXPECT_FALSE(hand_->GetInstanceTemplate(kProject, "slice-it-12").ok());
}

}  // namespace
}  // namespace hyperslice::tpu
