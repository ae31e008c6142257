#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>

#include <cstdlib>
#include <cstring>

#include "src/runners/attest/attest.h"
#include "src/runners/attest/internal/wire.h"

namespace hyperslice::runners::attest::internal {
namespace {

Error Invalid(std::string message) {
  return Error::Make(Error::Code::kInvalidArgument, std::move(message), "QuoteInvalid");
}

// Big-endian reader over untrusted bytes; a read past the end sets `failed` and yields zeros.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool failed() const { return failed_; }
  bool done() const { return data_.empty(); }
  uint64_t Uint(size_t n) {
    if (data_.size() < n) {
      failed_ = true;
      data_ = {};
      return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<uint8_t>(data_[i]);
    data_.remove_prefix(n);
    return v;
  }
  uint8_t U8() { return static_cast<uint8_t>(Uint(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Uint(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Uint(4)); }
  std::string_view Bytes(size_t n) {
    if (data_.size() < n) {
      failed_ = true;
      data_ = {};
      return {};
    }
    std::string_view v = data_.substr(0, n);
    data_.remove_prefix(n);
    return v;
  }
  std::string Tpm2b() { return std::string(Bytes(U16())); }

 private:
  std::string_view data_;
  bool failed_ = false;
};

void PutU16(std::string& out, size_t v) {
  out += static_cast<char>((v >> 8) & 0xff);
  out += static_cast<char>(v & 0xff);
}
void PutU32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out += static_cast<char>((v >> s) & 0xff);
}

const unsigned char* U(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* c) const { EVP_PKEY_CTX_free(c); }
};
struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct BnFree {
  void operator()(BIGNUM* b) const { BN_free(b); }
};
struct SigFree {
  void operator()(ECDSA_SIG* s) const { ECDSA_SIG_free(s); }
};

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), U(data), data.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

}  // namespace

Result<QuoteInfo> ParseQuote(std::string_view attest) {
  Reader r(attest);
  uint32_t magic = r.U32();
  uint16_t type = r.U16();
  if (r.failed() || magic != kTpmGeneratedValue) {
    return Invalid("the quote is not TPM-generated (magic is not TPM_GENERATED_VALUE)");
  }
  if (type != kStAttestQuote) return Invalid("the attestation structure is not a quote");
  QuoteInfo q;
  q.qualified_signer = r.Tpm2b();
  q.extra_data = r.Tpm2b();
  r.Bytes(8 + 4 + 4 + 1 + 8);  // clockInfo, firmwareVersion
  uint32_t count = r.U32();
  if (count > 16) return Invalid("the quote selects more than 16 PCR banks");
  for (uint32_t i = 0; i < count && !r.failed(); ++i) {
    PcrSelection sel;
    sel.hash = r.U16();
    uint8_t size = r.U8();
    if (size > 32) return Invalid("a PCR selection is longer than 32 bytes");
    std::string_view bits = r.Bytes(size);
    for (size_t b = 0; b < bits.size(); ++b) {
      for (uint32_t k = 0; k < 8; ++k) {
        if (static_cast<uint8_t>(bits[b]) & (1u << k)) sel.pcrs.push_back(b * 8 + k);
      }
    }
    q.selections.push_back(std::move(sel));
  }
  q.pcr_digest = r.Tpm2b();
  if (r.failed()) return Invalid("the quote is truncated");
  if (!r.done()) return Invalid("the quote has trailing bytes");
  return q;
}

Result<EccPublic> ParseEccPublic(std::string_view tpmt_public) {
  Reader r(tpmt_public);
  EccPublic p;
  if (r.U16() != kAlgEcc) return Invalid("the attestation key is not an ECC key");
  p.name_alg = r.U16();
  p.attributes = r.U32();
  r.Tpm2b();  // authPolicy
  if (uint16_t sym = r.U16(); sym != kAlgNull) {
    r.U16();
    r.U16();
  }
  p.scheme = r.U16();
  if (p.scheme != kAlgNull) p.scheme_hash = r.U16();
  p.curve = r.U16();
  if (uint16_t kdf = r.U16(); kdf != kAlgNull) r.U16();
  p.x = r.Tpm2b();
  p.y = r.Tpm2b();
  if (r.failed()) return Invalid("the attestation key's public area is truncated");
  if (!r.done()) return Invalid("the attestation key's public area has trailing bytes");
  return p;
}

std::string ObjectName(std::string_view tpmt_public) {
  std::string name;
  PutU16(name, kAlgSha256);
  auto h = Sha256(tpmt_public);
  name.append(reinterpret_cast<const char*>(h.data()), h.size());
  return name;
}

std::string EndorsementQualifiedName(std::string_view tpmt_public) {
  std::string input;
  PutU32(input, 0x4000000b);  // TPM_RH_ENDORSEMENT: a hierarchy's qualified name is its handle
  input += ObjectName(tpmt_public);
  std::string qn;
  PutU16(qn, kAlgSha256);
  auto h = Sha256(input);
  qn.append(reinterpret_cast<const char*>(h.data()), h.size());
  return qn;
}

Result<Pkey> EcP256PublicKey(std::string_view x, std::string_view y) {
  if (x.size() != 32 || y.size() != 32) return Invalid("a P-256 coordinate is not 32 bytes");
  std::string point = "\x04";
  point.append(x);
  point.append(y);
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, const_cast<char*>("P-256"), 0),
      OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size()),
      OSSL_PARAM_construct_end()};
  std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree> ctx(
      EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr));
  EVP_PKEY* key = nullptr;
  if (!ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &key, EVP_PKEY_PUBLIC_KEY, params) != 1) {
    return Invalid("the point is not on P-256");
  }
  return Pkey(key);
}

Result<Pkey> PublicKeyFromPem(std::string_view pem) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  EVP_PKEY* key = bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr;
  if (!key) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "not a PEM public key (SubjectPublicKeyInfo)");
  }
  return Pkey(key);
}

Result<Pkey> PrivateKeyFromPem(std::string_view pem) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  EVP_PKEY* key = bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr;
  if (!key) return Error::Make(Error::Code::kInvalidArgument, "not a PEM private key");
  return Pkey(key);
}

std::string PublicKeyPem(EVP_PKEY* key) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PUBKEY(bio.get(), key) != 1) return {};
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

bool VerifySignature(EVP_PKEY* key, std::string_view data, std::string_view signature) {
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  const EVP_MD* md = EVP_PKEY_base_id(key) == EVP_PKEY_ED25519 ? nullptr : EVP_sha256();
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, md, nullptr, key) != 1) return false;
  return EVP_DigestVerify(ctx.get(), U(signature), signature.size(), U(data), data.size()) == 1;
}

Result<std::string> EcdsaDerToJose(std::string_view der) {
  const unsigned char* p = U(der);
  std::unique_ptr<ECDSA_SIG, SigFree> sig(
      d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(der.size())));
  if (!sig) return Error::Make(Error::Code::kInternal, "not a DER ECDSA signature");
  std::string out(64, '\0');
  if (BN_bn2binpad(ECDSA_SIG_get0_r(sig.get()), reinterpret_cast<unsigned char*>(out.data()), 32) !=
          32 ||
      BN_bn2binpad(ECDSA_SIG_get0_s(sig.get()), reinterpret_cast<unsigned char*>(out.data()) + 32,
                   32) != 32) {
    return Error::Make(Error::Code::kInternal, "ECDSA signature component longer than 32 bytes");
  }
  return out;
}

Result<std::string> EcdsaJoseToDer(std::string_view jose) {
  if (jose.size() != 64) {
    return Error::Make(Error::Code::kUnauthorized, "an ES256 signature is 64 bytes",
                       "TokenSignature");
  }
  std::unique_ptr<ECDSA_SIG, SigFree> sig(ECDSA_SIG_new());
  BIGNUM* r = BN_bin2bn(U(jose), 32, nullptr);
  BIGNUM* s = BN_bin2bn(U(jose) + 32, 32, nullptr);
  if (!sig || !r || !s || ECDSA_SIG_set0(sig.get(), r, s) != 1) {
    BN_free(r);
    BN_free(s);
    return Error::Make(Error::Code::kInternal, "ECDSA_SIG allocation failed");
  }
  unsigned char* der = nullptr;
  int n = i2d_ECDSA_SIG(sig.get(), &der);
  if (n <= 0) return Error::Make(Error::Code::kInternal, "ECDSA signature encoding failed");
  std::string out(reinterpret_cast<char*>(der), static_cast<size_t>(n));
  OPENSSL_free(der);
  return out;
}

Result<std::pair<std::string, std::string>> EcP256Coordinates(EVP_PKEY* key) {
  BIGNUM* bx = nullptr;
  BIGNUM* by = nullptr;
  EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_EC_PUB_X, &bx);
  EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_EC_PUB_Y, &by);
  std::unique_ptr<BIGNUM, BnFree> x(bx), y(by);
  if (!x || !y) return Error::Make(Error::Code::kInvalidArgument, "not an EC key");
  std::string out_x(32, '\0'), out_y(32, '\0');
  if (BN_bn2binpad(x.get(), reinterpret_cast<unsigned char*>(out_x.data()), 32) != 32 ||
      BN_bn2binpad(y.get(), reinterpret_cast<unsigned char*>(out_y.data()), 32) != 32) {
    return Error::Make(Error::Code::kInvalidArgument, "not a P-256 key");
  }
  return std::make_pair(out_x, out_y);
}

std::string KdfaSha256(std::string_view key, std::string_view label, std::string_view context_u,
                       std::string_view context_v, uint32_t bits) {
  std::string out;
  size_t bytes = (bits + 7) / 8;
  for (uint32_t i = 1; out.size() < bytes; ++i) {
    std::string msg;
    PutU32(msg, i);
    msg.append(label);
    msg += '\0';
    msg.append(context_u);
    msg.append(context_v);
    PutU32(msg, bits);
    out += HmacSha256(key, msg);
  }
  out.resize(bytes);
  if (bits % 8 != 0) out[0] = static_cast<char>(out[0] & ((1 << (bits % 8)) - 1));
  return out;
}

Result<std::pair<std::string, std::string>> MakeCredential(EVP_PKEY* ek_rsa,
                                                           std::string_view object_name,
                                                           std::string_view secret) {
  if (EVP_PKEY_base_id(ek_rsa) != EVP_PKEY_RSA) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "credential activation supports RSA endorsement keys (the TCG default "
                       "EK template); this EK is not RSA",
                       "EkUnsupported");
  }
  if (secret.empty() || secret.size() > 32) {
    return Error::Make(Error::Code::kInvalidArgument, "a credential is 1 to 32 bytes");
  }
  std::string seed = RandomBytes(32);
  // The seed, RSA-OAEP(SHA-256) encrypted to the EK with label "IDENTITY\0".
  std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree> ctx(EVP_PKEY_CTX_new(ek_rsa, nullptr));
  static constexpr char kIdentity[] = "IDENTITY";
  auto* label = static_cast<unsigned char*>(OPENSSL_malloc(sizeof(kIdentity)));
  if (!label) return Error::Make(Error::Code::kInternal, "OPENSSL_malloc failed");
  std::memcpy(label, kIdentity, sizeof(kIdentity));
  size_t enc_len = 0;
  if (!ctx || EVP_PKEY_encrypt_init(ctx.get()) != 1 ||
      EVP_PKEY_CTX_set_rsa_padding(ctx.get(), RSA_PKCS1_OAEP_PADDING) != 1 ||
      EVP_PKEY_CTX_set_rsa_oaep_md(ctx.get(), EVP_sha256()) != 1 ||
      EVP_PKEY_CTX_set_rsa_mgf1_md(ctx.get(), EVP_sha256()) != 1 ||
      EVP_PKEY_CTX_set0_rsa_oaep_label(ctx.get(), label, sizeof(kIdentity)) != 1) {
    OPENSSL_free(label);
    return Error::Make(Error::Code::kInternal, "RSA-OAEP set-up failed");
  }
  if (EVP_PKEY_encrypt(ctx.get(), nullptr, &enc_len, U(seed), seed.size()) != 1) {
    return Error::Make(Error::Code::kInternal, "RSA-OAEP failed");
  }
  std::string encrypted_secret(enc_len, '\0');
  if (EVP_PKEY_encrypt(ctx.get(), reinterpret_cast<unsigned char*>(encrypted_secret.data()),
                       &enc_len, U(seed), seed.size()) != 1) {
    return Error::Make(Error::Code::kInternal, "RSA-OAEP failed");
  }
  encrypted_secret.resize(enc_len);

  // encIdentity = AES-128-CFB(KDFa(seed, "STORAGE", name), IV 0, TPM2B_DIGEST(secret)).
  std::string sym_key = KdfaSha256(seed, "STORAGE", object_name, {}, 128);
  std::string plain;
  PutU16(plain, secret.size());
  plain.append(secret);
  std::string enc_identity(plain.size(), '\0');
  unsigned char iv[16] = {};
  std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree> cctx(EVP_CIPHER_CTX_new());
  int n1 = 0, n2 = 0;
  if (!cctx || EVP_EncryptInit_ex(cctx.get(), EVP_aes_128_cfb128(), nullptr, U(sym_key), iv) != 1 ||
      EVP_EncryptUpdate(cctx.get(), reinterpret_cast<unsigned char*>(enc_identity.data()), &n1,
                        U(plain), static_cast<int>(plain.size())) != 1 ||
      EVP_EncryptFinal_ex(cctx.get(), reinterpret_cast<unsigned char*>(enc_identity.data()) + n1,
                          &n2) != 1) {
    return Error::Make(Error::Code::kInternal, "AES-128-CFB failed");
  }
  // outerHMAC = HMAC-SHA-256(KDFa(seed, "INTEGRITY"), encIdentity || name).
  std::string hmac_key = KdfaSha256(seed, "INTEGRITY", {}, {}, 256);
  std::string mac = HmacSha256(hmac_key, enc_identity + std::string(object_name));
  std::string blob;
  PutU16(blob, mac.size());
  blob += mac;
  blob += enc_identity;
  OPENSSL_cleanse(seed.data(), seed.size());
  return std::make_pair(blob, encrypted_secret);
}

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    std::abort();  // a verifier with a broken CSPRNG must not issue nonces or credentials
  }
  return out;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace hyperslice::runners::attest::internal
