// `hyperslice webhook --self-signed` as a process against the real apiserver: it mints its CA into
// a Secret, writes its serving pair, sets the caBundle of the webhook configurations it is told
// about, serves admissions the apiserver sends it, and exits 0 on SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/base/command.h"
#include "src/gpu/api.h"
#include "src/kube/client.h"
#include "src/webhook/webhook.h"
#include "test/integration/webhook/role_process.h"
#include "test/integration/webhook/worker_pod.h"
#include "test/testenv/child_process.h"
#include "test/testenv/crds.h"
#include "test/testenv/testenv.h"

namespace hyperslice {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;

using webhook_testing::FreePort;
using webhook_testing::WebhookConfig;

TEST(WebhookRole, SelfSignedModeMintsCaSetsCaBundleServesAndDrainsOnSigterm) {
  auto client = testenv::AdminClient();
  ASSERT_TRUE(client);
  // Installed as deploy/ installs them: without the CRDs the webhook's caches never sync and it
  // starts serving only after its 30 s sync timeout, which this test's waits would race.
  Status crds =
      testenv::InstallCrds({HS_DEPLOY_DIR "/crds/tpu.google.com_tpunodegroups.yaml",
                            HS_DEPLOY_DIR "/crds/tgp.io_gpunodeclasses.yaml",
                            HS_DEPLOY_DIR "/crds/tgp.io_gpunodepools.yaml"},
                           {webhook::TPUNodeGroups(), gpu::GPUNodeClasses(), gpu::GPUNodePools()});
  ASSERT_TRUE(crds.ok()) << crds.error().ToString();
  std::string ns = testenv::TestNamespace();
  int port = FreePort();
  std::string url = "https://127.0.0.1:" + std::to_string(port);
  // Named to sort before any other configuration: the first mutating webhook to add a variable
  // decides its value, so the hostnames below prove this process answered.
  std::string mname = "0-hs-role-" + std::to_string(getpid());
  std::string vname = "0-hs-role-v-" + std::to_string(getpid());
  json::object mutating =
      WebhookConfig("MutatingWebhookConfiguration", mname, url + "/mutate-pods", ns,
                    "tpu-env.role.hyperslice.dev", webhook_testing::PodCreateRules());
  json::object validating =
      WebhookConfig("ValidatingWebhookConfiguration", vname, url + "/validate-tpunodegroups", ns,
                    "tpunodegroups.role.hyperslice.dev", webhook_testing::TpuNodeGroupRules());
  ASSERT_TRUE(client->Create(kube::resources::MutatingWebhookConfigurations(), "", mutating).ok());
  ASSERT_TRUE(
      client->Create(kube::resources::ValidatingWebhookConfigurations(), "", validating).ok());

  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hs-webhook-role-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::string> args = {HS_HYPERSLICE_BIN,
                                   "webhook",
                                   "--kubeconfig=" + testenv::Cluster().kubeconfig_path(),
                                   "--self-signed",
                                   "--self-signed-extra-sans=127.0.0.1",
                                   "--namespace=" + ns,
                                   "--bind-address=127.0.0.1",
                                   "--port=" + std::to_string(port),
                                   "--tls-cert-file=" + (dir / "tls.crt").string(),
                                   "--tls-key-file=" + (dir / "tls.key").string(),
                                   "--mutating-webhook-configuration=" + mname,
                                   "--validating-webhook-configuration=" + vname,
                                   "--cluster-domain=role.test"};
  testenv::ChildProcess role(args, (dir / "role.log").string());
  role.Start();
  ASSERT_TRUE(role.running());

  // The caBundle appears once the process has minted its CA.
  bool bundled = false;
  for (auto deadline = std::chrono::steady_clock::now() + 60s;
       !bundled && std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(100ms)) {
    auto cfg = client->Get(kube::resources::MutatingWebhookConfigurations(), "", mname);
    bundled = cfg.ok() &&
              cfg->at("webhooks").as_array()[0].at("clientConfig").as_object().contains("caBundle");
  }
  ASSERT_TRUE(bundled) << "caBundle never set";
  auto vcfg = client->Get(kube::resources::ValidatingWebhookConfigurations(), "", vname);
  ASSERT_TRUE(vcfg.ok());
  EXPECT_TRUE(
      vcfg->at("webhooks").as_array()[0].at("clientConfig").as_object().contains("caBundle"));
  auto secret = client->Get(kube::resources::Secrets(), ns, "hyperslice-webhook-tls");
  ASSERT_TRUE(secret.ok()) << secret.error().ToString();
  EXPECT_TRUE(secret->at("data").as_object().contains("ca.crt"));

  auto worker = webhook_testing::CreateStatefulSetWorker(
      *client, ns, "role", json::object{{"hyperslice.dev/tpu-worker-hostnames-fqdn", "true"}});
  ASSERT_TRUE(worker.ok()) << worker.error().ToString();
  const json::object& pod = *worker;
  std::string want = "role-0.svc." + ns + ".svc.role.test,role-1.svc." + ns + ".svc.role.test";
  std::string got;
  // The apiserver may still be using the configuration without caBundle for a moment.
  for (auto deadline = std::chrono::steady_clock::now() + 30s;
       std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(200ms)) {
    auto res = client->Raw("POST", kube::resources::Pods().CollectionPath(ns) + "?dryRun=All",
                           json::serialize(pod));
    if (res.ok() && res->status == 201 && res->body.find(want) != std::string::npos) {
      got = want;
      break;
    }
  }
  EXPECT_EQ(got, want);

  ASSERT_EQ(kill(role.pid(), SIGTERM), 0);
  EXPECT_EQ(role.Wait(30s), 0) << role.Tail();
  (void)client->Delete(kube::resources::MutatingWebhookConfigurations(), "", mname);
  (void)client->Delete(kube::resources::ValidatingWebhookConfigurations(), "", vname);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hyperslice
