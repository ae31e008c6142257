#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <boost/json/serialize.hpp>

#include "src/base/base64.h"
#include "src/gce/internal/jwt.h"

namespace hyperslice::gce::internal {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

}  // namespace

Result<std::string> MakeJwtAssertion(const ServiceAccountKey& key, std::string_view audience,
                                     const std::vector<std::string>& scopes, int64_t iat) {
  std::unique_ptr<BIO, BioFree> bio(
      BIO_new_mem_buf(key.private_key.data(), static_cast<int>(key.private_key.size())));
  if (!bio) return Error::Make(Error::Code::kInternal, "BIO_new_mem_buf failed");
  std::unique_ptr<EVP_PKEY, PkeyFree> pkey(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!pkey) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "the service-account key's private_key is not a readable PEM private key");
  }
  if (EVP_PKEY_base_id(pkey.get()) != EVP_PKEY_RSA) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "the service-account key's private_key is not an RSA key");
  }

  boost::json::object header{{"alg", "RS256"}, {"typ", "JWT"}};
  if (!key.private_key_id.empty()) header["kid"] = key.private_key_id;
  std::string scope;
  for (const auto& s : scopes) {
    if (!scope.empty()) scope += ' ';
    scope += s;
  }
  boost::json::object claims{{"iss", key.client_email},
                             {"scope", scope},
                             {"aud", audience},
                             {"iat", iat},
                             {"exp", iat + 3600}};
  std::string signing_input = Base64UrlEncode(boost::json::serialize(header)) + "." +
                              Base64UrlEncode(boost::json::serialize(claims));

  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  size_t sig_len = 0;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, pkey.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &sig_len,
                     reinterpret_cast<const unsigned char*>(signing_input.data()),
                     signing_input.size()) != 1) {
    return Error::Make(Error::Code::kInternal, "RS256 signing failed to start");
  }
  std::string sig(sig_len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &sig_len,
                     reinterpret_cast<const unsigned char*>(signing_input.data()),
                     signing_input.size()) != 1) {
    return Error::Make(Error::Code::kInternal, "RS256 signing failed");
  }
  sig.resize(sig_len);
  return signing_input + "." + Base64UrlEncode(sig);
}

std::string NewRequestId() {
  std::array<unsigned char, 16> b{};
  if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1) {
    // The CSPRNG failing is not something to limp past: a reused requestId would silently turn a
    // new mutation into a no-op.
    std::abort();
  }
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // version 4
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);  // RFC 4122 variant
  char out[37];
  std::snprintf(out, sizeof(out),
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return out;
}

}  // namespace hyperslice::gce::internal
