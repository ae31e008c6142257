// The prover: a TPM 2.0 through the TSS ESAPI (libtss2-esys), the TCTI chosen by a configuration
// string (libtss2-tctildr).
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <tss2/tss2_esys.h>
#include <tss2/tss2_mu.h>
#include <tss2/tss2_rc.h>
#include <tss2/tss2_tctildr.h>

#include <algorithm>
#include <cstring>

#include "src/runners/attest/attest.h"
#include "src/runners/attest/internal/wire.h"

namespace hyperslice::runners::attest {
namespace {

Error TpmError(std::string_view what, TSS2_RC rc) {
  return Error::Make(Error::Code::kUnavailable,
                     std::string(what) + " failed: " + Tss2_RC_Decode(rc), "TpmError");
}

template <typename T>
struct EsysPtr {
  T* p = nullptr;
  ~EsysPtr() { Esys_Free(p); }
  T** out() { return &p; }
  T* operator->() const { return p; }
};

// TCG EK Credential Profile, template L-1 (RSA 2048, AES-128-CFB, policy PolicySecret(EH)): the
// template manufacturers certify, so an EK certificate in NV matches the key created here.
TPM2B_PUBLIC EkTemplate() {
  TPM2B_PUBLIC t{};
  auto& a = t.publicArea;
  a.type = TPM2_ALG_RSA;
  a.nameAlg = TPM2_ALG_SHA256;
  a.objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT |
                       TPMA_OBJECT_SENSITIVEDATAORIGIN | TPMA_OBJECT_ADMINWITHPOLICY |
                       TPMA_OBJECT_RESTRICTED | TPMA_OBJECT_DECRYPT;
  static constexpr uint8_t kPolicy[32] = {0x83, 0x71, 0x97, 0x67, 0x44, 0x84, 0xb3, 0xf8,
                                          0x1a, 0x90, 0xcc, 0x8d, 0x46, 0xa5, 0xd7, 0x24,
                                          0xfd, 0x52, 0xd7, 0x6e, 0x06, 0x52, 0x0b, 0x64,
                                          0xf2, 0xa1, 0xda, 0x1b, 0x33, 0x14, 0x69, 0xaa};
  a.authPolicy.size = sizeof(kPolicy);
  std::memcpy(a.authPolicy.buffer, kPolicy, sizeof(kPolicy));
  a.parameters.rsaDetail.symmetric.algorithm = TPM2_ALG_AES;
  a.parameters.rsaDetail.symmetric.keyBits.aes = 128;
  a.parameters.rsaDetail.symmetric.mode.aes = TPM2_ALG_CFB;
  a.parameters.rsaDetail.scheme.scheme = TPM2_ALG_NULL;
  a.parameters.rsaDetail.keyBits = 2048;
  a.parameters.rsaDetail.exponent = 0;
  a.unique.rsa.size = 256;
  return t;
}

// A restricted ECDSA P-256 signing key: it signs only TPM-generated structures (quotes), never
// arbitrary digests that could imitate one.
TPM2B_PUBLIC AkTemplate(std::string_view label) {
  TPM2B_PUBLIC t{};
  auto& a = t.publicArea;
  a.type = TPM2_ALG_ECC;
  a.nameAlg = TPM2_ALG_SHA256;
  a.objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT |
                       TPMA_OBJECT_SENSITIVEDATAORIGIN | TPMA_OBJECT_USERWITHAUTH |
                       TPMA_OBJECT_RESTRICTED | TPMA_OBJECT_SIGN_ENCRYPT;
  a.parameters.eccDetail.symmetric.algorithm = TPM2_ALG_NULL;
  a.parameters.eccDetail.scheme.scheme = TPM2_ALG_ECDSA;
  a.parameters.eccDetail.scheme.details.ecdsa.hashAlg = TPM2_ALG_SHA256;
  a.parameters.eccDetail.curveID = TPM2_ECC_NIST_P256;
  a.parameters.eccDetail.kdf.scheme = TPM2_ALG_NULL;
  auto h = Sha256(label);
  a.unique.ecc.x.size = 32;
  std::memcpy(a.unique.ecc.x.buffer, h.data(), 32);
  return t;
}

Result<std::string> RsaPublicPem(const TPM2B_PUBLIC_KEY_RSA& modulus, uint32_t exponent) {
  std::unique_ptr<BIGNUM, decltype(&BN_free)> n(BN_bin2bn(modulus.buffer, modulus.size, nullptr),
                                                &BN_free);
  std::unique_ptr<BIGNUM, decltype(&BN_free)> e(BN_new(), &BN_free);
  std::unique_ptr<OSSL_PARAM_BLD, decltype(&OSSL_PARAM_BLD_free)> bld(OSSL_PARAM_BLD_new(),
                                                                      &OSSL_PARAM_BLD_free);
  if (!n || !e || !bld || BN_set_word(e.get(), exponent == 0 ? 65537 : exponent) != 1 ||
      OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_N, n.get()) != 1 ||
      OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_E, e.get()) != 1) {
    return Error::Make(Error::Code::kInternal, "building the EK public key failed");
  }
  std::unique_ptr<OSSL_PARAM, decltype(&OSSL_PARAM_free)> params(OSSL_PARAM_BLD_to_param(bld.get()),
                                                                 &OSSL_PARAM_free);
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(
      EVP_PKEY_CTX_new_from_name(nullptr, "RSA", nullptr), &EVP_PKEY_CTX_free);
  EVP_PKEY* key = nullptr;
  if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &key, EVP_PKEY_PUBLIC_KEY, params.get()) != 1) {
    return Error::Make(Error::Code::kInternal, "building the EK public key failed");
  }
  internal::Pkey owned(key);
  return internal::PublicKeyPem(key);
}

class TpmProver final : public Prover {
 public:
  ~TpmProver() override {
    if (esys_) {
      if (ak_ != ESYS_TR_NONE) Esys_FlushContext(esys_, ak_);
      Esys_Finalize(&esys_);
    }
    if (tcti_) Tss2_TctiLdr_Finalize(&tcti_);
  }

  Status Init(const ProverConfig& config) {
    if (TSS2_RC rc = Tss2_TctiLdr_Initialize(config.tcti.c_str(), &tcti_); rc != TSS2_RC_SUCCESS) {
      return TpmError("connecting to the TPM (TCTI \"" + config.tcti + "\")", rc);
    }
    if (TSS2_RC rc = Esys_Initialize(&esys_, tcti_, nullptr); rc != TSS2_RC_SUCCESS) {
      return TpmError("Esys_Initialize", rc);
    }
    // A TPM the platform already started answers TPM_RC_INITIALIZE: that is fine.
    if (TSS2_RC rc = Esys_Startup(esys_, TPM2_SU_CLEAR);
        rc != TSS2_RC_SUCCESS && (rc & 0xfff) != TPM2_RC_INITIALIZE) {
      return TpmError("TPM2_Startup", rc);
    }
    // The EK is loaded only while a credential is activated: a TPM has few transient slots
    // (three on swtpm) and several provers may share it.
    TPM2B_PUBLIC ek_public{};
    HS_ASSIGN_OR_RETURN(ESYS_TR ek, CreatePrimary(EkTemplate(), &ek_public));
    Esys_FlushContext(esys_, ek);
    HS_ASSIGN_OR_RETURN(ek_pem_, RsaPublicPem(ek_public.publicArea.unique.rsa,
                                              ek_public.publicArea.parameters.rsaDetail.exponent));
    TPM2B_PUBLIC ak_public{};
    HS_ASSIGN_OR_RETURN(ak_, CreatePrimary(AkTemplate(config.ak_label), &ak_public));
    uint8_t buf[sizeof(TPMT_PUBLIC)];
    size_t off = 0;
    if (TSS2_RC rc = Tss2_MU_TPMT_PUBLIC_Marshal(&ak_public.publicArea, buf, sizeof(buf), &off);
        rc != TSS2_RC_SUCCESS) {
      return TpmError("marshalling the AK public area", rc);
    }
    ak_public_.tpmt_public = std::string(reinterpret_cast<char*>(buf), off);
    return OkStatus();
  }

  const std::string& EkPublicPem() const override { return ek_pem_; }
  const AkPublic& Ak() const override { return ak_public_; }

  Result<std::string> ReadEkCertificate() override {
    constexpr TPM2_HANDLE kRsaEkCertIndex = 0x01c00002;
    ESYS_TR nv = ESYS_TR_NONE;
    if (Esys_TR_FromTPMPublic(esys_, kRsaEkCertIndex, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
                              &nv) != TSS2_RC_SUCCESS) {
      return Error::Make(Error::Code::kNotFound, "the TPM has no RSA EK certificate in NV");
    }
    EsysPtr<TPM2B_NV_PUBLIC> pub;
    EsysPtr<TPM2B_NAME> name;
    if (TSS2_RC rc = Esys_NV_ReadPublic(esys_, nv, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
                                        pub.out(), name.out());
        rc != TSS2_RC_SUCCESS) {
      Esys_TR_Close(esys_, &nv);
      return TpmError("reading the EK certificate index", rc);
    }
    std::string der;
    const uint16_t size = pub->nvPublic.dataSize;
    while (der.size() < size) {
      auto chunk = static_cast<uint16_t>(std::min<size_t>(size - der.size(), 512));
      EsysPtr<TPM2B_MAX_NV_BUFFER> data;
      if (TSS2_RC rc = Esys_NV_Read(esys_, nv, nv, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE,
                                    chunk, static_cast<uint16_t>(der.size()), data.out());
          rc != TSS2_RC_SUCCESS) {
        Esys_TR_Close(esys_, &nv);
        return TpmError("reading the EK certificate", rc);
      }
      der.append(reinterpret_cast<const char*>(data->buffer), data->size);
    }
    Esys_TR_Close(esys_, &nv);
    const auto* p = reinterpret_cast<const unsigned char*>(der.data());
    std::unique_ptr<X509, decltype(&X509_free)> cert(
        d2i_X509(nullptr, &p, static_cast<long>(der.size())), &X509_free);
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), &BIO_free);
    if (!cert || !bio || PEM_write_bio_X509(bio.get(), cert.get()) != 1) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "the EK certificate in NV is not a DER certificate");
    }
    char* out = nullptr;
    long n = BIO_get_mem_data(bio.get(), &out);
    return std::string(out, static_cast<size_t>(n));
  }

  Result<std::string> ActivateCredential(std::string_view credential_blob,
                                         std::string_view encrypted_secret) override {
    TPM2B_ID_OBJECT cred{};
    TPM2B_ENCRYPTED_SECRET secret{};
    if (credential_blob.size() > sizeof(cred.credential) ||
        encrypted_secret.size() > sizeof(secret.secret)) {
      return Error::Make(Error::Code::kInvalidArgument, "the credential challenge is too large");
    }
    cred.size = static_cast<uint16_t>(credential_blob.size());
    std::memcpy(cred.credential, credential_blob.data(), credential_blob.size());
    secret.size = static_cast<uint16_t>(encrypted_secret.size());
    std::memcpy(secret.secret, encrypted_secret.data(), encrypted_secret.size());

    TPM2B_PUBLIC ek_public{};
    HS_ASSIGN_OR_RETURN(ESYS_TR ek, CreatePrimary(EkTemplate(), &ek_public));
    // The EK's policy is PolicySecret(endorsement hierarchy).
    ESYS_TR session = ESYS_TR_NONE;
    TPMT_SYM_DEF sym{};
    sym.algorithm = TPM2_ALG_NULL;
    if (TSS2_RC rc = Esys_StartAuthSession(esys_, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
                                           ESYS_TR_NONE, ESYS_TR_NONE, nullptr, TPM2_SE_POLICY,
                                           &sym, TPM2_ALG_SHA256, &session);
        rc != TSS2_RC_SUCCESS) {
      Esys_FlushContext(esys_, ek);
      return TpmError("starting the EK policy session", rc);
    }
    TPM2B_NONCE nonce_tpm{};
    TPM2B_DIGEST cp_hash{};
    TPM2B_NONCE policy_ref{};
    TSS2_RC rc =
        Esys_PolicySecret(esys_, ESYS_TR_RH_ENDORSEMENT, session, ESYS_TR_PASSWORD, ESYS_TR_NONE,
                          ESYS_TR_NONE, &nonce_tpm, &cp_hash, &policy_ref, 0, nullptr, nullptr);
    if (rc != TSS2_RC_SUCCESS) {
      Esys_FlushContext(esys_, session);
      Esys_FlushContext(esys_, ek);
      return TpmError("PolicySecret(endorsement)", rc);
    }
    EsysPtr<TPM2B_DIGEST> cert_info;
    rc = Esys_ActivateCredential(esys_, ak_, ek, ESYS_TR_PASSWORD, session, ESYS_TR_NONE, &cred,
                                 &secret, cert_info.out());
    Esys_FlushContext(esys_, session);  // may already be gone; nothing to do if so
    Esys_FlushContext(esys_, ek);
    if (rc != TSS2_RC_SUCCESS) {
      return Error::Make(Error::Code::kUnauthorized,
                         std::string("TPM2_ActivateCredential refused the challenge (not made for "
                                     "this TPM's EK and AK): ") +
                             Tss2_RC_Decode(rc),
                         "AkNotBound");
    }
    std::string out(reinterpret_cast<const char*>(cert_info->buffer), cert_info->size);
    return out;
  }

  Status ResetPcr(uint32_t pcr) override {
    if (pcr != kAgentPcr && pcr != kWorkloadPcr) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "only PCRs 16 and 23 are reset (resettable from locality 0)");
    }
    if (TSS2_RC rc =
            Esys_PCR_Reset(esys_, ESYS_TR_PCR0 + pcr, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE);
        rc != TSS2_RC_SUCCESS) {
      return TpmError("TPM2_PCR_Reset(" + std::to_string(pcr) + ")", rc);
    }
    std::erase_if(log_, [&](const Measurement& m) { return m.pcr == pcr; });
    return OkStatus();
  }

  Status Extend(const Measurement& m) override {
    if (m.pcr > 23) return Error::Make(Error::Code::kInvalidArgument, "PCR index above 23");
    TPML_DIGEST_VALUES d{};
    d.count = 1;
    d.digests[0].hashAlg = TPM2_ALG_SHA256;
    std::memcpy(d.digests[0].digest.sha256, m.digest.data(), 32);
    if (TSS2_RC rc = Esys_PCR_Extend(esys_, ESYS_TR_PCR0 + m.pcr, ESYS_TR_PASSWORD, ESYS_TR_NONE,
                                     ESYS_TR_NONE, &d);
        rc != TSS2_RC_SUCCESS) {
      return TpmError("TPM2_PCR_Extend(" + std::to_string(m.pcr) + ")", rc);
    }
    log_.push_back(m);
    return OkStatus();
  }

  const EventLog& Log() const override { return log_; }

  Result<Evidence> Quote(std::string_view nonce, std::string_view report_data,
                         const std::vector<uint32_t>& pcrs) override {
    if (nonce.size() != 32) {
      return Error::Make(Error::Code::kInvalidArgument, "the verifier nonce must be 32 bytes");
    }
    TPM2B_DATA qualifying{};
    auto rd = Sha256(report_data);
    qualifying.size = 64;
    std::memcpy(qualifying.buffer, nonce.data(), 32);
    std::memcpy(qualifying.buffer + 32, rd.data(), 32);
    TPMT_SIG_SCHEME scheme{};
    scheme.scheme = TPM2_ALG_ECDSA;
    scheme.details.ecdsa.hashAlg = TPM2_ALG_SHA256;
    TPML_PCR_SELECTION sel{};
    sel.count = 1;
    sel.pcrSelections[0].hash = TPM2_ALG_SHA256;
    sel.pcrSelections[0].sizeofSelect = 3;
    std::vector<uint32_t> sorted = pcrs;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    for (uint32_t p : sorted) {
      if (p > 23) return Error::Make(Error::Code::kInvalidArgument, "PCR index above 23");
      sel.pcrSelections[0].pcrSelect[p / 8] |= static_cast<uint8_t>(1u << (p % 8));
    }
    EsysPtr<TPM2B_ATTEST> quoted;
    EsysPtr<TPMT_SIGNATURE> sig;
    if (TSS2_RC rc = Esys_Quote(esys_, ak_, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE,
                                &qualifying, &scheme, &sel, quoted.out(), sig.out());
        rc != TSS2_RC_SUCCESS) {
      return TpmError("TPM2_Quote", rc);
    }
    const auto& ecdsa = sig->signature.ecdsa;
    if (sig->sigAlg != TPM2_ALG_ECDSA || ecdsa.signatureR.size > 32 || ecdsa.signatureS.size > 32) {
      return Error::Make(Error::Code::kInternal, "the TPM returned an unexpected signature");
    }
    std::string jose(64, '\0');
    std::memcpy(jose.data() + 32 - ecdsa.signatureR.size, ecdsa.signatureR.buffer,
                ecdsa.signatureR.size);
    std::memcpy(jose.data() + 64 - ecdsa.signatureS.size, ecdsa.signatureS.buffer,
                ecdsa.signatureS.size);
    Evidence e;
    e.attest.assign(reinterpret_cast<const char*>(quoted->attestationData), quoted->size);
    HS_ASSIGN_OR_RETURN(e.signature, internal::EcdsaJoseToDer(jose));
    e.pcrs = sorted;
    for (const auto& m : log_) {
      if (std::binary_search(sorted.begin(), sorted.end(), m.pcr)) e.event_log.push_back(m);
    }
    return e;
  }

 private:
  // A primary key of the endorsement hierarchy (its public area in `out_public`); the caller
  // owns the handle.
  Result<ESYS_TR> CreatePrimary(const TPM2B_PUBLIC& tmpl, TPM2B_PUBLIC* out_public) {
    TPM2B_SENSITIVE_CREATE sensitive{};
    TPM2B_DATA outside{};
    TPML_PCR_SELECTION creation_pcr{};
    ESYS_TR h = ESYS_TR_NONE;
    EsysPtr<TPM2B_PUBLIC> pub;
    EsysPtr<TPM2B_CREATION_DATA> creation_data;
    EsysPtr<TPM2B_DIGEST> creation_hash;
    EsysPtr<TPMT_TK_CREATION> ticket;
    if (TSS2_RC rc =
            Esys_CreatePrimary(esys_, ESYS_TR_RH_ENDORSEMENT, ESYS_TR_PASSWORD, ESYS_TR_NONE,
                               ESYS_TR_NONE, &sensitive, &tmpl, &outside, &creation_pcr, &h,
                               pub.out(), creation_data.out(), creation_hash.out(), ticket.out());
        rc != TSS2_RC_SUCCESS) {
      return TpmError("TPM2_CreatePrimary(endorsement)", rc);
    }
    *out_public = *pub.p;
    return h;
  }

  TSS2_TCTI_CONTEXT* tcti_ = nullptr;
  ESYS_CONTEXT* esys_ = nullptr;
  ESYS_TR ak_ = ESYS_TR_NONE;
  AkPublic ak_public_;
  std::string ek_pem_;
  EventLog log_;
};

}  // namespace

Result<std::unique_ptr<Prover>> Prover::Open(const ProverConfig& config) {
  auto p = std::make_unique<TpmProver>();
  HS_RETURN_IF_ERROR(p->Init(config));
  return std::unique_ptr<Prover>(std::move(p));
}

}  // namespace hyperslice::runners::attest
