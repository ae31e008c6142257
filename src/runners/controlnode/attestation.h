// RunnerAttestation: the link controller's verifier for one sealed runner (issue 21; RFC 9334
// Verifier). It enrols the agent's attestation key (EK certificate against the policy's CAs,
// credential activation), then appraises TPM quotes over a fresh single-use nonce: periodically
// (the policy's reattestIntervalSeconds), when triggered (a workload started, the policy or the
// agent changed) and synchronously for each token request. Measurements are compared with the
// AttestationPolicy's reference values, and each workload measurement with what the control node
// sent that runner (ExpectWorkload). src/runners/README.md ("Sealed runners").
//
// Thread-safety: every method from any thread; appraisals are serialised. Stop() joins the
// thread (the destructor calls it). on_change runs on the appraisal thread and must be quick.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/base/result.h"
#include "src/runners/agent.grpc.pb.h"
#include "src/runners/attest/attest.h"
#include "src/runners/controlnode/api.h"

namespace hyperslice::runners::controlnode {

// Runner condition reasons (kAttestedCondition).
inline constexpr char kReasonAttested[] = "Attested";
inline constexpr char kReasonAwaitingAttestation[] = "AwaitingAttestation";
inline constexpr char kReasonNoAttestationPolicy[] = "NoAttestationPolicy";
inline constexpr char kReasonEnrollmentFailed[] = "EnrollmentFailed";
inline constexpr char kReasonQuoteRefused[] = "QuoteRefused";
inline constexpr char kReasonMeasurementMismatch[] = "MeasurementMismatch";

struct AttestationOptions {
  std::string runner;
  std::string policy_name;
  std::shared_ptr<v1::RunnerAgent::StubInterface> stub;
  // Reads the AttestationPolicy (from the API: the admin's object, read at each appraisal).
  std::function<Result<AttestationPolicySpec>(const std::string& name)> policy;
  std::shared_ptr<attest::NonceRegistry> nonces;
  std::function<void()> on_change;
  std::chrono::milliseconds rpc_timeout{10000};
  // Appraisal when the policy is unreadable; also the first try's delay after a failed RPC.
  std::chrono::milliseconds retry_interval{2000};
};

struct AttestationState {
  enum class Verdict { kPending, kTrusted, kUntrusted };
  Verdict verdict = Verdict::kPending;
  std::string reason = kReasonAwaitingAttestation;  // a kReason* above
  std::string message = "waiting for the first appraisal";
  std::vector<std::string> mismatches;  // Mismatch::ToString() of each
  std::chrono::system_clock::time_point last_appraisal{};
  std::string ek_subject;
  std::string policy;
  attest::EventLog measurements;  // of the last appraisal that verified
  uint64_t appraisals = 0;        // quotes appraised (counts refusals too)
};

class RunnerAttestation {
 public:
  explicit RunnerAttestation(AttestationOptions options);
  ~RunnerAttestation();
  RunnerAttestation(const RunnerAttestation&) = delete;
  RunnerAttestation& operator=(const RunnerAttestation&) = delete;

  void Start();
  void Stop();
  // Appraise soon (coalesced): a workload started, the policy changed, the agent restarted.
  void Trigger();
  // The measurements the agent must make for this pod (its containers' image digests and
  // canonical specs): recorded before RunPod.
  void ExpectWorkload(const v1::RunPodRequest& request);
  void ForgetWorkload(const std::string& pod_uid);

  AttestationState State() const;
  // A fresh appraisal with `report_data` bound into the quote (a token request's audience and
  // nonces). Errors: kForbidden (reason = a kReason*) when the runner is not trusted by it;
  // kUnavailable when the agent did not answer.
  Result<AttestationState> AppraiseNow(const std::string& report_data);

 private:
  void Loop();
  // One appraisal; updates state_ and returns it. Transport errors leave the verdict as it was.
  Result<AttestationState> Appraise(const std::string& report_data);
  Status Enrol(const AttestationPolicySpec& policy);
  void Record(AttestationState next);

  AttestationOptions options_;
  std::mutex appraise_mu_;  // one appraisal at a time
  std::optional<attest::EnrolledAk> enrolled_;
  std::string enrolled_ca_;  // the CA bundle enrolment was checked against

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool triggered_ = true;
  AttestationState state_;
  std::chrono::milliseconds interval_{60000};
  // pod uid -> measurement name -> hex digest
  std::map<std::string, std::map<std::string, std::string>> expected_;
  std::thread thread_;
};

// What a sealed agent must measure for a pod it was sent: for each container,
// sealed::WorkloadImageName -> the image digest's hex (images by digest only) and
// sealed::WorkloadSpecName -> SHA-256 hex of sealed::CanonicalWorkloadSpec.
std::map<std::string, std::string> ExpectedMeasurements(const v1::RunPodRequest& request);

// The verifier's check of one Attest answer, without the transport: consumes `nonce` from
// `nonces` (a second use of the same nonce is NonceReplayed), appraises the quote against the
// policy's reference values and the expected workload measurements (pod uid -> name -> hex),
// and lists every mismatch. Errors: kUnauthorized with attest's reasons (QuoteInvalid,
// NonceMismatch, EventLogMismatch, NonceReplayed, ...).
Result<attest::Appraisal> AppraiseAnswer(
    const attest::EnrolledAk& ak, const v1::AttestResponse& answer, const std::string& nonce,
    const std::string& report_data, const AttestationPolicySpec& policy,
    const std::map<std::string, std::map<std::string, std::string>>& expected_workloads,
    attest::NonceRegistry& nonces);

}  // namespace hyperslice::runners::controlnode
