#include "src/net/pki.h"

#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <ctime>
#include <memory>

namespace hyperslice::net::pki {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
};
using PKey = std::unique_ptr<EVP_PKEY, Free>;
using Cert = std::unique_ptr<X509, Free>;
using Bio = std::unique_ptr<BIO, Free>;

Error SslError(const std::string& what) {
  char buf[256] = {0};
  unsigned long e = ERR_get_error();  // NOLINT(google-runtime-int)
  if (e) ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return Error::Make(Error::Code::kInternal, what + (e ? std::string(": ") + buf : ""));
}

// Certificate keys are ECDSA P-256: generated in microseconds rather than the ~100 ms (more on a
// loaded machine) of RSA-2048, and accepted by every Kubernetes component and OpenSSL client.
Result<PKey> NewKey() {
  std::unique_ptr<EVP_PKEY_CTX, Free> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr));
  EVP_PKEY* raw = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) <= 0 ||
      EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx.get(), NID_X9_62_prime256v1) <= 0 ||
      EVP_PKEY_keygen(ctx.get(), &raw) <= 0) {
    return SslError("ECDSA key generation failed");
  }
  return PKey(raw);
}

Result<PKey> NewRsaKey() {
  std::unique_ptr<EVP_PKEY_CTX, Free> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_RSA, nullptr));
  EVP_PKEY* raw = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) <= 0 ||
      EVP_PKEY_CTX_set_rsa_keygen_bits(ctx.get(), 2048) <= 0 ||
      EVP_PKEY_keygen(ctx.get(), &raw) <= 0) {
    return SslError("RSA key generation failed");
  }
  return PKey(raw);
}

std::string ToPem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);  // NOLINT(google-runtime-int)
  return std::string(data, static_cast<size_t>(n));
}

std::string KeyToPem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);  // NOLINT(google-runtime-int)
  return std::string(data, static_cast<size_t>(n));
}

std::string PubToPem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PUBKEY(bio.get(), key);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);  // NOLINT(google-runtime-int)
  return std::string(data, static_cast<size_t>(n));
}

bool AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) return false;
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return true;
}

Result<Cert> NewCert(EVP_PKEY* key, const std::string& cn, const std::vector<std::string>& orgs,
                     std::chrono::seconds validity) {
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof(serial));
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);  // tolerate small clock skew
  X509_gmtime_adj(X509_getm_notAfter(cert.get()),
                  static_cast<long>(validity.count()));  // NOLINT(google-runtime-int)
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  for (const auto& o : orgs) {
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                               reinterpret_cast<const unsigned char*>(o.c_str()), -1, -1, 0);
  }
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  return cert;
}

Result<std::pair<Cert, PKey>> Load(const KeyPair& kp) {
  Bio cb(BIO_new_mem_buf(kp.cert_pem.data(), static_cast<int>(kp.cert_pem.size())));
  Cert cert(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
  Bio kb(BIO_new_mem_buf(kp.key_pem.data(), static_cast<int>(kp.key_pem.size())));
  PKey key(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  if (!cert || !key) return SslError("cannot parse CA certificate or key");
  return std::make_pair(std::move(cert), std::move(key));
}

}  // namespace

Result<KeyPair> MakeRsaKey() {
  HS_ASSIGN_OR_RETURN(auto key, NewRsaKey());
  return KeyPair{PubToPem(key.get()), KeyToPem(key.get())};
}

Result<KeyPair> MakeCa(const std::string& common_name, std::chrono::seconds validity) {
  HS_ASSIGN_OR_RETURN(auto key, NewKey());
  HS_ASSIGN_OR_RETURN(auto cert, NewCert(key.get(), common_name, {}, validity));
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  if (!AddExt(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE") ||
      !AddExt(cert.get(), cert.get(), NID_key_usage,
              "critical,keyCertSign,cRLSign,digitalSignature") ||
      !AddExt(cert.get(), cert.get(), NID_subject_key_identifier, "hash")) {
    return SslError("CA extensions");
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) return SslError("signing CA");
  return KeyPair{ToPem(cert.get()), KeyToPem(key.get())};
}

namespace {

// The leaf certificate for `key` (only its public half is used), signed by `ca`.
Result<Cert> SignLeaf(const KeyPair& ca, EVP_PKEY* key, const CertRequest& req) {
  HS_ASSIGN_OR_RETURN(auto ca_parts, Load(ca));
  auto& [ca_cert, ca_key] = ca_parts;
  HS_ASSIGN_OR_RETURN(auto cert, NewCert(key, req.common_name, req.organizations, req.validity));
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get()));
  bool ok = AddExt(cert.get(), ca_cert.get(), NID_basic_constraints, "critical,CA:FALSE") &&
            AddExt(cert.get(), ca_cert.get(), NID_key_usage, "critical,digitalSignature") &&
            AddExt(cert.get(), ca_cert.get(), NID_authority_key_identifier, "keyid:always");
  std::string eku;
  if (req.server) eku = "serverAuth";
  if (req.client) eku.append(eku.empty() ? "clientAuth" : ",clientAuth");
  if (ok && !eku.empty()) ok = AddExt(cert.get(), ca_cert.get(), NID_ext_key_usage, eku);
  std::string san;
  auto add_san = [&san](std::string_view kind, const std::string& value) {
    if (!san.empty()) san.push_back(',');
    san.append(kind);
    san.append(value);
  };
  for (const auto& d : req.dns_names) add_san("DNS:", d);
  for (const auto& ip : req.ip_addresses) add_san("IP:", ip);
  if (ok && !san.empty()) ok = AddExt(cert.get(), ca_cert.get(), NID_subject_alt_name, san);
  if (!ok) return SslError("certificate extensions for " + req.common_name);
  if (X509_sign(cert.get(), ca_key.get(), EVP_sha256()) == 0) {
    return SslError("signing certificate for " + req.common_name);
  }
  return cert;
}

struct FreeReq {
  void operator()(X509_REQ* p) const { X509_REQ_free(p); }
};

}  // namespace

Result<KeyPair> Issue(const KeyPair& ca, const CertRequest& req) {
  HS_ASSIGN_OR_RETURN(auto key, NewKey());
  HS_ASSIGN_OR_RETURN(auto cert, SignLeaf(ca, key.get(), req));
  return KeyPair{ToPem(cert.get()), KeyToPem(key.get())};
}

Result<CsrAndKey> MakeCsr(const std::string& common_name) {
  CertRequest subject;
  subject.common_name = common_name;
  return MakeCsr(subject);
}

Result<CsrAndKey> MakeCsr(const CertRequest& subject) {
  HS_ASSIGN_OR_RETURN(auto key, NewKey());
  std::unique_ptr<X509_REQ, FreeReq> req(X509_REQ_new());
  X509_REQ_set_version(req.get(), 0);
  X509_NAME* name = X509_REQ_get_subject_name(req.get());
  for (const auto& o : subject.organizations) {
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                               reinterpret_cast<const unsigned char*>(o.c_str()), -1, -1, 0);
  }
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(subject.common_name.c_str()),
                             -1, -1, 0);
  std::string sans;
  for (const auto& d : subject.dns_names) sans += (sans.empty() ? "DNS:" : ",DNS:") + d;
  for (const auto& ip : subject.ip_addresses) sans += (sans.empty() ? "IP:" : ",IP:") + ip;
  if (!sans.empty()) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, nullptr, NID_subject_alt_name, sans.c_str());
    if (ext == nullptr) return SslError("CSR subjectAltName " + sans);
    STACK_OF(X509_EXTENSION)* exts = sk_X509_EXTENSION_new_null();
    sk_X509_EXTENSION_push(exts, ext);
    const int added = X509_REQ_add_extensions(req.get(), exts);
    sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
    if (added != 1) return SslError("CSR extensions");
  }
  X509_REQ_set_pubkey(req.get(), key.get());
  if (X509_REQ_sign(req.get(), key.get(), EVP_sha256()) == 0) return SslError("signing CSR");
  Bio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509_REQ(bio.get(), req.get());
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);  // NOLINT(google-runtime-int)
  return CsrAndKey{std::string(data, static_cast<size_t>(n)), KeyToPem(key.get())};
}

Result<std::string> SignCsr(const KeyPair& ca, const std::string& csr_pem, const CertRequest& req) {
  Bio b(BIO_new_mem_buf(csr_pem.data(), static_cast<int>(csr_pem.size())));
  std::unique_ptr<X509_REQ, FreeReq> csr(PEM_read_bio_X509_REQ(b.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (!csr) return Error::Make(Error::Code::kInvalidArgument, "cannot parse the PEM CSR");
  EVP_PKEY* pub = X509_REQ_get0_pubkey(csr.get());
  if (pub == nullptr || X509_REQ_verify(csr.get(), pub) != 1) {
    ERR_clear_error();
    return Error::Make(Error::Code::kInvalidArgument, "the CSR's self-signature does not verify");
  }
  HS_ASSIGN_OR_RETURN(auto cert, SignLeaf(ca, pub, req));
  return ToPem(cert.get());
}

namespace {

Result<Cert> ParseCert(const std::string& pem) {
  Bio b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Cert cert(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
  if (!cert) return SslError("cannot parse PEM certificate");
  return cert;
}

Result<std::chrono::system_clock::time_point> ToTimePoint(const ASN1_TIME* t) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return SslError("certificate time");
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

}  // namespace

Result<CertInfo> Inspect(const std::string& cert_pem) {
  HS_ASSIGN_OR_RETURN(Cert cert, ParseCert(cert_pem));
  CertInfo info;
  HS_ASSIGN_OR_RETURN(info.not_before, ToTimePoint(X509_get0_notBefore(cert.get())));
  HS_ASSIGN_OR_RETURN(info.not_after, ToTimePoint(X509_get0_notAfter(cert.get())));
  char cn[256] = {};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName, cn, sizeof(cn)) >
      0) {
    info.common_name = cn;
  }
  X509_NAME* subject = X509_get_subject_name(cert.get());
  for (int i = X509_NAME_get_index_by_NID(subject, NID_organizationName, -1); i >= 0;
       i = X509_NAME_get_index_by_NID(subject, NID_organizationName, i)) {
    ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i));
    info.organizations.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(data)),
                                    static_cast<size_t>(ASN1_STRING_length(data)));
  }
  return info;
}

Result<bool> SignedBy(const std::string& cert_pem, const std::string& ca_cert_pem) {
  HS_ASSIGN_OR_RETURN(Cert cert, ParseCert(cert_pem));
  HS_ASSIGN_OR_RETURN(Cert ca, ParseCert(ca_cert_pem));
  EVP_PKEY* ca_key = X509_get0_pubkey(ca.get());
  if (ca_key == nullptr) return SslError("CA certificate without a public key");
  bool ok = X509_verify(cert.get(), ca_key) == 1;
  ERR_clear_error();
  return ok;
}

}  // namespace hyperslice::net::pki
