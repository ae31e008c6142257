#include "src/runners/agent/attester.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/base/log.h"
#include "src/runners/sealed/sealed.h"

namespace hyperslice::runners::agent {
namespace {

Result<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::Make(Error::Code::kNotFound, "cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Result<std::unique_ptr<Attester>> Attester::Start(AttesterOptions options) {
  HS_ASSIGN_OR_RETURN(std::string binary, ReadWhole(options.binary_path));
  std::unique_ptr<Attester> a(new Attester(std::move(options)));
  attest::ProverConfig pc;
  pc.tcti = a->options_.tcti;
  HS_ASSIGN_OR_RETURN(a->tpm_, attest::Prover::Open(pc));
  // The PCRs start from zero so the event log is the whole story of this agent run.
  HS_RETURN_IF_ERROR(a->tpm_->ResetPcr(attest::kWorkloadPcr));
  HS_RETURN_IF_ERROR(a->tpm_->ResetPcr(attest::kAgentPcr));
  HS_RETURN_IF_ERROR(
      a->tpm_->Extend(attest::Measure(attest::kAgentPcr, sealed::kAgentBinary, binary)));
  HS_RETURN_IF_ERROR(a->tpm_->Extend(
      attest::Measure(attest::kAgentPcr, sealed::kAgentConfig, a->options_.config_document)));
  log::Info("sealed: agent measured",
            {{"binary", attest::Hex(attest::Sha256(binary))},
             {"config", attest::Hex(attest::Sha256(a->options_.config_document))}});
  return a;
}

Attester::~Attester() {
  std::map<std::string, std::unique_ptr<TeeServer>> servers;
  {
    std::lock_guard lock(mu_);
    servers.swap(servers_);
  }
  servers.clear();  // joins outside mu_: a server's handler may be waiting for the controller
}

Result<v1::AttestationIdentityResponse> Attester::Identity() {
  std::lock_guard lock(tpm_mu_);
  v1::AttestationIdentityResponse r;
  auto ek = tpm_->ReadEkCertificate();
  if (!ek.ok()) return ek.error();
  r.set_ek_certificate_pem(*ek);
  r.set_ek_public_pem(tpm_->EkPublicPem());
  r.set_ak_public(tpm_->Ak().tpmt_public);
  r.set_hwmodel("TPM2");
  return r;
}

Result<std::string> Attester::ActivateCredential(const std::string& blob,
                                                 const std::string& secret) {
  std::lock_guard lock(tpm_mu_);
  return tpm_->ActivateCredential(blob, secret);
}

Result<v1::AttestResponse> Attester::Quote(const std::string& nonce,
                                           const std::string& report_data) {
  std::lock_guard lock(tpm_mu_);
  HS_ASSIGN_OR_RETURN(attest::Evidence ev,
                      tpm_->Quote(nonce, report_data, {attest::kWorkloadPcr, attest::kAgentPcr}));
  v1::AttestResponse r;
  r.set_attest(ev.attest);
  r.set_signature(ev.signature);
  for (uint32_t p : ev.pcrs) r.add_pcrs(p);
  r.set_event_log_json(attest::EventLogToJson(ev.event_log));
  return r;
}

Result<std::map<std::string, std::string>> Attester::BeforeStart(const v1::RunPodRequest& pod,
                                                                 const v1::Container& c,
                                                                 const Image& image) {
  const std::string& uid = pod.pod().uid();
  const std::string key = uid + "/" + c.name();
  const std::string dir = options_.pods_dir + "/" + uid + "/tee/" + c.name();
  std::lock_guard lock(mu_);
  if (!measured_.count(key)) {
    // Measured before it first runs: the control node's next quote shows what started. The
    // digest the pod names (what a signature covers; the store checked the content against it,
    // an index resolved to its linux/amd64 manifest), else the manifest's for a tag.
    std::string digest = sealed::ImageDigest(c.image());
    if (digest.empty()) digest = image.manifest_digest;
    HS_ASSIGN_OR_RETURN(
        attest::Measurement img,
        attest::MeasureImageDigest(attest::kWorkloadPcr, sealed::WorkloadImageName(uid, c.name()),
                                   digest));
    {
      std::lock_guard tpm(tpm_mu_);
      HS_RETURN_IF_ERROR(tpm_->Extend(img));
      HS_RETURN_IF_ERROR(tpm_->Extend(attest::Measure(attest::kWorkloadPcr,
                                                      sealed::WorkloadSpecName(uid, c.name()),
                                                      sealed::CanonicalWorkloadSpec(pod, c))));
    }
    measured_.insert(key);
  }
  if (!servers_.count(key)) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    ::chmod(dir.c_str(), 0755);
    link::AttestationTokenIssuer tokens = options_.tokens;
    std::shared_ptr<KbsRelay> kbs = kbs_;
    auto server = TeeServer::Start(
        dir + "/teeserver.sock",
        [tokens, kbs, uid, name = c.name()](const TokenAsk& ask) -> Result<std::string> {
          if (!tokens) {
            return Error::Make(Error::Code::kUnavailable, "this agent has no link controller");
          }
          link::AttestationTokenRequest r;
          r.pod_uid = uid;
          r.container = name;
          r.audience = ask.audience;
          r.nonces = ask.nonces;
          r.tee_pubkey_sha256 = ask.tee_pubkey_sha256;
          auto token = tokens(r);
          if (token.ok()) kbs->LearnIssuer(*token);
          return token;
        },
        [kbs](const KbsAsk& ask) { return kbs->Forward(ask); });
    if (!server.ok()) return server.error();
    servers_[key] = std::move(*server);
  }
  return std::map<std::string, std::string>{{sealed::kTeeServerDir, dir}};
}

void Attester::ForgetPod(const std::string& uid) {
  std::vector<std::unique_ptr<TeeServer>> gone;
  {
    std::lock_guard lock(mu_);
    for (auto it = servers_.begin(); it != servers_.end();) {
      if (it->first.rfind(uid + "/", 0) == 0) {
        gone.push_back(std::move(it->second));
        it = servers_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

}  // namespace hyperslice::runners::agent
