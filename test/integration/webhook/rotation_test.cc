// `hyperslice webhook --self-signed` renews its own certificates while the apiserver keeps calling
// it: two replicas share a Secret written by an older version (no ca.key) with lifetimes of
// seconds; they replace the CA with an overlap, renew the serving certificate, replace the CA again
// when it nears its end, and every admission the apiserver sends after the first one succeeds.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/command.h"
#include "src/kube/client.h"
#include "src/net/pki.h"
#include "test/integration/webhook/role_process.h"
#include "test/integration/webhook/worker_pod.h"
#include "test/testenv/child_process.h"
#include "test/testenv/files.h"
#include "test/testenv/testenv.h"

namespace hyperslice {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using webhook_testing::FreePort;
using webhook_testing::WebhookConfig;

std::string Base64(const std::string& in) { return Base64Encode(in); }
std::string Unbase64(std::string_view in) {
  auto decoded = Base64Decode(in);
  return decoded.ok() ? std::move(decoded).value() : std::string();
}

// The certificates of a PEM bundle, each as its base64 body (comparable).
std::vector<std::string> Certs(const std::string& pem) {
  std::vector<std::string> out;
  const std::string begin = "-----BEGIN CERTIFICATE-----", end = "-----END CERTIFICATE-----";
  for (size_t pos = pem.find(begin); pos != std::string::npos; pos = pem.find(begin, pos)) {
    size_t e = pem.find(end, pos);
    std::string body;
    for (size_t i = pos + begin.size(); i < e; ++i) {
      if (!std::isspace(static_cast<unsigned char>(pem[i]))) body += pem[i];
    }
    out.push_back(body);
    pos = e;
  }
  return out;
}

using testenv::ReadFile;

std::vector<std::string> RoleArgs(const std::string& ns, const std::string& secret, int port,
                                  const std::filesystem::path& dir, const std::string& mname,
                                  const std::string& vname) {
  return {HS_HYPERSLICE_BIN, "webhook", "--kubeconfig=" + testenv::Cluster().kubeconfig_path(),
          "--self-signed", "--self-signed-extra-sans=127.0.0.1", "--namespace=" + ns,
          "--ca-secret=" + secret, "--bind-address=127.0.0.1", "--port=" + std::to_string(port),
          "--tls-cert-file=" + (dir / "tls.crt").string(),
          "--tls-key-file=" + (dir / "tls.key").string(),
          "--mutating-webhook-configuration=" + mname,
          "--validating-webhook-configuration=" + vname, "--cluster-domain=rot.test",
          // Serve at once (the informers would wait for the TPUNodeGroup CRD this test lacks).
          "--owner-cache=none",
          // Seconds instead of years: the CA is replaced at 20 s, the serving pair renewed every
          // ~6 s.
          "--self-signed-ca-lifetime=30s", "--self-signed-cert-lifetime=9s",
          "--self-signed-check-interval=1s", "--self-signed-propagation-delay=2s"};
}

TEST(WebhookRotation, SelfSignedCertificatesRenewWithCaOverlapWhileTheApiserverKeepsCalling) {
  auto client = testenv::AdminClient();
  ASSERT_TRUE(client);
  std::string ns = testenv::TestNamespace();
  int port = FreePort();
  std::string url = "https://127.0.0.1:" + std::to_string(port);
  // Sorted first among mutating configurations: the first webhook to set a variable decides it.
  std::string mname = "0-hs-rot-" + std::to_string(getpid());
  std::string vname = "0-hs-rot-v-" + std::to_string(getpid());
  std::string secret_name = "hs-rotation-tls";
  ASSERT_TRUE(
      client
          ->Create(kube::resources::MutatingWebhookConfigurations(), "",
                   WebhookConfig("MutatingWebhookConfiguration", mname, url + "/mutate-pods", ns,
                                 "tpu-env.rot.hyperslice.dev", webhook_testing::PodCreateRules()))
          .ok());
  ASSERT_TRUE(client
                  ->Create(kube::resources::ValidatingWebhookConfigurations(), "",
                           WebhookConfig("ValidatingWebhookConfiguration", vname,
                                         url + "/validate-tpunodegroups", ns,
                                         "tpunodegroups.rot.hyperslice.dev",
                                         webhook_testing::TpuNodeGroupRules()))
                  .ok());

  // A Secret as an older hyperslice wrote it: CA certificate and serving pair, no ca.key.
  auto legacy_ca = net::pki::MakeCa("legacy-webhook-ca", std::chrono::hours(1));
  ASSERT_TRUE(legacy_ca.ok());
  net::pki::CertRequest req;
  req.common_name = "hyperslice-webhook." + ns + ".svc";
  req.ip_addresses = {"127.0.0.1"};
  req.server = true;
  auto legacy_serving = net::pki::Issue(*legacy_ca, req);
  ASSERT_TRUE(legacy_serving.ok());
  json::object secret{{"apiVersion", "v1"},
                      {"kind", "Secret"},
                      {"metadata", json::object{{"name", secret_name}}},
                      {"type", "kubernetes.io/tls"},
                      {"data", json::object{{"ca.crt", Base64(legacy_ca->cert_pem)},
                                            {"tls.crt", Base64(legacy_serving->cert_pem)},
                                            {"tls.key", Base64(legacy_serving->key_pem)}}}};
  ASSERT_TRUE(client->Create(kube::resources::Secrets(), ns, secret).ok());
  std::string legacy_body = Certs(legacy_ca->cert_pem).at(0);

  auto worker = webhook_testing::CreateStatefulSetWorker(*client, ns, "rot", json::object{});
  ASSERT_TRUE(worker.ok()) << worker.error().ToString();
  const json::object& pod = *worker;
  const std::string want = "rot-0.svc,rot-1.svc";
  // One Pod create through the webhook (dry run); true when our webhook answered it.
  int admitted = 0;
  std::vector<std::string> failures;
  auto admit = [&] {
    auto res = client->Raw("POST", kube::resources::Pods().CollectionPath(ns) + "?dryRun=All",
                           json::serialize(pod));
    bool ok = res.ok() && res->status == 201 && res->body.find(want) != std::string::npos;
    if (ok) {
      ++admitted;
    } else if (admitted > 0) {
      failures.push_back(res.ok() ? std::to_string(res->status) + " " + res->body.substr(0, 300)
                                  : res.error().ToString());
    }
    return ok;
  };
  auto bundle = [&]() -> std::vector<std::string> {
    auto cfg = client->Get(kube::resources::MutatingWebhookConfigurations(), "", mname);
    if (!cfg.ok()) return {};
    const json::object& cc = cfg->at("webhooks").as_array()[0].at("clientConfig").as_object();
    if (!cc.contains("caBundle")) return {};
    return Certs(Unbase64(cc.at("caBundle").as_string()));
  };
  auto secret_field = [&](const char* key) -> std::string {
    auto s = client->Get(kube::resources::Secrets(), ns, secret_name);
    if (!s.ok()) return "";
    const json::object& d = s->at("data").as_object();
    return d.contains(key) ? Unbase64(d.at(key).as_string()) : "";
  };
  // Polls `done` (admitting a Pod each round) until it holds or `timeout` passes.
  auto poll = [&](std::chrono::seconds timeout, const std::function<bool()>& done) {
    for (auto deadline = Clock::now() + timeout; Clock::now() < deadline;
         std::this_thread::sleep_for(100ms)) {
      admit();
      if (done()) return true;
    }
    return false;
  };

  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hs-webhook-rot-" + std::to_string(getpid()));
  std::filesystem::path dir_b = dir / "b";
  std::filesystem::create_directories(dir_b);
  // Replica A is the one the configurations call; replica B shares the Secret (and races A).
  testenv::ChildProcess a(RoleArgs(ns, secret_name, port, dir, mname, vname),
                          (dir / "a.log").string());
  testenv::ChildProcess b(RoleArgs(ns, secret_name, FreePort(), dir_b, mname, vname),
                          (dir / "b.log").string());
  a.Start();
  b.Start();
  ASSERT_TRUE(a.running());
  ASSERT_TRUE(b.running());

  // 1. The legacy CA is replaced with an overlap: the bundle holds the new and the legacy CA while
  //    the legacy serving certificate is still in use, and the apiserver calls the webhook.
  std::string ca1;
  EXPECT_TRUE(poll(60s, [&] {
    std::vector<std::string> b = bundle();
    ca1 = Certs(secret_field("ca.crt")).empty() ? "" : Certs(secret_field("ca.crt"))[0];
    return b.size() == 2 && b[1] == legacy_body && b[0] == ca1 && admitted > 0;
  })) << "no overlap bundle [new CA, legacy CA] observed";
  EXPECT_FALSE(secret_field("ca.key").empty());
  // 2. The serving certificate moves to the new CA, then the legacy CA leaves the bundle.
  EXPECT_TRUE(poll(30s, [&] {
    auto signed_by = net::pki::SignedBy(secret_field("tls.crt"), secret_field("ca.crt"));
    return signed_by.ok() && *signed_by && bundle() == std::vector<std::string>{ca1};
  })) << "legacy CA never left the bundle";
  int before_renewal = admitted;

  // 3. The serving certificate is renewed by the same CA (1/3 of 9 s before its end), and both
  //    replicas serve the renewed pair.
  std::string serving1 = secret_field("tls.crt");
  EXPECT_TRUE(poll(30s, [&] {
    std::string now = secret_field("tls.crt");
    auto signed_by = net::pki::SignedBy(now, secret_field("ca.crt"));
    return !now.empty() && now != serving1 && signed_by.ok() && *signed_by &&
           Certs(secret_field("ca.crt"))[0] == ca1;
  })) << "serving certificate not renewed";
  EXPECT_TRUE(poll(10s, [&] {
    std::string s = secret_field("tls.crt");
    return ReadFile(dir / "tls.crt") == s && ReadFile(dir_b / "tls.crt") == s;
  })) << "replicas do not serve the Secret's pair";
  EXPECT_TRUE(poll(10s, [&] { return admitted > before_renewal + 3; }));

  // 4. The CA nears its end (1/3 of 30 s): its successor joins the bundle, signs the serving
  //    certificate, and the old CA leaves.
  std::string ca2;
  EXPECT_TRUE(poll(40s, [&] {
    std::vector<std::string> b = bundle();
    if (b.size() == 2 && b[1] == ca1) ca2 = b[0];
    return !ca2.empty();
  })) << "no overlap bundle [next CA, CA] observed";
  EXPECT_TRUE(poll(30s, [&] {
    auto signed_by = net::pki::SignedBy(secret_field("tls.crt"), secret_field("ca.crt"));
    return signed_by.ok() && *signed_by && bundle() == std::vector<std::string>{ca2};
  })) << "old CA never left the bundle";
  int before_final = admitted;
  EXPECT_TRUE(poll(10s, [&] { return admitted > before_final + 3; }))
      << "apiserver cannot call the webhook with only the new CA trusted";
  EXPECT_THAT(failures, testing::IsEmpty()) << "admissions failed after the first success";
  EXPECT_GT(admitted, 20);

  // 5. Deleting the Secret starts over: a replica mints a new CA whose bundle replaces the
  //    configurations' newer-generation one, and the apiserver calls the webhook again.
  ASSERT_TRUE(client->Delete(kube::resources::Secrets(), ns, secret_name).ok());
  EXPECT_TRUE(poll(30s, [&] {
    std::vector<std::string> ca = Certs(secret_field("ca.crt"));
    std::vector<std::string> b = bundle();
    return ca.size() == 1 && ca[0] != ca2 && ca[0] != ca1 && b == ca;
  })) << "a re-created Secret's CA never reached the caBundle";
  int before_restart = admitted;
  EXPECT_TRUE(poll(20s, [&] { return admitted > before_restart + 3; }))
      << "apiserver cannot call the webhook after the Secret was re-created";

  for (testenv::ChildProcess* p : {&a, &b}) {
    ASSERT_EQ(kill(p->pid(), SIGTERM), 0);
    EXPECT_EQ(p->Wait(30s), 0) << p->Tail();
  }
  (void)client->Delete(kube::resources::MutatingWebhookConfigurations(), "", mname);
  (void)client->Delete(kube::resources::ValidatingWebhookConfigurations(), "", vname);
  std::filesystem::remove_all(dir);
}

TEST(WebhookRotation, MalformedSecretIsAClearErrorAndExitCodeAtStartup) {
  auto client = testenv::AdminClient();
  ASSERT_TRUE(client);
  std::string ns = testenv::TestNamespace();
  std::string mname = "0-hs-bad-" + std::to_string(getpid());
  std::string vname = "0-hs-bad-v-" + std::to_string(getpid());
  json::object secret{{"apiVersion", "v1"},
                      {"kind", "Secret"},
                      {"metadata", json::object{{"name", "hs-bad-tls"}}},
                      {"data", json::object{{"ca.crt", Base64("not a certificate")},
                                            {"tls.crt", Base64("nor this")},
                                            {"tls.key", Base64("nor this")}}}};
  ASSERT_TRUE(client->Create(kube::resources::Secrets(), ns, secret).ok());
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hs-webhook-bad-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  testenv::ChildProcess role(RoleArgs(ns, "hs-bad-tls", FreePort(), dir, mname, vname),
                             (dir / "role.log").string());
  role.Start();
  ASSERT_TRUE(role.running());
  // Killed when it is still running at the end (ChildProcess's destructor).
  EXPECT_EQ(role.Wait(30s), 1) << role.Tail();
  // The Secret is left as it was for the operator to inspect.
  auto after = client->Get(kube::resources::Secrets(), ns, "hs-bad-tls");
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->at("data").as_object().contains("ca.key"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hyperslice
