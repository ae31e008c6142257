// Test helper: ECDSA P-256 keys and cosign-style signatures made with OpenSSL.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>

#include <memory>
#include <string>

#include "src/base/base64.h"
#include "src/net/pki.h"

namespace hyperslice::runners::attest::testing {

struct SigningKey {
  std::string private_pem;
  std::string public_pem;
};

inline SigningKey NewSigningKey() {
  auto ca = net::pki::MakeCa("cosign test key");
  SigningKey k{ca->key_pem, ""};
  std::unique_ptr<BIO, decltype(&BIO_free)> in(
      BIO_new_mem_buf(k.private_pem.data(), static_cast<int>(k.private_pem.size())), &BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(in.get(), nullptr, nullptr, nullptr), &EVP_PKEY_free);
  std::unique_ptr<BIO, decltype(&BIO_free)> out(BIO_new(BIO_s_mem()), &BIO_free);
  PEM_write_bio_PUBKEY(out.get(), key.get());
  char* data = nullptr;
  long n = BIO_get_mem_data(out.get(), &data);
  k.public_pem.assign(data, static_cast<size_t>(n));
  return k;
}

// base64(DER ECDSA-SHA256(payload)), as cosign puts in the signature annotation.
inline std::string SignBase64(const SigningKey& k, const std::string& payload) {
  std::unique_ptr<BIO, decltype(&BIO_free)> in(
      BIO_new_mem_buf(k.private_pem.data(), static_cast<int>(k.private_pem.size())), &BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(in.get(), nullptr, nullptr, nullptr), &EVP_PKEY_free);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  size_t len = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(payload.data());
  EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key.get());
  EVP_DigestSign(ctx.get(), nullptr, &len, p, payload.size());
  std::string sig(len, '\0');
  EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len, p, payload.size());
  sig.resize(len);
  return Base64Encode(sig);
}

}  // namespace hyperslice::runners::attest::testing
