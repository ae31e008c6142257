// The key broker's release: token checks, key binding, ECDH-ES + HKDF + AES-GCM sealing.
#include "src/runners/kbs/kbs.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include <algorithm>
#include <boost/json.hpp>
#include <memory>

#include "src/base/base64.h"
#include "src/runners/attest/attest.h"

namespace hyperslice::runners::kbs {
namespace {

namespace json = boost::json;
constexpr char kAlg[] = "ECDH-ES+HKDF-SHA256+A256GCM";

using Pkey = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using Ctx = std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)>;

Error Bad(const std::string& m) { return Error::Make(Error::Code::kInvalidArgument, m); }
Error Forbidden(const std::string& m) {
  return Error::Make(Error::Code::kForbidden, m, "SecretPolicy", 403);
}

Result<Pkey> ReadKey(const std::string& pem, bool is_private) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  EVP_PKEY* k = nullptr;
  if (bio) {
    k = is_private ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr)
                   : PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr);
  }
  Pkey key(k, &EVP_PKEY_free);
  if (!key || !EVP_PKEY_is_a(key.get(), "EC")) {
    return Bad(std::string("the ") + (is_private ? "private" : "public") +
               " key is not an EC key in PEM");
  }
  return key;
}

std::string PublicPem(EVP_PKEY* key) {
  std::unique_ptr<BIO, decltype(&BIO_free)> out(BIO_new(BIO_s_mem()), &BIO_free);
  PEM_write_bio_PUBKEY(out.get(), key);
  char* data = nullptr;
  long n = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// ECDH shared secret, then HKDF-SHA256 to a 32-byte AES key (info names the algorithm).
Result<std::string> DeriveKey(EVP_PKEY* mine, EVP_PKEY* theirs) {
  Ctx ctx(EVP_PKEY_CTX_new(mine, nullptr), &EVP_PKEY_CTX_free);
  size_t n = 0;
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) <= 0 ||
      EVP_PKEY_derive_set_peer(ctx.get(), theirs) <= 0 ||
      EVP_PKEY_derive(ctx.get(), nullptr, &n) <= 0) {
    return Bad("ECDH failed (keys on different curves?)");
  }
  std::string z(n, '\0');
  if (EVP_PKEY_derive(ctx.get(), reinterpret_cast<unsigned char*>(z.data()), &n) <= 0) {
    return Bad("ECDH failed");
  }
  Ctx kdf(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr), &EVP_PKEY_CTX_free);
  std::string key(32, '\0');
  size_t klen = key.size();
  if (!kdf || EVP_PKEY_derive_init(kdf.get()) <= 0 ||
      EVP_PKEY_CTX_set_hkdf_md(kdf.get(), EVP_sha256()) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_key(kdf.get(), reinterpret_cast<const unsigned char*>(z.data()),
                                 static_cast<int>(z.size())) <= 0 ||
      EVP_PKEY_CTX_add1_hkdf_info(kdf.get(), reinterpret_cast<const unsigned char*>(kAlg),
                                  static_cast<int>(sizeof(kAlg) - 1)) <= 0 ||
      EVP_PKEY_derive(kdf.get(), reinterpret_cast<unsigned char*>(key.data()), &klen) <= 0) {
    return Bad("HKDF failed");
  }
  OPENSSL_cleanse(z.data(), z.size());
  return key;
}

// AES-256-GCM; `encrypt` false checks the tag.
Result<std::string> Gcm(bool encrypt, const std::string& key, const std::string& iv,
                        const std::string& in, std::string* tag) {
  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> c(EVP_CIPHER_CTX_new(),
                                                                    &EVP_CIPHER_CTX_free);
  const auto* k = reinterpret_cast<const unsigned char*>(key.data());
  const auto* v = reinterpret_cast<const unsigned char*>(iv.data());
  std::string out(in.size(), '\0');
  int n = 0, fin = 0;
  bool ok = c && EVP_CipherInit_ex(c.get(), EVP_aes_256_gcm(), nullptr, k, v, encrypt ? 1 : 0) > 0;
  ok = ok && EVP_CipherUpdate(c.get(), reinterpret_cast<unsigned char*>(out.data()), &n,
                              reinterpret_cast<const unsigned char*>(in.data()),
                              static_cast<int>(in.size())) > 0;
  if (ok && !encrypt) {
    ok = tag->size() == 16 &&
         EVP_CIPHER_CTX_ctrl(c.get(), EVP_CTRL_GCM_SET_TAG, 16, tag->data()) > 0;
  }
  ok =
      ok && EVP_CipherFinal_ex(c.get(), reinterpret_cast<unsigned char*>(out.data()) + n, &fin) > 0;
  if (ok && encrypt) {
    tag->assign(16, '\0');
    ok = EVP_CIPHER_CTX_ctrl(c.get(), EVP_CTRL_GCM_GET_TAG, 16, tag->data()) > 0;
  }
  if (!ok) return Bad(encrypt ? "encryption failed" : "the envelope does not open with this key");
  return out;
}

}  // namespace

Result<std::string> KeyBinding(const std::string& public_key_pem) {
  HS_ASSIGN_OR_RETURN(Pkey key, ReadKey(public_key_pem, false));
  unsigned char* der = nullptr;
  int n = i2d_PUBKEY(key.get(), &der);
  if (n <= 0) return Bad("the public key cannot be encoded");
  std::string bytes(reinterpret_cast<char*>(der), static_cast<size_t>(n));
  OPENSSL_free(der);
  return attest::Hex(attest::Sha256(bytes));
}

Result<std::string> Release(const ReleaseRequest& request, const SecretPolicy& policy,
                            const std::string& secret, const Verifier& verifier) {
  if (request.token.empty()) {
    return Error::Make(Error::Code::kUnauthorized,
                       "secret " + policy.name +
                           " needs an attestation token (Authorization: "
                           "Bearer)",
                       "TokenMissing", 401);
  }
  auto claims = attest::VerifyToken(request.token, verifier.jwks_json, verifier.issuer,
                                    policy.audience, verifier.now);
  if (!claims.ok()) {
    return Error::Make(Error::Code::kUnauthorized,
                       "secret " + policy.name + ": " + claims.error().message,
                       claims.error().reason, 401);
  }
  if (std::find(policy.image_digests.begin(), policy.image_digests.end(), claims->image_digest) ==
      policy.image_digests.end()) {
    return Forbidden("secret " + policy.name + " is not released to image " +
                     (claims->image_digest.empty() ? "(none)" : claims->image_digest));
  }
  HS_ASSIGN_OR_RETURN(std::string binding, KeyBinding(request.public_key_pem));
  std::string bound;
  if (!claims->extra_json.empty()) {
    boost::system::error_code ec;
    json::value v = json::parse(claims->extra_json, ec);
    if (!ec && v.is_object()) {
      if (const auto* b = v.as_object().if_contains(kKeyBindingClaim); b && b->is_string()) {
        bound = std::string(b->as_string());
      }
    }
  }
  if (bound != binding) {
    return Forbidden("secret " + policy.name + ": the key is not the one the token binds (" +
                     kKeyBindingClaim + ")");
  }
  HS_ASSIGN_OR_RETURN(Pkey theirs, ReadKey(request.public_key_pem, false));
  Ctx gen(EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr), &EVP_PKEY_CTX_free);
  EVP_PKEY* eph_raw = nullptr;
  if (!gen || EVP_PKEY_keygen_init(gen.get()) <= 0 ||
      EVP_PKEY_CTX_set_group_name(gen.get(), "P-256") <= 0 ||
      EVP_PKEY_keygen(gen.get(), &eph_raw) <= 0) {
    return Error::Make(Error::Code::kInternal, "ephemeral key generation failed");
  }
  Pkey eph(eph_raw, &EVP_PKEY_free);
  HS_ASSIGN_OR_RETURN(std::string key, DeriveKey(eph.get(), theirs.get()));
  std::string iv(12, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(iv.data()), static_cast<int>(iv.size()));
  std::string tag;
  auto ct = Gcm(true, key, iv, secret, &tag);
  OPENSSL_cleanse(key.data(), key.size());
  if (!ct.ok()) return ct.error();
  return json::serialize(json::object{{"alg", kAlg},
                                      {"epk", PublicPem(eph.get())},
                                      {"iv", Base64Encode(iv)},
                                      {"ciphertext", Base64Encode(*ct)},
                                      {"tag", Base64Encode(tag)}});
}

Result<std::string> Open(const std::string& envelope_json, const std::string& private_key_pem) {
  boost::system::error_code ec;
  json::value v = json::parse(envelope_json, ec);
  if (ec || !v.is_object()) return Bad("the envelope is not JSON");
  const json::object& o = v.as_object();
  auto field = [&o](const char* k) -> std::string {
    const auto* f = o.if_contains(k);
    return f && f->is_string() ? std::string(f->as_string()) : std::string();
  };
  if (field("alg") != kAlg) return Bad("unknown envelope algorithm");
  HS_ASSIGN_OR_RETURN(Pkey mine, ReadKey(private_key_pem, true));
  HS_ASSIGN_OR_RETURN(Pkey epk, ReadKey(field("epk"), false));
  HS_ASSIGN_OR_RETURN(std::string iv, Base64Decode(field("iv"), "iv"));
  HS_ASSIGN_OR_RETURN(std::string ct, Base64Decode(field("ciphertext"), "ciphertext"));
  HS_ASSIGN_OR_RETURN(std::string tag, Base64Decode(field("tag"), "tag"));
  HS_ASSIGN_OR_RETURN(std::string key, DeriveKey(mine.get(), epk.get()));
  auto pt = Gcm(false, key, iv, ct, &tag);
  OPENSSL_cleanse(key.data(), key.size());
  return pt;
}

}  // namespace hyperslice::runners::kbs
