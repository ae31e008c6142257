// libFuzzer target over what a sealed runner's verifier parses from untrusted parties
// (src/runners/attest/attest.h): simple-signing payloads and signature manifests from a registry,
// JWTs from workloads, event logs and TPM quote bytes from runners.
//
// Nothing may crash or hit UB (ASan/UBSan); nothing random may be accepted: a JWT against a key
// nobody holds must never verify, and a quote with no enrolled AK must never appraise.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "src/runners/attest/attest.h"

namespace {

using namespace hyperslice::runners::attest;  // NOLINT(google-build-using-namespace): a test

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "attest fuzz: %s\n", what);
  std::abort();
}

const std::string& Jwks() {
  static const std::string jwks = [] {
    auto issuer = TokenIssuer::Create("https://fuzz.test");
    Check(issuer.ok(), "token issuer");
    return (*issuer)->Jwks();
  }();
  return jwks;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto ss = ParseSimpleSigning(in);
  if (ss.ok()) {
    Check(ss->docker_manifest_digest.size() == 71, "accepted digest is sha256:<64 hex>");
    auto again =
        ParseSimpleSigning(MakeSimpleSigning(ss->docker_reference, ss->docker_manifest_digest));
    Check(again.ok() && again->docker_manifest_digest == ss->docker_manifest_digest,
          "payload round trip");
  }
  (void)ExtractCosignSignatures(in, {});
  (void)EventLogFromJson(in);
  auto token =
      VerifyToken(in, Jwks(), "https://fuzz.test", "aud", std::chrono::system_clock::time_point{});
  Check(!token.ok(), "a random token verified");
  Evidence e;
  e.attest = std::string(in);
  e.pcrs = {16, 23};
  EnrolledAk ak;
  ak.ak.tpmt_public = std::string(in.substr(0, size / 2));
  Check(!AppraiseQuote(ak, e, std::string(32, 'n'), "", {}).ok(), "a random quote appraised");
  return 0;
}
