// The prover against a real TPM 2.0 implementation (swtpm) and the verifier against its evidence:
// enrollment by credential activation, quotes, the event log, reference values, nonces.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "src/net/pki.h"
#include "src/runners/attest/attest.h"
#include "test/integration/runners_attest/swtpm.h"

namespace hyperslice::runners::attest {
namespace {

using testing::IssueEkCertificate;
using testing::Swtpm;

constexpr std::string_view kAgentBinary =
    "\x7f"
    "ELF agent build 1";
// The same agent after a change: what a reference value must catch.
constexpr std::string_view kPatchedAgentBinary =
    "\x7f"
    "ELF agent build 2 (patched)";
constexpr std::string_view kAgentConfig = R"({"mode":"sealed","link":"https://127.0.0.1:1"})";
constexpr std::string_view kImage =
    "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
constexpr std::string_view kSpec = R"({"command":["/serve"],"env":{"MODEL":"m1"}})";

// One sealed runner: its TPM, the prover on it, the test CA and the enrolled AK.
class SealedRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = Swtpm::Missing()) GTEST_SKIP() << *why;
    // The TSS logs every TPM error to stderr; the refusals below are expected ones.
    setenv("TSS2_LOG", "all+none", 0);
    auto tpm = Swtpm::Start();
    ASSERT_TRUE(tpm.ok()) << tpm.error().ToString();
    tpm_ = std::move(*tpm);
    auto prover = Prover::Open({.tcti = tpm_->Tcti()});
    ASSERT_TRUE(prover.ok()) << prover.error().ToString();
    prover_ = std::move(*prover);
    auto ca = net::pki::MakeCa("test TPM manufacturer CA");
    ASSERT_TRUE(ca.ok());
    ca_ = *ca;
    auto ek_cert = IssueEkCertificate(ca_.cert_pem, ca_.key_pem, prover_->EkPublicPem());
    ASSERT_TRUE(ek_cert.ok()) << ek_cert.error().ToString();
    ek_cert_ = *ek_cert;

    auto enrollment = Enrollment::Begin(ek_cert_, prover_->Ak(), ca_.cert_pem);
    ASSERT_TRUE(enrollment.ok()) << enrollment.error().ToString();
    auto secret = prover_->ActivateCredential(enrollment->challenge().credential_blob,
                                              enrollment->challenge().encrypted_secret);
    ASSERT_TRUE(secret.ok()) << secret.error().ToString();
    auto enrolled = enrollment->Finish(*secret);
    ASSERT_TRUE(enrolled.ok()) << enrolled.error().ToString();
    ak_ = *enrolled;

    reference_.allowed["agent/binary"] = {Hex(Sha256(kAgentBinary))};
    reference_.allowed["agent/config"] = {Hex(Sha256(kAgentConfig))};
    reference_.allowed["workload/serve/image"] = {std::string(kImage.substr(7))};
    reference_.allowed["workload/serve/spec"] = {Hex(Sha256(kSpec))};
    reference_.required = {"agent/binary", "agent/config"};
  }

  // What the agent does at start and before a workload starts.
  void MeasureRunner(std::string_view binary) {
    ASSERT_TRUE(prover_->ResetPcr(kAgentPcr).ok());
    ASSERT_TRUE(prover_->ResetPcr(kWorkloadPcr).ok());
    ASSERT_TRUE(prover_->Extend(Measure(kAgentPcr, "agent/binary", binary)).ok());
    ASSERT_TRUE(prover_->Extend(Measure(kAgentPcr, "agent/config", kAgentConfig)).ok());
    auto image = MeasureImageDigest(kWorkloadPcr, "workload/serve/image", kImage);
    ASSERT_TRUE(image.ok());
    ASSERT_TRUE(prover_->Extend(*image).ok());
    ASSERT_TRUE(prover_->Extend(Measure(kWorkloadPcr, "workload/serve/spec", kSpec)).ok());
  }

  Result<Evidence> QuoteFor(std::string_view nonce) {
    return prover_->Quote(nonce, "tee-public-key", {kAgentPcr, kWorkloadPcr});
  }
  // The verifier's appraisal of `evidence` against the enrolled AK and the reference values.
  Result<Appraisal> Appraise(const Evidence& evidence, std::string_view nonce,
                             std::string_view tee_key = "tee-public-key") {
    return AppraiseQuote(ak_, evidence, nonce, tee_key, reference_);
  }

  std::unique_ptr<Swtpm> tpm_;
  std::unique_ptr<Prover> prover_;
  net::pki::KeyPair ca_;
  std::string ek_cert_;
  EnrolledAk ak_;
  ReferenceValues reference_;
  NonceRegistry nonces_;
};

TEST_F(SealedRunnerTest, QuoteOverExpectedMeasurementsVerifies) {
  MeasureRunner(kAgentBinary);
  // Latency figure: quote on the TPM + verification, over a few rounds.
  constexpr int kRounds = 10;
  auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration quote_time{};
  for (int i = 0; i < kRounds; ++i) {
    std::string nonce = nonces_.Issue();
    auto q0 = std::chrono::steady_clock::now();
    auto evidence = QuoteFor(nonce);
    quote_time += std::chrono::steady_clock::now() - q0;
    ASSERT_TRUE(evidence.ok()) << evidence.error().ToString();
    ASSERT_TRUE(nonces_.Consume(nonce).ok());
    // The evidence crosses the wire as bytes and JSON.
    auto log = EventLogFromJson(EventLogToJson(evidence->event_log));
    ASSERT_TRUE(log.ok());
    evidence->event_log = *log;
    auto appraisal = Appraise(*evidence, nonce);
    ASSERT_TRUE(appraisal.ok()) << appraisal.error().ToString();
    EXPECT_TRUE(appraisal->ok()) << appraisal->mismatches[0].ToString();
    EXPECT_EQ(appraisal->measurements.size(), 4u);
  }
  auto total = std::chrono::steady_clock::now() - start;
  using us = std::chrono::microseconds;
  std::printf(
      "quote+verify: %.2f ms per round (quote on swtpm %.2f ms), %d rounds\n",
      static_cast<double>(std::chrono::duration_cast<us>(total).count()) / 1000.0 / kRounds,
      static_cast<double>(std::chrono::duration_cast<us>(quote_time).count()) / 1000.0 / kRounds,
      kRounds);
}

TEST_F(SealedRunnerTest, ChangedAgentBinaryIsNamedWithExpectedAndGot) {
  MeasureRunner(kPatchedAgentBinary);
  std::string nonce = nonces_.Issue();
  auto evidence = QuoteFor(nonce);
  ASSERT_TRUE(evidence.ok());
  auto appraisal = Appraise(*evidence, nonce);
  ASSERT_TRUE(appraisal.ok()) << appraisal.error().ToString();
  ASSERT_EQ(appraisal->mismatches.size(), 1u);
  const Mismatch& m = appraisal->mismatches[0];
  EXPECT_EQ(m.pcr, kAgentPcr);
  EXPECT_EQ(m.name, "agent/binary");
  EXPECT_EQ(m.expected, Hex(Sha256(kAgentBinary)));
  EXPECT_EQ(m.got, Hex(Sha256(kPatchedAgentBinary)));
  EXPECT_NE(m.ToString().find("PCR 23 measurement \"agent/binary\""), std::string::npos);
}

TEST_F(SealedRunnerTest, ReplayedNonceIsRefused) {
  MeasureRunner(kAgentBinary);
  std::string nonce = nonces_.Issue();
  auto evidence = QuoteFor(nonce);
  ASSERT_TRUE(evidence.ok());
  ASSERT_TRUE(nonces_.Consume(nonce).ok());
  ASSERT_TRUE(Appraise(*evidence, nonce).ok());
  // The same quote sent again: its nonce is spent.
  auto again = nonces_.Consume(nonce);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().reason, "NonceReplayed");
  // The old quote answering a new challenge: the nonce in the quote is not the new one.
  std::string fresh = nonces_.Issue();
  auto replay = Appraise(*evidence, fresh);
  ASSERT_FALSE(replay.ok());
  EXPECT_EQ(replay.error().reason, "NonceMismatch");
  // Report data is bound too: the quote cannot be moved to another TEE key.
  auto moved = Appraise(*evidence, nonce, "another-tee-key");
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.error().reason, "NonceMismatch");
}

TEST_F(SealedRunnerTest, EditedEventLogIsRefused) {
  MeasureRunner(kPatchedAgentBinary);
  std::string nonce = nonces_.Issue();
  auto evidence = QuoteFor(nonce);
  ASSERT_TRUE(evidence.ok());
  // The runner lies in its log about what it extended: the replay no longer matches the quote.
  evidence->event_log[0].digest = Sha256(kAgentBinary);
  auto appraisal = Appraise(*evidence, nonce);
  ASSERT_FALSE(appraisal.ok());
  EXPECT_EQ(appraisal.error().reason, "EventLogMismatch");
  // An extend left out of the log.
  evidence = QuoteFor(nonce);
  ASSERT_TRUE(evidence.ok());
  evidence->event_log.pop_back();
  appraisal = Appraise(*evidence, nonce);
  ASSERT_FALSE(appraisal.ok());
  EXPECT_EQ(appraisal.error().reason, "EventLogMismatch");
}

TEST_F(SealedRunnerTest, QuoteFromAnAkNotEnrolledIsRefused) {
  MeasureRunner(kAgentBinary);
  // Another AK in the same TPM (never enrolled) signs the quote.
  auto other = Prover::Open({.tcti = tpm_->Tcti(), .ak_label = "someone-else"});
  ASSERT_TRUE(other.ok()) << other.error().ToString();
  ASSERT_NE((*other)->Ak().tpmt_public, prover_->Ak().tpmt_public);
  std::string nonce = nonces_.Issue();
  auto evidence = (*other)->Quote(nonce, "tee-public-key", {kAgentPcr, kWorkloadPcr});
  ASSERT_TRUE(evidence.ok());
  evidence->event_log = prover_->Log();
  auto appraisal = Appraise(*evidence, nonce);
  ASSERT_FALSE(appraisal.ok());
  EXPECT_EQ(appraisal.error().reason, "QuoteInvalid");
  // A signature swapped in from that key over the enrolled AK's quote.
  auto good = QuoteFor(nonce);
  ASSERT_TRUE(good.ok());
  good->signature = evidence->signature;
  appraisal = Appraise(*good, nonce);
  ASSERT_FALSE(appraisal.ok());
  EXPECT_EQ(appraisal.error().reason, "QuoteInvalid");
}

TEST_F(SealedRunnerTest, AkFromAnotherTpmCannotBindToThisEk) {
  // TPM B's AK presented with TPM A's (certified) EK: the credential is sealed to A's EK and the
  // AK's name, and B cannot activate it.
  auto tpm_b = Swtpm::Start();
  ASSERT_TRUE(tpm_b.ok()) << tpm_b.error().ToString();
  auto prover_b = Prover::Open({.tcti = (*tpm_b)->Tcti()});
  ASSERT_TRUE(prover_b.ok()) << prover_b.error().ToString();
  ASSERT_NE((*prover_b)->EkPublicPem(), prover_->EkPublicPem());
  auto enrollment = Enrollment::Begin(ek_cert_, (*prover_b)->Ak(), ca_.cert_pem);
  ASSERT_TRUE(enrollment.ok()) << enrollment.error().ToString();
  auto secret = (*prover_b)->ActivateCredential(enrollment->challenge().credential_blob,
                                                enrollment->challenge().encrypted_secret);
  ASSERT_FALSE(secret.ok());
  EXPECT_EQ(secret.error().reason, "AkNotBound");
  // Guessing the answer does not help either.
  auto finished = enrollment->Finish(std::string(32, '\0'));
  ASSERT_FALSE(finished.ok());
  EXPECT_EQ(finished.error().reason, "AkNotBound");
  // TPM A holds the EK but not B's AK: it cannot activate a credential for B's AK name either.
  auto enrollment2 = Enrollment::Begin(ek_cert_, (*prover_b)->Ak(), ca_.cert_pem);
  ASSERT_TRUE(enrollment2.ok());
  auto secret2 = prover_->ActivateCredential(enrollment2->challenge().credential_blob,
                                             enrollment2->challenge().encrypted_secret);
  ASSERT_FALSE(secret2.ok());
}

TEST_F(SealedRunnerTest, EkCertificateFromAnotherCaIsRefused) {
  auto other_ca = net::pki::MakeCa("someone else's CA");
  ASSERT_TRUE(other_ca.ok());
  auto cert = IssueEkCertificate(other_ca->cert_pem, other_ca->key_pem, prover_->EkPublicPem());
  ASSERT_TRUE(cert.ok());
  auto enrollment = Enrollment::Begin(*cert, prover_->Ak(), ca_.cert_pem);
  ASSERT_FALSE(enrollment.ok());
  EXPECT_EQ(enrollment.error().reason, "EkUntrusted");
}

// A TPM provisioned like a vendor's: the EK certificate is read from the TPM's NV and chains to
// the provisioning CA (swtpm_localca's, made by swtpm_setup), and enrolment works from it.
TEST(ManufacturedTpmTest, EkCertificateFromNvEnrolsAndQuotes) {
  if (auto why = Swtpm::Missing()) GTEST_SKIP() << *why;
  setenv("TSS2_LOG", "all+none", 0);
  auto tpm = Swtpm::Start(/*with_ek_certificate=*/true);
  ASSERT_TRUE(tpm.ok()) << tpm.error().ToString();
  auto prover = Prover::Open({.tcti = (*tpm)->Tcti()});
  ASSERT_TRUE(prover.ok()) << prover.error().ToString();
  auto cert = (*prover)->ReadEkCertificate();
  ASSERT_TRUE(cert.ok()) << cert.error().ToString();
  auto enrollment = Enrollment::Begin(*cert, (*prover)->Ak(), (*tpm)->ek_ca_pem());
  ASSERT_TRUE(enrollment.ok()) << enrollment.error().ToString();
  auto secret = (*prover)->ActivateCredential(enrollment->challenge().credential_blob,
                                              enrollment->challenge().encrypted_secret);
  ASSERT_TRUE(secret.ok()) << secret.error().ToString();
  auto enrolled = enrollment->Finish(*secret);
  ASSERT_TRUE(enrolled.ok()) << enrolled.error().ToString();
  ASSERT_TRUE((*prover)->ResetPcr(kAgentPcr).ok());
  ASSERT_TRUE((*prover)->Extend(Measure(kAgentPcr, "agent/binary", kAgentBinary)).ok());
  NonceRegistry nonces;
  std::string nonce = nonces.Issue();
  auto evidence = (*prover)->Quote(nonce, "", {kAgentPcr});
  ASSERT_TRUE(evidence.ok()) << evidence.error().ToString();
  ReferenceValues ref;
  ref.allowed["agent/binary"] = {Hex(Sha256(kAgentBinary))};
  auto appraisal = AppraiseQuote(*enrolled, *evidence, nonce, "", ref);
  ASSERT_TRUE(appraisal.ok()) << appraisal.error().ToString();
  EXPECT_TRUE(appraisal->ok());
}

TEST_F(SealedRunnerTest, SwtpmWithoutEkCertificateSaysNotFound) {
  auto cert = prover_->ReadEkCertificate();
  ASSERT_FALSE(cert.ok());
  EXPECT_EQ(cert.error().code, Error::Code::kNotFound);
}

}  // namespace
}  // namespace hyperslice::runners::attest
