// Admission for sealed control nodes through the real kube-apiserver: deploy/webhook/base's
// sealed-pods configuration pointed at an in-process webhook, a local docker-registry holding the
// signatures (cosign's format, pushed by the test). Unsigned, untrusted-key, by-tag and
// launch-policy-violating pods for a sealed control node are refused with the reason; a signed
// one, and pods that cannot land on it, are admitted.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/kube/client.h"
#include "src/runners/attest/attest.h"
#include "src/runners/policy/policy.h"
#include "src/webhook/webhook.h"
#include "test/testenv/admission_env.h"
#include "test/testenv/admission_probe.h"
#include "test/testenv/registry.h"
#include "test/testenv/testenv.h"
#include "test/unit/runners_attest/signing.h"

namespace hyperslice::webhook {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;
using runners::attest::testing::NewSigningKey;
using runners::attest::testing::SignBase64;
using runners::attest::testing::SigningKey;

const kube::Resource kControlNodes{"runners.hyperslice.dev", "v1alpha1", "controlnodes",
                                   "ControlNode", false};
const kube::Resource kWorkloadPolicies{"runners.hyperslice.dev", "v1alpha1", "workloadpolicies",
                                       "WorkloadPolicy", false};

struct SealedEnv {
  std::shared_ptr<kube::Client> client;
  std::unique_ptr<testenv::LocalRegistry> registry;
  std::unique_ptr<testenv::AdmissionEnv> admission;
  SigningKey trusted = NewSigningKey();
  SigningKey untrusted = NewSigningKey();
  std::string repo;
  std::string skip;   // why the suite cannot run here
  std::string error;  // set-up failure

  static SealedEnv& Get() {
    static SealedEnv* env = new SealedEnv();  // lives until exit, like the cluster
    return *env;
  }

  std::string Image(char c) const { return repo + "@sha256:" + std::string(64, c); }

 private:
  SealedEnv() {
    auto reg = testenv::LocalRegistry::Start();
    if (!reg.ok()) {
      skip = "no local registry (docker-registry): " + reg.error().message;
      return;
    }
    registry = std::move(*reg);
    repo = registry->host() + "/sealed/app";
    // Signatures only: admission reads the .sig tag, never the image.
    for (auto [c, key] : {std::pair{'1', &trusted}, {'3', &untrusted}}) {
      std::string payload =
          runners::attest::MakeSimpleSigning(repo, "sha256:" + std::string(64, c));
      Status st = registry->PushCosignSignature(Image(c), payload, SignBase64(*key, payload));
      if (!st.ok()) {
        error = "signature: " + st.error().ToString();
        return;
      }
    }
    ServerOptions o;
    o.source = NewApiObjectSource(testenv::AdminClient());
    runners::registry::RegistryOptions ro;
    ro.insecure_registries = {registry->host()};
    o.admission.signatures = runners::policy::NewRegistrySignatureSource(ro);
    admission = std::make_unique<testenv::AdmissionEnv>(
        "sealed-it",
        std::vector<std::string>{HS_DEPLOY_DIR "/crds/runners.hyperslice.dev_controlnodes.yaml",
                                 HS_DEPLOY_DIR
                                 "/crds/runners.hyperslice.dev_workloadpolicies.yaml"},
        std::vector<kube::Resource>{kControlNodes, kWorkloadPolicies},
        HS_DEPLOY_DIR "/webhook/base/sealed-pods.yaml", std::move(o));
    client = admission->client;
    error = admission->error;
  }
};

class SealedPodsAdmission : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SealedEnv& env = SealedEnv::Get();
    if (!env.skip.empty() || !env.error.empty()) return;
    json::object policy{
        {"apiVersion", "runners.hyperslice.dev/v1alpha1"},
        {"kind", "WorkloadPolicy"},
        {"metadata", json::object{{"name", "adm-models"}}},
        {"spec",
         json::object{
             {"trustedKeys", json::array{json::object{{"name", "release"},
                                                      {"publicKey", env.trusted.public_pem}}}},
             {"launchPolicy", json::object{{"allowedEnvOverrides", json::array{"MODEL"}}}}}}};
    (void)env.client->Create(kWorkloadPolicies, "", policy);
    for (const auto& [name, sealed] :
         std::vector<std::pair<std::string, bool>>{{"adm-sealed", true}, {"adm-open", false}}) {
      json::object spec{{"address", "127.0.0.1"}};
      if (sealed) {
        spec["sealed"] = true;
        spec["workloadPolicy"] = "adm-models";
      }
      (void)env.client->Create(kControlNodes, "",
                               json::object{{"apiVersion", "runners.hyperslice.dev/v1alpha1"},
                                            {"kind", "ControlNode"},
                                            {"metadata", json::object{{"name", name}}},
                                            {"spec", spec}});
    }
  }
  // The registry is a child process: stop it here, or it outlives the test binary (the rest of
  // the environment is in-process and dies with it).
  static void TearDownTestSuite() { SealedEnv::Get().registry.reset(); }

  void SetUp() override {
    SealedEnv& env = SealedEnv::Get();
    if (!env.skip.empty()) GTEST_SKIP() << env.skip;
    ASSERT_TRUE(env.error.empty()) << env.error;
    env_ = &env;
    ns_ = testenv::TestNamespace();
    // The apiserver picks the configuration up asynchronously: dry-run an unsigned pod for the
    // sealed node until it is refused.
    Status acted = testenv::ProbeUntil(
        [&] {
          return testenv::DryRunCreate(*env.client, kube::resources::Pods(), ns_,
                                       Pod("probe", env.Image('2'), ""));
        },
        [](const testenv::Answer& res) {
          return res.ok() && res->status == 403 && res->body.find("sealed") != std::string::npos;
        });
    if (!acted.ok()) FAIL() << "the sealed-pods webhook never acted: " << acted.error().ToString();
  }

  // A pod bound to the sealed control node's Node unless `placement` (spec fields) says else.
  json::object Pod(const std::string& name, const std::string& image,
                   const std::string& container_extra,
                   const std::string& placement = R"("nodeName":"adm-sealed")") {
    return json::parse(R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":")" + name +
                       R"("},"spec":{)" + placement +
                       R"(,"automountServiceAccountToken":false,"containers":[{"name":"main",)" +
                       R"("image":")" + image + R"(")" + container_extra + "}]}}")
        .as_object();
  }
  // The create's error message ("" when it was admitted).
  std::string Create(const json::object& pod) {
    auto r = env_->client->Create(kube::resources::Pods(), ns_, pod);
    return r.ok() ? "" : r.error().message + (r.error().http_status == 403 ? " [403]" : "");
  }

  SealedEnv* env_ = nullptr;
  std::string ns_;
};

TEST_F(SealedPodsAdmission, RefusesWhatThePolicyDoesNotAdmitWithTheReason) {
  const std::string prefix =
      "is refused by sealed control node adm-sealed: workload policy "
      "adm-models: container main: image ";
  std::string msg = Create(Pod("unsigned", env_->Image('2'), ""));
  EXPECT_NE(msg.find(prefix), std::string::npos) << msg;
  EXPECT_NE(msg.find("the image has no cosign signature [403]"), std::string::npos) << msg;
  msg = Create(Pod("untrusted", env_->Image('3'), ""));
  EXPECT_NE(msg.find("no signature verifies under a trusted key [403]"), std::string::npos) << msg;
  msg = Create(Pod("tag", env_->repo + ":v1", ""));
  EXPECT_NE(msg.find("is not pinned by digest"), std::string::npos) << msg;
  msg = Create(Pod("args", env_->Image('1'), R"(,"args":["/bin/sh"])"));
  EXPECT_NE(msg.find("overrides the image's command or args"), std::string::npos) << msg;
  msg = Create(Pod("env", env_->Image('1'), R"(,"env":[{"name":"LD_PRELOAD","value":"x"}])"));
  EXPECT_NE(msg.find("sets env LD_PRELOAD"), std::string::npos) << msg;
  // Through the scheduler: tolerating the taint, pinned by the control-node label, or not
  // pinned at all (it may land on any control node, the sealed one included).
  const std::string tolerate =
      R"("tolerations":[{"key":"runners.hyperslice.dev/control-node","operator":"Exists",)"
      R"("effect":"NoSchedule"}])";
  msg = Create(Pod("pinned", env_->Image('2'), "",
                   tolerate + R"(,"nodeSelector":{"runners.hyperslice.dev/control-node":)"
                              R"("adm-sealed"})"));
  EXPECT_NE(msg.find("the image has no cosign signature"), std::string::npos) << msg;
  msg = Create(Pod("anywhere", env_->Image('2'), "", tolerate));
  EXPECT_NE(msg.find("the image has no cosign signature"), std::string::npos) << msg;
}

TEST_F(SealedPodsAdmission, AdmitsSignedPodsAndPodsThatCannotLandOnASealedNode) {
  EXPECT_EQ(Create(Pod("signed", env_->Image('1'), R"(,"env":[{"name":"MODEL","value":"m"}])")),
            "");
  const std::string tolerate =
      R"("tolerations":[{"key":"runners.hyperslice.dev/control-node","operator":"Exists"}])";
  // Pinned to the unsealed control node: its pods are not the seal's business.
  EXPECT_EQ(Create(Pod("open", env_->Image('2'), "",
                       tolerate + R"(,"nodeSelector":{"runners.hyperslice.dev/control-node":)"
                                  R"("adm-open"})")),
            "");
  EXPECT_EQ(Create(Pod("bound-open", env_->Image('2'), "", R"("nodeName":"adm-open")")), "");
  // No toleration, no nodeName: the taint keeps it off every control node.
  EXPECT_EQ(Create(Pod("elsewhere", env_->Image('2'), "", R"("restartPolicy":"Never")")), "");
}

}  // namespace
}  // namespace hyperslice::webhook
