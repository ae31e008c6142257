// deploy/device-plugin parses and says what the issue asks of the DaemonSet. Schema validation
// against a real API server needs the control plane; `kubectl kustomize` (offline) is run when
// kubectl is on PATH.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

namespace {

const std::string kDir = std::string(HS_SOURCE_DIR) + "/deploy/device-plugin";

YAML::Node LoadDaemonSet() { return YAML::LoadFile(kDir + "/daemonset.yaml"); }

TEST(DevicePluginDaemonSet, NamespacePriorityAndImage) {
  YAML::Node ds = LoadDaemonSet();
  EXPECT_EQ(ds["apiVersion"].as<std::string>(), "apps/v1");
  EXPECT_EQ(ds["kind"].as<std::string>(), "DaemonSet");
  EXPECT_EQ(ds["metadata"]["namespace"].as<std::string>(), "tpu-node-group");
  YAML::Node pod = ds["spec"]["template"]["spec"];
  EXPECT_EQ(pod["priorityClassName"].as<std::string>(), "system-node-critical");
  // The selector must match the template's labels or the API server rejects the DaemonSet.
  for (const auto& kv : ds["spec"]["selector"]["matchLabels"]) {
    EXPECT_EQ(
        ds["spec"]["template"]["metadata"]["labels"][kv.first.as<std::string>()].as<std::string>(),
        kv.second.as<std::string>());
  }
  YAML::Node c = pod["containers"][0];
  EXPECT_EQ(c["image"].as<std::string>(), "hyperslice:latest");
  EXPECT_EQ(c["args"][0].as<std::string>(), "device-plugin");
}

TEST(DevicePluginDaemonSet, RunsOnlyOnTpuNodesAndToleratesTheirTaint) {
  YAML::Node pod = LoadDaemonSet()["spec"]["template"]["spec"];
  YAML::Node expr =
      pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
         ["nodeSelectorTerms"][0]["matchExpressions"][0];
  EXPECT_EQ(expr["key"].as<std::string>(), "cloud.google.com/gke-tpu-accelerator");
  EXPECT_EQ(expr["operator"].as<std::string>(), "Exists");
  bool tolerated = false;
  for (const auto& t : pod["tolerations"]) {
    tolerated |= t["key"].as<std::string>() == "google.com/tpu" &&
                 t["operator"].as<std::string>() == "Exists" &&
                 t["effect"].as<std::string>() == "NoSchedule";
  }
  EXPECT_TRUE(tolerated);
}

TEST(DevicePluginDaemonSet, MountsTheKubeletFolderAndDevFromTheHost) {
  YAML::Node pod = LoadDaemonSet()["spec"]["template"]["spec"];
  std::map<std::string, std::string> host_path_of;  // volume name -> host path
  for (const auto& v : pod["volumes"]) {
    host_path_of[v["name"].as<std::string>()] = v["hostPath"]["path"].as<std::string>();
  }
  std::map<std::string, std::string> mounted;  // mount path -> host path
  for (const auto& m : pod["containers"][0]["volumeMounts"]) {
    mounted[m["mountPath"].as<std::string>()] = host_path_of[m["name"].as<std::string>()];
  }
  EXPECT_EQ(mounted["/var/lib/kubelet/device-plugins"], "/var/lib/kubelet/device-plugins");
  EXPECT_EQ(mounted["/dev"], "/dev");
}

TEST(DevicePluginDaemonSet, KustomizationBuilds) {
  YAML::Node k = YAML::LoadFile(kDir + "/kustomization.yaml");
  EXPECT_EQ(k["resources"][0].as<std::string>(), "daemonset.yaml");
  if (std::system("command -v kubectl >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "kubectl not on PATH";
  }
  std::string cmd = "kubectl kustomize " + kDir + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int rc = pclose(p);
  ASSERT_EQ(rc, 0) << out;
  YAML::Node built = YAML::Load(out);
  EXPECT_EQ(built["kind"].as<std::string>(), "DaemonSet");
  EXPECT_EQ(built["metadata"]["name"].as<std::string>(), "hyperslice-tpu-device-plugin");
}

}  // namespace
