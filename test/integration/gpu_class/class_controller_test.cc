// The GPUNodeClass controller against the real kube-apiserver, with seed 002's class and pool as
// deploy/examples holds them. The provider clients are fakes behind the controller's factory seam
// that read their API key through the real SecretCredential the controller builds, so what is
// tested is the controller: Secret lookup (tgp-system default namespace), per-provider status,
// conditions with observedGeneration, the offer cache, rotation, deletion blocked while a pool
// references the class, and the metrics.
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/gpu/api.h"
#include "src/gpu/class_controller.h"
#include "src/kube/client.h"
#include "src/kube/manager.h"
#include "src/kube/metrics.h"
#include "src/kube/object_helpers.h"
#include "src/kube/yaml.h"
#include "test/testenv/eventually.h"
#include "test/testenv/testenv.h"
#include "test/testenv/tgp.h"

namespace hyperslice::gpu {
namespace {

namespace bj = boost::json;
using namespace std::chrono_literals;
using testenv::Eventually;

// A provider whose account accepts exactly one API key; it reads the key from the credential
// source on every call (as the real clients do) and drops the cached value on a refusal.
class FakeProvider final : public Provider {
 public:
  FakeProvider(std::string name, std::shared_ptr<CredentialSource> creds, int offers,
               std::atomic<int>* checks)
      : name_(std::move(name)), creds_(std::move(creds)), offers_(offers), checks_(checks) {}
  const char* name() const override { return name_.c_str(); }
  Capabilities capabilities() const override { return {}; }
  Status CheckCredentials() override {
    ++*checks_;
    auto key = creds_->Get();
    if (!key.ok()) return key.error();
    if (*key != "good-key") {
      creds_->Invalidate();
      return MakeError(ErrorKind::kUnauthorized, name_ + " refused the API key (401)", 401);
    }
    return OkStatus();
  }
  Result<std::vector<Offer>> ListOffers() override {
    std::vector<Offer> out;
    for (int i = 0; i < offers_; ++i) {
      Offer o;
      o.provider = name_;
      o.id = name_ + "-" + std::to_string(i);
      o.gpu_type = i == 0 ? "Mystery GPU 9000" : "RTX4090";
      o.gpu_type_known = i != 0;
      o.provider_gpu_name = o.gpu_type;
      o.region = "us-west";
      o.region_known = true;
      o.gpu_count = 1;
      o.on_demand_price = 690000;
      out.push_back(o);
    }
    return out;
  }
  Result<Instance> Create(const LaunchRequest&) override {
    return MakeError(ErrorKind::kInternal, "not used");
  }
  Result<Instance> Get(const std::string&) override {
    return MakeError(ErrorKind::kInternal, "not used");
  }
  Result<std::vector<Instance>> List(const std::map<std::string, std::string>&) override {
    return std::vector<Instance>{};
  }
  Status Delete(const std::string&) override { return OkStatus(); }

 private:
  std::string name_;
  std::shared_ptr<CredentialSource> creds_;
  int offers_;
  std::atomic<int>* checks_;
};

bj::object LoadExample(const char* file) {
  return kube::YamlToJson(YAML::LoadFile(std::string(HS_DEPLOY_DIR "/examples/") + file))
      .as_object();
}

const bj::object* ProviderStatus(const bj::object& cls, const std::string& name) {
  const bj::object* status = jsonfield::ObjectField(cls, "status");
  const bj::array* providers = status ? jsonfield::ArrayField(*status, "providers") : nullptr;
  if (providers == nullptr) return nullptr;
  for (const bj::value& p : *providers) {
    if (p.is_object() && jsonfield::StringField(p.as_object(), "name") == name) {
      return &p.as_object();
    }
  }
  return nullptr;
}

class ClassControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_ = testenv::AdminClient();
    ASSERT_TRUE(client_);
    Status st = testenv::InstallTgpCrds(HS_DEPLOY_DIR);
    ASSERT_TRUE(st.ok()) << st.error().ToString();
    // Seed 002's Secret: created in tgp-system, named by credentialsRefs without a namespace.
    Status secret =
        testenv::PutSecret(*client_, "tgp-system", "tgp-operator-secret",
                           {{"RUNPOD_API_KEY", "good-key"}, {"LAMBDA_LABS_API_KEY", "stale-key"}});
    ASSERT_TRUE(secret.ok()) << secret.error().ToString();

    kube::ManagerOptions mo;
    mo.client = client_;
    mo.registry = &registry_;
    auto m = kube::Manager::Create(std::move(mo));
    ASSERT_TRUE(m.ok()) << m.error().ToString();
    manager_ = std::move(*m);
    ClassControllerOptions o;
    o.talos_providers = TalosProviders();
    o.client = client_;
    o.cache = cache_;
    o.credentials_check_interval = 500ms;
    o.offer_refresh_interval = 1s;
    o.factory = [this](const ProviderConfig& c) -> Result<std::unique_ptr<Provider>> {
      std::lock_guard lock(mu_);
      endpoints_[c.name] = c.endpoint;
      return std::unique_ptr<Provider>(std::make_unique<FakeProvider>(
          c.name, c.credentials, c.name == kRunPod ? 3 : 2, &checks_[c.name]));
    };
    Status reg = RegisterClassController(*manager_, std::move(o));
    ASSERT_TRUE(reg.ok()) << reg.error().ToString();
    runner_ = std::thread([this] { (void)manager_->Run(); });
  }

  // Providers whose machines boot Talos from the class's template (none in the operator yet).
  virtual std::set<std::string> TalosProviders() const { return {}; }

  void TearDown() override {
    if (manager_) manager_->Stop();
    if (runner_.joinable()) runner_.join();
    (void)client_->Delete(kube::resources::Secrets(), "tgp-system", "tgp-operator-secret");
  }

  bj::object GetClass() {
    auto c = client_->Get(GPUNodeClasses(), "", "standard-gpu-class");
    return c.ok() ? *c : bj::object{};
  }

  std::shared_ptr<kube::Client> client_;
  kube::metrics::Registry registry_;
  std::shared_ptr<OfferCache> cache_ = std::make_shared<OfferCache>();
  std::unique_ptr<kube::Manager> manager_;
  std::thread runner_;
  std::mutex mu_;
  std::map<std::string, std::string> endpoints_;
  std::map<std::string, std::atomic<int>> checks_;  // CheckCredentials calls per provider
};

TEST_F(ClassControllerTest, SeedClassReportsEachProviderRotatesAndWaitsForItsPools) {
  auto created = client_->Create(GPUNodeClasses(), "", LoadExample("gpunodeclass.yaml"));
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  int64_t generation = kube::Generation(*created);

  // RunPod's key works, Lambda's does not: 1/2, Ready (one usable provider), ProvidersReady False
  // naming lambdalabs, offers cached for runpod only.
  ASSERT_TRUE(Eventually([&] {
    bj::object cls = GetClass();
    const bj::object* status = jsonfield::ObjectField(cls, "status");
    return status != nullptr && jsonfield::StringField(*status, "providersReady") == "1/2";
  })) << bj::serialize(GetClass());
  bj::object cls = GetClass();
  EXPECT_TRUE(kube::HasFinalizer(cls, kClassFinalizer));
  const bj::object* runpod = ProviderStatus(cls, kRunPod);
  const bj::object* lambda = ProviderStatus(cls, kLambda);
  ASSERT_NE(runpod, nullptr);
  ASSERT_NE(lambda, nullptr);
  EXPECT_EQ(jsonfield::BoolField(*runpod, "credentialsValid"), true);
  EXPECT_EQ(jsonfield::IntField(*runpod, "offerCount"), 3);
  EXPECT_FALSE(jsonfield::StringField(*runpod, "lastRefresh").empty());
  // The GPU name no table knows is reported, not dropped.
  ASSERT_NE(jsonfield::ArrayField(*runpod, "unknownNames"), nullptr);
  EXPECT_EQ(bj::serialize(*jsonfield::ArrayField(*runpod, "unknownNames")),
            R"(["gpu:Mystery GPU 9000"])");
  EXPECT_EQ(jsonfield::BoolField(*lambda, "credentialsValid"), false);
  EXPECT_NE(jsonfield::StringField(*lambda, "error").find("refused the API key"),
            std::string::npos);
  EXPECT_EQ(jsonfield::IntField(*lambda, "offerCount"), 0);
  auto providers_ready = kube::FindCondition(cls, "ProvidersReady");
  ASSERT_TRUE(providers_ready);
  EXPECT_EQ(providers_ready->status, "False");
  EXPECT_NE(providers_ready->message.find("lambdalabs"), std::string::npos);
  EXPECT_EQ(providers_ready->observed_generation, generation);
  auto ready = kube::FindCondition(cls, "Ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, "True");
  // Seed 002's Talos template as written is one Talos refuses: reported with each refusal and
  // its fix. Neither of the seed's providers boots Talos here, so the class stays Ready.
  auto machine_config = kube::FindCondition(cls, "MachineConfigValid");
  ASSERT_TRUE(machine_config);
  EXPECT_EQ(machine_config->status, "False");
  EXPECT_EQ(machine_config->reason, "TemplateInvalid");
  EXPECT_EQ(machine_config->observed_generation, generation);
  for (const char* refusal :
       {"unknown key machine.systemd (Talos runs no systemd units", "machine.type is missing",
        "machine.files[0].path \"/etc/tailscale/authkey\" is outside /var",
        "machine.files[1].path \"/etc/systemd/system/tailscaled.service\" is outside /var"}) {
    EXPECT_NE(machine_config->message.find(refusal), std::string::npos)
        << refusal << " not in: " << machine_config->message;
  }
  // No secret value anywhere in the status.
  EXPECT_EQ(bj::serialize(cls).find("good-key"), std::string::npos);
  EXPECT_EQ(bj::serialize(cls).find("stale-key"), std::string::npos);

  auto runpod_state = cache_->Get("standard-gpu-class", kRunPod);
  ASSERT_TRUE(runpod_state);
  EXPECT_EQ(runpod_state->offers.size(), 3u);
  EXPECT_EQ(runpod_state->priority, 1);
  EXPECT_EQ(cache_->Get("standard-gpu-class", kLambda)->offers.size(), 0u);
  {
    std::lock_guard lock(mu_);
    EXPECT_EQ(endpoints_[kRunPod], "");  // the seed names no endpoint: the public API
  }
  std::string metrics = registry_.Expose();
  EXPECT_NE(
      metrics.find(R"(hyperslice_gpu_offers{class="standard-gpu-class",provider="runpod"} 3)"),
      std::string::npos)
      << metrics.substr(0, 3000);

  // The Secret is rotated: Lambda's key is fixed. The next check (every 500 ms here) re-reads it
  // because the refusal dropped the cached value.
  auto secret = client_->Get(kube::resources::Secrets(), "tgp-system", "tgp-operator-secret");
  ASSERT_TRUE(secret.ok());
  (*secret)["stringData"] = bj::object{{"LAMBDA_LABS_API_KEY", "good-key"}};
  ASSERT_TRUE(client_->Update(kube::resources::Secrets(), "tgp-system", *secret).ok());
  ASSERT_TRUE(Eventually([&] {
    bj::object c = GetClass();
    auto cond = kube::FindCondition(c, "ProvidersReady");
    return cond && cond->status == "True";
  })) << bj::serialize(GetClass());
  EXPECT_EQ(jsonfield::StringField(*jsonfield::ObjectField(GetClass(), "status"), "providersReady"),
            "2/2");
  EXPECT_TRUE(Eventually([&] {
    auto s = cache_->Get("standard-gpu-class", kLambda);
    return s && s->offers.size() == 2;
  }));

  // Disabling a provider removes it from the status and the cache.
  bj::object edit = GetClass();
  edit["spec"].as_object()["providers"].as_array()[1].as_object()["enabled"] = false;
  ASSERT_TRUE(client_->Update(GPUNodeClasses(), "", edit).ok());
  ASSERT_TRUE(Eventually([&] {
    bj::object c = GetClass();
    const bj::object* st = jsonfield::ObjectField(c, "status");
    return st && jsonfield::StringField(*st, "providersReady") == "1/1" &&
           ProviderStatus(c, kLambda) == nullptr;
  })) << bj::serialize(GetClass());
  EXPECT_EQ(cache_->Get("standard-gpu-class", kLambda), nullptr);

  // A claim of this class (as the provisioner writes it, still launching at its planned price)
  // counts in the class's nodes and hourly cost.
  bj::object claim{
      {"apiVersion", "tgp.io/v1"},
      {"kind", "GPUNodeClaim"},
      {"metadata", bj::object{{"name", "standard-1"},
                              {"annotations", bj::object{{"tgp.io/planned-price", "0.69"}}}}},
      {"spec", bj::object{{"nodeClassRef", bj::object{{"name", "standard-gpu-class"}}},
                          {"poolRef",
                           bj::object{{"namespace", "default"}, {"name", "ml-workload-pool"}}}}}};
  ASSERT_TRUE(client_->Create(GPUNodeClaims(), "", claim).ok());
  ASSERT_TRUE(Eventually([&] {
    bj::object c = GetClass();
    const bj::object* st = jsonfield::ObjectField(c, "status");
    return st && jsonfield::IntField(*st, "activeNodes") == 1 &&
           jsonfield::StringField(*st, "hourlyCost") == "0.69";
  })) << bj::serialize(GetClass());

  // Seed 002's pool references the class: deleting the class waits, and says for whom.
  auto pool = client_->Create(GPUNodePools(), "default", LoadExample("gpunodepool.yaml"));
  ASSERT_TRUE(pool.ok()) << pool.error().ToString();
  ASSERT_TRUE(client_->Delete(GPUNodeClasses(), "", "standard-gpu-class").ok());
  // The claim alone already holds it: wait until the pool's informer event has been seen too.
  ASSERT_TRUE(Eventually([&] {
    auto cond = kube::FindCondition(GetClass(), "Ready");
    return cond && cond->reason == "InUse" &&
           cond->message.find("GPUNodePool") != std::string::npos;
  })) << bj::serialize(GetClass());
  std::string holders = kube::FindCondition(GetClass(), "Ready")->message;
  EXPECT_NE(holders.find("GPUNodePool default/ml-workload-pool"), std::string::npos) << holders;
  EXPECT_NE(holders.find("GPUNodeClaim standard-1"), std::string::npos) << holders;
  ASSERT_TRUE(client_->Get(GPUNodeClasses(), "", "standard-gpu-class").ok());

  // The pool goes: the claim still holds the class (its machine is returned through it).
  ASSERT_TRUE(client_->Delete(GPUNodePools(), "default", "ml-workload-pool").ok());
  ASSERT_TRUE(Eventually([&] {
    auto cond = kube::FindCondition(GetClass(), "Ready");
    return cond && cond->message.find("GPUNodePool") == std::string::npos;
  })) << bj::serialize(GetClass());
  EXPECT_TRUE(client_->Get(GPUNodeClasses(), "", "standard-gpu-class").ok());
  ASSERT_TRUE(client_->Delete(GPUNodeClaims(), "", "standard-1").ok());
  EXPECT_TRUE(Eventually([&] {
    auto c = client_->Get(GPUNodeClasses(), "", "standard-gpu-class");
    return !c.ok() && c.error().code == Error::Code::kNotFound;
  }));
  EXPECT_TRUE(cache_->ForClass("standard-gpu-class").empty());
}

// RunPod boots Talos from the class's template here; Lambda (whose key is stale) does not.
class TalosBootedClassTest : public ClassControllerTest {
 protected:
  std::set<std::string> TalosProviders() const override { return {kRunPod}; }

  void SetTemplate(const std::string& tmpl) {
    for (int attempt = 0; attempt < 5; ++attempt) {  // a status write may race the update
      bj::object cls = GetClass();
      cls["spec"].as_object()["talosConfig"].as_object()["machineConfigTemplate"] = tmpl;
      if (client_->Update(GPUNodeClasses(), "", cls).ok()) return;
    }
    ADD_FAILURE() << "could not update the class's template";
  }

  bj::object WaitForMachineConfig(const std::string& status, const std::string& reason) {
    EXPECT_TRUE(Eventually([&] {
      bj::object c = GetClass();
      auto cond = kube::FindCondition(c, "MachineConfigValid");
      return cond && cond->status == status && cond->reason == reason &&
             cond->observed_generation == kube::Generation(c);
    })) << bj::serialize(GetClass());
    return GetClass();
  }
};

// Seed 002's template with the fixes the condition names applied.
std::string FixedSeedTemplate(std::string t) {
  auto replace = [&t](const std::string& from, const std::string& to) {
    size_t at = t.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    t.replace(at, from.size(), to);
  };
  replace("  systemd:\n    services:\n      - name: tailscaled.service\n        enabled: true\n",
          "");
  replace("machine:\n", "machine:\n  type: worker\n");
  replace("path: /etc/tailscale/authkey", "path: /var/etc/tailscale/authkey");
  replace("path: /etc/systemd/", "path: /var/etc/systemd/");
  return t;
}

TEST_F(TalosBootedClassTest, AnInvalidTemplateKeepsTheClassFromBeingReady) {
  bj::object seed = LoadExample("gpunodeclass.yaml");
  std::string seed_template(jsonfield::StringField(*jsonfield::ObjectAt(seed, "spec.talosConfig"),
                                                   "machineConfigTemplate"));
  auto created = client_->Create(GPUNodeClasses(), "", seed);
  ASSERT_TRUE(created.ok()) << created.error().ToString();

  // RunPod is the only usable provider and boots Talos from a template Talos refuses.
  bj::object cls = WaitForMachineConfig("False", "TemplateInvalid");
  ASSERT_TRUE(Eventually([&] {
    auto ready = kube::FindCondition(GetClass(), "Ready");
    return ready && ready->reason == "MachineConfigInvalid";
  })) << bj::serialize(GetClass());
  auto ready = kube::FindCondition(GetClass(), "Ready");
  EXPECT_EQ(ready->status, "False");
  EXPECT_NE(ready->message.find("unknown key machine.systemd"), std::string::npos)
      << ready->message;

  // Fixed as the condition says: valid, and RunPod counts again.
  SetTemplate(FixedSeedTemplate(seed_template));
  WaitForMachineConfig("True", "TemplateValid");
  ASSERT_TRUE(Eventually([&] {
    auto r = kube::FindCondition(GetClass(), "Ready");
    return r && r->status == "True";
  })) << bj::serialize(GetClass());

  // A variable the renderer does not know is an error on the class, naming it.
  SetTemplate(FixedSeedTemplate(seed_template) + "# {{.NodeNmae}}\n");
  cls = WaitForMachineConfig("False", "TemplateInvalid");
  auto mc = kube::FindCondition(cls, "MachineConfigValid");
  EXPECT_NE(mc->message.find("unknown variable NodeNmae"), std::string::npos) << mc->message;
  ASSERT_TRUE(Eventually([&] {
    auto r = kube::FindCondition(GetClass(), "Ready");
    return r && r->status == "False" && r->reason == "MachineConfigInvalid";
  })) << bj::serialize(GetClass());

  ASSERT_TRUE(client_->Delete(GPUNodeClasses(), "", "standard-gpu-class").ok());
  EXPECT_TRUE(Eventually([&] {
    auto c = client_->Get(GPUNodeClasses(), "", "standard-gpu-class");
    return !c.ok() && c.error().code == Error::Code::kNotFound;
  }));
}

}  // namespace
}  // namespace hyperslice::gpu
