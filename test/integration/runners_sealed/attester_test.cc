// The sealed agent's Attester on a software TPM (swtpm, EK certificate from the test's own CA)
// against the control node's verifier (AppraiseAnswer): the measurements the agent makes are
// the ones the control node expects for the pod it sent; a different agent config, a workload
// spec other than the one sent, a replayed answer and an old quote under a new nonce are each
// refused and named.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "src/runners/agent/attester.h"
#include "src/runners/attest/attest.h"
#include "src/runners/controlnode/attestation.h"
#include "src/runners/sealed/sealed.h"
#include "test/integration/runners_attest/swtpm.h"

namespace hyperslice::runners {
namespace {

namespace fs = std::filesystem;
using attest::testing::Swtpm;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::string kDigest = "sha256:" + std::string(64, 'c');

v1::RunPodRequest Pod(const std::string& arg) {
  v1::RunPodRequest r;
  r.mutable_pod()->set_uid("uid-1");
  r.mutable_pod()->set_namespace_("default");
  r.mutable_pod()->set_name("p");
  auto* c = r.add_containers();
  c->set_name("main");
  c->set_image("127.0.0.1:5000/hs@" + kDigest);
  c->add_args(arg);
  return r;
}

class AttesterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto missing = Swtpm::Missing()) GTEST_SKIP() << *missing;
    ::setenv("TSS2_LOG", "all+none", 1);
    auto tpm = Swtpm::Start(/*with_ek_certificate=*/true);
    ASSERT_TRUE(tpm.ok()) << tpm.error().message;
    tpm_ = std::move(*tpm);
    char tmpl[] = "/tmp/hs-sealed-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    agent::AttesterOptions o;
    o.tcti = tpm_->Tcti();
    o.binary_path = "/proc/self/exe";
    o.config_document = R"({"capacity":{"cpu":"4"},"sealed":true})";
    o.pods_dir = dir_ + "/pods";
    o.tokens = [this](const link::AttestationTokenRequest& r) -> Result<std::string> {
      asked_ = r;
      return std::string("a.jwt.token");
    };
    auto a = agent::Attester::Start(o);
    ASSERT_TRUE(a.ok()) << a.error().message;
    attester_ = std::move(*a);

    // Enrolment as the control node does it.
    auto id = attester_->Identity();
    ASSERT_TRUE(id.ok()) << id.error().message;
    EXPECT_EQ(id->hwmodel(), "TPM2");
    auto enrollment = attest::Enrollment::Begin(
        id->ek_certificate_pem(), attest::AkPublic{id->ak_public()}, tpm_->ek_ca_pem());
    ASSERT_TRUE(enrollment.ok()) << enrollment.error().message;
    auto secret = attester_->ActivateCredential(enrollment->challenge().credential_blob,
                                                enrollment->challenge().encrypted_secret);
    ASSERT_TRUE(secret.ok()) << secret.error().message;
    auto enrolled = enrollment->Finish(*secret);
    ASSERT_TRUE(enrolled.ok()) << enrolled.error().message;
    ak_ = *enrolled;

    policy_.name = "fleet";
    policy_.ek_ca_pem = tpm_->ek_ca_pem();
    policy_.reference_values[sealed::kAgentBinary] = {
        attest::Hex(attest::Sha256(ReadAll("/proc/self/exe")))};
    policy_.reference_values[sealed::kAgentConfig] = {
        attest::Hex(attest::Sha256(R"({"capacity":{"cpu":"4"},"sealed":true})"))};
    policy_.required = {sealed::kAgentBinary, sealed::kAgentConfig};
  }
  void TearDown() override {
    attester_.reset();
    tpm_.reset();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // The pod started on the runner: the agent measures it before its container starts.
  void Start(const v1::RunPodRequest& pod) {
    agent::Image image;
    image.manifest_digest = kDigest;
    auto binds = attester_->BeforeStart(pod, pod.containers(0), image);
    ASSERT_TRUE(binds.ok()) << binds.error().message;
    ASSERT_EQ(binds->count(sealed::kTeeServerDir), 1u);
    socket_dir_ = binds->at(sealed::kTeeServerDir);
  }

  Result<attest::Appraisal> Appraise(const v1::AttestResponse& answer, const std::string& nonce,
                                     const v1::RunPodRequest& sent) {
    std::map<std::string, std::map<std::string, std::string>> expected{
        {sent.pod().uid(), controlnode::ExpectedMeasurements(sent)}};
    return controlnode::AppraiseAnswer(ak_, answer, nonce, "", policy_, expected, nonces_);
  }

  std::unique_ptr<Swtpm> tpm_;
  std::string dir_, socket_dir_;
  std::unique_ptr<agent::Attester> attester_;
  attest::EnrolledAk ak_;
  controlnode::AttestationPolicySpec policy_;
  attest::NonceRegistry nonces_;
  link::AttestationTokenRequest asked_;
};

TEST_F(AttesterTest, TheControlNodeExpectsExactlyWhatTheAgentMeasured) {
  v1::RunPodRequest pod = Pod("print:hi");
  Start(pod);
  std::string nonce = nonces_.Issue();
  auto t0 = std::chrono::steady_clock::now();
  auto answer = attester_->Quote(nonce, "");
  ASSERT_TRUE(answer.ok()) << answer.error().message;
  auto appraisal = Appraise(*answer, nonce, pod);
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(appraisal.ok()) << appraisal.error().reason << ": " << appraisal.error().message;
  EXPECT_TRUE(appraisal->ok()) << appraisal->mismatches.front().ToString();
  std::vector<std::string> names;
  for (const auto& m : appraisal->measurements) names.push_back(m.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"agent/binary", "agent/config", "workload/uid-1/main/image",
                                      "workload/uid-1/main/spec"}));
  std::printf("quote + appraisal: %.2f ms\n",
              std::chrono::duration<double, std::milli>(took).count());
  // Restarts of the same container are not measured again.
  Start(pod);
  std::string n2 = nonces_.Issue();
  auto again = attester_->Quote(n2, "");
  ASSERT_TRUE(again.ok());
  auto appraisal2 = Appraise(*again, n2, pod);
  ASSERT_TRUE(appraisal2.ok());
  EXPECT_EQ(appraisal2->measurements.size(), 4u);
}

TEST_F(AttesterTest, AReplayedAnswerAndAnOldQuoteUnderANewNonceAreRefused) {
  v1::RunPodRequest pod = Pod("print:hi");
  Start(pod);
  std::string nonce = nonces_.Issue();
  auto answer = attester_->Quote(nonce, "");
  ASSERT_TRUE(answer.ok());
  ASSERT_TRUE(Appraise(*answer, nonce, pod).ok());
  auto replay = Appraise(*answer, nonce, pod);
  ASSERT_FALSE(replay.ok());
  EXPECT_EQ(replay.error().reason, "NonceReplayed");
  std::string fresh = nonces_.Issue();
  auto old_quote = Appraise(*answer, fresh, pod);
  ASSERT_FALSE(old_quote.ok());
  EXPECT_EQ(old_quote.error().reason, "NonceMismatch");
  auto unknown = Appraise(*answer, std::string(32, 'n'), pod);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().reason, "NonceUnknown");
}

TEST_F(AttesterTest, AnotherAgentConfigIsNamedWithItsPcrAndDigests) {
  const std::string expected = attest::Hex(attest::Sha256(R"({"capacity":{"cpu":"8"}})"));
  policy_.reference_values[sealed::kAgentConfig] = {expected};
  v1::RunPodRequest pod = Pod("print:hi");
  std::string nonce = nonces_.Issue();
  auto answer = attester_->Quote(nonce, "");
  ASSERT_TRUE(answer.ok());
  auto appraisal = Appraise(*answer, nonce, pod);
  ASSERT_TRUE(appraisal.ok()) << appraisal.error().message;
  ASSERT_EQ(appraisal->mismatches.size(), 1u);
  EXPECT_EQ(appraisal->mismatches[0].ToString(),
            "PCR 23 measurement \"agent/config\": expected " + expected + ", got " +
                attest::Hex(attest::Sha256(R"({"capacity":{"cpu":"4"},"sealed":true})")));
}

TEST_F(AttesterTest, AWorkloadOtherThanTheOneSentIsNamed) {
  Start(Pod("print:something-else"));
  std::string nonce = nonces_.Issue();
  auto answer = attester_->Quote(nonce, "");
  ASSERT_TRUE(answer.ok());
  auto appraisal = Appraise(*answer, nonce, Pod("print:hi"));
  ASSERT_TRUE(appraisal.ok()) << appraisal.error().message;
  ASSERT_EQ(appraisal->mismatches.size(), 1u);
  EXPECT_EQ(appraisal->mismatches[0].pcr, attest::kWorkloadPcr);
  EXPECT_EQ(appraisal->mismatches[0].name, "workload/uid-1/main/spec");
}

TEST_F(AttesterTest, TheTokenSocketNamesThePodAndContainerItServes) {
  Start(Pod("print:hi"));
  const std::string path = socket_dir_ + "/teeserver.sock";
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, path.c_str(), sizeof(sa.sun_path) - 1);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0) << path;
  const std::string body = R"({"audience":"https://kbs.example","nonces":["nonce-12345"],)"
                           R"("tee_pubkey_sha256":")" +
                           std::string(64, 'f') + "\"}";
  const std::string req =
      "POST /v1/token HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
      body;
  ASSERT_EQ(::write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_NE(out.find("200 OK"), std::string::npos) << out;
  EXPECT_EQ(out.substr(out.find("\r\n\r\n") + 4), "a.jwt.token");
  EXPECT_EQ(asked_.pod_uid, "uid-1");
  EXPECT_EQ(asked_.container, "main");
  EXPECT_EQ(asked_.audience, "https://kbs.example");
  EXPECT_EQ(asked_.nonces, std::vector<std::string>{"nonce-12345"});
  EXPECT_EQ(asked_.tee_pubkey_sha256, std::string(64, 'f'));
  attester_->ForgetPod("uid-1");
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace hyperslice::runners
