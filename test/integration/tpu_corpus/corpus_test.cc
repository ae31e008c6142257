// The bad-input corpus for TPUNodeGroups (test/corpus/tpunodegroups), applied as a user would:
// each file's YAML, unchanged, sent with server-side apply (kubectl apply --server-side: PATCH
// application/apply-patch+yaml, fieldValidation=Strict) to the real kube-apiserver, with the CRD
// from deploy/crds and the validating webhook of deploy/webhook served in-process.
//
// Each file starts with "# Case: ..." and "# Expect: <substring>": a refusal (4xx, never a failed
// webhook call) whose message contains the substring, or "admitted". Nothing refused may exist
// afterwards.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "src/kube/client.h"
#include "src/webhook/webhook.h"
#include "test/testenv/admission_env.h"
#include "test/testenv/admission_probe.h"
#include "test/testenv/corpus.h"
#include "test/testenv/server_side_apply.h"
#include "test/testenv/testenv.h"

namespace hyperslice::webhook {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testenv::CorpusCase;
using testenv::LoadCorpusCase;

std::vector<fs::path> CorpusFiles() { return testenv::CorpusFiles(HS_CORPUS_DIR); }

// The webhook server, the CRD and deploy/webhook's configurations, once per binary.
class CorpusEnv {
 public:
  static CorpusEnv& Get() {
    static CorpusEnv* env = new CorpusEnv();  // lives until exit, like the cluster
    return *env;
  }
  testenv::AdmissionEnv admission{"corpus-it",
                                  {HS_DEPLOY_DIR "/crds/tpu.google.com_tpunodegroups.yaml"},
                                  {TPUNodeGroups()},
                                  HS_DEPLOY_DIR "/webhook/base/webhooks.yaml"};
  std::string ns = testenv::TestNamespace();
  std::string error = admission.error;

  // Server-side apply of `yaml` as `name`, as kubectl apply --server-side sends it.
  Result<net::Response> Apply(const std::string& name, const std::string& yaml, bool dry_run) {
    return testenv::ServerSideApply(*admission.client, TPUNodeGroups(), ns, name, yaml, dry_run);
  }

 private:
  CorpusEnv() {
    if (!error.empty()) return;
    if (Status st = WaitForWebhook(); !st.ok()) error = st.error().ToString();
  }

  // The apiserver picks the configuration up asynchronously: dry-run a group only the webhook
  // refuses until it is refused.
  Status WaitForWebhook() {
    CorpusCase probe = LoadCorpusCase(fs::path(HS_CORPUS_DIR) / "ok-seed-000-example.yaml");
    std::string text = probe.text;
    size_t at = text.find("nodeCount: 2");
    if (at == std::string::npos) return Error::Make(Error::Code::kInternal, "probe: no nodeCount");
    text.replace(at, 12, "nodeCount: 3");
    return testenv::ProbeUntil([&] { return Apply(probe.name, text, /*dry_run=*/true); },
                               [](const testenv::Answer& res) {
                                 return res.ok() &&
                                        res->body.find("needs nodeCount 2") != std::string::npos;
                               });
  }
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
    CorpusCase c = LoadCorpusCase(f);
    EXPECT_FALSE(c.what.empty()) << c.file << ": no '# Case:' line";
    EXPECT_FALSE(c.expect.empty()) << c.file << ": no '# Expect:' line";
    (c.expect == "admitted" ? positives : refusals)++;
  }
  EXPECT_GE(refusals, 50);
  EXPECT_GE(positives, 2);
}

TEST_P(Corpus, RefusedWithTheExpectedMessageOrAdmitted) {
  CorpusEnv& env = CorpusEnv::Get();
  CorpusCase c = LoadCorpusCase(GetParam());
  ASSERT_FALSE(c.name.empty()) << c.file << ": no metadata.name";
  SCOPED_TRACE(c.file + ": " + c.what);
  auto res = env.Apply(c.name, c.text, /*dry_run=*/false);
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  if (c.expect == "admitted") {
    EXPECT_TRUE(res->status == 200 || res->status == 201) << res->status << " " << res->body;
    return;
  }
  // A refusal by the schema, CEL or the webhook (testenv::ExpectRefusal).
  std::string msg;
  ASSERT_NO_FATAL_FAILURE(testenv::ExpectRefusal(*res, c.expect, &msg));
  RecordProperty("message", msg);  // in --gtest_output=xml, to review the wording
  auto stored = env.admission.client->Get(TPUNodeGroups(), env.ns, c.name);
  EXPECT_FALSE(stored.ok()) << c.name << " was stored";
}

INSTANTIATE_TEST_SUITE_P(TPUNodeGroups, Corpus, ::testing::ValuesIn(CorpusFiles()),
                         testenv::CorpusCaseName);

}  // namespace
}  // namespace hyperslice::webhook
