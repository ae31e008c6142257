#include "src/runners/controlnode/attestation.h"

#include <algorithm>

#include "src/base/log.h"
#include "src/runners/link/link.h"
#include "src/runners/sealed/sealed.h"

namespace hyperslice::runners::controlnode {
namespace {

using Verdict = AttestationState::Verdict;

bool IsWorkload(const std::string& name) { return name.rfind("workload/", 0) == 0; }

Error Refusal(const std::string& reason, const std::string& message) {
  Error e = Error::Make(Error::Code::kForbidden, message);
  e.reason = reason;
  return e;
}

}  // namespace

Result<attest::Appraisal> AppraiseAnswer(
    const attest::EnrolledAk& ak, const v1::AttestResponse& answer, const std::string& nonce,
    const std::string& report_data, const AttestationPolicySpec& policy,
    const std::map<std::string, std::map<std::string, std::string>>& expected_workloads,
    attest::NonceRegistry& nonces) {
  // The nonce is spent whatever the answer: a quote over it can be appraised once.
  HS_RETURN_IF_ERROR(nonces.Consume(nonce));
  attest::Evidence ev;
  ev.attest = answer.attest();
  ev.signature = answer.signature();
  ev.pcrs.assign(answer.pcrs().begin(), answer.pcrs().end());
  auto log = attest::EventLogFromJson(answer.event_log_json());
  if (!log.ok()) {
    Error e = Error::Make(Error::Code::kUnauthorized, "event log: " + log.error().message);
    e.reason = "EventLogMismatch";
    return e;
  }
  ev.event_log = std::move(*log);
  attest::ReferenceValues ref;
  ref.allowed = policy.reference_values;
  ref.required = policy.required;
  // Workload events of pods this control node did not send (an earlier operator's, deleted
  // pods) have no expectation here; the other names are all checked below.
  ref.allow_unlisted = true;
  for (const auto& [uid, names] : expected_workloads) {
    for (const auto& [name, hex] : names) ref.allowed[name] = {hex};
  }
  HS_ASSIGN_OR_RETURN(attest::Appraisal appraisal,
                      attest::AppraiseQuote(ak, ev, nonce, report_data, ref));
  for (const attest::Measurement& m : appraisal.measurements) {
    if (!IsWorkload(m.name) && !ref.allowed.count(m.name)) {
      appraisal.mismatches.push_back(attest::Mismatch{m.pcr, m.name, "", attest::Hex(m.digest)});
    }
  }
  for (attest::Mismatch& m : appraisal.mismatches) {
    // A required measurement that is absent has no PCR of its own; name the one it belongs to.
    if (m.got == "absent" && m.pcr == 0)
      m.pcr = IsWorkload(m.name) ? attest::kWorkloadPcr : attest::kAgentPcr;
  }
  return appraisal;
}

RunnerAttestation::RunnerAttestation(AttestationOptions options) : options_(std::move(options)) {
  state_.policy = options_.policy_name;
}

RunnerAttestation::~RunnerAttestation() { Stop(); }

void RunnerAttestation::Start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void RunnerAttestation::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RunnerAttestation::Trigger() {
  {
    std::lock_guard lock(mu_);
    triggered_ = true;
  }
  cv_.notify_all();
}

std::map<std::string, std::string> ExpectedMeasurements(const v1::RunPodRequest& req) {
  std::map<std::string, std::string> names;
  const std::string& uid = req.pod().uid();
  for (const auto* list : {&req.init_containers(), &req.containers()}) {
    for (const v1::Container& c : *list) {
      std::string digest = sealed::ImageDigest(c.image());
      if (digest.rfind("sha256:", 0) == 0) {
        names[sealed::WorkloadImageName(uid, c.name())] = digest.substr(7);
      }
      names[sealed::WorkloadSpecName(uid, c.name())] =
          attest::Hex(attest::Sha256(sealed::CanonicalWorkloadSpec(req, c)));
    }
  }
  return names;
}

void RunnerAttestation::ExpectWorkload(const v1::RunPodRequest& req) {
  auto names = ExpectedMeasurements(req);
  std::lock_guard lock(mu_);
  expected_[req.pod().uid()] = std::move(names);
}

void RunnerAttestation::ForgetWorkload(const std::string& pod_uid) {
  std::lock_guard lock(mu_);
  expected_.erase(pod_uid);
}

AttestationState RunnerAttestation::State() const {
  std::lock_guard lock(mu_);
  return state_;
}

Result<AttestationState> RunnerAttestation::AppraiseNow(const std::string& report_data) {
  HS_ASSIGN_OR_RETURN(AttestationState s, Appraise(report_data));
  if (s.verdict != Verdict::kTrusted) return Refusal(s.reason, s.message);
  return s;
}

void RunnerAttestation::Loop() {
  std::chrono::milliseconds wait(0);
  while (true) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, wait, [&] { return stopping_ || triggered_; });
      if (stopping_) return;
      triggered_ = false;
    }
    auto r = Appraise("");
    std::lock_guard lock(mu_);
    wait = r.ok() ? interval_ : options_.retry_interval;
  }
}

Status RunnerAttestation::Enrol(const AttestationPolicySpec& policy) {
  if (enrolled_ && enrolled_ca_ == policy.ek_ca_pem) return OkStatus();
  enrolled_.reset();
  auto deadline = [&] { return std::chrono::system_clock::now() + options_.rpc_timeout; };
  v1::AttestationIdentityResponse id;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    grpc::Status st = options_.stub->AttestationIdentity(&ctx, {}, &id);
    if (!st.ok()) return link::FromGrpc(st, "attestation identity of " + options_.runner);
  }
  auto enrollment = attest::Enrollment::Begin(id.ek_certificate_pem(),
                                              attest::AkPublic{id.ak_public()}, policy.ek_ca_pem);
  if (!enrollment.ok()) return Refusal(kReasonEnrollmentFailed, enrollment.error().message);
  v1::ActivateCredentialRequest req;
  req.set_credential_blob(enrollment->challenge().credential_blob);
  req.set_encrypted_secret(enrollment->challenge().encrypted_secret);
  v1::ActivateCredentialResponse resp;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    grpc::Status st = options_.stub->ActivateCredential(&ctx, req, &resp);
    if (!st.ok()) {
      if (st.error_code() == grpc::StatusCode::UNAVAILABLE ||
          st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        return link::FromGrpc(st, "credential activation on " + options_.runner);
      }
      return Refusal(kReasonEnrollmentFailed, "credential activation: " + st.error_message());
    }
  }
  auto enrolled = enrollment->Finish(resp.secret());
  if (!enrolled.ok()) return Refusal(kReasonEnrollmentFailed, enrolled.error().message);
  enrolled_ = std::move(*enrolled);
  enrolled_ca_ = policy.ek_ca_pem;
  log::Info("runner attestation key enrolled",
            {{"runner", options_.runner}, {"ek", enrolled_->ek_subject}});
  return OkStatus();
}

void RunnerAttestation::Record(AttestationState next) {
  bool changed = false;
  {
    std::lock_guard lock(mu_);
    changed = next.verdict != state_.verdict || next.reason != state_.reason ||
              next.mismatches != state_.mismatches || next.message != state_.message;
    next.appraisals = state_.appraisals + 1;
    state_ = std::move(next);
  }
  if (changed && options_.on_change) options_.on_change();
}

Result<AttestationState> RunnerAttestation::Appraise(const std::string& report_data) {
  std::lock_guard serial(appraise_mu_);
  AttestationState next = State();
  next.mismatches.clear();
  auto policy = options_.policy(options_.policy_name);
  if (!policy.ok()) {
    next.verdict = Verdict::kPending;
    next.reason = kReasonNoAttestationPolicy;
    next.message =
        options_.policy_name.empty()
            ? "a sealed runner needs spec.attestationPolicy (or its ControlNode's)"
            : "AttestationPolicy " + options_.policy_name + ": " + policy.error().message;
    Record(next);
    return Refusal(next.reason, next.message);
  }
  {
    std::lock_guard lock(mu_);
    interval_ = policy->reattest_interval;
  }
  if (Status st = Enrol(*policy); !st.ok()) {
    if (st.error().code != Error::Code::kForbidden) return st.error();  // transport: retried
    next.verdict = Verdict::kUntrusted;
    next.reason = kReasonEnrollmentFailed;
    next.message = st.error().message;
    next.last_appraisal = std::chrono::system_clock::now();
    Record(next);
    return next;
  }
  next.ek_subject = enrolled_->ek_subject;
  std::string nonce = options_.nonces->Issue();
  v1::AttestRequest req;
  req.set_nonce(nonce);
  req.set_report_data(report_data);
  v1::AttestResponse answer;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options_.rpc_timeout);
  grpc::Status st = options_.stub->Attest(&ctx, req, &answer);
  if (!st.ok()) return link::FromGrpc(st, "attest " + options_.runner);
  std::map<std::string, std::map<std::string, std::string>> expected;
  {
    std::lock_guard lock(mu_);
    expected = expected_;
  }
  next.last_appraisal = std::chrono::system_clock::now();
  auto appraisal =
      AppraiseAnswer(*enrolled_, answer, nonce, report_data, *policy, expected, *options_.nonces);
  if (!appraisal.ok()) {
    next.verdict = Verdict::kUntrusted;
    next.reason = kReasonQuoteRefused;
    next.message = appraisal.error().reason + ": " + appraisal.error().message;
    // A quote that does not verify may come from a TPM reset or a swapped AK: enrol again.
    enrolled_.reset();
  } else if (!appraisal->ok()) {
    next.verdict = Verdict::kUntrusted;
    next.reason = kReasonMeasurementMismatch;
    for (const auto& m : appraisal->mismatches) next.mismatches.push_back(m.ToString());
    next.message = next.mismatches.front();
    for (size_t i = 1; i < next.mismatches.size(); ++i) next.message += "; " + next.mismatches[i];
    next.measurements = appraisal->measurements;
  } else {
    next.verdict = Verdict::kTrusted;
    next.reason = kReasonAttested;
    next.message = "quote over " + std::to_string(appraisal->measurements.size()) +
                   " measurements matches AttestationPolicy " + options_.policy_name;
    next.measurements = appraisal->measurements;
  }
  Record(next);
  return State();
}

}  // namespace hyperslice::runners::controlnode
