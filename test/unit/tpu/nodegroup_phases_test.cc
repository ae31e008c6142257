// The decisions of the TPUNodeGroup phases other than readiness (src/tpu/internal/
// nodegroup_phases.h), as pure functions of what the phase read: provisioning the children, nodes
// and registration, bootstrap, teardown. (The phases' apiserver calls are covered by
// test/integration/tpu_operator; their GCE side, the join values, by join_metadata_test.cc.)
#include <chrono>
#include <memory>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/net/pki.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/nodegroup_phases.h"
#include "src/tpu/internal/reasons.h"
#include "test/unit/tpu/two_host_spec.h"

namespace hyperslice::tpu::internal {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

constexpr char kGroupUid[] = "group-uid";

json::object OwnedBy(const std::string& uid) {
  return json::object{{"name", "g"},
                      {"namespace", "ns"},
                      {"uid", "child-uid"},
                      {"generation", 2},
                      {"ownerReferences", json::array{json::object{{"apiVersion", kApiVersion},
                                                                   {"kind", "TPUNodeGroup"},
                                                                   {"name", "g"},
                                                                   {"uid", uid},
                                                                   {"controller", true}}}}};
}

json::object ReadyCondition(const std::string& status, int64_t observed, const std::string& reason,
                            const std::string& message) {
  return json::object{{"type", kCondReady},
                      {"status", status},
                      {"observedGeneration", observed},
                      {"reason", reason},
                      {"message", message}};
}

kube::ObjectPtr Child(json::object status) {
  return std::make_shared<const kube::Object>(
      kube::Object{{"metadata", OwnedBy(kGroupUid)}, {"spec", json::object{}}, {"status", status}});
}

// --- provision children ----------------------------------------------------------------------

TEST(ChildStateOf, NamesWhatTheChildIsWaitingFor) {
  ChildState none = ChildStateOf(nullptr, "ResourcePolicy g");
  EXPECT_FALSE(none.exists);
  EXPECT_FALSE(none.ready);
  EXPECT_EQ(none.reason, reason::kCreating);
  EXPECT_EQ(none.message, "ResourcePolicy g not created yet");

  ChildState fresh = ChildStateOf(Child({}), "ResourcePolicy g");
  EXPECT_TRUE(fresh.exists);
  EXPECT_EQ(fresh.reason, reason::kCreating);
  EXPECT_EQ(fresh.message, "ResourcePolicy g is being created");

  // A condition about an older generation says nothing about the current spec.
  ChildState stale = ChildStateOf(
      Child({{"conditions", json::array{ReadyCondition("True", 1, "Created", "created")}}}),
      "ResourcePolicy g");
  EXPECT_FALSE(stale.ready);
  EXPECT_EQ(stale.reason, reason::kReconciling);

  ChildState ready = ChildStateOf(
      Child({{"conditions", json::array{ReadyCondition("True", 2, "Created", "created p/x")}}}),
      "ResourcePolicy g");
  EXPECT_TRUE(ready.ready);
  EXPECT_EQ(ready.reason, "Created");
  EXPECT_EQ(ready.message, "created p/x");

  ChildState failed = ChildStateOf(
      Child({{"conditions", json::array{ReadyCondition("False", 2, "", "quota")}}}), "MIG g");
  EXPECT_FALSE(failed.ready);
  EXPECT_EQ(failed.reason, "NotReady") << "an empty reason is named by the status";
}

TEST(ChildUpToDate, OnlyTheSameSpecUnderThisGroupSkipsTheApply) {
  const NodeGroupSpec s = TwoHostSpec(kGroupUid);
  const json::object spec = ResourcePolicySpec(s);
  kube::Object cached{{"metadata", OwnedBy(kGroupUid)}, {"spec", spec}};
  EXPECT_TRUE(ChildUpToDate(cached, spec, kGroupUid));

  json::object other_spec = spec;
  other_spec["workloadPolicy"].as_object()["acceleratorTopology"] = "4x4x4";
  EXPECT_FALSE(ChildUpToDate(cached, other_spec, kGroupUid)) << "spec drift is re-applied";

  EXPECT_FALSE(ChildUpToDate(cached, spec, "another-uid")) << "another group's child is taken";

  kube::Object no_spec{{"metadata", OwnedBy(kGroupUid)}};
  EXPECT_FALSE(ChildUpToDate(no_spec, spec, kGroupUid));

  kube::Object unowned{{"metadata", json::object{{"name", "g"}}}, {"spec", spec}};
  EXPECT_FALSE(ChildUpToDate(unowned, spec, kGroupUid)) << "an unowned child gets its owner";
}

TEST(MigWaiting, TheMigWaitsForBothPrerequisitesUnlessItExists) {
  const ChildState ready{true, true, "Created", ""};
  const ChildState creating{true, false, reason::kCreating, ""};
  EXPECT_FALSE(MigWaiting(ready, ready, false).has_value()) << "both Ready: create it";

  auto w = MigWaiting(creating, ready, false);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->reason, reason::kWaitingForPrerequisites);
  EXPECT_FALSE(w->exists);
  EXPECT_EQ(w->message, "waiting for ResourcePolicy to be Ready before creating the MIG");

  w = MigWaiting(creating, creating, false);
  ASSERT_TRUE(w.has_value());
  EXPECT_THAT(w->message, HasSubstr("ResourcePolicy, InstanceTemplate"));

  EXPECT_FALSE(MigWaiting(creating, creating, true).has_value())
      << "an existing MIG stays applied while a prerequisite is reconciled";
}

// --- nodes and registration --------------------------------------------------------------------

TEST(InstancesOfMig, ReadsTheVmsAndCountsRunningAndFailed) {
  const NodeGroupSpec s = TwoHostSpec(kGroupUid);
  EXPECT_TRUE(InstancesOfMig(s, nullptr).instances.empty());
  auto mig = std::make_shared<const kube::Object>(kube::Object{
      {"status",
       json::object{
           {"instances",
            json::array{json::object{{"name", "g-a"}, {"instanceStatus", "RUNNING"}},
                        json::object{{"name", "g-b"},
                                     {"zone", "us-central1-b"},
                                     {"instanceStatus", "STAGING"},
                                     {"providerID", "gce://p/us-central1-b/g-b"}},
                        json::object{{"name", "g-c"}, {"instanceStatus", "TERMINATED"}},
                        json::object{{"name", "g-d"},
                                     {"instanceStatus", "PROVISIONING"},
                                     {"lastAttempt", json::object{{"errors", json::array{}}}}},
                        "not an object"}}}}});
  MigInstances m = InstancesOfMig(s, mig);
  ASSERT_EQ(m.instances.size(), 4u);
  EXPECT_EQ(m.running, 1);
  EXPECT_EQ(m.failed, 2) << "TERMINATED, and a VM with a lastAttempt error";
  EXPECT_EQ(m.instances[0].zone, "us-central1-c") << "the spec's zone when the MIG names none";
  EXPECT_EQ(m.instances[0].provider_id, "gce://p/us-central1-c/g-a");
  EXPECT_EQ(m.instances[1].provider_id, "gce://p/us-central1-b/g-b");
  EXPECT_EQ(m.instances[1].project, "p");
}

kube::Object Node(const std::string& ready, const std::string& tpus) {
  json::object status{
      {"conditions",
       json::array{json::object{
           {"type", "Ready"}, {"status", ready}, {"reason", "KubeletReady"}, {"message", "m"}}}}};
  if (!tpus.empty()) status["allocatable"] = json::object{{kTpuResourceName, tpus}};
  return kube::Object{{"metadata", json::object{{"name", "n-1"}, {"resourceVersion", "7"}}},
                      {"status", status}};
}

TEST(JudgeNode, ReadyWithEveryChipOrSaysWhyNot) {
  EXPECT_EQ(JudgeNode(Node("True", "4"), 4).kind, NodeVerdict::Kind::kReady);
  EXPECT_EQ(JudgeNode(Node("True", ""), 4).kind, NodeVerdict::Kind::kReady)
      << "no google.com/tpu yet: the device plugin has not registered, not judged on chips";

  NodeVerdict not_ready = JudgeNode(Node("False", "4"), 4);
  EXPECT_EQ(not_ready.kind, NodeVerdict::Kind::kNotReady);
  EXPECT_EQ(not_ready.why, "node n-1 Ready=False (KubeletReady): m");

  kube::Object no_condition{{"metadata", json::object{{"name", "n-2"}}}};
  EXPECT_EQ(JudgeNode(no_condition, 4).why, "node n-2 has no Ready condition");

  NodeVerdict short_of_chips = JudgeNode(Node("True", "3"), 4);
  EXPECT_EQ(short_of_chips.kind, NodeVerdict::Kind::kChipsMissing);
  EXPECT_THAT(short_of_chips.why, HasSubstr("node n-1 has 3 of 4 TPU chips allocatable"));
}

TEST(NodeLabelPatch, AddsWhatIsMissingAndKeepsOtherTaints) {
  const NodeGroupSpec s = TwoHostSpec(kGroupUid);
  kube::Object bare = Node("True", "4");
  bare["spec"] = json::object{
      {"taints", json::array{json::object{{"key", "other"}, {"effect", "NoExecute"}}}}};
  auto patch = NodeLabelPatch(s, bare);
  ASSERT_TRUE(patch.has_value());
  const auto& meta = patch->at("metadata").as_object();
  for (const auto& [k, v] : NodeLabels(s)) EXPECT_EQ(meta.at("labels").at(k), json::value(v)) << k;
  EXPECT_EQ(meta.at("resourceVersion"), "7") << "the taint list is replaced under a version guard";
  const auto& taints = patch->at("spec").at("taints").as_array();
  ASSERT_EQ(taints.size(), 2u);
  EXPECT_EQ(taints[0].at("key"), "other");
  EXPECT_EQ(taints[1].at("key"), kTaintKey);
  EXPECT_EQ(taints[1].at("effect"), kTaintEffect);

  // Labelled and tainted: nothing to patch.
  kube::Object done = bare;
  json::object labels;
  for (const auto& [k, v] : NodeLabels(s)) labels[k] = v;
  done["metadata"].as_object()["labels"] = labels;
  done["spec"].as_object()["taints"] = taints;
  EXPECT_FALSE(NodeLabelPatch(s, done).has_value());

  // Only a label missing: a label-only patch, no version guard, the taints untouched.
  done["metadata"].as_object()["labels"].as_object().erase(kLabelNodeGroup);
  auto labels_only = NodeLabelPatch(s, done);
  ASSERT_TRUE(labels_only.has_value());
  EXPECT_FALSE(labels_only->contains("spec"));
  EXPECT_FALSE(labels_only->at("metadata").as_object().contains("resourceVersion"));
  EXPECT_EQ(labels_only->at("metadata").at("labels").as_object().size(), 1u);
}

// --- bootstrap -----------------------------------------------------------------------------------

TEST(ChooseClusterCa, FlagThenClusterInfoThenTheClientsOwn) {
  auto ca = net::pki::MakeCa("cluster-info-ca");
  ASSERT_TRUE(ca.ok()) << ca.error().ToString();
  const std::string kubeconfig =
      "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
      "    server: https://10.0.0.1:6443\n"
      "    certificate-authority-data: " +
      Base64Encode(ca->cert_pem) +
      "\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n"
      "current-context: x\nusers:\n- name: u\n  user:\n    token: t\n";
  const kube::Object info{{"data", json::object{{"kubeconfig", kubeconfig}}}};
  EXPECT_EQ(ChooseClusterCa("FLAG-CA", &info, "CLIENT-CA"), "FLAG-CA");
  EXPECT_EQ(ChooseClusterCa("", &info, "CLIENT-CA"), ca->cert_pem);
  EXPECT_EQ(ChooseClusterCa("", nullptr, "CLIENT-CA"), "CLIENT-CA") << "cluster-info unreadable";
  const kube::Object empty{{"data", json::object{}}};
  EXPECT_EQ(ChooseClusterCa("", &empty, "CLIENT-CA"), "CLIENT-CA");
  EXPECT_EQ(ChooseClusterCa("", nullptr, ""), "");
}

// kube-public/cluster-info exactly as kubeadm writes it: one cluster named "", no context.
TEST(ChooseClusterCa, ReadsKubeadmsClusterInfoWhichHasNoContext) {
  auto ca = net::pki::MakeCa("kubeadm-ca");
  ASSERT_TRUE(ca.ok()) << ca.error().ToString();
  const std::string kubeconfig =
      "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: " +
      Base64Encode(ca->cert_pem) +
      "\n    server: https://10.0.0.1:6443\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\n"
      "kind: Config\npreferences: {}\nusers: null\n";
  const kube::Object info{{"data", json::object{{"kubeconfig", kubeconfig}}}};
  EXPECT_EQ(ChooseClusterCa("", &info, "CLIENT-CA"), ca->cert_pem);
  const kube::Object garbled{
      {"data", json::object{{"kubeconfig",
                             "clusters:\n- cluster:\n    "
                             "certificate-authority-data: bm90IGEgY2VydA==\n"}}}};
  EXPECT_EQ(ChooseClusterCa("", &garbled, "CLIENT-CA"), "CLIENT-CA") << "not a certificate";
}

TEST(BootstrapRecheck, LooksAgainBeforeAWaitingVmsTokenExpires) {
  BootstrapReport report;
  EXPECT_FALSE(BootstrapRecheck(report).has_value()) << "a join wakes the group by itself";
  report.waiting = {"g-a"};
  auto again = BootstrapRecheck(report);
  ASSERT_TRUE(again.has_value());
  EXPECT_LT(*again, BootstrapOptions{}.token_ttl - BootstrapOptions{}.token_min_remaining)
      << "the token must still be usable when the group looks again";
}

// --- teardown ------------------------------------------------------------------------------------

TEST(NeedsCordon, UntilTheNodeIsUnschedulable) {
  EXPECT_TRUE(NeedsCordon(kube::Object{}));
  EXPECT_TRUE(NeedsCordon(kube::Object{{"spec", json::object{{"unschedulable", false}}}}));
  EXPECT_FALSE(NeedsCordon(kube::Object{{"spec", json::object{{"unschedulable", true}}}}));
}

TEST(TeardownChild, DeletesOnceThenWaitsAndLeavesOtherGroupsChildren) {
  EXPECT_EQ(TeardownChild(nullptr, kGroupUid, "ManagedInstanceGroup", "g").action,
            ChildTeardown::Action::kNone);

  kube::Object mine{{"metadata", OwnedBy(kGroupUid)}};
  ChildTeardown del = TeardownChild(&mine, kGroupUid, "ManagedInstanceGroup", "g");
  EXPECT_EQ(del.action, ChildTeardown::Action::kDelete);
  EXPECT_EQ(del.message, "deleting ManagedInstanceGroup g");

  mine["metadata"].as_object()["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  ChildTeardown wait = TeardownChild(&mine, kGroupUid, "ManagedInstanceGroup", "g");
  EXPECT_EQ(wait.action, ChildTeardown::Action::kWait);
  EXPECT_EQ(wait.message, "waiting for ManagedInstanceGroup g to be deleted");
  mine["status"] =
      json::object{{"conditions",
                    json::array{ReadyCondition("False", 2, "Deleting", "operation op-1 running")}}};
  EXPECT_EQ(TeardownChild(&mine, kGroupUid, "ManagedInstanceGroup", "g").message,
            "waiting for ManagedInstanceGroup g to be deleted (operation op-1 running)");

  kube::Object theirs{{"metadata", OwnedBy("another-group")}};
  EXPECT_EQ(TeardownChild(&theirs, kGroupUid, "InstanceTemplate", "g").action,
            ChildTeardown::Action::kNone)
      << "another group's child of the same name is not ours to delete";
}

}  // namespace
}  // namespace hyperslice::tpu::internal
