// Internal: TPM 2.0 wire structures the verifier reads without a TSS (parsed by hand so the link
// controller needs no TPM library, and so hostile input meets one small, fuzzed parser), and the
// OpenSSL pieces shared by the verifier, the token code and cosign.
#pragma once

#include <openssl/evp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::runners::attest::internal {

inline constexpr uint32_t kTpmGeneratedValue = 0xff544347;  // TPM_GENERATED_VALUE
inline constexpr uint16_t kStAttestQuote = 0x8018;          // TPM_ST_ATTEST_QUOTE
inline constexpr uint16_t kAlgSha256 = 0x000b;
inline constexpr uint16_t kAlgEcc = 0x0023;
inline constexpr uint16_t kAlgEcdsa = 0x0018;
inline constexpr uint16_t kAlgNull = 0x0010;
inline constexpr uint16_t kEccNistP256 = 0x0003;
// TPMA_OBJECT bits.
inline constexpr uint32_t kFixedTpm = 1u << 1;
inline constexpr uint32_t kFixedParent = 1u << 4;
inline constexpr uint32_t kSensitiveDataOrigin = 1u << 5;
inline constexpr uint32_t kRestricted = 1u << 16;
inline constexpr uint32_t kDecrypt = 1u << 17;
inline constexpr uint32_t kSign = 1u << 18;

struct PcrSelection {
  uint16_t hash = 0;
  std::vector<uint32_t> pcrs;  // ascending
};
struct QuoteInfo {
  std::string qualified_signer;  // TPM2B_NAME contents
  std::string extra_data;        // qualifyingData as the TPM echoed it
  std::vector<PcrSelection> selections;
  std::string pcr_digest;
};
// TPMS_ATTEST of type TPM_ST_ATTEST_QUOTE; anything else (or trailing bytes) is an error.
Result<QuoteInfo> ParseQuote(std::string_view attest);

struct EccPublic {
  uint16_t name_alg = 0;
  uint32_t attributes = 0;
  uint16_t scheme = 0;
  uint16_t scheme_hash = 0;
  uint16_t curve = 0;
  std::string x, y;
};
// TPMT_PUBLIC of an ECC key.
Result<EccPublic> ParseEccPublic(std::string_view tpmt_public);
// TPM name of an object: nameAlg (SHA-256) || SHA-256(TPMT_PUBLIC).
std::string ObjectName(std::string_view tpmt_public);
// Qualified name of a primary key of the endorsement hierarchy (what a quote's qualifiedSigner
// holds): nameAlg || SHA-256(TPM_RH_ENDORSEMENT || name).
std::string EndorsementQualifiedName(std::string_view tpmt_public);

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

Result<Pkey> EcP256PublicKey(std::string_view x, std::string_view y);
Result<Pkey> PublicKeyFromPem(std::string_view pem);
Result<Pkey> PrivateKeyFromPem(std::string_view pem);
std::string PublicKeyPem(EVP_PKEY* key);
// SHA-256 digest-and-verify (ECDSA DER / RSA PKCS#1 v1.5) or Ed25519 over `data`.
bool VerifySignature(EVP_PKEY* key, std::string_view data, std::string_view signature);
// ECDSA DER <-> JOSE r||s (32+32 bytes).
Result<std::string> EcdsaDerToJose(std::string_view der);
Result<std::string> EcdsaJoseToDer(std::string_view jose);
// Affine coordinates of a P-256 key, 32 bytes each.
Result<std::pair<std::string, std::string>> EcP256Coordinates(EVP_PKEY* key);

// TPM 2.0 Part 1 §11.4.10.2 KDFa with SHA-256.
std::string KdfaSha256(std::string_view key, std::string_view label, std::string_view context_u,
                       std::string_view context_v, uint32_t bits);
// TPM2_MakeCredential (Part 1 §24) for an RSA EK with the default template (OAEP-SHA-256 with
// label "IDENTITY", AES-128-CFB, HMAC-SHA-256): returns (credentialBlob, encryptedSecret)
// contents, each without its TPM2B size.
Result<std::pair<std::string, std::string>> MakeCredential(EVP_PKEY* ek_rsa,
                                                           std::string_view object_name,
                                                           std::string_view secret);

std::string RandomBytes(size_t n);
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace hyperslice::runners::attest::internal
