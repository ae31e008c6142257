// Seed 001's acceptance, as a user migrating from gke-tpu-env-injector would try it: its two sample
// workloads (headless Service nginx, StatefulSet web of 3, labelled; one with FOO=BAR) applied to a
// real kube-apiserver whose kube-controller-manager creates the pods, with the webhook
// configuration upstream's chart ships (path /mutate, StatefulSets and Pods, [v1beta1, v1]) pointed
// at our server, then with ours (deploy/webhook/base, /mutate-pods). Upstream's integration test
// reads web-0's env by position; so does this one, and then the whole list.
#include <chrono>
#include <functional>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/kube/client.h"
#include "src/kube/yaml.h"
#include "src/localcluster/localcluster.h"
#include "src/webhook/webhook.h"
#include "test/integration/webhook/pod_env.h"
#include "test/testenv/admission_probe.h"
#include "test/testenv/crds.h"
#include "test/testenv/files.h"
#include "test/testenv/local_webhook.h"
#include "test/unit/webhook/upstream_samples.h"

namespace hyperslice::webhook {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;
using ::testing::ElementsAre;
using Clock = std::chrono::steady_clock;

const kube::Resource& Services() {
  static const kube::Resource r{"", "v1", "services", "Service", true};
  return r;
}

using testenv::ReadFile;
using webhook_testing::EnvOf;

// `kubectl get pods web-0 -o jsonpath='{.spec.containers[0].env[i].<field>}'`: "" when absent.
std::string EnvField(const json::object& pod, size_t i, const char* field) {
  const json::value* env = pod.at("spec").at("containers").at(0).as_object().if_contains("env");
  if (env == nullptr || i >= env->as_array().size()) return "";
  const json::value* v = env->as_array()[i].as_object().if_contains(field);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : "";
}

// One control plane with kube-controller-manager (its StatefulSet controller creates the pods) and
// our webhook server in-process, for the whole binary.
class Env {
 public:
  static Env& Get() {
    static Env* env = new Env();  // lives until exit, like the cluster's processes
    return *env;
  }
  std::unique_ptr<localcluster::LocalCluster> cluster;
  std::shared_ptr<kube::Client> client;
  std::unique_ptr<testenv::LocalWebhook> webhook;
  std::string ca_bundle;  // base64 PEM of the CA that issued the server's certificate
  std::string error;

 private:
  Env() {
    localcluster::Options o;
    o.controller_manager = true;
    auto started = localcluster::LocalCluster::Start(o);
    if (!started.ok()) {
      error = "control plane: " + started.error().ToString();
      return;
    }
    cluster = std::move(*started);
    auto c = kube::Client::Create(cluster->AdminConfig());
    if (!c.ok()) {
      error = "client: " + c.error().ToString();
      return;
    }
    client = *c;
    // The TPUNodeGroup CRD, so that the webhook's informers sync (as in a cluster with deploy/).
    Status crd = testenv::InstallCrds(
        *client, {HS_DEPLOY_DIR "/crds/tpu.google.com_tpunodegroups.yaml"}, {TPUNodeGroups()});
    if (!crd.ok()) {
      error = "the TPUNodeGroup CRD: " + crd.error().ToString();
      return;
    }
    ServerOptions so;
    so.source = NewInformerObjectSource(client, 20s);
    auto w = testenv::LocalWebhook::Start("upstream-it", std::move(so));
    if (!w.ok()) {
      error = "webhook: " + w.error().ToString();
      return;
    }
    webhook = std::move(*w);
    ca_bundle = Base64Encode(webhook->ca_pem());
  }
};

class UpstreamAcceptance : public ::testing::Test {
 protected:
  void SetUp() override {
    Env& env = Env::Get();
    ASSERT_TRUE(env.error.empty()) << env.error;
    client_ = env.client;
  }

  std::string Url(const std::string& path) const { return Env::Get().webhook->url() + path; }

  // A configuration as shipped, with clientConfig.service replaced by our server's URL (same path).
  json::object PointedAtUs(json::object cfg) const {
    for (json::value& hook : cfg["webhooks"].as_array()) {
      json::object& h = hook.as_object();
      std::string path(h["clientConfig"].as_object()["service"].as_object()["path"].as_string());
      h["clientConfig"] = json::object{{"url", Url(path)}, {"caBundle", Env::Get().ca_bundle}};
    }
    return cfg;
  }

  void CreateNamespace(const std::string& ns) {
    auto created = client_->Create(
        kube::resources::Namespaces(), "",
        json::object{
            {"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", json::object{{"name", ns}}}});
    ASSERT_TRUE(created.ok()) << created.error().ToString();
  }

  // Retries a dry-run create until `done` holds for what the apiserver answered: configurations
  // take effect asynchronously, and the dry run shows what the admission chain does right now.
  bool DryRunUntil(const kube::Resource& r, const std::string& ns, const json::object& obj,
                   const std::function<bool(const testenv::Answer&)>& done) {
    return testenv::ProbeUntil([&] { return testenv::DryRunCreate(*client_, r, ns, obj); }, done,
                               60s)
        .ok();
  }
  static bool Created(const Result<net::Response>& r) { return r.ok() && r->status == 201; }
  static bool Has(const Result<net::Response>& r, std::string_view s) {
    return Created(r) && r->body.find(s) != std::string::npos;
  }

  // Applies a sample in its own namespace, as `kubectl apply -f` would, and returns web-0 once the
  // StatefulSet controller has created it.
  Result<kube::Object> ApplySampleAndGetWeb0(const std::string& ns, bool with_extra_env) {
    CreateNamespace(ns);
    HS_ASSIGN_OR_RETURN(std::vector<kube::Object> objects,
                        kube::ObjectsFromYaml(upstream::Sample(with_extra_env)));
    HS_RETURN_IF_ERROR(client_->Create(Services(), ns, objects[0]));
    HS_RETURN_IF_ERROR(client_->Create(kube::resources::StatefulSets(), ns, objects[1]));
    Result<kube::Object> pod = Error::Make(Error::Code::kTimeout, "web-0 was never created");
    for (auto deadline = Clock::now() + 120s; Clock::now() < deadline;
         std::this_thread::sleep_for(200ms)) {
      pod = client_->Get(kube::resources::Pods(), ns, "web-0");
      if (pod.ok()) return pod;
    }
    return Error::Make(Error::Code::kTimeout, "the StatefulSet controller never created web-0 in " +
                                                  ns + ": " + pod.error().ToString());
  }

  // Upstream's scripts/integration_test.sh, both halves, then the whole list.
  void ExpectUpstreamAssertions(const std::string& ns_prefix) {
    auto bare = ApplySampleAndGetWeb0(ns_prefix + "-bare", false);
    ASSERT_TRUE(bare.ok()) << bare.error().ToString();
    EXPECT_EQ(EnvField(*bare, 0, "name"), "TPU_WORKER_HOSTNAMES");
    EXPECT_EQ(EnvField(*bare, 0, "value"), upstream::kHostnames);
    EXPECT_THAT(EnvOf(bare->at("spec").as_object()),
                ElementsAre(std::string("TPU_WORKER_HOSTNAMES=") + upstream::kHostnames,
                            "TPU_WORKER_ID=0"));

    auto foo = ApplySampleAndGetWeb0(ns_prefix + "-foo", true);
    ASSERT_TRUE(foo.ok()) << foo.error().ToString();
    EXPECT_EQ(EnvField(*foo, 0, "name"), "FOO");
    EXPECT_EQ(EnvField(*foo, 1, "name"), "TPU_WORKER_HOSTNAMES");
    EXPECT_EQ(EnvField(*foo, 1, "value"), upstream::kHostnames);
    EXPECT_THAT(EnvOf(foo->at("spec").as_object()),
                ElementsAre("FOO=BAR", std::string("TPU_WORKER_HOSTNAMES=") + upstream::kHostnames,
                            "TPU_WORKER_ID=0"));
  }

  // Registers `cfg` (pointed at us); its name goes to *name.
  void Register(const json::object& cfg, std::string* name) {
    *name = std::string(cfg.at("metadata").at("name").as_string());
    ASSERT_TRUE(client_->Create(kube::resources::MutatingWebhookConfigurations(), "", cfg).ok());
  }

  // A namespace `ns` and, in *sts, the samples' StatefulSet renamed `name` to probe in it.
  void ProbeIn(const std::string& ns, const std::string& name, json::object* sts) {
    CreateNamespace(ns);
    auto sample = kube::ObjectsFromYaml(upstream::Sample(false));
    ASSERT_TRUE(sample.ok());
    *sts = (*sample)[1];
    (*sts)["metadata"].as_object()["name"] = name;
  }

  std::shared_ptr<kube::Client> client_;
};

TEST_F(UpstreamAcceptance, UpstreamChartsConfigurationPointedAtUs) {
  auto docs = kube::ObjectsFromYaml(upstream::WebhookConfiguration());
  ASSERT_TRUE(docs.ok()) << docs.error().ToString();
  std::string name;
  ASSERT_NO_FATAL_FAILURE(Register(PointedAtUs((*docs)[0]), &name));

  // Live once a labelled StatefulSet comes back with the variable in its template.
  const std::string probe_ns = "upstream-probe";
  json::object probe;
  ASSERT_NO_FATAL_FAILURE(ProbeIn(probe_ns, "probe", &probe));
  ASSERT_TRUE(DryRunUntil(kube::resources::StatefulSets(), probe_ns, probe, [](const auto& r) {
    return Has(r, "TPU_WORKER_HOSTNAMES");
  })) << "the apiserver never called /mutate for a labelled StatefulSet";

  ExpectUpstreamAssertions("upstream-cfg");

  // UPDATE goes through /mutate too: the template keeps one TPU_WORKER_HOSTNAMES (upstream would
  // append a second), and a scale through the spec updates it.
  const std::string ns = "upstream-cfg-foo";
  auto relabelled =
      client_->Patch(kube::resources::StatefulSets(), ns, "web", kube::PatchType::kMerge,
                     R"({"metadata":{"labels":{"team":"ml"}}})");
  ASSERT_TRUE(relabelled.ok()) << relabelled.error().ToString();
  const json::object& tmpl_spec = relabelled->at("spec").at("template").at("spec").as_object();
  EXPECT_THAT(EnvOf(tmpl_spec),
              ElementsAre("FOO=BAR", std::string("TPU_WORKER_HOSTNAMES=") + upstream::kHostnames));
  auto scaled = client_->Patch(kube::resources::StatefulSets(), ns, "web", kube::PatchType::kMerge,
                               R"({"spec":{"replicas":4}})");
  ASSERT_TRUE(scaled.ok()) << scaled.error().ToString();
  EXPECT_THAT(EnvOf(scaled->at("spec").at("template").at("spec").as_object()),
              ElementsAre("FOO=BAR",
                          "TPU_WORKER_HOSTNAMES=web-0.nginx,web-1.nginx,web-2.nginx,"
                          "web-3.nginx"));

  // Gone again (for the next test): a labelled StatefulSet is stored as sent.
  ASSERT_TRUE(client_->Delete(kube::resources::MutatingWebhookConfigurations(), "", name).ok());
  ASSERT_TRUE(DryRunUntil(kube::resources::StatefulSets(), probe_ns, probe, [](const auto& r) {
    return Created(r) && !Has(r, "TPU_WORKER_HOSTNAMES");
  })) << "the deleted configuration kept acting";
}

TEST_F(UpstreamAcceptance, OurShippedConfiguration) {
  // deploy/webhook/base's MutatingWebhookConfiguration (Pods only, /mutate-pods).
  auto docs = kube::ObjectsFromYaml(ReadFile(HS_DEPLOY_DIR "/webhook/base/webhooks.yaml"));
  ASSERT_TRUE(docs.ok()) << docs.error().ToString();
  json::object cfg;
  for (const kube::Object& d : *docs) {
    if (d.at("kind").as_string() == "MutatingWebhookConfiguration") cfg = PointedAtUs(d);
  }
  ASSERT_FALSE(cfg.empty());
  std::string name;
  ASSERT_NO_FATAL_FAILURE(Register(cfg, &name));

  // Live once a pod of a StatefulSet comes back with its worker id.
  const std::string probe_ns = "ours-probe";
  json::object sts;
  ASSERT_NO_FATAL_FAILURE(ProbeIn(probe_ns, "probe", &sts));
  sts["spec"].as_object()["replicas"] = 0;  // the controller creates nothing; the dry run does
  auto created = client_->Create(kube::resources::StatefulSets(), probe_ns, sts);
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  json::object pod{
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", json::object{{"name", "probe-0"},
                                {"labels", json::object{{kCompatInjectLabel, "enabled"}}},
                                {"ownerReferences", json::array{json::object{
                                                        {"apiVersion", "apps/v1"},
                                                        {"kind", "StatefulSet"},
                                                        {"name", "probe"},
                                                        {"uid", created->at("metadata").at("uid")},
                                                        {"controller", true}}}}}},
      {"spec",
       json::object{{"containers", json::array{json::object{{"name", "c"}, {"image", "nginx"}}}}}}};
  // Ordinal 0 of 0 replicas: the webhook denies with the reason, which proves it answered.
  ASSERT_TRUE(DryRunUntil(kube::resources::Pods(), probe_ns, pod, [](const auto& r) {
    return r.ok() && r->body.find("outside StatefulSet") != std::string::npos;
  })) << "the apiserver never called /mutate-pods";

  ExpectUpstreamAssertions("ours-cfg");

  ASSERT_TRUE(client_->Delete(kube::resources::MutatingWebhookConfigurations(), "", name).ok());
  ASSERT_TRUE(DryRunUntil(kube::resources::Pods(), probe_ns, pod, [](const auto& r) {
    return Created(r);
  })) << "the deleted configuration kept acting";
}

}  // namespace
}  // namespace hyperslice::webhook
