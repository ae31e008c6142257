// The device-plugin DaemonSet object the operator applies: the fields that decide where and how
// it runs (server-side validation is in test/integration/tpu_bootstrap).
#include <string>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "src/tpu/internal/device_plugin.h"

namespace hyperslice::tpu::internal {
namespace {

namespace json = boost::json;

const json::value& At(const json::value& v, std::initializer_list<std::string_view> path) {
  const json::value* cur = &v;
  for (auto key : path) cur = &cur->as_object().at(key);
  return *cur;
}

TEST(DevicePluginDaemonSet, Shape) {
  const json::value ds = DevicePluginDaemonSet("tpu-node-group", "registry.invalid/hs:1");
  EXPECT_EQ(At(ds, {"apiVersion"}), "apps/v1");
  EXPECT_EQ(At(ds, {"kind"}), "DaemonSet");
  EXPECT_EQ(At(ds, {"metadata", "name"}), "tpu-device-plugin");
  EXPECT_EQ(At(ds, {"metadata", "namespace"}), "tpu-node-group");

  // The selector matches the pod template's labels.
  const auto& selector = At(ds, {"spec", "selector", "matchLabels"}).as_object();
  const auto& pod_labels = At(ds, {"spec", "template", "metadata", "labels"}).as_object();
  ASSERT_FALSE(selector.empty());
  for (const auto& kv : selector) {
    ASSERT_TRUE(pod_labels.contains(kv.key())) << kv.key();
    EXPECT_EQ(pod_labels.at(kv.key()), kv.value());
  }

  const auto& pod = At(ds, {"spec", "template", "spec"});
  const auto& terms =
      At(pod, {"affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
               "nodeSelectorTerms"})
          .as_array();
  ASSERT_EQ(terms.size(), 1u);
  EXPECT_EQ(
      json::serialize(terms[0]),
      R"({"matchExpressions":[{"key":"cloud.google.com/gke-tpu-accelerator","operator":"Exists"}]})");
  const auto& tolerations = At(pod, {"tolerations"}).as_array();
  ASSERT_EQ(tolerations.size(), 1u);
  EXPECT_EQ(json::serialize(tolerations[0]),
            R"({"key":"google.com/tpu","operator":"Exists","effect":"NoSchedule"})");

  const auto& containers = At(pod, {"containers"}).as_array();
  ASSERT_EQ(containers.size(), 1u);
  const auto& c = containers[0];
  EXPECT_EQ(At(c, {"image"}), "registry.invalid/hs:1");
  ASSERT_FALSE(At(c, {"args"}).as_array().empty());
  EXPECT_EQ(At(c, {"args"}).as_array()[0], "device-plugin");
  EXPECT_EQ(At(c, {"securityContext", "privileged"}), true);

  // Every mount names a hostPath volume of the pod.
  const auto& volumes = At(pod, {"volumes"}).as_array();
  std::map<std::string, std::string> host_paths;
  for (const auto& v : volumes) {
    host_paths[std::string(At(v, {"name"}).as_string())] =
        std::string(At(v, {"hostPath", "path"}).as_string());
  }
  EXPECT_EQ(host_paths["device-plugins"], "/var/lib/kubelet/device-plugins");
  EXPECT_EQ(host_paths["dev"], "/dev");
  for (const auto& m : At(c, {"volumeMounts"}).as_array()) {
    std::string name(At(m, {"name"}).as_string());
    ASSERT_TRUE(host_paths.count(name)) << name;
    EXPECT_EQ(At(m, {"mountPath"}).as_string(), host_paths[name]);
  }
}

}  // namespace
}  // namespace hyperslice::tpu::internal
