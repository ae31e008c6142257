// Service-account keys the simulator trusts, and RS256 JWT-bearer assertion checks (RFC 7523), as
// Google's token endpoint does them.
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include <memory>

#include "sim/gce/internal.h"
#include "src/base/base64.h"
#include "src/base/json.h"
#include "src/net/pki.h"

namespace hyperslice::sim::gce::internal {

Result<ServiceAccountKey> NewServiceAccountKey(const std::string& email) {
  auto kp = net::pki::MakeRsaKey();
  if (!kp.ok()) return kp.error();
  unsigned char raw[20];
  if (RAND_bytes(raw, sizeof raw) != 1) {
    return Error::Make(Error::Code::kInternal, "gce sim: no randomness for a key id");
  }
  static const char kHex[] = "0123456789abcdef";
  std::string kid;
  for (unsigned char b : raw) {
    kid += kHex[b >> 4];
    kid += kHex[b & 15];
  }
  return ServiceAccountKey{email, kid, kp->key_pem, kp->cert_pem};
}

namespace {

Error Grant(const std::string& message) {
  return Error::Make(Error::Code::kUnauthorized, message, "invalid_grant", 400);
}

bool VerifyRs256(const std::string& public_pem, std::string_view signed_part,
                 const std::string& signature) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(public_pem.data(), static_cast<int>(public_pem.size())), BIO_free);
  if (!bio) return false;
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  if (!key) return false;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key.get()) != 1) {
    return false;
  }
  return EVP_DigestVerify(
             ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
             reinterpret_cast<const unsigned char*>(signed_part.data()), signed_part.size()) == 1;
}

}  // namespace

Result<std::string> VerifyAssertion(std::string_view jwt,
                                    const std::map<std::string, ServiceAccountKey>& keys_by_id,
                                    const std::vector<std::string>& audiences, int64_t now_unix) {
  size_t d1 = jwt.find('.');
  size_t d2 = d1 == std::string_view::npos ? d1 : jwt.find('.', d1 + 1);
  if (d2 == std::string_view::npos || jwt.find('.', d2 + 1) != std::string_view::npos) {
    return Grant(
        "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable "
        "timeframe. Check your iat and exp values in the JWT claim.");
  }
  auto header_s = Base64UrlDecode(jwt.substr(0, d1));
  auto claims_s = Base64UrlDecode(jwt.substr(d1 + 1, d2 - d1 - 1));
  auto sig_b = Base64UrlDecode(jwt.substr(d2 + 1));
  if (!header_s.ok() || !claims_s.ok() || !sig_b.ok()) return Grant("Invalid JWT Signature.");
  const std::string& sig = *sig_b;
  boost::system::error_code ec1, ec2;
  json::value header = json::parse(*header_s, ec1);
  json::value claims = json::parse(*claims_s, ec2);
  if (ec1 || ec2 || !header.is_object() || !claims.is_object()) {
    return Grant("Invalid JWT: malformed header or claims.");
  }
  auto num = [](const json::object& o, const char* k) -> int64_t {
    auto* v = o.if_contains(k);
    if (v == nullptr) return 0;
    if (v->is_int64()) return v->as_int64();
    if (v->is_uint64()) return static_cast<int64_t>(v->as_uint64());
    if (v->is_double()) return static_cast<int64_t>(v->as_double());
    return 0;
  };
  const auto& h = header.as_object();
  const auto& c = claims.as_object();
  if (jsonfield::StringValue(h, "alg") != "RS256") return Grant("Invalid JWT: alg must be RS256.");
  std::string iss = jsonfield::StringValue(c, "iss");
  const ServiceAccountKey* key = nullptr;
  if (auto it = keys_by_id.find(jsonfield::StringValue(h, "kid")); it != keys_by_id.end()) {
    key = &it->second;
  } else {
    for (const auto& [id, k] : keys_by_id) {
      if (k.email == iss) {
        key = &k;
        break;
      }
    }
  }
  if (key == nullptr || key->email != iss) return Grant("Invalid grant: account not found");
  if (!VerifyRs256(key->public_key_pem, jwt.substr(0, d2), sig)) {
    return Grant("Invalid JWT Signature.");
  }
  std::string aud = jsonfield::StringValue(c, "aud");
  if (std::find(audiences.begin(), audiences.end(), aud) == audiences.end()) {
    return Grant("Invalid JWT: audience '" + aud + "' is not this token endpoint.");
  }
  int64_t iat = num(c, "iat"), exp = num(c, "exp");
  if (exp <= now_unix - 300 || iat > now_unix + 300 || exp - iat > 3600 || exp <= iat) {
    return Grant(
        "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable "
        "timeframe. Check your iat and exp values in the JWT claim.");
  }
  return iss;
}

}  // namespace hyperslice::sim::gce::internal
