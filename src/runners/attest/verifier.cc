// The verifier side: enrollment (AK ↔ EK binding by credential activation), quote appraisal and
// the nonce registry.
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <algorithm>
#include <memory>

#include "src/runners/attest/attest.h"
#include "src/runners/attest/internal/wire.h"

namespace hyperslice::runners::attest {
namespace {

using internal::Pkey;

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};

Error Refused(std::string reason, std::string message) {
  return Error::Make(Error::Code::kUnauthorized, std::move(message), std::move(reason));
}

// Chains `cert` to one of the PEM certificates in `trusted_ca_pem`.
Status VerifyChain(X509* cert, std::string_view trusted_ca_pem) {
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  std::unique_ptr<BIO, BioFree> bio(
      BIO_new_mem_buf(trusted_ca_pem.data(), static_cast<int>(trusted_ca_pem.size())));
  int loaded = 0;
  while (store && bio) {
    std::unique_ptr<X509, X509Free> ca(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (!ca) break;
    if (X509_STORE_add_cert(store.get(), ca.get()) == 1) ++loaded;
  }
  if (loaded == 0) {
    return Error::Make(Error::Code::kInvalidArgument, "no trusted EK CA certificate was given");
  }
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  if (!ctx || X509_STORE_CTX_init(ctx.get(), store.get(), cert, nullptr) != 1) {
    return Error::Make(Error::Code::kInternal, "X509_STORE_CTX_init failed");
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    int err = X509_STORE_CTX_get_error(ctx.get());
    return Refused("EkUntrusted",
                   std::string("the EK certificate does not chain to a trusted CA: ") +
                       X509_verify_cert_error_string(err));
  }
  return OkStatus();
}

std::string SubjectOf(X509* cert) {
  char buf[256] = {};
  X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof(buf));
  return buf;
}

// The AK must be a restricted signing key that never left its TPM: otherwise a "quote" could be a
// signature over anything the holder of the key chose.
Status CheckAkTemplate(const internal::EccPublic& p) {
  constexpr uint32_t kMust = internal::kFixedTpm | internal::kFixedParent |
                             internal::kSensitiveDataOrigin | internal::kRestricted |
                             internal::kSign;
  if ((p.attributes & kMust) != kMust || (p.attributes & internal::kDecrypt) != 0) {
    return Refused("AkTemplate",
                   "the attestation key is not a restricted, TPM-bound signing key (fixedTPM, "
                   "fixedParent, sensitiveDataOrigin, restricted, sign; not decrypt)");
  }
  if (p.name_alg != internal::kAlgSha256 || p.curve != internal::kEccNistP256 ||
      p.scheme != internal::kAlgEcdsa || p.scheme_hash != internal::kAlgSha256) {
    return Refused("AkTemplate", "the attestation key is not ECDSA P-256 / SHA-256");
  }
  return OkStatus();
}

}  // namespace

Result<Enrollment> Enrollment::Begin(std::string_view ek_certificate_pem, const AkPublic& ak,
                                     std::string_view trusted_ca_pem) {
  std::unique_ptr<BIO, BioFree> bio(
      BIO_new_mem_buf(ek_certificate_pem.data(), static_cast<int>(ek_certificate_pem.size())));
  std::unique_ptr<X509, X509Free> cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)
                                           : nullptr);
  if (!cert) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "the EK certificate is not a PEM certificate");
  }
  HS_RETURN_IF_ERROR(VerifyChain(cert.get(), trusted_ca_pem));
  HS_ASSIGN_OR_RETURN(auto parsed, internal::ParseEccPublic(ak.tpmt_public));
  HS_RETURN_IF_ERROR(CheckAkTemplate(parsed));
  Pkey ek(X509_get_pubkey(cert.get()));
  if (!ek) return Error::Make(Error::Code::kInvalidArgument, "the EK certificate has no key");

  Enrollment e;
  e.secret_ = internal::RandomBytes(32);
  HS_ASSIGN_OR_RETURN(auto cred, internal::MakeCredential(
                                     ek.get(), internal::ObjectName(ak.tpmt_public), e.secret_));
  e.challenge_.credential_blob = std::move(cred.first);
  e.challenge_.encrypted_secret = std::move(cred.second);
  e.enrolled_.ak = ak;
  e.enrolled_.ek_certificate_pem = std::string(ek_certificate_pem);
  e.enrolled_.ek_subject = SubjectOf(cert.get());
  return e;
}

Result<EnrolledAk> Enrollment::Finish(std::string_view activated_secret) {
  bool match = !secret_.empty() && internal::ConstantTimeEquals(secret_, activated_secret);
  secret_.assign(secret_.size(), '\0');
  secret_.clear();
  if (!match) {
    return Refused("AkNotBound",
                   "the credential was not activated: the attestation key is not bound to the "
                   "certified EK");
  }
  return enrolled_;
}

std::string Mismatch::ToString() const {
  std::string s = "PCR " + std::to_string(pcr) + " measurement \"" + name + "\": ";
  if (expected.empty()) return s + "no reference value (got " + got + ")";
  return s + "expected " + expected + ", got " + got;
}

Result<Appraisal> AppraiseQuote(const EnrolledAk& ak, const Evidence& evidence,
                                std::string_view nonce, std::string_view report_data,
                                const ReferenceValues& reference) {
  auto quote = internal::ParseQuote(evidence.attest);
  if (!quote.ok()) return Refused("QuoteInvalid", quote.error().message);
  if (quote->qualified_signer != internal::EndorsementQualifiedName(ak.ak.tpmt_public)) {
    return Refused("QuoteInvalid", "the quote was made by another key than the enrolled AK");
  }
  HS_ASSIGN_OR_RETURN(auto pub, internal::ParseEccPublic(ak.ak.tpmt_public));
  HS_ASSIGN_OR_RETURN(auto key, internal::EcP256PublicKey(pub.x, pub.y));
  if (!internal::VerifySignature(key.get(), evidence.attest, evidence.signature)) {
    return Refused("QuoteInvalid", "the quote's signature does not verify under the enrolled AK");
  }
  std::string expected_extra(nonce);
  auto rd = Sha256(report_data);
  expected_extra.append(reinterpret_cast<const char*>(rd.data()), rd.size());
  if (nonce.empty() || !internal::ConstantTimeEquals(quote->extra_data, expected_extra)) {
    return Refused("NonceMismatch",
                   "the quote is not over this challenge's nonce and report data (replayed or "
                   "made for another challenge)");
  }
  std::vector<uint32_t> pcrs = evidence.pcrs;
  std::sort(pcrs.begin(), pcrs.end());
  if (quote->selections.size() != 1 || quote->selections[0].hash != internal::kAlgSha256 ||
      quote->selections[0].pcrs != pcrs) {
    return Refused("QuoteInvalid", "the quote's PCR selection is not the evidence's SHA-256 PCRs");
  }

  // Replay: each selected PCR starts at zero (the agent resets them before measuring).
  std::map<uint32_t, std::array<uint8_t, 32>> values;
  for (uint32_t p : pcrs) values[p] = {};
  for (const auto& m : evidence.event_log) {
    auto it = values.find(m.pcr);
    if (it == values.end()) {
      return Refused("EventLogMismatch", "the event log extends PCR " + std::to_string(m.pcr) +
                                             ", which the quote does not cover");
    }
    std::string buf(reinterpret_cast<const char*>(it->second.data()), 32);
    buf.append(reinterpret_cast<const char*>(m.digest.data()), 32);
    it->second = Sha256(buf);
  }
  std::string composite;
  for (const auto& [p, v] : values) composite.append(reinterpret_cast<const char*>(v.data()), 32);
  auto digest = Sha256(composite);
  if (quote->pcr_digest != std::string_view(reinterpret_cast<const char*>(digest.data()), 32)) {
    return Refused("EventLogMismatch",
                   "the event log does not replay to the quoted PCR digest (an unlogged extend or "
                   "an edited log)");
  }

  Appraisal out;
  out.measurements = evidence.event_log;
  for (const auto& m : evidence.event_log) {
    std::string got = Hex(m.digest);
    auto it = reference.allowed.find(m.name);
    if (it == reference.allowed.end()) {
      if (!reference.allow_unlisted) out.mismatches.push_back(Mismatch{m.pcr, m.name, "", got});
      continue;
    }
    if (std::find(it->second.begin(), it->second.end(), got) == it->second.end()) {
      std::string expected;
      for (const auto& a : it->second) expected += (expected.empty() ? "" : ",") + a;
      out.mismatches.push_back(Mismatch{m.pcr, m.name, expected, got});
    }
  }
  for (const auto& name : reference.required) {
    bool seen = std::any_of(evidence.event_log.begin(), evidence.event_log.end(),
                            [&](const Measurement& m) { return m.name == name; });
    if (!seen) {
      std::string expected;
      if (auto it = reference.allowed.find(name); it != reference.allowed.end()) {
        for (const auto& a : it->second) expected += (expected.empty() ? "" : ",") + a;
      }
      out.mismatches.push_back(Mismatch{0, name, expected, "absent"});
    }
  }
  return out;
}

NonceRegistry::NonceRegistry(std::chrono::seconds ttl,
                             std::function<std::chrono::steady_clock::time_point()> now)
    : ttl_(ttl), now_(now ? std::move(now) : [] { return std::chrono::steady_clock::now(); }) {}

void NonceRegistry::Sweep(std::chrono::steady_clock::time_point now) {
  // Used nonces stay until they would have expired, so a replay inside the window says
  // "replayed" and one after it says "unknown"; either way it is refused.
  std::erase_if(nonces_, [&](const auto& kv) { return kv.second.expires + ttl_ < now; });
}

std::string NonceRegistry::Issue() {
  std::string nonce = internal::RandomBytes(32);
  auto now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  Sweep(now);
  nonces_[nonce] = Entry{now + ttl_, false};
  return nonce;
}

Status NonceRegistry::Consume(std::string_view nonce) {
  auto now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  Sweep(now);
  auto it = nonces_.find(std::string(nonce));
  if (it == nonces_.end()) return Refused("NonceUnknown", "the nonce was not issued here");
  if (it->second.used) return Refused("NonceReplayed", "the nonce was already used (replay)");
  it->second.used = true;
  if (it->second.expires < now) return Refused("NonceExpired", "the nonce expired");
  return OkStatus();
}

}  // namespace hyperslice::runners::attest
