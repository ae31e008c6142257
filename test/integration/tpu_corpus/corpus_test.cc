// The bad-input corpus for TPUNodeGroups (test/corpus/tpunodegroups), applied as a user would:
// each file's YAML, unchanged, sent with server-side apply (kubectl apply --server-side: PATCH
// application/apply-patch+yaml, fieldValidation=Strict) to the real kube-apiserver, with the CRD
// from deploy/crds and the validating webhook of deploy/webhook served in-process.
//
// Each file starts with "# Case: ..." and "# Expect: <substring>": a refusal (4xx, never a failed
// webhook call) whose message contains the substring, or "admitted". Nothing refused may exist
// afterwards.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>

#include "src/kube/client.h"
#include "src/kube/yaml.h"
#include "src/net/pki.h"
#include "src/webhook/internal.h"
#include "src/webhook/webhook.h"
#include "test/testenv/serving_pair.h"
#include "test/testenv/testenv.h"

namespace hyperslice::webhook {
namespace {

namespace json = boost::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

using kube::YamlToJson;

struct Case {
  std::string file;    // file name
  std::string text;    // the YAML as committed
  std::string what;    // "# Case:"
  std::string expect;  // "# Expect:"
  std::string name;    // metadata.name
};

Case LoadCase(const fs::path& path) {
  Case c;
  c.file = path.filename().string();
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  c.text = ss.str();
  std::istringstream lines(c.text);
  for (std::string line; std::getline(lines, line) && line.rfind('#', 0) == 0;) {
    if (line.rfind("# Case: ", 0) == 0) c.what = line.substr(8);
    if (line.rfind("# Expect: ", 0) == 0) c.expect = line.substr(10);
  }
  try {
    c.name = YAML::Load(c.text)["metadata"]["name"].as<std::string>();
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

const kube::Resource& ValidatingConfigs() {
  static const kube::Resource r{"admissionregistration.k8s.io", "v1",
                                "validatingwebhookconfigurations", "ValidatingWebhookConfiguration",
                                false};
  return r;
}

// The webhook server, the CRD and the validating configuration, once per binary.
class CorpusEnv {
 public:
  static CorpusEnv& Get() {
    static CorpusEnv* env = new CorpusEnv();  // lives until exit, like the cluster
    return *env;
  }
  std::shared_ptr<kube::Client> client;
  std::unique_ptr<Server> server;
  std::string ns;
  std::string error;

  // Server-side apply of `yaml` as `name`, as kubectl apply --server-side sends it.
  Result<net::Response> Apply(const std::string& name, const std::string& yaml, bool dry_run) {
    std::string path = TPUNodeGroups().ObjectPath(ns, name) +
                       "?fieldManager=kubectl&fieldValidation=Strict&force=true";
    if (dry_run) path += "&dryRun=All";
    return client->Raw("PATCH", path, yaml, "application/apply-patch+yaml");
  }

 private:
  CorpusEnv() {
    client = testenv::AdminClient();
    if (!client) {
      error = "no admin client";
      return;
    }
    ns = testenv::TestNamespace();
    dir_ = fs::temp_directory_path() / ("hs-corpus-it-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    auto ca = testenv::WriteLoopbackServingPair(dir_, "corpus-it-ca");
    ServerOptions o;
    o.tls_cert_file = (dir_ / "tls.crt").string();
    o.tls_key_file = (dir_ / "tls.key").string();
    o.source = NewInformerObjectSource(client, 20s);
    auto s = Server::Start(std::move(o));
    if (!s.ok()) {
      error = s.error().ToString();
      return;
    }
    server = std::move(*s);
    if (Status st = InstallCrd(); !st.ok()) {
      error = "CRD: " + st.error().ToString();
      return;
    }
    if (Status st = RegisterWebhook(ca->cert_pem); !st.ok()) {
      error = "webhook configuration: " + st.error().ToString();
      return;
    }
    if (Status st = WaitForWebhook(); !st.ok()) error = st.error().ToString();
  }

  Status InstallCrd() {
    json::object crd =
        YamlToJson(YAML::LoadFile(HS_DEPLOY_DIR "/crds/tpu.google.com_tpunodegroups.yaml"))
            .as_object();
    auto created = client->Create(kube::resources::CustomResourceDefinitions(), "", crd);
    if (!created.ok() && created.error().code != Error::Code::kAlreadyExists) {
      return created.error();
    }
    for (auto deadline = std::chrono::steady_clock::now() + 60s;
         std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(100ms)) {
      if (client->List(TPUNodeGroups(), ns).ok()) return OkStatus();
    }
    return Error::Make(Error::Code::kTimeout, "TPUNodeGroup CRD not served");
  }

  // deploy/webhook/base/webhooks.yaml's ValidatingWebhookConfiguration, pointed at the server.
  Status RegisterWebhook(const std::string& ca_pem) {
    std::string base = "https://127.0.0.1:" + std::to_string(server->port());
    for (const YAML::Node& doc :
         YAML::LoadAllFromFile(HS_DEPLOY_DIR "/webhook/base/webhooks.yaml")) {
      if (!doc.IsMap()) continue;
      json::object cfg = YamlToJson(doc).as_object();
      if (cfg["kind"].as_string() != "ValidatingWebhookConfiguration") continue;
      for (json::value& hook : cfg["webhooks"].as_array()) {
        json::object& h = hook.as_object();
        std::string path(h["clientConfig"].as_object()["service"].as_object()["path"].as_string());
        h["clientConfig"] =
            json::object{{"url", base + path}, {"caBundle", internal::Base64(ca_pem)}};
      }
      HS_RETURN_IF_ERROR(client->Create(ValidatingConfigs(), "", cfg));
    }
    return OkStatus();
  }

  // The apiserver picks the configuration up asynchronously: dry-run a group only the webhook
  // refuses until it is refused.
  Status WaitForWebhook() {
    Case probe = LoadCase(fs::path(HS_CORPUS_DIR) / "ok-seed-000-example.yaml");
    std::string text = probe.text;
    size_t at = text.find("nodeCount: 2");
    if (at == std::string::npos) return Error::Make(Error::Code::kInternal, "probe: no nodeCount");
    text.replace(at, 12, "nodeCount: 3");
    std::string last;
    for (auto deadline = std::chrono::steady_clock::now() + 30s;
         std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(100ms)) {
      auto res = Apply(probe.name, text, /*dry_run=*/true);
      if (res.ok() && res->body.find("needs nodeCount 2") != std::string::npos) return OkStatus();
      last = res.ok() ? std::to_string(res->status) + " " + res->body : res.error().ToString();
    }
    return Error::Make(Error::Code::kTimeout, "the webhook never refused the probe; last: " + last);
  }

  fs::path dir_;
};

class Corpus : public ::testing::TestWithParam<fs::path> {
 protected:
  void SetUp() override {
    CorpusEnv& env = CorpusEnv::Get();
    ASSERT_TRUE(env.error.empty()) << env.error;
  }
};

TEST(CorpusFiles, AtLeastFiftyRefusalsAndThePositives) {
  int refusals = 0, positives = 0;
  for (const auto& f : CorpusFiles()) {
    Case c = LoadCase(f);
    EXPECT_FALSE(c.what.empty()) << c.file << ": no '# Case:' line";
    EXPECT_FALSE(c.expect.empty()) << c.file << ": no '# Expect:' line";
    (c.expect == "admitted" ? positives : refusals)++;
  }
  EXPECT_GE(refusals, 50);
  EXPECT_GE(positives, 2);
}

TEST_P(Corpus, RefusedWithTheExpectedMessageOrAdmitted) {
  CorpusEnv& env = CorpusEnv::Get();
  Case c = LoadCase(GetParam());
  ASSERT_FALSE(c.name.empty()) << c.file << ": no metadata.name";
  SCOPED_TRACE(c.file + ": " + c.what);
  auto res = env.Apply(c.name, c.text, /*dry_run=*/false);
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  if (c.expect == "admitted") {
    EXPECT_TRUE(res->status == 200 || res->status == 201) << res->status << " " << res->body;
    return;
  }
  // A refusal by the schema, CEL or the webhook: 4xx with a metav1.Status naming the problem.
  // The one 500 allowed is the apiserver's own server-side-apply type check ("failed to create
  // typed patch object (...): .spec.x: expected string, got ..."), which kube-apiserver answers
  // with 500 for a value of the wrong type; a failed webhook call (crash, timeout, bad answer)
  // is never a refusal of the input.
  boost::system::error_code ec;
  json::value status = json::parse(res->body, ec);
  ASSERT_FALSE(ec) << res->body;
  const json::value* message =
      status.is_object() ? status.as_object().if_contains("message") : nullptr;
  ASSERT_TRUE(message != nullptr && message->is_string()) << res->body;
  std::string msg(message->as_string());
  RecordProperty("message", msg);  // in --gtest_output=xml, to review the wording
  EXPECT_GE(res->status, 400) << res->body;
  if (res->status >= 500) {
    EXPECT_EQ(msg.rfind("failed to create typed patch object", 0), 0u) << res->body;
  }
  EXPECT_EQ(msg.find("failed calling webhook"), std::string::npos) << msg;
  EXPECT_NE(msg.find(c.expect), std::string::npos) << "expected \"" << c.expect << "\" in:\n"
                                                   << msg.substr(0, 2000);
  auto stored = env.client->Get(TPUNodeGroups(), env.ns, c.name);
  EXPECT_FALSE(stored.ok()) << c.name << " was stored";
}

std::string CaseName(const ::testing::TestParamInfo<fs::path>& info) {
  std::string n = info.param.stem().string();
  for (char& ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
}

INSTANTIATE_TEST_SUITE_P(TPUNodeGroups, Corpus, ::testing::ValuesIn(CorpusFiles()), CaseName);

}  // namespace
}  // namespace hyperslice::webhook
