#include "src/kube/object_helpers.h"

#include <chrono>

#include <gtest/gtest.h>
#include <boost/json.hpp>

namespace hyperslice::kube {
namespace {

namespace json = boost::json;

Object Obj(const std::string& api_version, const std::string& kind, const std::string& ns,
           const std::string& name, const std::string& uid) {
  json::object md{{"name", name}};
  if (!ns.empty()) md["namespace"] = ns;
  if (!uid.empty()) md["uid"] = uid;
  return Object{{"apiVersion", api_version}, {"kind", kind}, {"metadata", md}};
}

TEST(OwnerReferences, SetControllerReferenceAddsAControllerRef) {
  Object owner = Obj("tpu.google.com/v1alpha1", "TPUNodeGroup", "ns", "g", "uid-1");
  Object child = Obj("v1", "ConfigMap", "ns", "c", "");
  auto changed = SetControllerReference(owner, child);
  ASSERT_TRUE(changed.ok()) << changed.error().ToString();
  EXPECT_TRUE(*changed);
  const auto& refs = child["metadata"].as_object().at("ownerReferences").as_array();
  ASSERT_EQ(refs.size(), 1u);
  EXPECT_EQ(refs[0], (json::value{{"apiVersion", "tpu.google.com/v1alpha1"},
                                  {"kind", "TPUNodeGroup"},
                                  {"name", "g"},
                                  {"uid", "uid-1"},
                                  {"controller", true},
                                  {"blockOwnerDeletion", true}}));
  EXPECT_TRUE(HasOwner(child, owner));
  EXPECT_TRUE(HasOwnerUid(child, "uid-1"));
  EXPECT_EQ(ControllerUid(child), "uid-1");
  auto again = SetControllerReference(owner, child);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again) << "setting the same reference twice is not a change";
}

TEST(OwnerReferences, ASecondControllerIsRefused) {
  Object a = Obj("tpu.google.com/v1alpha1", "TPUNodeGroup", "ns", "a", "uid-a");
  Object b = Obj("tpu.google.com/v1alpha1", "TPUNodeGroup", "ns", "b", "uid-b");
  Object child = Obj("v1", "ConfigMap", "ns", "c", "");
  ASSERT_TRUE(SetControllerReference(a, child).ok());
  auto r = SetControllerReference(b, child);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "AlreadyOwned");
  EXPECT_EQ(r.error().code, Error::Code::kAlreadyExists);
  // A plain owner reference is allowed alongside.
  auto plain = SetOwnerReference(b, child);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(*plain);
  EXPECT_TRUE(HasOwner(child, b));
  EXPECT_EQ(ControllerUid(child), "uid-a");
}

TEST(OwnerReferences, CrossNamespaceAndClusterScopedChildrenAreRefused) {
  Object owner = Obj("tpu.google.com/v1alpha1", "TPUNodeGroup", "ns", "g", "uid-1");
  Object other_ns = Obj("v1", "ConfigMap", "other", "c", "");
  Object node = Obj("v1", "Node", "", "n", "");
  EXPECT_EQ(SetControllerReference(owner, other_ns).error().code, Error::Code::kInvalidArgument);
  EXPECT_EQ(SetControllerReference(owner, node).error().code, Error::Code::kInvalidArgument);
  // A cluster-scoped owner may own anything.
  Object cluster_owner = Obj("tgp.io/v1", "GPUNodeClass", "", "cls", "uid-c");
  EXPECT_TRUE(SetControllerReference(cluster_owner, node).ok());
  EXPECT_TRUE(SetControllerReference(cluster_owner, other_ns).ok());
  // An owner without a uid (not read from the server) is a bug.
  Object no_uid = Obj("v1", "ConfigMap", "ns", "x", "");
  Object child = Obj("v1", "ConfigMap", "ns", "c", "");
  EXPECT_FALSE(SetControllerReference(no_uid, child).ok());
}

TEST(Finalizers, AddRemoveHas) {
  Object o = Obj("v1", "ConfigMap", "ns", "c", "u");
  EXPECT_FALSE(HasFinalizer(o, "hyperslice.dev/teardown"));
  EXPECT_TRUE(AddFinalizer(o, "hyperslice.dev/teardown"));
  EXPECT_FALSE(AddFinalizer(o, "hyperslice.dev/teardown"));
  EXPECT_TRUE(AddFinalizer(o, "other/f"));
  EXPECT_TRUE(HasFinalizer(o, "hyperslice.dev/teardown"));
  EXPECT_EQ(o["metadata"].as_object()["finalizers"].as_array().size(), 2u);
  EXPECT_TRUE(RemoveFinalizer(o, "hyperslice.dev/teardown"));
  EXPECT_FALSE(RemoveFinalizer(o, "hyperslice.dev/teardown"));
  EXPECT_FALSE(HasFinalizer(o, "hyperslice.dev/teardown"));
  EXPECT_TRUE(HasFinalizer(o, "other/f"));
}

TEST(Finalizers, RemovalPatchTestsTheListItRemovesFrom) {
  Object o = Obj("v1", "X", "ns", "x", "u");
  EXPECT_EQ(RemoveFinalizerPatch(o, "a/f"), "");  // no finalizers at all
  AddFinalizer(o, "a/f");
  AddFinalizer(o, "b/g");
  EXPECT_EQ(RemoveFinalizerPatch(o, "c/h"), "");  // not ours to remove
  EXPECT_EQ(
      boost::json::parse(RemoveFinalizerPatch(o, "a/f")),
      boost::json::parse(R"([{"op":"test","path":"/metadata/finalizers","value":["a/f","b/g"]},
                                   {"op":"replace","path":"/metadata/finalizers","value":["b/g"]}])"));
}

TEST(Conditions, TransitionTimeMovesOnlyWhenStatusChanges) {
  using std::chrono::seconds;
  Object o = Obj("v1", "X", "ns", "x", "u");
  o["metadata"].as_object()["generation"] = 3;
  auto t0 = std::chrono::system_clock::from_time_t(1700000000);  // 2023-11-14T22:13:20Z
  EXPECT_TRUE(SetCondition(o, {"Ready", "False", "Provisioning", "waiting for VMs", 3, ""}, t0));
  auto c = FindCondition(o, "Ready");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->last_transition_time, "2023-11-14T22:13:20Z");
  EXPECT_EQ(c->observed_generation, 3);
  EXPECT_EQ(Generation(o), 3);

  // Same status, new message and generation: updated in place, transition time kept.
  EXPECT_TRUE(
      SetCondition(o, {"Ready", "False", "Provisioning", "2 of 4 VMs", 4, ""}, t0 + seconds(60)));
  c = FindCondition(o, "Ready");
  EXPECT_EQ(c->message, "2 of 4 VMs");
  EXPECT_EQ(c->observed_generation, 4);
  EXPECT_EQ(c->last_transition_time, "2023-11-14T22:13:20Z");

  // Identical: no change reported.
  EXPECT_FALSE(
      SetCondition(o, {"Ready", "False", "Provisioning", "2 of 4 VMs", 4, ""}, t0 + seconds(90)));

  // Status flips: transition time moves.
  EXPECT_TRUE(SetCondition(o, {"Ready", "True", "AllNodesReady", "", 4, ""}, t0 + seconds(120)));
  c = FindCondition(o, "Ready");
  EXPECT_EQ(c->status, "True");
  EXPECT_EQ(c->last_transition_time, "2023-11-14T22:15:20Z");
  EXPECT_TRUE(IsConditionTrue(o, "Ready"));

  EXPECT_TRUE(SetCondition(o, {"NodesReady", "Unknown", "Pending", "", 4, ""}, t0));
  EXPECT_EQ(o["status"].as_object()["conditions"].as_array().size(), 2u);
  EXPECT_TRUE(RemoveCondition(o, "NodesReady"));
  EXPECT_FALSE(FindCondition(o, "NodesReady"));
  EXPECT_FALSE(IsConditionTrue(o, "NodesReady"));
}

TEST(ParseTime, ReadsEveryRfc3339FormTheApiAndKubeconfigsUse) {
  using std::chrono::system_clock;
  const auto base = system_clock::from_time_t(1795000000);  // 2026-11-18T11:06:40Z
  EXPECT_EQ(ParseTime("2026-11-18T11:06:40Z"), base);
  EXPECT_EQ(ParseTime("2026-11-18T11:06:40z"), base);
  EXPECT_EQ(ParseTime("2026-11-18T13:06:40+02:00"), base);
  EXPECT_EQ(ParseTime("2026-11-18T06:36:40-04:30"), base);
  EXPECT_EQ(ParseTime("2026-11-18T13:06:40.25+02:00"), base + std::chrono::microseconds(250000));
  // Far-future expiries (kubeconfig exec credentials say 9999) clamp instead of overflowing.
  auto far = ParseTime("9999-12-31T23:59:59Z");
  ASSERT_TRUE(far);
  EXPECT_GT(*far, base);
  for (const char* bad : {"", "2026-11-18T07:06:40", "2026-11-18T07:06:40+2:00",
                          "2026-11-18T07:06:40+02:60", "2026-11-18 07:06:40Z", "yesterday"}) {
    EXPECT_FALSE(ParseTime(bad)) << bad;
  }
}

}  // namespace
}  // namespace hyperslice::kube
