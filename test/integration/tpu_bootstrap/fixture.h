// Shared set-up of the bootstrap integration tests: the binary's real control plane (testenv), a
// GCE simulator per test with VMs created the way the operator creates them (an instance
// template and a MIG), and a Bootstrapper wired to both.
#pragma once

#include <chrono>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "src/gce/auth.h"
#include "src/kube/client.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/bootstrap.h"
#include "test/integration/gce/sim_fixture.h"
#include "test/testenv/testenv.h"

namespace hyperslice::tpu::testing {

namespace json = boost::json;
using gce::testing::Eventually;
using gce::testing::kProject;
using gce::testing::kZone;

inline constexpr char kControlPlane[] = "10.128.0.2";
inline constexpr char kKubeLabels[] =
    "cloud.google.com/gke-tpu-accelerator=tpu7x,cloud.google.com/gke-tpu-topology=2x2x2";

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class BootstrapTest : public gce::testing::SimTest {
 protected:
  void SetUp() override {
    gce::testing::SimTest::SetUp();
    if (HasFatalFailure()) return;
    kube_ = testenv::AdminClient();
    ASSERT_NE(kube_, nullptr);
    compute_shared_ = std::shared_ptr<gce::Compute>(
        NewCompute(gce::StaticTokenSource(control_->NewToken())).release());
    ASSERT_NE(compute_shared_, nullptr);
    auto hash = internal::CaCertHash(ReadWholeFile(testenv::Cluster().ca_cert_path()));
    ASSERT_TRUE(hash.ok()) << hash.error().ToString();
    ca_hash_ = *hash;
    group_ = NewGroup("slice");
  }

  internal::Bootstrapper NewBootstrapper(
      const std::function<void(internal::BootstrapOptions&)>& tweak = {}) {
    internal::BootstrapOptions o;
    o.ca_hash = ca_hash_;
    if (tweak) tweak(o);
    return internal::Bootstrapper(kube_, compute_shared_, o);
  }

  // A TPUNodeGroup as the parent controller hands it over (only what the bootstrap reads).
  static json::object NewGroup(const std::string& name) {
    static std::mt19937_64 rng{std::random_device{}()};
    char uid[40];
    std::snprintf(uid, sizeof uid, "%08llx-0000-4000-8000-%012llx",
                  static_cast<unsigned long long>(rng() & 0xffffffffULL),
                  static_cast<unsigned long long>(rng() & 0xffffffffffffULL));
    return {{"apiVersion", "tpu.google.com/v1alpha1"},
            {"kind", "TPUNodeGroup"},
            {"metadata", json::object{{"name", name}, {"namespace", "default"}, {"uid", uid}}},
            {"spec",
             json::object{{"bootstrapKubernetes",
                           json::object{{"version", "1.31"}, {"controlPlaneIP", kControlPlane}}}}}};
  }

  // `count` VMs through an instance template (with kube-labels and the startup script, as the
  // operator's template has) and a BULK MIG; returns them once RUNNING.
  std::vector<internal::InstanceState> MakeVms(const std::string& mig, int count) {
    auto tmpl = TemplateBody(mig + "-it");
    auto& items = tmpl["properties"].as_object()["metadata"].as_object()["items"].as_array();
    items.clear();
    items.push_back(json::object{{"key", kMetaKubeLabels}, {"value", kKubeLabels}});
    items.push_back(
        json::object{{"key", kMetaStartupScript}, {"value", internal::StartupScript("1.31")}});
    auto op = compute_->InsertInstanceTemplate(kProject, tmpl);
    EXPECT_TRUE(op.ok()) << op.error().ToString();
    if (!op.ok()) return {};
    EXPECT_TRUE(compute_->Wait(op->ref, std::chrono::seconds(30)).ok());
    auto mop = compute_->InsertInstanceGroupManager(kProject, kZone,
                                                    MigBody(mig, op->target_link, "", count));
    EXPECT_TRUE(mop.ok()) << mop.error().ToString();
    if (!mop.ok()) return {};
    std::vector<internal::InstanceState> out;
    bool running = Eventually(
        [&] {
          auto list = compute_->ListManagedInstances(kProject, kZone, mig, {});
          if (!list.ok()) return false;
          out.clear();
          for (const auto& mi : *list) {
            std::string url(mi.at("instance").as_string());
            std::string status = mi.contains("instanceStatus")
                                     ? std::string(mi.at("instanceStatus").as_string())
                                     : std::string();
            if (status != "RUNNING") return false;
            internal::InstanceState s;
            s.project = kProject;
            s.zone = kZone;
            s.name = url.substr(url.rfind('/') + 1);
            s.instance_status = status;
            s.provider_id = ProviderId(s.project, s.zone, s.name);
            out.push_back(s);
          }
          return static_cast<int>(out.size()) == count;
        },
        std::chrono::seconds(30));
    EXPECT_TRUE(running) << "MIG " << mig << " did not get " << count << " RUNNING VMs";
    return out;
  }

  gce::MetadataItems Metadata(const internal::InstanceState& vm) {
    auto inst = compute_->GetInstance(vm.project, vm.zone, vm.name);
    EXPECT_TRUE(inst.ok()) << inst.error().ToString();
    if (!inst.ok()) return {};
    return gce::MetadataItemsOf(inst->at("metadata").as_object());
  }

  std::vector<json::object> TokenSecrets(const json::object& group) {
    kube::ListOptions lo;
    lo.label_selector = std::string(kSecretLabelGroupUid) + "=" +
                        std::string(group.at("metadata").at("uid").as_string());
    auto list = kube_->ListAll(kube::resources::Secrets(), "kube-system", lo);
    EXPECT_TRUE(list.ok()) << list.error().ToString();
    return list.ok() ? list->items : std::vector<json::object>{};
  }

  // Every GCE call the simulator has served so far, by method.
  json::value GceCalls() { return control_->Call("GET", "/control/counters"); }

  std::shared_ptr<kube::Client> kube_;
  std::shared_ptr<gce::Compute> compute_shared_;
  std::string ca_hash_;
  json::object group_;
};

}  // namespace hyperslice::tpu::testing
