// The tgp.io CRDs (GPUNodeClass, GPUNodePool, GPUNodeClaim) on a real kube-apiserver:
// - seed 002's two examples, as deploy/examples holds them, applied unchanged with `kubectl apply`;
// - what the schema defaults (weight, enabled, ephemeral, the disruption block);
// - `kubectl get` prints the documented columns and knows the short names;
// - every file of test/corpus/gpu ("# Case:", "# Expect: <substring>" or "admitted") sent as
//   `kubectl apply --server-side` sends it (apply patch, fieldValidation=Strict) is refused with
//   that message and leaves nothing stored, or is admitted.
// Refusals the schema cannot express (a pool naming a missing class, maxHourlyPrice above the
// class's maxHourlyCost, unknown template variables) are the webhook's and tested with it.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>

#include "src/kube/client.h"
#include "src/kube/yaml.h"
#include "test/testenv/command.h"
#include "test/testenv/crds.h"
#include "test/testenv/testenv.h"

namespace hyperslice {
namespace {

namespace json = boost::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

const kube::Resource kClasses{"tgp.io", "v1", "gpunodeclasses", "GPUNodeClass", false};
const kube::Resource kPools{"tgp.io", "v1", "gpunodepools", "GPUNodePool", true};
const kube::Resource kClaims{"tgp.io", "v1", "gpunodeclaims", "GPUNodeClaim", false};

const kube::Resource* ResourceOf(const std::string& kind) {
  if (kind == "GPUNodeClass") return &kClasses;
  if (kind == "GPUNodePool") return &kPools;
  if (kind == "GPUNodeClaim") return &kClaims;
  return nullptr;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Installs the three CRDs once per binary and waits until each is served.
class CrdEnv {
 public:
  static CrdEnv& Get() {
    static CrdEnv* env = new CrdEnv();  // lives until exit, like the cluster
    return *env;
  }
  std::shared_ptr<kube::Client> client;
  std::string error;

 private:
  CrdEnv() {
    client = testenv::AdminClient();
    if (!client) {
      error = "no admin client";
      return;
    }
    Status st = testenv::InstallCrds({HS_DEPLOY_DIR "/crds/tgp.io_gpunodeclasses.yaml",
                                      HS_DEPLOY_DIR "/crds/tgp.io_gpunodepools.yaml",
                                      HS_DEPLOY_DIR "/crds/tgp.io_gpunodeclaims.yaml"},
                                     {kClasses, kPools, kClaims});
    if (!st.ok()) error = st.error().ToString();
  }
};

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
  for (const char* file : {"gpunodeclass.yaml", "gpunodepool.yaml"}) {
    testenv::CommandResult r =
        testenv::Kubectl({"apply", "-f", std::string(HS_DEPLOY_DIR "/examples/") + file});
    ASSERT_EQ(r.exit_code, 0) << file << ": " << r.errors;
    EXPECT_NE(r.output.find("created"), std::string::npos) << r.output;
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

// ---- the corpus ----

struct Case {
  std::string file, text, what, expect, kind, name, ns;
};

Case LoadCase(const fs::path& path) {
  Case c;
  c.file = path.filename().string();
  c.text = ReadFile(path);
  std::istringstream lines(c.text);
  for (std::string line; std::getline(lines, line) && line.rfind('#', 0) == 0;) {
    if (line.rfind("# Case: ", 0) == 0) c.what = line.substr(8);
    if (line.rfind("# Expect: ", 0) == 0) c.expect = line.substr(10);
  }
  try {
    YAML::Node doc = YAML::Load(c.text);
    c.kind = doc["kind"].as<std::string>("");
    c.name = doc["metadata"]["name"].as<std::string>("");
    c.ns = doc["metadata"]["namespace"].as<std::string>("");
  } catch (const std::exception&) {
  }
  return c;
}

std::vector<fs::path> CorpusFiles() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(HS_CORPUS_DIR)) {
    if (e.is_regular_file() && e.path().extension() == ".yaml") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(GpuCorpusFiles, EveryKindHasRefusalsAndPositives) {
  std::map<std::string, std::pair<int, int>> per_kind;  // kind -> (refusals, positives)
  for (const auto& f : CorpusFiles()) {
    Case c = LoadCase(f);
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
  Case c = LoadCase(GetParam());
  SCOPED_TRACE(c.file + ": " + c.what);
  const kube::Resource* r = ResourceOf(c.kind);
  ASSERT_NE(r, nullptr) << c.kind;
  ASSERT_FALSE(c.name.empty());
  auto res = client->Raw(
      "PATCH",
      r->ObjectPath(c.ns, c.name) + "?fieldManager=kubectl&fieldValidation=Strict&force=true",
      c.text, "application/apply-patch+yaml");
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  if (c.expect == "admitted") {
    EXPECT_TRUE(res->status == 200 || res->status == 201) << res->status << " " << res->body;
    return;
  }
  boost::system::error_code ec;
  json::value status = json::parse(res->body, ec);
  ASSERT_FALSE(ec) << res->body;
  const json::value* message =
      status.is_object() ? status.as_object().if_contains("message") : nullptr;
  ASSERT_TRUE(message != nullptr && message->is_string()) << res->body;
  std::string msg(message->as_string());
  EXPECT_GE(res->status, 400) << res->body;
  // kube-apiserver answers a value of the wrong type in an apply patch with 500 and this prefix
  // (its server-side-apply type check); every other refusal is a 4xx.
  if (res->status >= 500) {
    EXPECT_EQ(msg.rfind("failed to create typed patch object", 0), 0u) << res->body;
  }
  EXPECT_NE(msg.find(c.expect), std::string::npos) << "expected \"" << c.expect << "\" in:\n"
                                                   << msg.substr(0, 2000);
  EXPECT_FALSE(client->Get(*r, c.ns, c.name).ok()) << c.name << " was stored";
}

std::string CaseName(const ::testing::TestParamInfo<fs::path>& info) {
  std::string n = info.param.stem().string();
  for (char& ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
}

INSTANTIATE_TEST_SUITE_P(Gpu, GpuCorpus, ::testing::ValuesIn(CorpusFiles()), CaseName);

}  // namespace
}  // namespace hyperslice
