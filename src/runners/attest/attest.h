// Sealed runners' attestation (issue 21, ARCHITECTURE.md §9): the pieces the runner agent and the
// link controller wire together. RFC 9334 roles: the runner agent is the Attester (Prover below),
// the link controller the Verifier and the token issuer, workloads and the key broker are the
// Relying Parties.
//
//   Prover          a TPM 2.0 through the TSS ESAPI: EK, an attestation key (AK) in the
//                   endorsement hierarchy, credential activation, PCR measurements with an event
//                   log, quotes over the verifier's nonce and report data.
//   Enrollment      binds an AK to an EK whose certificate chains to a trusted CA
//                   (TPM2_MakeCredential done with OpenSSL, the TPM answers with
//                   ActivateCredential).
//   AppraiseQuote   signature, signer, nonce, report data, event-log replay, reference values.
//   NonceRegistry   single-use, expiring verifier nonces (a replayed quote is refused).
//   TokenIssuer     ES256 attestation JWTs with EAT-style claims, JWKS and OIDC discovery bodies;
//                   VerifyToken for relying parties.
//   cosign          simple-signing payloads and signatures as cosign stores them in a registry.
//
// Errors are values; nothing here throws across the API. Thread-safety is stated per class.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::runners::attest {

// ---------------------------------------------------------------------------------------------
// Measurements and the event log.

// The application PCRs measurements go to. Both are resettable from locality 0 (TCG PC Client
// platform profile: 16 is the debug PCR, 23 the application-support PCR), so an agent that starts
// on a TPM whose PCRs already hold an earlier run's values can start from zero. The agent's own
// binary and configuration go to 23, workloads to 16, so a mismatch names the half that differs.
inline constexpr uint32_t kAgentPcr = 23;
inline constexpr uint32_t kWorkloadPcr = 16;

// One extend: PCR `pcr` ← SHA-256(PCR || digest). `name` is what the verifier's reference values
// are keyed by ("agent/binary", "agent/config", "workload/<name>/image", "workload/<name>/spec").
struct Measurement {
  uint32_t pcr = 0;
  std::string name;
  std::array<uint8_t, 32> digest{};
};
using EventLog = std::vector<Measurement>;

std::array<uint8_t, 32> Sha256(std::string_view data);
std::string Hex(std::string_view bytes);
template <size_t N>
std::string Hex(const std::array<uint8_t, N>& a) {
  return Hex(std::string_view(reinterpret_cast<const char*>(a.data()), N));
}
// A measurement of `content` (a file's bytes, a config document, a canonical spec).
Measurement Measure(uint32_t pcr, std::string name, std::string_view content);
// A measurement of an image digest "sha256:<64 hex>": the digest's own bytes are extended, so the
// verifier compares it with the image digest it expects without hashing anything.
Result<Measurement> MeasureImageDigest(uint32_t pcr, std::string name, std::string_view digest);

// JSON array of {"pcr","name","digest"} (hex) — how the event log travels.
std::string EventLogToJson(const EventLog& log);
Result<EventLog> EventLogFromJson(std::string_view json);

// ---------------------------------------------------------------------------------------------
// Evidence: what the prover sends, what the verifier reads. Byte strings are raw bytes.

struct Evidence {
  std::string attest;          // TPMS_ATTEST as the TPM marshalled it (what the signature covers)
  std::string signature;       // ECDSA signature over SHA-256(attest), DER
  std::vector<uint32_t> pcrs;  // SHA-256 bank PCRs the quote covers, ascending
  EventLog event_log;          // every extend into those PCRs since they were last reset
};

// The attestation key's public part as the TPM marshals it (TPMT_PUBLIC, no size prefix). Its
// TPM name (nameAlg || H(TPMT_PUBLIC)) is what credential activation binds.
struct AkPublic {
  std::string tpmt_public;
};

// ---------------------------------------------------------------------------------------------
// Prover: a TPM through the TSS ESAPI.

struct ProverConfig {
  // TSS TCTI configuration string: "swtpm:host=127.0.0.1,port=2321", "device:/dev/tpmrm0".
  std::string tcti;
  // Distinguishes attestation keys (it goes into the AK template's unique field, so each label is
  // a different, reproducible primary key of the endorsement hierarchy).
  std::string ak_label = "hyperslice-runner-ak";
};

// Contract: one TPM connection; not thread-safe (the agent serialises TPM use through one owner).
// Keys are primaries of the endorsement hierarchy recreated on Open (the TPM derives the same key
// from the same template and seed), so nothing needs to be persisted between agent starts.
class Prover {
 public:
  virtual ~Prover() = default;
  // Connects, creates the EK (TCG default RSA-2048 template, so a manufacturer's EK certificate
  // matches it) and the AK (restricted ECDSA P-256 / SHA-256 signing key).
  static Result<std::unique_ptr<Prover>> Open(const ProverConfig& config);

  // The EK public key, SubjectPublicKeyInfo PEM (a CA certifies this).
  virtual const std::string& EkPublicPem() const = 0;
  virtual const AkPublic& Ak() const = 0;
  // The EK certificate provisioned in the TPM's NV (index 0x01c00002, RSA EK), PEM; kNotFound
  // when the TPM has none (swtpm without --create-ek-cert, tests that issue their own).
  virtual Result<std::string> ReadEkCertificate() = 0;

  // TPM2_ActivateCredential with AK and EK: recovers the secret the verifier sealed to them.
  virtual Result<std::string> ActivateCredential(std::string_view credential_blob,
                                                 std::string_view encrypted_secret) = 0;

  // Resets `pcr` (16 or 23) and forgets its events.
  virtual Status ResetPcr(uint32_t pcr) = 0;
  // Extends the measurement and appends it to the event log.
  virtual Status Extend(const Measurement& m) = 0;
  virtual const EventLog& Log() const = 0;

  // TPM2_Quote over `pcrs` with qualifyingData = nonce || SHA-256(report_data) (nonce: 32 bytes).
  virtual Result<Evidence> Quote(std::string_view nonce, std::string_view report_data,
                                 const std::vector<uint32_t>& pcrs) = 0;
};

// ---------------------------------------------------------------------------------------------
// Verifier.

// Binds an AK to an EK. Begin checks the EK certificate against the trusted CAs and the AK's
// attributes, and seals a fresh secret to (EK, AK name); the prover's ActivateCredential can only
// recover it when that AK is loaded in the TPM that holds that EK. Finish compares the answer.
struct CredentialChallenge {
  std::string credential_blob;   // TPM2B_ID_OBJECT contents (what ActivateCredential takes)
  std::string encrypted_secret;  // TPM2B_ENCRYPTED_SECRET contents
};
struct EnrolledAk {
  AkPublic ak;
  std::string ek_certificate_pem;
  std::string ek_subject;  // for conditions and logs
};
class Enrollment {
 public:
  // `trusted_ca_pem`: one or more PEM certificates the EK certificate must chain to.
  static Result<Enrollment> Begin(std::string_view ek_certificate_pem, const AkPublic& ak,
                                  std::string_view trusted_ca_pem);
  const CredentialChallenge& challenge() const { return challenge_; }
  // Constant-time comparison; the enrollment is spent either way.
  Result<EnrolledAk> Finish(std::string_view activated_secret);

 private:
  CredentialChallenge challenge_;
  std::string secret_;
  EnrolledAk enrolled_;
};

// What the admin expects: for each measurement name, the digests (hex) allowed.
struct ReferenceValues {
  std::map<std::string, std::vector<std::string>> allowed;
  // Names that must appear in the log (a runner that skipped measuring its config must not pass).
  std::vector<std::string> required;
  // Events whose name has no entry in `allowed` pass when this holds (workload events checked by
  // the workload policy instead), and are refused otherwise.
  bool allow_unlisted = false;
};

struct Mismatch {
  uint32_t pcr = 0;
  std::string name;
  std::string expected;  // allowed digests, comma-separated; "" when the name has no reference
  std::string got;       // digest in the log; "absent" when a required measurement is missing
  std::string ToString() const;
};

// The outcome of a successful signature/nonce/log check. `mismatches` empty = trusted.
struct Appraisal {
  EventLog measurements;
  std::vector<Mismatch> mismatches;
  bool ok() const { return mismatches.empty(); }
};

// Checks, in order: the quote parses and is a TPM-generated quote (magic, type); the signer is the
// enrolled AK; the signature verifies; qualifyingData is nonce || SHA-256(report_data); the PCR
// selection is the evidence's; the event log replays to the quoted PCR digest; then each
// measurement against the reference values. Errors (kUnauthorized, reason "QuoteInvalid",
// "NonceMismatch", "EventLogMismatch") for evidence that cannot be trusted at all; an Appraisal
// with mismatches for trustworthy evidence of the wrong software.
Result<Appraisal> AppraiseQuote(const EnrolledAk& ak, const Evidence& evidence,
                                std::string_view nonce, std::string_view report_data,
                                const ReferenceValues& reference);

// Single-use verifier nonces. Issue() returns 32 random bytes valid for `ttl`; Consume() accepts
// each issued nonce once before it expires (kUnauthorized, reason "NonceReplayed" /
// "NonceUnknown" / "NonceExpired" otherwise). Thread-safe.
class NonceRegistry {
 public:
  explicit NonceRegistry(std::chrono::seconds ttl = std::chrono::seconds(120),
                         std::function<std::chrono::steady_clock::time_point()> now = nullptr);
  std::string Issue();
  Status Consume(std::string_view nonce);

 private:
  struct Entry {
    std::chrono::steady_clock::time_point expires;
    bool used = false;
  };
  void Sweep(std::chrono::steady_clock::time_point now);  // mu_ held
  std::chrono::seconds ttl_;
  std::function<std::chrono::steady_clock::time_point()> now_;
  std::mutex mu_;
  std::map<std::string, Entry> nonces_;
};

// ---------------------------------------------------------------------------------------------
// Attestation tokens (ES256 JWT, EAT-style claims as Confidential Space issues them).

struct TokenClaims {
  std::string issuer;                                // iss
  std::string subject;                               // sub: the runner identity
  std::string audience;                              // aud
  std::chrono::system_clock::time_point issued_at;   // iat (= nbf)
  std::chrono::system_clock::time_point expires_at;  // exp
  std::string hwmodel;       // "TPM2" (swtpm and real TPMs alike; the EK CA says which)
  std::string dbgstat;       // "disabled-since-boot" for sealed runners, "enabled" otherwise
  std::string image_digest;  // the workload's "sha256:..."
  std::vector<std::string> eat_nonce;
  // Further claims, a JSON object serialized ("submods", "swname", ...); "" for none.
  std::string extra_json;
};

// Contract: holds one ES256 key; Issue/Jwks/Discovery are const and thread-safe.
class TokenIssuer {
 public:
  virtual ~TokenIssuer() = default;
  // A new P-256 key.
  static Result<std::unique_ptr<TokenIssuer>> Create(std::string issuer);
  // An existing key (PKCS#8 or SEC1 PEM, P-256), e.g. from a Secret.
  static Result<std::unique_ptr<TokenIssuer>> FromPrivateKeyPem(std::string issuer,
                                                                std::string_view key_pem);
  virtual const std::string& issuer() const = 0;
  virtual const std::string& key_id() const = 0;  // RFC 7638 thumbprint
  // The signed JWT. `claims.issuer` is replaced by this issuer's.
  virtual Result<std::string> Issue(TokenClaims claims) const = 0;
  // {"keys":[{kty,crv,x,y,kid,use,alg}]}
  virtual std::string Jwks() const = 0;
  // The /.well-known/openid-configuration body; jwks_uri = issuer + "/jwks".
  virtual std::string OidcDiscovery() const = 0;
};

// Verifies signature (ES256 only; "none" and other algorithms refused), kid against the JWKS,
// issuer, audience (string or array), exp and nbf with `leeway`. kUnauthorized with reasons
// "TokenMalformed", "TokenSignature", "TokenExpired", "TokenNotYetValid", "TokenAudience",
// "TokenIssuer".
Result<TokenClaims> VerifyToken(std::string_view token, std::string_view jwks_json,
                                std::string_view expected_issuer,
                                std::string_view expected_audience,
                                std::chrono::system_clock::time_point now,
                                std::chrono::seconds leeway = std::chrono::seconds(30));

// ---------------------------------------------------------------------------------------------
// cosign signatures.

inline constexpr char kSimpleSigningMediaType[] =
    "application/vnd.dev.cosign.simplesigning.v1+json";
inline constexpr char kCosignSignatureAnnotation[] = "dev.cosignproject.cosign/signature";

struct SimpleSigning {
  std::string docker_reference;        // critical.identity.docker-reference
  std::string docker_manifest_digest;  // critical.image.docker-manifest-digest
  std::string optional_json;           // the "optional" object serialized, "" when null/absent
};
// Strict: type must be "cosign container image signature", the digest "sha256:<64 lowercase
// hex>". kInvalidArgument naming the field otherwise.
Result<SimpleSigning> ParseSimpleSigning(std::string_view payload);
// The payload cosign writes for (reference, digest), byte for byte.
std::string MakeSimpleSigning(std::string_view docker_reference, std::string_view digest);

// The tag cosign stores an image's signatures under: "sha256-<hex>.sig".
Result<std::string> CosignSignatureTag(std::string_view image_digest);

// One signature as stored: the layer's bytes and the annotation's base64.
struct CosignSignature {
  std::string payload;
  std::string signature_b64;
};
// From a signature manifest (OCI or Docker v2 schema 2 JSON) and its layer blobs keyed by digest
// ("sha256:..."): the simple-signing layers whose bytes hash to their descriptor's digest.
Result<std::vector<CosignSignature>> ExtractCosignSignatures(
    std::string_view manifest_json, const std::map<std::string, std::string>& blobs);

struct VerifiedImage {
  std::string docker_reference;
  size_t key_index = 0;  // which trusted key signed
};
// Accepts when some signature verifies (SHA-256, ECDSA/RSA/Ed25519 per key type) under one of
// `trusted_keys_pem` (PEM public keys) and its payload names `expected_digest`. kUnauthorized
// with reason "Unsigned" (no signatures), "UntrustedSignature" (no trusted key verifies any),
// "DigestMismatch" (a trusted signature over another image).
Result<VerifiedImage> VerifyCosignSignatures(const std::vector<CosignSignature>& signatures,
                                             const std::vector<std::string>& trusted_keys_pem,
                                             std::string_view expected_digest);

}  // namespace hyperslice::runners::attest
