#include "sim/kubelet/internal/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <array>
#include <memory>

#include <boost/json.hpp>

#include "src/base/base64.h"

namespace hyperslice::sim::kubelet::internal {
namespace {

Error Invalid(std::string msg, std::string reason = {}) {
  return Error::Make(Error::Code::kInvalidArgument, std::move(msg), std::move(reason));
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct ReqFree {
  void operator()(X509_REQ* r) const { X509_REQ_free(r); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

std::string BioString(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Hex(const unsigned char* p, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    s += kHex[p[i] >> 4];
    s += kHex[p[i] & 15];
  }
  return s;
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &len);
  return std::string(reinterpret_cast<const char*>(out.data()), len);
}

Result<std::unique_ptr<X509, X509Free>> ParseCert(std::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return Invalid("not a PEM certificate");
  return cert;
}

std::string NameEntry(X509_NAME* name, int nid) {
  int idx = X509_NAME_get_index_by_NID(name, nid, -1);
  if (idx < 0) return "";
  ASN1_STRING* s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, idx));
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     static_cast<size_t>(ASN1_STRING_length(s)));
}

}  // namespace

Result<std::string> CaCertHash(std::string_view ca_pem) {
  HS_ASSIGN_OR_RETURN(auto cert, ParseCert(ca_pem));
  unsigned char* der = nullptr;
  int n = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert.get()), &der);
  if (n <= 0) return Invalid("certificate has no encodable public key");
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int md_len = 0;
  EVP_Digest(der, static_cast<size_t>(n), md.data(), &md_len, EVP_sha256(), nullptr);
  OPENSSL_free(der);
  return "sha256:" + Hex(md.data(), md_len);
}

std::string SignDetachedJws(std::string_view payload, std::string_view token_id,
                            std::string_view token_secret) {
  boost::json::object header{{"alg", "HS256"}, {"kid", token_id}};
  std::string protected_b64 = Base64UrlEncode(boost::json::serialize(header));
  std::string signing_input = protected_b64 + "." + Base64UrlEncode(payload);
  return protected_b64 + ".." + Base64UrlEncode(HmacSha256(token_secret, signing_input));
}

Status VerifyDetachedJws(std::string_view jws, std::string_view payload, std::string_view token_id,
                         std::string_view token_secret) {
  size_t dot = jws.find("..");
  if (dot == std::string_view::npos || jws.find('.', dot + 2) != std::string_view::npos)
    return Invalid("the cluster-info signature is not a detached compact JWS", "JWSInvalid");
  std::string_view protected_b64 = jws.substr(0, dot);
  auto header_json = Base64UrlDecode(protected_b64);
  auto signature = Base64UrlDecode(jws.substr(dot + 2));
  if (!header_json.ok() || !signature.ok())
    return Invalid("the cluster-info signature is not base64url", "JWSInvalid");
  boost::system::error_code ec;
  boost::json::value header = boost::json::parse(*header_json, ec);
  if (ec || !header.is_object())
    return Invalid("the cluster-info signature header is not JSON", "JWSInvalid");
  const auto& h = header.as_object();
  auto* alg = h.if_contains("alg");
  auto* kid = h.if_contains("kid");
  if (alg == nullptr || !alg->is_string() || alg->as_string() != "HS256")
    return Invalid("the cluster-info signature is not HS256", "JWSInvalid");
  if (kid == nullptr || !kid->is_string() || kid->as_string() != token_id)
    return Invalid("the cluster-info signature names another token id", "JWSInvalid");
  std::string signing_input = std::string(protected_b64) + "." + Base64UrlEncode(payload);
  std::string expected = HmacSha256(token_secret, signing_input);
  if (expected.size() != signature->size() ||
      CRYPTO_memcmp(expected.data(), signature->data(), expected.size()) != 0)
    return Invalid("the cluster-info signature does not verify with the bootstrap token",
                   "JWSInvalid");
  return OkStatus();
}

Result<KeyAndCsr> MakeCsr(const std::string& common_name, const std::string& organization) {
  std::unique_ptr<EVP_PKEY, PkeyFree> key(EVP_EC_gen("P-256"));
  if (!key) return Error::Make(Error::Code::kInternal, "generating a P-256 key failed");
  std::unique_ptr<X509_REQ, ReqFree> req(X509_REQ_new());
  X509_REQ_set_version(req.get(), 0);
  X509_NAME* name = X509_REQ_get_subject_name(req.get());
  auto add = [&](const char* field, const std::string& v) {
    return X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8,
                                      reinterpret_cast<const unsigned char*>(v.c_str()), -1, -1,
                                      0) == 1;
  };
  if (!add("O", organization) || !add("CN", common_name) ||
      X509_REQ_set_pubkey(req.get(), key.get()) != 1 ||
      X509_REQ_sign(req.get(), key.get(), EVP_sha256()) <= 0)
    return Error::Make(Error::Code::kInternal, "building the certificate request failed");
  BioPtr csr_bio(BIO_new(BIO_s_mem()));
  BioPtr key_bio(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_X509_REQ(csr_bio.get(), req.get()) != 1 ||
      PEM_write_bio_PrivateKey(key_bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) !=
          1)
    return Error::Make(Error::Code::kInternal, "encoding the certificate request failed");
  return KeyAndCsr{BioString(key_bio.get()), BioString(csr_bio.get())};
}

Result<CertFacts> InspectCertificate(std::string_view cert_pem, std::string_view key_pem) {
  HS_ASSIGN_OR_RETURN(auto cert, ParseCert(cert_pem));
  CertFacts f;
  X509_NAME* subject = X509_get_subject_name(cert.get());
  f.common_name = NameEntry(subject, NID_commonName);
  f.organization = NameEntry(subject, NID_organizationName);
  BioPtr bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  std::unique_ptr<EVP_PKEY, PkeyFree> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  f.matches_key = key && X509_check_private_key(cert.get(), key.get()) == 1;
  return f;
}

}  // namespace hyperslice::sim::kubelet::internal
