// The sealed agent's TPM side (issue 21; RFC 9334 Attester): at start it resets PCRs 16 and 23
// and measures its own binary and configuration; before each container starts it measures the
// image digest and the canonical spec (sealed/sealed.h) and gives the container its token
// socket; it answers the control node's enrolment and quote requests; and it forwards
// workloads' token requests to the link controller and their key-broker requests to its
// resource endpoint (kbs_relay.h).
//
// Thread-safety: all methods from any thread; TPM use is serialised inside.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "src/base/result.h"
#include "src/runners/agent.pb.h"
#include "src/runners/agent/image_store.h"
#include "src/runners/agent/tee_server.h"
#include "src/runners/attest/attest.h"
#include "src/runners/link/link.h"

namespace hyperslice::runners::agent {

struct AttesterOptions {
  std::string tcti;             // attest::ProverConfig::tcti
  std::string binary_path;      // measured as agent/binary
  std::string config_document;  // measured as agent/config (SealedConfigDocument)
  std::string pods_dir;         // <state_dir>/pods: token sockets go to <pods_dir>/<uid>/tee/<c>
  link::AttestationTokenIssuer tokens;  // asks the link controller (the runner is the session's)
  std::string runners_ca_pem;           // what the key broker's certificate chains to
};

class Attester {
 public:
  // Opens the TPM, resets PCRs 16 and 23, measures binary and config. Errors: the prover's
  // (kUnavailable without a TPM, NoTss without libtss2), kNotFound (binary unreadable).
  static Result<std::unique_ptr<Attester>> Start(AttesterOptions options);
  ~Attester();

  Result<v1::AttestationIdentityResponse> Identity();
  Result<std::string> ActivateCredential(const std::string& blob, const std::string& secret);
  Result<v1::AttestResponse> Quote(const std::string& nonce, const std::string& report_data);

  // PodManagerOptions::before_start: measures the container once per pod (its restarts run the
  // same image and spec) and serves its token socket; returns the bind {kTeeServerDir: dir}.
  Result<std::map<std::string, std::string>> BeforeStart(const v1::RunPodRequest& pod,
                                                         const v1::Container& container,
                                                         const Image& image);
  // Stops the pod's token servers (after its deletion).
  void ForgetPod(const std::string& uid);

 private:
  explicit Attester(AttesterOptions options)
      : options_(std::move(options)), kbs_(std::make_shared<KbsRelay>(options_.runners_ca_pem)) {}
  AttesterOptions options_;
  std::mutex tpm_mu_;
  std::unique_ptr<attest::Prover> tpm_;
  std::mutex mu_;
  std::set<std::string> measured_;                             // "<uid>/<container>"
  std::map<std::string, std::unique_ptr<TeeServer>> servers_;  // same key
  std::shared_ptr<KbsRelay> kbs_;                              // shared by every container's socket
};

}  // namespace hyperslice::runners::agent
