#include "src/localcluster/internal/pki.h"

#include <memory>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace hyperslice::localcluster::internal {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
};
template <typename T>
using Ptr = std::unique_ptr<T, Free>;

Error OpensslError(const std::string& what) {
  std::string detail;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!detail.empty()) detail += "; ";
    detail += buf;
  }
  return Error::Make(Error::Code::kInternal,
                     "pki: " + what + (detail.empty() ? "" : ": " + detail));
}

std::string BioString(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

Result<std::string> KeyPem(EVP_PKEY* key) {
  Ptr<BIO> bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return OpensslError("writing private key");
  return BioString(bio.get());
}

Result<std::string> CertPem(X509* cert) {
  Ptr<BIO> bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return OpensslError("writing certificate");
  return BioString(bio.get());
}

Result<Ptr<EVP_PKEY>> ReadKey(const std::string& pem) {
  Ptr<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Ptr<EVP_PKEY> key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) return OpensslError("reading private key");
  return key;
}

Result<Ptr<X509>> ReadCert(const std::string& pem) {
  Ptr<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Ptr<X509> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return OpensslError("reading certificate");
  return cert;
}

Result<Ptr<EVP_PKEY>> NewEcKey() {
  Ptr<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (!key) return OpensslError("generating EC key");
  return key;
}

Status AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  Ptr<X509_EXTENSION> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1)
    return OpensslError("adding extension " + std::string(OBJ_nid2sn(nid)) + "=" + value);
  return OkStatus();
}

// A certificate with a random serial, validity from one hour ago, and the given subject.
Result<Ptr<X509>> NewCert(EVP_PKEY* key, const std::string& cn,
                          const std::vector<std::string>& orgs, int days) {
  Ptr<X509> cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1) return OpensslError("creating certificate");
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return OpensslError("random serial");
  serial[0] &= 0x7f;  // positive
  Ptr<BIGNUM> bn(BN_bin2bn(serial, sizeof serial, nullptr));
  if (!bn || !BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get())))
    return OpensslError("setting serial");
  if (!X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) ||
      !X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 24 * 3600))
    return OpensslError("setting validity");
  X509_NAME* name = X509_get_subject_name(cert.get());
  for (const auto& o : orgs) {
    if (X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                                   reinterpret_cast<const unsigned char*>(o.c_str()), -1, -1,
                                   0) != 1)
      return OpensslError("setting O");
  }
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1)
    return OpensslError("setting CN");
  if (X509_set_pubkey(cert.get(), key) != 1) return OpensslError("setting public key");
  return cert;
}

}  // namespace

Result<KeyPair> MakeCa(const std::string& common_name) {
  HS_ASSIGN_OR_RETURN(auto key, NewEcKey());
  HS_ASSIGN_OR_RETURN(auto cert, NewCert(key.get(), common_name, {}, 3650));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1)
    return OpensslError("setting issuer");
  HS_RETURN_IF_ERROR(AddExt(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE"));
  HS_RETURN_IF_ERROR(AddExt(cert.get(), cert.get(), NID_key_usage,
                            "critical,digitalSignature,keyCertSign,cRLSign"));
  HS_RETURN_IF_ERROR(AddExt(cert.get(), cert.get(), NID_subject_key_identifier, "hash"));
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) <= 0) return OpensslError("signing CA");
  KeyPair out;
  HS_ASSIGN_OR_RETURN(out.cert_pem, CertPem(cert.get()));
  HS_ASSIGN_OR_RETURN(out.key_pem, KeyPem(key.get()));
  return out;
}

Result<KeyPair> MakeLeaf(const KeyPair& ca, const LeafSpec& spec) {
  HS_ASSIGN_OR_RETURN(auto ca_cert, ReadCert(ca.cert_pem));
  HS_ASSIGN_OR_RETURN(auto ca_key, ReadKey(ca.key_pem));
  HS_ASSIGN_OR_RETURN(auto key, NewEcKey());
  HS_ASSIGN_OR_RETURN(auto cert,
                      NewCert(key.get(), spec.common_name, spec.organizations, spec.valid_days));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get())) != 1)
    return OpensslError("setting issuer");
  X509* c = cert.get();
  X509* issuer = ca_cert.get();
  HS_RETURN_IF_ERROR(AddExt(c, issuer, NID_basic_constraints, "critical,CA:FALSE"));
  HS_RETURN_IF_ERROR(AddExt(c, issuer, NID_key_usage, "critical,digitalSignature,keyEncipherment"));
  HS_RETURN_IF_ERROR(
      AddExt(c, issuer, NID_ext_key_usage, spec.server ? "serverAuth" : "clientAuth"));
  HS_RETURN_IF_ERROR(AddExt(c, issuer, NID_authority_key_identifier, "keyid:always"));
  std::string san;
  for (const auto& d : spec.dns_names) san += (san.empty() ? "" : ",") + std::string("DNS:") + d;
  for (const auto& ip : spec.ip_addresses)
    san += (san.empty() ? "" : ",") + std::string("IP:") + ip;
  if (!san.empty()) HS_RETURN_IF_ERROR(AddExt(c, issuer, NID_subject_alt_name, san));
  if (X509_sign(c, ca_key.get(), EVP_sha256()) <= 0) return OpensslError("signing certificate");
  KeyPair out;
  HS_ASSIGN_OR_RETURN(out.cert_pem, CertPem(c));
  HS_ASSIGN_OR_RETURN(out.key_pem, KeyPem(key.get()));
  return out;
}

Result<RsaKey> MakeRsaKey(int bits) {
  Ptr<EVP_PKEY> key(EVP_RSA_gen(static_cast<unsigned int>(bits)));
  if (!key) return OpensslError("generating RSA key");
  RsaKey out;
  HS_ASSIGN_OR_RETURN(out.private_pem, KeyPem(key.get()));
  Ptr<BIO> bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PUBKEY(bio.get(), key.get()) != 1)
    return OpensslError("writing public key");
  out.public_pem = BioString(bio.get());
  return out;
}

}  // namespace hyperslice::localcluster::internal
