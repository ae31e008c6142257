// The webhook through the real kube-apiserver: the webhook runs in-process on 127.0.0.1 with a
// certificate from src/net/pki; the Mutating/ValidatingWebhookConfigurations are deploy/webhook's,
// pointed at it by URL with our caBundle; the CRD is deploy/crds'. There is no
// kube-controller-manager, so the tests create the Pods the StatefulSet/Job controllers would
// (same owner references, labels and annotations) and read back what the apiserver stored.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>

#include "src/kube/client.h"
#include "src/kube/yaml.h"
#include "src/webhook/self_signed.h"
#include "src/webhook/webhook.h"
#include "test/integration/webhook/pod_env.h"
#include "test/testenv/admission_env.h"
#include "test/testenv/admission_probe.h"
#include "test/testenv/examples.h"
#include "test/testenv/testenv.h"

namespace hyperslice::webhook {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using kube::YamlToJson;

using webhook_testing::PodEnvOf;

json::object Parse(const std::string& s) { return json::parse(s).as_object(); }

// One webhook server and its registration for the whole binary (the cluster is shared too): the
// CRD, the in-process webhook and deploy/webhook/base/webhooks.yaml pointed at it.
testenv::AdmissionEnv& Env() {
  static auto* env = new testenv::AdmissionEnv(  // lives until exit, like the cluster
      "webhook-it", {HS_DEPLOY_DIR "/crds/tpu.google.com_tpunodegroups.yaml"}, {TPUNodeGroups()},
      HS_DEPLOY_DIR "/webhook/base/webhooks.yaml");
  return *env;
}

class WebhookIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    testenv::AdmissionEnv& env = Env();
    ASSERT_TRUE(env.error.empty()) << env.error;
    client_ = env.client;
    ns_ = testenv::TestNamespace();
  }

  kube::Object MustCreate(const kube::Resource& r, const json::object& obj) {
    auto created = client_->Create(r, ns_, obj);
    EXPECT_TRUE(created.ok()) << created.error().ToString();
    return created.ok() ? *created : kube::Object{};
  }

  // The apiserver picks new webhook configurations up asynchronously: create (dry-run) the probe
  // until the webhook has acted on it, then run the real create (which the test then checks, so a
  // webhook that never acts fails there).
  Result<kube::Object> CreateOnceWebhookActive(
      const kube::Resource& r, const json::object& obj,
      const std::function<bool(const testenv::Answer&)>& acted) {
    (void)testenv::ProbeUntil([&] { return testenv::DryRunCreate(*client_, r, ns_, obj); }, acted);
    return client_->Create(r, ns_, obj);
  }

  json::object StatefulSet(const std::string& name, const std::string& service, int replicas,
                           const json::object& pod_spec, const json::object& labels) {
    return json::object{
        {"apiVersion", "apps/v1"},
        {"kind", "StatefulSet"},
        {"metadata", json::object{{"name", name}, {"namespace", ns_}}},
        {"spec",
         json::object{{"serviceName", service},
                      {"replicas", replicas},
                      {"selector", json::object{{"matchLabels", json::object{{"app", name}}}}},
                      {"template", json::object{{"metadata", json::object{{"labels", labels}}},
                                                {"spec", pod_spec}}}}}};
  }

  // The Pod the StatefulSet controller would create for `ordinal`.
  json::object StatefulSetPod(const kube::Object& sts, int ordinal) {
    std::string name(sts.at("metadata").at("name").as_string());
    json::object tmpl = sts.at("spec").at("template").as_object();
    json::object meta = tmpl["metadata"].as_object();
    json::object labels = meta["labels"].as_object();
    labels["apps.kubernetes.io/pod-index"] = std::to_string(ordinal);
    labels["statefulset.kubernetes.io/pod-name"] = name + "-" + std::to_string(ordinal);
    json::object spec = tmpl["spec"].as_object();
    spec["hostname"] = name + "-" + std::to_string(ordinal);
    spec["subdomain"] = sts.at("spec").at("serviceName");
    return json::object{
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", json::object{{"name", name + "-" + std::to_string(ordinal)},
                                  {"namespace", ns_},
                                  {"labels", labels},
                                  {"ownerReferences",
                                   json::array{json::object{{"apiVersion", "apps/v1"},
                                                            {"kind", "StatefulSet"},
                                                            {"name", name},
                                                            {"uid", sts.at("metadata").at("uid")},
                                                            {"controller", true},
                                                            {"blockOwnerDeletion", true}}}}}},
        {"spec", spec}};
  }

  static bool HasEnv(const Result<net::Response>& res, std::string_view var) {
    return res.ok() && res->status == 201 && res->body.find(var) != std::string::npos;
  }

  std::shared_ptr<kube::Client> client_;
  std::string ns_;
};

TEST_F(WebhookIntegration, StatefulSetPodGetsHostnamesThenWorkerIdAfterItsOwnEnv) {
  json::object pod_spec = Parse(R"({"containers":[{"name":"main","image":"busybox",
      "env":[{"name":"A","value":"1"},{"name":"B","value":"2"}]}]})");
  kube::Object sts =
      MustCreate(kube::resources::StatefulSets(),
                 StatefulSet("web", "nginx", 3, pod_spec,
                             json::object{{"app", "web"}, {kCompatInjectLabel, "enabled"}}));
  ASSERT_FALSE(sts.empty());
  auto pod = CreateOnceWebhookActive(kube::resources::Pods(), StatefulSetPod(sts, 1),
                                     [](const auto& r) { return HasEnv(r, "TPU_WORKER_ID"); });
  ASSERT_TRUE(pod.ok()) << pod.error().ToString();
  auto stored = client_->Get(kube::resources::Pods(), ns_, "web-1");
  ASSERT_TRUE(stored.ok());
  EXPECT_THAT(PodEnvOf(*stored),
              ElementsAre("A=1", "B=2", "TPU_WORKER_HOSTNAMES=web-0.nginx,web-1.nginx,web-2.nginx",
                          "TPU_WORKER_ID=1"));
}

TEST_F(WebhookIntegration, ScaledStatefulSetIsReadFresh) {
  json::object pod_spec = Parse(R"({"containers":[{"name":"main","image":"busybox",
      "resources":{"limits":{"google.com/tpu":"4"},"requests":{"google.com/tpu":"4"}}}]})");
  kube::Object sts =
      MustCreate(kube::resources::StatefulSets(),
                 StatefulSet("grow", "svc", 1, pod_spec, json::object{{"app", "grow"}}));
  ASSERT_FALSE(sts.empty());
  auto first = CreateOnceWebhookActive(kube::resources::Pods(), StatefulSetPod(sts, 0),
                                       [](const auto& r) { return HasEnv(r, "TPU_WORKER_ID"); });
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  EXPECT_THAT(PodEnvOf(*first), ElementsAre("TPU_WORKER_HOSTNAMES=grow-0.svc", "TPU_WORKER_ID=0"));
  // Scale to 2 and create ordinal 1 at once: a cache that has not seen the update yet must not
  // answer with one hostname (the webhook re-reads the StatefulSet live when its copy is stale).
  auto scaled = client_->Patch(kube::resources::StatefulSets(), ns_, "grow",
                               kube::PatchType::kMerge, R"({"spec":{"replicas":2}})");
  ASSERT_TRUE(scaled.ok()) << scaled.error().ToString();
  auto second = client_->Create(kube::resources::Pods(), ns_, StatefulSetPod(*scaled, 1));
  ASSERT_TRUE(second.ok()) << second.error().ToString();
  EXPECT_THAT(PodEnvOf(*second),
              ElementsAre("TPU_WORKER_HOSTNAMES=grow-0.svc,grow-1.svc", "TPU_WORKER_ID=1"));
}

TEST_F(WebhookIntegration, IndexedJobPodGetsCompletionIndexAndFourHostnames) {
  json::object job = Parse(R"({"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"train"},
      "spec":{"completionMode":"Indexed","completions":4,"parallelism":4,
        "template":{"spec":{"subdomain":"workers","restartPolicy":"Never",
          "containers":[{"name":"main","image":"busybox",
            "resources":{"limits":{"google.com/tpu":"4"},"requests":{"google.com/tpu":"4"}}}]}}}})");
  kube::Object created = MustCreate(kube::resources::Jobs(), job);
  ASSERT_FALSE(created.empty());
  json::object tmpl = created.at("spec").at("template").as_object();
  json::object labels = tmpl["metadata"].as_object()["labels"].as_object();
  labels["batch.kubernetes.io/job-completion-index"] = "2";
  json::object spec = tmpl["spec"].as_object();
  spec["hostname"] = "train-2";
  json::object pod{
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       json::object{
           {"name", "train-2-x7k2p"},
           {"namespace", ns_},
           {"labels", labels},
           {"annotations", json::object{{"batch.kubernetes.io/job-completion-index", "2"}}},
           {"ownerReferences", json::array{json::object{{"apiVersion", "batch/v1"},
                                                        {"kind", "Job"},
                                                        {"name", "train"},
                                                        {"uid", created.at("metadata").at("uid")},
                                                        {"controller", true},
                                                        {"blockOwnerDeletion", true}}}}}},
      {"spec", spec}};
  auto stored = CreateOnceWebhookActive(kube::resources::Pods(), pod,
                                        [](const auto& r) { return HasEnv(r, "TPU_WORKER_ID"); });
  ASSERT_TRUE(stored.ok()) << stored.error().ToString();
  EXPECT_THAT(PodEnvOf(*stored),
              ElementsAre("TPU_WORKER_HOSTNAMES=train-0.workers,train-1.workers,train-2.workers,"
                          "train-3.workers",
                          "TPU_WORKER_ID=2"));
}

// Seed 000's TPUNodeGroup example as deploy/examples ships it, in namespace `ns`.
json::object SeedNodeGroup(const std::string& ns) {
  std::string yaml = testenv::Example("tpunodegroup.yaml", "tpu7x-2x2x2.env", {{"NAMESPACE", ns}});
  return YamlToJson(YAML::Load(yaml)).as_object();
}

// Seed 000's StatefulSet pod template as deploy/examples/tpu-workload.yaml ships it, for namespace
// `ns`, without the topology variables the example sets by hand (the webhook adds them), or with
// the two the hand-set case keeps (TPU_TOPOLOGY, TPU_ACCELERATOR_TYPE=tpu7x-4).
json::object SeedPodSpec(const std::string& ns, bool with_hand_set_topology) {
  auto objects = kube::ObjectsFromYaml(
      testenv::Example("tpu-workload.yaml", "tpu7x-2x2x2.env", {{"NAMESPACE", ns}}));
  if (!objects.ok()) return json::object{};
  for (const json::object& o : *objects) {
    if (o.at("kind").as_string() != "StatefulSet") continue;
    json::object spec = o.at("spec").at("template").at("spec").as_object();
    json::array& env = spec["containers"].as_array()[0].as_object()["env"].as_array();
    std::vector<std::string> drop = {"TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS"};
    if (!with_hand_set_topology) {
      drop.insert(drop.end(), {"TPU_TOPOLOGY", "TPU_ACCELERATOR_TYPE"});
    }
    json::array kept;
    for (const json::value& e : env) {
      std::string name(e.at("name").as_string());
      if (std::find(drop.begin(), drop.end(), name) == drop.end()) kept.push_back(e);
    }
    env = std::move(kept);
    return spec;
  }
  return json::object{};
}

TEST_F(WebhookIntegration, SeedStatefulSetOnTpu7xGroupGetsTopologyVariables) {
  // The node label value "<namespace>-<group>" must fit 63 characters: a short namespace.
  ns_ = "seed-" + std::to_string(getpid());
  auto created_ns = client_->Create(
      kube::resources::Namespaces(), "",
      json::object{
          {"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", json::object{{"name", ns_}}}});
  ASSERT_TRUE(created_ns.ok()) << created_ns.error().ToString();
  auto group = client_->Create(TPUNodeGroups(), ns_, SeedNodeGroup(ns_));
  ASSERT_TRUE(group.ok()) << group.error().ToString();
  EXPECT_EQ(group->at("spec").at("targetSizePolicyMode").as_string(), "BULK");

  kube::Object sts =
      MustCreate(kube::resources::StatefulSets(),
                 StatefulSet("tpu-worker-v7x", "tpu-svc-v7x", 2, SeedPodSpec(ns_, false),
                             json::object{{"app", "tpu-worker-v7x"}}));
  ASSERT_FALSE(sts.empty());
  auto pod = CreateOnceWebhookActive(kube::resources::Pods(), StatefulSetPod(sts, 1),
                                     [](const auto& r) { return HasEnv(r, "TPU_HOST_BOUNDS"); });
  ASSERT_TRUE(pod.ok()) << pod.error().ToString();
  EXPECT_THAT(
      PodEnvOf(*pod),
      ElementsAre("JAX_PLATFORMS=tpu", "JAX_PROCESS_COUNT=2", "K8S_POD_NAME=<valueFrom>",
                  "NODE_IP=<valueFrom>", "VBAR_CONTROL_SERVICE_URL=127.0.0.1:8353",
                  "TPU_PROCESS_PORT=8470", "TPU_RUNTIME_METRICS_PORTS=8431,8432,8433,8434",
                  "TPU_WORKER_HOSTNAMES=tpu-worker-v7x-0.tpu-svc-v7x,tpu-worker-v7x-1.tpu-svc-v7x",
                  "TPU_WORKER_ID=1", "TPU_TOPOLOGY=2x2x2", "TPU_ACCELERATOR_TYPE=tpu7x-16",
                  "TPU_CHIPS_PER_HOST_BOUNDS=2,2,1", "TPU_HOST_BOUNDS=1,1,2"));

  // The seed's own env sets TPU_ACCELERATOR_TYPE=tpu7x-4 by hand: kept, not duplicated.
  kube::Object sts2 =
      MustCreate(kube::resources::StatefulSets(),
                 StatefulSet("tpu-worker-hand", "tpu-svc-v7x", 2, SeedPodSpec(ns_, true),
                             json::object{{"app", "tpu-worker-hand"}}));
  auto hand = client_->Create(kube::resources::Pods(), ns_, StatefulSetPod(sts2, 0));
  ASSERT_TRUE(hand.ok()) << hand.error().ToString();
  std::vector<std::string> env = PodEnvOf(*hand);
  EXPECT_THAT(env, ::testing::Contains("TPU_ACCELERATOR_TYPE=tpu7x-4"));
  EXPECT_THAT(env, ::testing::Not(::testing::Contains("TPU_ACCELERATOR_TYPE=tpu7x-16")));
  EXPECT_EQ(std::count_if(env.begin(), env.end(),
                          [](const std::string& e) { return e.rfind("TPU_TOPOLOGY=", 0) == 0; }),
            1);
  EXPECT_THAT(env, ::testing::Contains("TPU_HOST_BOUNDS=1,1,2"));
  EXPECT_THAT(env, ::testing::Contains("TPU_WORKER_ID=0"));
}

TEST_F(WebhookIntegration, UnrelatedPodsAreStoredUnchanged) {
  json::object plain = Parse(R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"plain"},
      "spec":{"containers":[{"name":"main","image":"busybox","env":[{"name":"X","value":"y"}]}]}})");
  json::object opted_out = Parse(R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"opted-out",
      "labels":{"hyperslice.dev/tpu-env":"disabled"}},
      "spec":{"containers":[{"name":"main","image":"busybox",
        "resources":{"limits":{"google.com/tpu":"4"},"requests":{"google.com/tpu":"4"}}}],
      "nodeSelector":{"cloud.google.com/tpu-node-group":"nowhere-at-all"}}})");
  // Make sure the webhook is live (so "unchanged" is the webhook's answer, not its absence).
  json::object sts_spec = Parse(R"({"containers":[{"name":"main","image":"busybox"}]})");
  kube::Object sts = MustCreate(kube::resources::StatefulSets(),
                                StatefulSet("probe", "svc", 1, sts_spec,
                                            json::object{{"app", "probe"}, {kInjectLabel, "all"}}));
  auto probe = CreateOnceWebhookActive(kube::resources::Pods(), StatefulSetPod(sts, 0),
                                       [](const auto& r) { return HasEnv(r, "TPU_WORKER_ID"); });
  ASSERT_TRUE(probe.ok()) << probe.error().ToString();
  ASSERT_THAT(PodEnvOf(*probe), ::testing::Contains("TPU_WORKER_ID=0"));

  auto a = client_->Create(kube::resources::Pods(), ns_, plain);
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  EXPECT_THAT(PodEnvOf(*a), ElementsAre("X=y"));
  auto b = client_->Create(kube::resources::Pods(), ns_, opted_out);
  ASSERT_TRUE(b.ok()) << b.error().ToString();
  EXPECT_TRUE(PodEnvOf(*b).empty());
}

TEST_F(WebhookIntegration, OptedInPodWhoseOwnerIsGoneIsDeniedWithReason) {
  json::object pod = Parse(R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"orphan-0",
      "labels":{"gke-tpu-env-injector.aaronbatilo.dev/inject":"enabled"},
      "ownerReferences":[{"apiVersion":"apps/v1","kind":"StatefulSet","name":"orphan",
                          "uid":"5b0b5a8e-0000-4000-8000-000000000000","controller":true}]},
      "spec":{"containers":[{"name":"main","image":"busybox"}]}})");
  Result<kube::Object> res = Error::Make(Error::Code::kUnknown, "not tried");
  for (auto deadline = std::chrono::steady_clock::now() + 30s;
       std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(100ms)) {
    res = client_->Create(kube::resources::Pods(), ns_, pod);
    if (!res.ok()) break;
    ASSERT_TRUE(
        client_->Delete(kube::resources::Pods(), ns_, "orphan-0").ok());  // webhook not live yet
  }
  ASSERT_FALSE(res.ok());
  EXPECT_THAT(res.error().message, HasSubstr("StatefulSet " + ns_ + "/orphan"));
  EXPECT_THAT(res.error().message, HasSubstr("not found"));
}

TEST_F(WebhookIntegration, InvalidTPUNodeGroupsAreRefusedWithWhatToChange) {
  json::object bad = SeedNodeGroup(ns_);
  bad["metadata"].as_object()["name"] = "three-hosts";
  bad["spec"].as_object()["nodeCount"] = 3;
  Result<kube::Object> res = Error::Make(Error::Code::kUnknown, "not tried");
  for (auto deadline = std::chrono::steady_clock::now() + 30s;
       std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(100ms)) {
    res = client_->Create(TPUNodeGroups(), ns_, bad);
    if (!res.ok()) break;
    ASSERT_TRUE(client_->Delete(TPUNodeGroups(), ns_, "three-hosts").ok());  // not live yet
  }
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.error().code, Error::Code::kInvalidArgument) << res.error().ToString();
  EXPECT_THAT(res.error().message,
              HasSubstr("topology 2x2x2 on tpu7x-standard-4t needs nodeCount 2 (8 chips / 4 per "
                        "host); got 3"));

  json::object individual = SeedNodeGroup(ns_);
  individual["metadata"].as_object()["name"] = "individual";
  individual["spec"].as_object()["targetSizePolicyMode"] = "INDIVIDUAL";
  auto r2 = client_->Create(TPUNodeGroups(), ns_, individual);
  ASSERT_FALSE(r2.ok());
  EXPECT_THAT(r2.error().message, HasSubstr("set spec.targetSizePolicyMode to BULK"));

  json::object foreign = SeedNodeGroup(ns_);
  foreign["metadata"].as_object()["name"] = "foreign";
  foreign["spec"].as_object().erase("instanceConfig");
  foreign["spec"].as_object().erase("bootstrapKubernetes");
  foreign["spec"].as_object()["instanceTemplateURI"] =
      "projects/someone-else/global/instanceTemplates/tpu7x-template";
  auto r3 = client_->Create(TPUNodeGroups(), ns_, foreign);
  ASSERT_FALSE(r3.ok());
  EXPECT_THAT(r3.error().message,
              HasSubstr("project someone-else but spec.project is my-gcp-project"));

  // The CRD's own CEL rules: instanceConfig xor instanceTemplateURI, and immutability.
  json::object both = SeedNodeGroup(ns_);
  both["metadata"].as_object()["name"] = "both";
  both["spec"].as_object()["instanceTemplateURI"] =
      "projects/my-gcp-project/global/instanceTemplates/t";
  auto r4 = client_->Create(TPUNodeGroups(), ns_, both);
  ASSERT_FALSE(r4.ok());
  EXPECT_THAT(r4.error().message, HasSubstr("exactly one of instanceConfig"));

  json::object good = SeedNodeGroup(ns_);
  good["metadata"].as_object()["name"] = "good";
  auto created = client_->Create(TPUNodeGroups(), ns_, good);
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  auto moved = client_->Patch(TPUNodeGroups(), ns_, "good", kube::PatchType::kMerge,
                              R"({"spec":{"topology":"2x2x4","nodeCount":4}})");
  ASSERT_FALSE(moved.ok());
  EXPECT_THAT(moved.error().message, HasSubstr("topology is immutable"));
  // Metadata-only updates still pass.
  auto labelled = client_->Patch(TPUNodeGroups(), ns_, "good", kube::PatchType::kMerge,
                                 R"({"metadata":{"labels":{"team":"ml"}}})");
  EXPECT_TRUE(labelled.ok()) << labelled.error().ToString();
}

// --self-signed told about a configuration that does not exist: the error says which one (kind,
// name and the flag), not only the apiserver's "not found". The flag takes a comma-separated list
// (deploy/ names the TPUNodeGroup and sealed-pods configurations): the first one exists here, the
// error names the second alone.
TEST_F(WebhookIntegration, SelfSignedNamesTheConfigurationItCannotRead) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("hs-webhook-missing-cfg-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  SelfSignedOptions o;
  o.namespace_ = ns_;
  o.secret = "missing-cfg-tls";
  o.service_name = "hyperslice-webhook";
  o.mutating_config = "";  // none
  o.validating_config = "hyperslice-tpunodegroups,no-such-configuration";
  o.cert_file = (dir / "tls.crt").string();
  o.key_file = (dir / "tls.key").string();
  auto started = SelfSignedCertificates::Start(client_, o);
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.error().code, Error::Code::kNotFound) << started.error().ToString();
  EXPECT_THAT(started.error().message,
              HasSubstr("ValidatingWebhookConfiguration \"no-such-configuration\""));
  EXPECT_THAT(started.error().message, HasSubstr("--validating-webhook-configuration"));
}

}  // namespace
}  // namespace hyperslice::webhook
