// The TPU operator on the real control plane (test/testenv) with the GCE simulator (sim/gce)
// reached over HTTP by the real Compute client, the CRDs from deploy/crds, and the validating
// webhook in-process and registered with the apiserver as in deploy/webhook.
//
// There is no kubelet here: until simulated VMs join for real, each test plays kubelet for the
// slice's VMs — for every RUNNING instance in the simulator it creates a Node named like the VM
// with spec.providerID gce://project/zone/name and a Ready condition (status subresource), as a
// kubelet registering would.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>

#include "sim/gce/simulator.h"
#include "src/gce/auth.h"
#include "src/gce/compute.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/kube/yaml.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/device_plugin.h"
#include "src/tpu/internal/nodegroup_spec.h"
#include "src/webhook/webhook.h"
#include "test/testenv/eventually.h"
#include "test/testenv/examples.h"
#include "test/testenv/in_process_operator.h"
#include "test/testenv/local_webhook.h"
#include "test/testenv/operator_process.h"
#include "test/testenv/shell.h"
#include "test/testenv/testenv.h"
#include "test/testenv/tpu_env.h"
#include "test/testenv/yaml_file.h"

namespace hyperslice::tpu {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

// The shared environment (test/testenv/tpu_env.h, operator_process.h, in_process_operator.h): Env,
// GceControl, OperatorProcess, InProcessOperator, FakeKubelets, the zones (kZone is the seed's,
// with the reservation).
using namespace testenv::tpuenv;  // NOLINT(google-build-using-namespace)

constexpr char kReservation[] = "my-tpu-reservation";

// Seed 000's example TPUNodeGroup as deploy/examples ships it, with tpu7x-2x2x2.env's values.
std::string SeedExample() { return testenv::Example("tpunodegroup.yaml", "tpu7x-2x2x2.env"); }

using kube::YamlToJson;

using testenv::Eventually;

using testenv::Shell;  // {exit code, stdout+stderr}

// The validating webhook in-process, registered with the apiserver as deploy/webhook registers it
// (a URL on loopback instead of the Service). It serves until exit, like the environment.
Status StartWebhook(const Env& env) {
  static std::unique_ptr<testenv::LocalWebhook> webhook;
  webhook::ServerOptions o;
  o.source = webhook::NewApiObjectSource(env.client);
  HS_ASSIGN_OR_RETURN(webhook, testenv::LocalWebhook::Start("tpu-operator-it", std::move(o)));
  return webhook->Register(*env.client, HS_DEPLOY_DIR "/webhook/base/webhooks.yaml",
                           "ValidatingWebhookConfiguration");
}

// The shared environment with seed 000's reservation in kZone, and the webhook (started once).
Env& OperatorEnv(std::string* error) {
  sim::gce::Options o = SimOptions();
  o.reservations.push_back({kProject, kZone, kReservation, "tpu7x-standard-4t", 2});
  Env& env = SharedEnv("tpu-op-it", o);
  static const std::string webhook_error = [&]() -> std::string {
    if (!env.error.empty()) return "";
    Status st = StartWebhook(env);
    return st.ok() ? "" : "webhook: " + st.error().ToString();
  }();
  *error = env.error.empty() ? webhook_error : env.error;
  return env;
}

// What the simulator holds in the project, by kind.
struct Inventory {
  std::vector<json::object> policies, templates, migs, instances;
  size_t Total() const {
    return policies.size() + templates.size() + migs.size() + instances.size();
  }
  std::string Describe() const {
    std::string out;
    for (const auto* list : {&policies, &templates, &migs, &instances}) {
      for (const auto& o : *list) out += std::string(o.at("selfLink").as_string()) + "\n";
    }
    return out;
  }
};

class TpuOperatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    Env& env = OperatorEnv(&error);
    ASSERT_TRUE(error.empty()) << error;
    env_ = &env;
    client_ = env.client;
  }
  void TearDown() override { op_.Stop(); }

  // A call to the simulator's control endpoint that must succeed.
  void ControlCall(const std::string& method, const std::string& path, const json::object& body) {
    auto r = env_->control->Call(method, path, body);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
  }

  void StartInProcessOperator() {
    Status s = op_.Start(*env_);
    ASSERT_TRUE(s.ok()) << s.error().ToString();
  }

  Inventory SimInventory() {
    Inventory inv;
    auto& c = *env_->compute;
    if (auto l = c.ListResourcePolicies(kProject, kRegion, {}); l.ok()) inv.policies = *l;
    if (auto l = c.ListInstanceTemplates(kProject, {}); l.ok()) inv.templates = *l;
    for (const char* z : {kZone, kStockoutZone, kV6eZone}) {
      if (auto l = c.ListInstanceGroupManagers(kProject, z, {}); l.ok()) {
        inv.migs.insert(inv.migs.end(), l->begin(), l->end());
      }
      if (auto l = c.ListInstances(kProject, z, {}); l.ok()) {
        inv.instances.insert(inv.instances.end(), l->begin(), l->end());
      }
    }
    return inv;
  }

  std::optional<kube::Condition> Cond(const std::string& ns, const std::string& name,
                                      const std::string& type) {
    return testenv::tpuenv::Cond(*client_, ns, name, type);
  }
  bool WaitCondition(const std::string& ns, const std::string& name, const std::string& type,
                     const std::string& status, std::chrono::milliseconds timeout = 60s,
                     const std::string& reason = "") {
    return Eventually(
        [&] {
          auto c = Cond(ns, name, type);
          return c && c->status == status && (reason.empty() || c->reason == reason);
        },
        timeout);
  }
  std::string DescribeGroup(const std::string& ns, const std::string& name) {
    return testenv::tpuenv::DescribeGroup(*client_, ns, name);
  }

  // Deletes the group and waits until it, its Nodes, token Secrets and GCE resources are gone.
  void DeleteAndExpectNothingLeft(const std::string& ns, const std::string& name,
                                  const std::set<std::string>& node_names) {
    Status del = client_->Delete(TPUNodeGroups(), ns, name);
    ASSERT_TRUE(del.ok()) << del.error().ToString();
    ASSERT_TRUE(Eventually(
        [&] {
          auto g = client_->Get(TPUNodeGroups(), ns, name);
          return !g.ok() && g.error().code == Error::Code::kNotFound;
        },
        90s))
        << DescribeGroup(ns, name);
    ExpectNothingLeft(node_names);
  }
  void ExpectNothingLeft(const std::set<std::string>& node_names) {
    auto inv = SimInventory();
    EXPECT_EQ(inv.Total(), 0u) << inv.Describe();
    for (const auto& n : node_names) {
      auto node = client_->Get(kube::resources::Nodes(), "", n);
      EXPECT_FALSE(node.ok()) << "Node " << n << " is left";
    }
    auto secrets = client_->List(kube::resources::Secrets(), "kube-system",
                                 {.label_selector = std::string(kSecretLabelGroupUid)});
    ASSERT_TRUE(secrets.ok());
    EXPECT_TRUE(secrets->items.empty()) << secrets->items.size() << " bootstrap Secrets left";
  }

  Env* env_ = nullptr;
  std::shared_ptr<kube::Client> client_;
  InProcessOperator op_;
};

// Seed 000's example applied with kubectl, verbatim: the policy, template and MIG GCE received,
// field by field; Nodes labelled and tainted; `kubectl wait` and `kubectl get` work; deletion
// leaves nothing behind.
TEST_F(TpuOperatorTest, SeedExampleBecomesAReadySliceAndIsTornDownCompletely) {
  StartInProcessOperator();
  const std::map<std::string, int64_t> calls_before = env_->control->Counters();
  FakeKubelets kubelets(*env_);
  std::string file = (env_->dir / "seed.yaml").string();
  std::ofstream(file) << SeedExample();
  std::string kc = "KUBECONFIG=" + env_->kubeconfig + " kubectl ";
  auto [rc, out] = Shell(kc + "apply -f " + file);
  ASSERT_EQ(rc, 0) << out;

  auto [wrc, wout] = Shell(kc +
                           "wait --for=condition=Ready tpunodegroup/my-tpu-node-group -n default "
                           "--timeout=90s");
  ASSERT_EQ(wrc, 0) << wout << DescribeGroup("default", "my-tpu-node-group");
  auto group = client_->Get(TPUNodeGroups(), "default", "my-tpu-node-group").value();
  const std::string uid(group.at("metadata").at("uid").as_string());

  // What GCE holds, field by field.
  const std::string policy_name = GceName("my-tpu-node-group", kRolePolicy, uid);
  auto policy = env_->compute->GetResourcePolicy(kProject, kRegion, policy_name);
  ASSERT_TRUE(policy.ok()) << policy.error().ToString();
  EXPECT_EQ(policy->at("workloadPolicy").at("type").as_string(), "HIGH_THROUGHPUT");
  EXPECT_EQ(policy->at("workloadPolicy").at("acceleratorTopology").as_string(), "2x2x2");

  auto tmpl = env_->compute->GetInstanceTemplate(kProject,
                                                 GceName("my-tpu-node-group", kRoleTemplate, uid));
  ASSERT_TRUE(tmpl.ok()) << tmpl.error().ToString();
  const json::object& p = tmpl->at("properties").as_object();
  EXPECT_EQ(p.at("machineType").as_string(), "tpu7x-standard-4t");
  const json::object& disk = p.at("disks").at(0).as_object();
  EXPECT_EQ(disk.at("boot"), true);
  EXPECT_EQ(disk.at("initializeParams").at("sourceImage").as_string(),
            "projects/ubuntu-os-accelerator-images/global/images/"
            "ubuntu-accel-2404-amd64-tpu-tpu7x-v20260320");
  EXPECT_EQ(json::serialize(disk.at("initializeParams").at("diskSizeGb")), "\"100\"");
  EXPECT_THAT(std::string(p.at("networkInterfaces").at(0).at("subnetwork").as_string()),
              HasSubstr("projects/my-gcp-project/regions/us-central1/subnetworks/default"));
  EXPECT_EQ(p.at("scheduling").at("provisioningModel").as_string(), "RESERVATION_BOUND");
  EXPECT_EQ(p.at("scheduling").at("onHostMaintenance").as_string(), "TERMINATE");
  EXPECT_EQ(p.at("reservationAffinity").at("consumeReservationType").as_string(),
            "SPECIFIC_RESERVATION");
  EXPECT_EQ(p.at("reservationAffinity").at("key").as_string(),
            "compute.googleapis.com/reservation-name");
  EXPECT_EQ(p.at("reservationAffinity").at("values"), json::array{kReservation});
  EXPECT_EQ(p.at("labels").at(kGceLabelGroupUid).as_string(), GceLabelValue(uid));
  std::map<std::string, std::string> meta;
  for (const auto& it : p.at("metadata").at("items").as_array()) {
    meta[std::string(it.at("key").as_string())] = std::string(it.at("value").as_string());
  }
  EXPECT_EQ(meta[kMetaKubeLabels],
            "cloud.google.com/gke-accelerator-count=4,cloud.google.com/gke-tpu-accelerator=tpu7x,"
            "cloud.google.com/gke-tpu-topology=2x2x2,"
            "cloud.google.com/tpu-node-group=default-my-tpu-node-group");
  EXPECT_EQ(meta[kMetaStartupScript].rfind("#!", 0), 0u) << "not a script";
  EXPECT_THAT(meta[kMetaStartupScript], HasSubstr("kubeadm"));
  EXPECT_THAT(meta[kMetaStartupScript], HasSubstr("1.31"));

  auto mig = env_->compute->GetInstanceGroupManager(kProject, kZone,
                                                    GceName("my-tpu-node-group", kRoleMig, uid));
  ASSERT_TRUE(mig.ok()) << mig.error().ToString();
  EXPECT_EQ(mig->at("targetSizePolicy").at("mode").as_string(), "BULK");
  EXPECT_EQ(json::value_to<int64_t>(mig->at("targetSize")), 2);
  EXPECT_THAT(std::string(mig->at("resourcePolicies").at("workloadPolicy").as_string()),
              HasSubstr("regions/us-central1/resourcePolicies/" + policy_name));
  EXPECT_THAT(
      std::string(mig->at("instanceTemplate").as_string()),
      HasSubstr("global/instanceTemplates/" + GceName("my-tpu-node-group", kRoleTemplate, uid)));

  // Status: every condition True with observedGeneration; the summary counts both hosts.
  for (const char* t : {kCondResourcePolicyReady, kCondInstanceTemplateReady,
                        kCondManagedInstanceGroupReady, kCondNodesReady, kCondReady}) {
    auto c = kube::FindCondition(group, t);
    ASSERT_TRUE(c) << t;
    EXPECT_EQ(c->status, "True") << t;
    EXPECT_EQ(c->observed_generation, kube::Generation(group)) << t;
  }
  EXPECT_EQ(
      group.at("status").at("nodeSummary"),
      (json::object{{"desired", 2}, {"running", 2}, {"joined", 2}, {"ready", 2}, {"failed", 0}}));

  // Nodes: labels and taint.
  std::set<std::string> nodes = kubelets.registered();
  ASSERT_EQ(nodes.size(), 2u);
  for (const auto& n : nodes) {
    ASSERT_TRUE(Eventually([&] {
      auto node = client_->Get(kube::resources::Nodes(), "", n);
      if (!node.ok()) return false;
      const auto& labels = node->at("metadata").as_object().if_contains("labels")->as_object();
      auto label = [&](const char* k) {
        const auto* v = labels.if_contains(k);
        return v ? std::string(v->as_string()) : std::string();
      };
      bool tainted = false;
      if (const auto* taints = node->at("spec").as_object().if_contains("taints")) {
        for (const auto& t : taints->as_array()) {
          tainted |= t.at("key").as_string() == kTaintKey &&
                     t.at("value").as_string() == "present" &&
                     t.at("effect").as_string() == "NoSchedule";
        }
      }
      return label(kLabelNodeGroup) == "default-my-tpu-node-group" &&
             label(kLabelAccelerator) == "tpu7x" && label(kLabelTopology) == "2x2x2" &&
             label(kLabelAcceleratorCount) == "4" && tainted;
    })) << n;
  }
  // The device plugin is wanted while a group exists.
  EXPECT_TRUE(client_
                  ->Get(kube::resources::DaemonSets(), kOperatorNs,
                        tpu::internal::kDevicePluginDaemonSetName)
                  .ok());

  // Joined VMs keep no bootstrap token: no Secret, nothing in their metadata.
  EXPECT_TRUE(Eventually([&] {
    auto secrets = client_->List(kube::resources::Secrets(), "kube-system",
                                 {.label_selector = std::string(kSecretLabelGroupUid) + "=" + uid});
    if (!secrets.ok() || !secrets->items.empty()) return false;
    for (const auto& n : nodes) {
      auto vm = env_->compute->GetInstance(kProject, kZone, n);
      if (!vm.ok()) return false;
      const auto* md = vm->if_contains("metadata");
      if (md != nullptr && md->is_object() &&
          gce::MetadataItemsOf(md->as_object()).count(kMetaJoinToken) > 0) {
        return false;
      }
    }
    return true;
  })) << "a bootstrap token outlived the join";

  // kubectl shows the columns.
  auto [grc, gout] = Shell(kc + "get tpunodegroups -n default");
  ASSERT_EQ(grc, 0) << gout;
  EXPECT_THAT(gout, HasSubstr("TOPOLOGY"));
  EXPECT_THAT(gout, HasSubstr("READY"));
  EXPECT_THAT(gout, HasSubstr("REASON"));
  EXPECT_THAT(gout, HasSubstr("AGE"));
  EXPECT_THAT(gout, HasSubstr("2x2x2"));
  EXPECT_THAT(gout, HasSubstr("SliceReady"));

  DeleteAndExpectNothingLeft("default", "my-tpu-node-group", nodes);
  // The figure: GCE calls of one 2-host slice's life (create → Ready → delete), by method.
  const std::map<std::string, int64_t> calls_after = env_->control->Counters();
  int64_t total = 0;
  std::string by_method;
  for (const auto& [method, n] : calls_after) {
    auto b = calls_before.find(method);
    int64_t d = n - (b != calls_before.end() ? b->second : 0);
    // *.list calls are this test's (inventory), not the operator's.
    if (d <= 0 || method.ends_with(".list")) continue;
    total += d;
    by_method += " " + method + "=" + std::to_string(d);
  }
  std::printf(
      "[ figure ] GCE calls for one 2-host slice lifecycle (lists excluded, instances.get includes "
      "the test checks): %lld:%s\n",
      static_cast<long long>(total), by_method.c_str());
  EXPECT_TRUE(Eventually([&] {
    auto ds = client_->Get(kube::resources::DaemonSets(), kOperatorNs,
                           tpu::internal::kDevicePluginDaemonSetName);
    return !ds.ok() && ds.error().code == Error::Code::kNotFound;
  })) << "the device-plugin DaemonSet outlived the last group";
}

json::object V6eGroup(const std::string& ns, const std::string& name) {
  return json::object{
      {"apiVersion", kApiVersion},
      {"kind", "TPUNodeGroup"},
      {"metadata", json::object{{"name", name}, {"namespace", ns}}},
      {"spec", json::object{{"project", kProject},
                            {"nodeLocation", kV6eZone},
                            {"nodeCount", 1},
                            {"topology", "2x2"},
                            {"instanceConfig", json::object{{"machineType", "ct6e-standard-4t"},
                                                            {"provisioningModel", "SPOT"}}}}}};
}

// A single-host v6e slice needs no workload policy; a Node that stops being Ready makes the group
// not Ready with a message naming it, and Ready again when it recovers; deleting a group whose GCE
// resources were deleted by hand completes.
TEST_F(TpuOperatorTest, SingleHostV6eWorksWithoutPolicyAndReportsALostNode) {
  StartInProcessOperator();
  FakeKubelets kubelets(*env_);
  const std::string ns = testenv::TestNamespace();
  auto created = client_->Create(TPUNodeGroups(), ns, V6eGroup(ns, "v6e"));
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  ASSERT_TRUE(WaitCondition(ns, "v6e", kCondReady, "True")) << DescribeGroup(ns, "v6e");
  auto rp = Cond(ns, "v6e", kCondResourcePolicyReady);
  ASSERT_TRUE(rp);
  EXPECT_EQ(rp->status, "True");
  EXPECT_EQ(rp->reason, "NotRequired");
  auto inv = SimInventory();
  EXPECT_EQ(inv.policies.size(), 0u);
  EXPECT_EQ(inv.templates.size(), 1u);
  ASSERT_EQ(inv.migs.size(), 1u);
  EXPECT_FALSE(inv.migs[0].contains("resourcePolicies") &&
               inv.migs[0].at("resourcePolicies").as_object().contains("workloadPolicy"));
  ASSERT_EQ(inv.instances.size(), 1u);
  EXPECT_FALSE(client_->Get(ResourcePolicies(), ns, "v6e").ok());

  // The host's Node stops being Ready: the group says which one.
  std::string node(inv.instances[0].at("name").as_string());
  ASSERT_TRUE(SetNodeReady(*client_, node, false).ok());
  ASSERT_TRUE(WaitCondition(ns, "v6e", kCondReady, "False", 30s, "NodeNotReady"))
      << DescribeGroup(ns, "v6e");
  EXPECT_THAT(Cond(ns, "v6e", kCondReady)->message, HasSubstr(node));
  ASSERT_TRUE(SetNodeReady(*client_, node, true).ok());
  ASSERT_TRUE(WaitCondition(ns, "v6e", kCondReady, "True", 30s)) << DescribeGroup(ns, "v6e");

  // Someone deletes the GCE resources by hand; deleting the group still completes.
  auto group = client_->Get(TPUNodeGroups(), ns, "v6e").value();
  const std::string uid(group.at("metadata").at("uid").as_string());
  op_.Stop();  // so nothing re-creates them in between
  auto op =
      env_->compute->DeleteInstanceGroupManager(kProject, kV6eZone, GceName("v6e", kRoleMig, uid));
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  ASSERT_TRUE(env_->compute->Wait(op->ref, 30s).ok());
  op = env_->compute->DeleteInstanceTemplate(kProject, GceName("v6e", kRoleTemplate, uid));
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  ASSERT_TRUE(env_->compute->Wait(op->ref, 30s).ok());
  StartInProcessOperator();
  DeleteAndExpectNothingLeft(ns, "v6e", {node});
}

// BULK with too little capacity: no VM at all, the group not Ready with GCE's stockout reason;
// capacity arrives and the slice becomes Ready with no user action.
TEST_F(TpuOperatorTest, BulkStockoutCreatesNoVmAndRecoversWhenCapacityArrives) {
  ControlCall("POST", "/control/capacity",
              {{"zone", kStockoutZone}, {"machineType", "tpu7x-standard-4t"}, {"instances", 1}});
  StartInProcessOperator();
  FakeKubelets kubelets(*env_);
  const std::string ns = testenv::TestNamespace();
  json::object g{
      {"apiVersion", kApiVersion},
      {"kind", "TPUNodeGroup"},
      {"metadata", json::object{{"name", "short"}, {"namespace", ns}}},
      {"spec", json::object{{"project", kProject},
                            {"nodeLocation", kStockoutZone},
                            {"nodeCount", 2},
                            {"topology", "2x2x2"},
                            {"targetSizePolicyMode", "BULK"},
                            {"instanceConfig", json::object{{"machineType", "tpu7x-standard-4t"},
                                                            {"provisioningModel", "STANDARD"}}}}}};
  ASSERT_TRUE(client_->Create(TPUNodeGroups(), ns, g).ok());
  ASSERT_TRUE(WaitCondition(ns, "short", kCondReady, "False", 60s, "ZONE_RESOURCE_POOL_EXHAUSTED"))
      << DescribeGroup(ns, "short");
  auto mc = Cond(ns, "short", kCondManagedInstanceGroupReady);
  ASSERT_TRUE(mc);
  EXPECT_EQ(mc->reason, "ZONE_RESOURCE_POOL_EXHAUSTED");
  EXPECT_THAT(mc->message, HasSubstr("does not have enough resources"));
  EXPECT_EQ(SimInventory().instances.size(), 0u) << "BULK made part of a slice";

  ControlCall("POST", "/control/capacity",
              {{"zone", kStockoutZone}, {"machineType", "tpu7x-standard-4t"}, {"instances", 2}});
  ASSERT_TRUE(WaitCondition(ns, "short", kCondReady, "True", 90s)) << DescribeGroup(ns, "short");
  EXPECT_EQ(SimInventory().instances.size(), 2u);
  DeleteAndExpectNothingLeft(ns, "short", kubelets.registered());
  ControlCall("POST", "/control/capacity",
              {{"zone", kStockoutZone}, {"machineType", "tpu7x-standard-4t"}, {"instances", -1}});
}

// `hyperslice operator` killed with -9 while GCE operations are in flight, during create and
// during delete, and restarted: the same slice, no duplicate, nothing leaked; its log holds no
// token.
TEST_F(TpuOperatorTest, OperatorKilledDuringCreateAndDeleteLeaksNothing) {
  ControlCall("POST", "/control/latency", {{"operationMs", 1500}});
  FakeKubelets kubelets(*env_);
  const std::string ns = testenv::TestNamespace();
  const std::string log = (env_->dir / "operator.log").string();
  json::object g{{"apiVersion", kApiVersion},
                 {"kind", "TPUNodeGroup"},
                 {"metadata", json::object{{"name", "crashy"}, {"namespace", ns}}},
                 {"spec", json::object{{"project", kProject},
                                       {"nodeLocation", kZone},
                                       {"nodeCount", 2},
                                       {"topology", "2x2x2"},
                                       {"instanceConfig",
                                        json::object{{"machineType", "tpu7x-standard-4t"},
                                                     {"provisioningModel", "RESERVATION_BOUND"},
                                                     {"reservation", kReservation}}}}}};
  ASSERT_TRUE(client_->Create(TPUNodeGroups(), ns, g).ok());

  OperatorProcess first;
  first.Start(*env_, log);
  // Kill it while the MIG's insert operation is in flight.
  ASSERT_TRUE(Eventually(
      [&] {
        auto mig = client_->Get(ManagedInstanceGroups(), ns, "crashy");
        if (!mig.ok()) return false;
        const auto* st = mig->if_contains("status");
        return st && st->is_object() && st->as_object().contains("operation");
      },
      90s))
      << first.Log();
  first.Kill();

  OperatorProcess second;
  second.Start(*env_, log);
  ASSERT_TRUE(WaitCondition(ns, "crashy", kCondReady, "True", 90s)) << DescribeGroup(ns, "crashy");
  auto inv = SimInventory();
  EXPECT_EQ(inv.policies.size(), 1u) << inv.Describe();
  EXPECT_EQ(inv.templates.size(), 1u) << inv.Describe();
  EXPECT_EQ(inv.migs.size(), 1u) << inv.Describe();
  EXPECT_EQ(inv.instances.size(), 2u) << inv.Describe();

  // Delete, and kill it while the MIG's delete is in flight.
  ASSERT_TRUE(client_->Delete(TPUNodeGroups(), ns, "crashy").ok());
  ASSERT_TRUE(Eventually(
      [&] {
        auto mig = client_->Get(ManagedInstanceGroups(), ns, "crashy");
        if (!mig.ok()) return false;
        const auto* st = mig->if_contains("status");
        return mig->at("metadata").as_object().contains("deletionTimestamp") && st &&
               st->is_object() && st->as_object().contains("operation");
      },
      60s))
      << second.Log();
  second.Kill();
  OperatorProcess third;
  third.Start(*env_, log);
  ASSERT_TRUE(Eventually(
      [&] {
        auto gr = client_->Get(TPUNodeGroups(), ns, "crashy");
        return !gr.ok() && gr.error().code == Error::Code::kNotFound;
      },
      90s))
      << DescribeGroup(ns, "crashy");
  ExpectNothingLeft(kubelets.registered());
  EXPECT_EQ(third.Terminate(), 0) << "SIGTERM is a clean exit";
  ControlCall("POST", "/control/latency", {{"operationMs", 100}});

  std::string logs = third.Log();
  EXPECT_THAT(logs, HasSubstr("operator starting"));
  EXPECT_EQ(logs.find(env_->token), std::string::npos) << "the GCE token is in the log";
}

// Admission refuses what cannot work, saying what to change.
TEST_F(TpuOperatorTest, InvalidSpecsAreRefusedAtAdmission) {
  const std::string ns = testenv::TestNamespace();
  auto seed = [&](const std::string& name) {
    json::object g = YamlToJson(YAML::Load(SeedExample())).as_object();
    g["metadata"].as_object()["name"] = name;
    g["metadata"].as_object()["namespace"] = ns;
    return g;
  };
  // The apiserver picks a new webhook configuration up asynchronously: retry until refused.
  auto refused = [&](json::object g) -> std::string {
    std::string name(g["metadata"].as_object()["name"].as_string());
    Result<kube::Object> r = Error::Make(Error::Code::kUnknown, "not tried");
    Eventually(
        [&] {
          r = client_->Create(TPUNodeGroups(), ns, g);
          if (r.ok()) (void)client_->Delete(TPUNodeGroups(), ns, name);
          return !r.ok();
        },
        30s);
    EXPECT_FALSE(r.ok()) << name << " was admitted";
    return r.ok() ? "" : r.error().message;
  };

  auto topo = seed("wrong-topology");
  topo["spec"].as_object()["topology"] = "2x4";
  EXPECT_THAT(refused(topo), HasSubstr("spec.topology"));

  auto count = seed("wrong-count");
  count["spec"].as_object()["nodeCount"] = 3;
  EXPECT_THAT(refused(count), HasSubstr("needs nodeCount 2"));

  auto individual = seed("individual");
  individual["spec"].as_object()["targetSizePolicyMode"] = "INDIVIDUAL";
  EXPECT_THAT(refused(individual), HasSubstr("set spec.targetSizePolicyMode to BULK"));

  auto both = seed("both");
  both["spec"].as_object()["instanceTemplateURI"] =
      "projects/my-gcp-project/global/instanceTemplates/t";
  EXPECT_THAT(refused(both), HasSubstr("exactly one of instanceConfig"));

  auto foreign = seed("foreign");
  foreign["spec"].as_object().erase("instanceConfig");
  foreign["spec"].as_object()["instanceTemplateURI"] =
      "projects/someone-else/global/instanceTemplates/t";
  EXPECT_THAT(refused(foreign), HasSubstr("use a template from project my-gcp-project"));
}

}  // namespace
}  // namespace hyperslice::tpu
