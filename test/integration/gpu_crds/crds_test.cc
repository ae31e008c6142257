// The tgp.io CRDs (GPUNodeClass, GPUNodePool, GPUNodeClaim) on a real kube-apiserver, with the
// validating webhook of deploy/webhook (/validate-tgp) served in-process and registered from
// deploy/webhook/base/webhooks.yaml, as the TPUNodeGroup corpus test does:
// - seed 002's two examples, as deploy/examples holds them, applied unchanged with `kubectl apply`
//   (through the webhook: the pool's class exists and its budget admits the pool's price);
// - what the schema defaults (weight, enabled, ephemeral, the disruption block);
// - `kubectl get` prints the documented columns and knows the short names;
// - every file of test/corpus/gpu ("# Case:", "# Expect: <substring>" or "admitted", optionally
//   "# Warn: <substring>" for an admission warning) sent as `kubectl apply --server-side` sends it
//   (apply patch, fieldValidation=Strict) is refused with that message — by the schema, a CEL
//   rule or the webhook — and leaves nothing stored, or is admitted.
// Corpus pools that need a class name seed 002's `standard-gpu-class` (maxHourlyCost "50.0"):
// the environment applies deploy/examples/gpunodeclass.yaml before any test runs.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>

#include "src/gpu/api.h"
#include "src/kube/client.h"
#include "src/kube/yaml.h"
#include "src/webhook/webhook.h"
#include "test/testenv/admission_env.h"
#include "test/testenv/admission_probe.h"
#include "test/testenv/command.h"
#include "test/testenv/corpus.h"
#include "test/testenv/eventually.h"
#include "test/testenv/files.h"
#include "test/testenv/server_side_apply.h"
#include "test/testenv/testenv.h"

namespace hyperslice {
namespace {

namespace json = boost::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

const kube::Resource kClasses{"tgp.io", "v1", "gpunodeclasses", "GPUNodeClass", false};
const kube::Resource kPools{"tgp.io", "v1", "gpunodepools", "GPUNodePool", true};
const kube::Resource kClaims{"tgp.io", "v1", "gpunodeclaims", "GPUNodeClaim", false};

// The texts of a response's Warning headers (`299 - "<text>"`, quotes in the text escaped), one per
// line, unescaped.
std::string Warnings(const net::Response& res) {
  std::string out;
  for (const auto& [k, v] : res.headers) {
    if (k != "warning") continue;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] == '\\' && i + 1 < v.size()) ++i;
      out += v[i];
    }
    out += '\n';
  }
  return out;
}

const kube::Resource* ResourceOf(const std::string& kind) {
  if (kind == "GPUNodeClass") return &kClasses;
  if (kind == "GPUNodePool") return &kPools;
  if (kind == "GPUNodeClaim") return &kClaims;
  return nullptr;
}

using testenv::ReadFile;

// Once per binary: the three CRDs (and TPUNodeGroup's, so every informer of the webhook syncs at
// once), the webhook server with its informer cache, deploy/webhook's configurations, and seed
// 002's class.
class CrdEnv {
 public:
  static CrdEnv& Get() {
    static CrdEnv* env = Created() = new CrdEnv();  // lives until exit, like the cluster
    return *env;
  }
  // The webhook server (and its informers) stop after the last test, before the process exits:
  // a reflector still retrying while the statics it uses are destroyed (the cluster stops at
  // exit too) crashed the process under ASan after every test had passed.
  static void Shutdown() {
    if (Created() != nullptr && Created()->admission.webhook) Created()->admission.webhook->Stop();
  }
  static CrdEnv*& Created() {
    static CrdEnv* created = nullptr;
    return created;
  }
  testenv::AdmissionEnv admission{"gpu-crds-it",
                                  {HS_DEPLOY_DIR "/crds/tgp.io_gpunodeclasses.yaml",
                                   HS_DEPLOY_DIR "/crds/tgp.io_gpunodepools.yaml",
                                   HS_DEPLOY_DIR "/crds/tgp.io_gpunodeclaims.yaml",
                                   HS_DEPLOY_DIR "/crds/tpu.google.com_tpunodegroups.yaml"},
                                  {kClasses, kPools, kClaims, webhook::TPUNodeGroups()},
                                  HS_DEPLOY_DIR "/webhook/base/webhooks.yaml"};
  std::shared_ptr<kube::Client> client = admission.client;
  std::string error = admission.error;

  // Server-side apply of `yaml`, as kubectl apply --server-side sends it.
  Result<net::Response> Apply(const kube::Resource& r, const std::string& ns,
                              const std::string& name, const std::string& yaml,
                              bool dry_run = false) {
    return testenv::ServerSideApply(*client, r, ns, name, yaml, dry_run);
  }

 private:
  CrdEnv() {
    if (!error.empty()) return;
    if (Status w = WaitForWebhook(); !w.ok()) {
      error = "webhook: " + w.error().ToString();
      return;
    }
    if (Status c = ApplySeedClass(); !c.ok()) error = "seed 002's class: " + c.error().ToString();
  }

  // The apiserver picks the configuration up asynchronously: dry-run a pool only the webhook
  // refuses (its class does not exist: the corpus's case) until it is refused.
  Status WaitForWebhook() {
    testenv::CorpusCase probe =
        testenv::LoadCorpusCase(HS_CORPUS_DIR "/050-pool-missing-class.yaml");
    return testenv::ProbeUntil(
        [&] { return Apply(kPools, probe.ns, probe.name, probe.text, /*dry_run=*/true); },
        [](const testenv::Answer& res) {
          return res.ok() && res->body.find("names no GPUNodeClass") != std::string::npos;
        });
  }

  // Seed 002's class, as a user applies it: kubectl apply when kubectl is there (the seed test
  // then sees it unchanged), else the same server-side apply the corpus uses.
  Status ApplySeedClass() {
    const std::string file = HS_DEPLOY_DIR "/examples/gpunodeclass.yaml";
    if (testenv::HaveKubectl()) {
      testenv::CommandResult r = testenv::Kubectl({"apply", "-f", file});
      if (r.exit_code != 0) return Error::Make(Error::Code::kInternal, r.errors);
      return OkStatus();
    }
    HS_ASSIGN_OR_RETURN(net::Response res,
                        Apply(kClasses, "", "standard-gpu-class", ReadFile(file)));
    if (res.status >= 300) return Error::Make(Error::Code::kInternal, res.body);
    return OkStatus();
  }
};

class CrdEnvShutdown : public ::testing::Environment {
 public:
  void TearDown() override { CrdEnv::Shutdown(); }
};
const auto* const kCrdEnvShutdown = ::testing::AddGlobalTestEnvironment(new CrdEnvShutdown);

class GpuCrds : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(CrdEnv::Get().error.empty()) << CrdEnv::Get().error;
    client_ = CrdEnv::Get().client;
  }
  std::shared_ptr<kube::Client> client_;
};

TEST_F(GpuCrds, SeedExamplesApplyUnchangedWithKubectlAndGetTheirDefaults) {
  if (!testenv::HaveKubectl()) GTEST_SKIP() << "kubectl is not installed";
  // The class is already there: the environment applied it with kubectl before any test, so the
  // corpus can rely on it. Applying it again changes nothing.
  for (const char* file : {"gpunodeclass.yaml", "gpunodepool.yaml"}) {
    testenv::CommandResult r =
        testenv::Kubectl({"apply", "-f", std::string(HS_DEPLOY_DIR "/examples/") + file});
    ASSERT_EQ(r.exit_code, 0) << file << ": " << r.errors;
    EXPECT_NE(r.output.find(std::string(file) == "gpunodepool.yaml" ? "created" : "unchanged"),
              std::string::npos)
        << r.output;
  }
  auto cls = client_->Get(kClasses, "", "standard-gpu-class");
  ASSERT_TRUE(cls.ok()) << cls.error().ToString();
  const json::object& spec = cls->at("spec").as_object();
  // Kept as written (nothing pruned): the template, the providers and the decimal-string limits.
  EXPECT_EQ(spec.at("limits").at("maxHourlyCost").as_string(), "50.0");
  EXPECT_EQ(spec.at("limits").at("maxNodes").as_int64(), 10);
  EXPECT_NE(
      spec.at("talosConfig").at("machineConfigTemplate").as_string().find("{{.MachineToken}}"),
      std::string::npos);
  const json::array& providers = spec.at("providers").as_array();
  ASSERT_EQ(providers.size(), 2u);
  EXPECT_EQ(providers[1].at("name").as_string(), "lambdalabs");
  EXPECT_EQ(providers[1].at("credentialsRef").at("key").as_string(), "LAMBDA_LABS_API_KEY");
  EXPECT_EQ(spec.at("tailscaleConfig").at("tags").as_array().size(), 2u);

  auto pool = client_->Get(kPools, "default", "ml-workload-pool");
  ASSERT_TRUE(pool.ok()) << pool.error().ToString();
  const json::object& ps = pool->at("spec").as_object();
  EXPECT_EQ(ps.at("maxHourlyPrice").as_string(), "2.0");
  EXPECT_EQ(ps.at("weight").as_int64(), 10);
  EXPECT_EQ(ps.at("template").at("spec").at("taints").at(0).at("effect").as_string(), "NoSchedule");

  // Defaults: a provider without `enabled` is enabled; a pool without weight weighs 10; a
  // disruption block gets Karpenter-like defaults.
  std::string minimal = R"(
apiVersion: tgp.io/v1
kind: GPUNodePool
metadata:
  name: defaults-pool
  namespace: default
spec:
  nodeClassRef:
    kind: GPUNodeClass
    name: standard-gpu-class
  template:
    spec: {}
  disruption: {}
)";
  auto res = client_->Raw(
      "PATCH",
      kPools.ObjectPath("default", "defaults-pool") + "?fieldManager=test&fieldValidation=Strict",
      minimal, "application/apply-patch+yaml");
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  ASSERT_LT(res->status, 300) << res->body;
  json::value stored = json::parse(res->body);
  EXPECT_EQ(stored.at("spec").at("weight").as_int64(), 10);
  EXPECT_EQ(stored.at("spec").at("disruption").at("consolidationPolicy").as_string(), "WhenEmpty");
  EXPECT_EQ(stored.at("spec").at("disruption").at("consolidateAfter").as_string(), "30s");
  EXPECT_EQ(stored.at("spec").at("disruption").at("expireAfter").as_string(), "Never");
  EXPECT_TRUE(providers[0].as_object().if_contains("enabled") != nullptr &&
              providers[0].at("enabled").as_bool());
}

TEST_F(GpuCrds, KubectlPrintsTheColumnsAndKnowsTheShortNames) {
  if (!testenv::HaveKubectl()) GTEST_SKIP() << "kubectl is not installed";
  std::string claim = R"(
apiVersion: tgp.io/v1
kind: GPUNodeClaim
metadata:
  name: columns-claim
spec:
  nodeClassRef:
    name: standard-gpu-class
  poolRef:
    namespace: default
    name: ml-workload-pool
)";
  auto res = client_->Raw("PATCH", kClaims.ObjectPath("", "columns-claim") + "?fieldManager=test",
                          claim, "application/apply-patch+yaml");
  ASSERT_TRUE(res.ok() && res->status < 300) << (res.ok() ? res->body : res.error().ToString());
  json::object status{{"provider", "lambdalabs"}, {"gpuType", "RTX4090"},
                      {"region", "us-west"},      {"price", "0.69"},
                      {"nodeName", "gpu-node-1"}, {"providerID", "lambdalabs://i-1"}};
  auto st = client_->Raw("PATCH", kClaims.ObjectPath("", "columns-claim") + "/status",
                         json::serialize(json::object{{"status", status}}),
                         "application/merge-patch+json");
  ASSERT_TRUE(st.ok() && st->status < 300) << (st.ok() ? st->body : st.error().ToString());

  struct Want {
    std::vector<std::string> args;
    std::vector<std::string> headers;
    std::string row;  // a substring of the object's row
  };
  for (const Want& w : std::vector<Want>{
           {{"get", "gpuclass"}, {"PROVIDERS", "NODES", "HOURLY-COST", "READY", "AGE"}, ""},
           {{"get", "gpupool", "-A"}, {"CLASS", "NODES", "HOURLY-COST", "READY"}, ""},
           {{"get", "gpuclaim", "columns-claim"},
            {"PROVIDER", "GPU", "REGION", "PRICE", "NODE", "READY", "AGE"},
            "lambdalabs"},
           {{"get", "hyperslice"}, {}, "gpunodeclass.tgp.io/standard-gpu-class"},
       }) {
    testenv::CommandResult r = testenv::Kubectl(w.args);
    ASSERT_EQ(r.exit_code, 0) << w.args[1] << ": " << r.errors;
    std::string header = r.output.substr(0, r.output.find('\n'));
    for (const auto& h : w.headers) {
      EXPECT_NE(header.find(h), std::string::npos) << w.args[1] << ": no " << h << " in " << header;
    }
    if (!w.row.empty()) {
      EXPECT_NE(r.output.find(w.row), std::string::npos) << r.output;
    }
  }
  testenv::CommandResult r = testenv::Kubectl({"get", "gpuclaim", "columns-claim"});
  for (const char* v : {"RTX4090", "us-west", "0.69", "gpu-node-1"}) {
    EXPECT_NE(r.output.find(v), std::string::npos) << v << " not in\n" << r.output;
  }
}

TEST_F(GpuCrds, ClaimSpecIsImmutable) {
  std::string claim = R"(
apiVersion: tgp.io/v1
kind: GPUNodeClaim
metadata:
  name: immutable-claim
spec:
  nodeClassRef:
    name: a
  poolRef:
    namespace: default
    name: p
)";
  auto path = kClaims.ObjectPath("", "immutable-claim") + "?fieldManager=test";
  auto first = client_->Raw("PATCH", path, claim, "application/apply-patch+yaml");
  ASSERT_TRUE(first.ok() && first->status < 300);
  std::string changed = claim;
  changed.replace(changed.find("name: a"), 7, "name: b");
  auto second = client_->Raw("PATCH", path, changed, "application/apply-patch+yaml");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->status, 422) << second->body;
  EXPECT_NE(second->body.find("a GPUNodeClaim's spec is immutable"), std::string::npos)
      << second->body;
}

// A class's budget lowered under a pool's price is admitted (lowering a budget must always work at
// once) with a warning naming the pool; a new pool above the lowered budget is refused, read live
// (the webhook's cache may not have the new budget yet).
TEST_F(GpuCrds, LoweringAClassBudgetWarnsAboutThePoolsAboveIt) {
  auto cls = [](const std::string& cost) {
    return R"(
apiVersion: tgp.io/v1
kind: GPUNodeClass
metadata:
  name: budget-class
spec:
  providers:
    - name: lambdalabs
      credentialsRef:
        name: tgp-operator-secret
        key: LAMBDA_LABS_API_KEY
  limits:
    maxHourlyCost: ")" +
           cost + "\"\n";
  };
  auto pool = [](const std::string& name, const std::string& price) {
    return R"(
apiVersion: tgp.io/v1
kind: GPUNodePool
metadata:
  name: )" +
           name + R"(
  namespace: default
spec:
  nodeClassRef:
    kind: GPUNodeClass
    name: budget-class
  template:
    spec: {}
  maxHourlyPrice: ")" +
           price + "\"\n";
  };
  CrdEnv& env = CrdEnv::Get();
  auto created = env.Apply(kClasses, "", "budget-class", cls("20"));
  ASSERT_TRUE(created.ok() && created->status < 300)
      << (created.ok() ? created->body : created.error().ToString());
  auto p = env.Apply(kPools, "default", "budget-pool", pool("budget-pool", "15"));
  ASSERT_TRUE(p.ok() && p->status < 300) << (p.ok() ? p->body : p.error().ToString());

  // The webhook warns from its informer cache ("however stale, good enough" for a warning), so
  // the pool just created may not be in it yet: lower the limit again (from 20) until the cache
  // has caught up, then check what it says.
  std::string warning;
  const std::string expected = "GPUNodePool default/budget-pool has maxHourlyPrice \"15\"";
  auto lowered = env.Apply(kClasses, "", "budget-class", cls("10"));
  ASSERT_TRUE(lowered.ok());
  EXPECT_LT(lowered->status, 300) << lowered->body;
  warning = Warnings(*lowered);
  EXPECT_TRUE(testenv::Eventually(
      [&] {
        if (warning.find(expected) != std::string::npos) return true;
        auto raised = env.Apply(kClasses, "", "budget-class", cls("20"));
        auto again = env.Apply(kClasses, "", "budget-class", cls("10"));
        if (!raised.ok() || !again.ok() || again->status >= 300) return false;
        warning = Warnings(*again);
        return warning.find(expected) != std::string::npos;
      },
      std::chrono::seconds(10)))
      << "warning: " << warning;
  EXPECT_NE(warning.find("GPUNodePool default/budget-pool has maxHourlyPrice \"15\" above this "
                         "class's limits.maxHourlyCost \"10\""),
            std::string::npos)
      << "warning: " << warning;

  auto refused = env.Apply(kPools, "default", "budget-pool-2", pool("budget-pool-2", "15"));
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->status, 422) << refused->body;
  EXPECT_NE(refused->body.find("is above GPUNodeClass \\\"budget-class\\\"'s "
                               "limits.maxHourlyCost \\\"10\\\""),
            std::string::npos)
      << refused->body;
  // Moving the existing pool to a class that does not exist is refused; editing it in place
  // (its price, within the budget) is not.
  auto moved = env.Apply(kPools, "default", "budget-pool",
                         std::regex_replace(pool("budget-pool", "5"),
                                            std::regex("name: budget-class"), "name: gone-class"));
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->status, 422) << moved->body;
  EXPECT_NE(moved->body.find("names no GPUNodeClass"), std::string::npos) << moved->body;
  auto edited = env.Apply(kPools, "default", "budget-pool", pool("budget-pool", "5"));
  ASSERT_TRUE(edited.ok());
  EXPECT_LT(edited->status, 300) << edited->body;
}

// ---- the corpus ----

using testenv::CorpusCase;
using testenv::LoadCorpusCase;

std::vector<fs::path> CorpusFiles() { return testenv::CorpusFiles(HS_CORPUS_DIR); }

TEST(GpuCorpusFiles, EveryKindHasRefusalsAndPositives) {
  std::map<std::string, std::pair<int, int>> per_kind;  // kind -> (refusals, positives)
  for (const auto& f : CorpusFiles()) {
    CorpusCase c = LoadCorpusCase(f);
    EXPECT_FALSE(c.what.empty()) << c.file << ": no '# Case:' line";
    EXPECT_FALSE(c.expect.empty()) << c.file << ": no '# Expect:' line";
    EXPECT_NE(ResourceOf(c.kind), nullptr) << c.file << ": kind " << c.kind;
    auto& [refused, admitted] = per_kind[c.kind];
    (c.expect == "admitted" ? admitted : refused)++;
  }
  for (const char* kind : {"GPUNodeClass", "GPUNodePool", "GPUNodeClaim"}) {
    EXPECT_GE(per_kind[kind].first, 2) << kind;
    EXPECT_GE(per_kind[kind].second, 1) << kind;
  }
}

class GpuCorpus : public ::testing::TestWithParam<fs::path> {
 protected:
  void SetUp() override { ASSERT_TRUE(CrdEnv::Get().error.empty()) << CrdEnv::Get().error; }
};

TEST_P(GpuCorpus, RefusedWithTheExpectedMessageOrAdmitted) {
  auto client = CrdEnv::Get().client;
  CorpusCase c = LoadCorpusCase(GetParam());
  SCOPED_TRACE(c.file + ": " + c.what);
  const kube::Resource* r = ResourceOf(c.kind);
  ASSERT_NE(r, nullptr) << c.kind;
  ASSERT_FALSE(c.name.empty());
  auto res = CrdEnv::Get().Apply(*r, c.ns, c.name, c.text);
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  // Admission warnings come back as Warning headers (299 - "<text>").
  std::string warnings = Warnings(*res);
  if (!c.warn.empty()) {
    EXPECT_NE(warnings.find(c.warn), std::string::npos)
        << "expected a warning with \"" << c.warn << "\"; got:\n"
        << warnings;
  }
  if (c.expect == "admitted") {
    EXPECT_TRUE(res->status == 200 || res->status == 201) << res->status << " " << res->body;
    return;
  }
  // A refusal by the schema, a CEL rule or the webhook (testenv::ExpectRefusal).
  ASSERT_NO_FATAL_FAILURE(testenv::ExpectRefusal(*res, c.expect));
  EXPECT_FALSE(client->Get(*r, c.ns, c.name).ok()) << c.name << " was stored";
}

INSTANTIATE_TEST_SUITE_P(Gpu, GpuCorpus, ::testing::ValuesIn(CorpusFiles()),
                         testenv::CorpusCaseName);

}  // namespace
}  // namespace hyperslice
