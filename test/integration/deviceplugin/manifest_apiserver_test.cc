// deploy/device-plugin applied to a real kube-apiserver (LocalCluster) with `kubectl apply
// --validate=strict`: the server's OpenAPI schema checks every field, so a typo or a field in the
// wrong place fails here. A deliberately broken copy must be rejected, proving the check bites.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

#include "src/localcluster/localcluster.h"

namespace hyperslice::deviceplugin {
namespace {

const std::string kDir = std::string(HS_SOURCE_DIR) + "/deploy/device-plugin";

struct KubectlRun {
  int rc;
  std::string out;
};

KubectlRun Kubectl(const localcluster::LocalCluster& cluster, const std::string& args) {
  std::string cmd = "kubectl --kubeconfig " + cluster.kubeconfig_path() + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

class DevicePluginManifestOnApiserver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("command -v kubectl >/dev/null 2>&1") != 0) return;
    auto started = localcluster::LocalCluster::Start({});
    if (!started.ok()) {
      start_error_ = started.error().message;
      return;
    }
    cluster_ = std::move(started).value().release();
    Kubectl(*cluster_, "create namespace tpu-node-group");
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (std::system("command -v kubectl >/dev/null 2>&1") != 0) GTEST_SKIP() << "no kubectl";
    ASSERT_NE(cluster_, nullptr) << "LocalCluster did not start: " << start_error_;
  }

  static localcluster::LocalCluster* cluster_;
  static std::string start_error_;
};
localcluster::LocalCluster* DevicePluginManifestOnApiserver::cluster_ = nullptr;
std::string DevicePluginManifestOnApiserver::start_error_;

TEST_F(DevicePluginManifestOnApiserver, KustomizationAppliesWithStrictValidation) {
  KubectlRun ns = Kubectl(*cluster_, "get namespace tpu-node-group");
  ASSERT_EQ(ns.rc, 0) << ns.out;
  KubectlRun apply = Kubectl(*cluster_, "apply --validate=strict -k " + kDir);
  ASSERT_EQ(apply.rc, 0) << apply.out;
  KubectlRun get = Kubectl(*cluster_,
                           "get daemonset -n tpu-node-group hyperslice-tpu-device-plugin -o "
                           "jsonpath='{.spec.template.spec.priorityClassName} "
                           "{.spec.template.spec.tolerations[0].key} "
                           "{.spec.template.spec.containers[0].args[0]}'");
  ASSERT_EQ(get.rc, 0) << get.out;
  EXPECT_EQ(get.out, "system-node-critical google.com/tpu device-plugin");
}

TEST_F(DevicePluginManifestOnApiserver, AMisplacedFieldIsRejected) {
  std::string manifest;
  {
    std::ifstream in(kDir + "/daemonset.yaml");
    manifest.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // Put hostPath's `type` one level too high: valid YAML, invalid DaemonSet.
  auto at = manifest.find("            type: Directory");
  ASSERT_NE(at, std::string::npos);
  manifest.replace(at, 27, "          tpye: Directory");
  auto dir = std::filesystem::temp_directory_path() / ("hsdp-broken-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "daemonset.yaml") << manifest;
  KubectlRun apply = Kubectl(*cluster_, "apply --validate=strict --dry-run=server -f " +
                                            (dir / "daemonset.yaml").string());
  std::filesystem::remove_all(dir);
  EXPECT_NE(apply.rc, 0) << "a broken manifest was accepted: " << apply.out;
  EXPECT_NE(apply.out.find("tpye"), std::string::npos) << apply.out;
}

}  // namespace
}  // namespace hyperslice::deviceplugin
