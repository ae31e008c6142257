// cosign's signature format: simple-signing payloads, the registry layout, key verification.
#include <gtest/gtest.h>

#include "src/runners/attest/attest.h"
#include "test/unit/runners_attest/signing.h"

namespace hyperslice::runners::attest {
namespace {

using testing::NewSigningKey;
using testing::SignBase64;

const std::string kDigest = "sha256:" + std::string(64, 'c');
const std::string kOtherDigest = "sha256:" + std::string(64, 'd');
constexpr char kRepo[] = "127.0.0.1:5000/models/serve";

// A signature manifest as cosign pushes it under sha256-<hex>.sig.
std::string SignatureManifest(const std::string& payload, const std::string& sig_b64) {
  return R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",)"
         R"("config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":233,)"
         R"("digest":"sha256:)" +
         std::string(64, '0') +
         R"("},"layers":[{"mediaType":"application/vnd.dev.cosign.simplesigning.v1+json",)"
         R"("size":)" +
         std::to_string(payload.size()) + R"(,"digest":"sha256:)" + Hex(Sha256(payload)) +
         R"(","annotations":{"dev.cosignproject.cosign/signature":")" + sig_b64 + R"("}}]})";
}

TEST(CosignTest, PayloadIsCosignsFormat) {
  std::string payload = MakeSimpleSigning(kRepo, kDigest);
  EXPECT_EQ(payload, R"({"critical":{"identity":{"docker-reference":")" + std::string(kRepo) +
                         R"("},"image":{"docker-manifest-digest":")" + kDigest +
                         R"("},"type":"cosign container image signature"},"optional":null})");
  auto parsed = ParseSimpleSigning(payload);
  ASSERT_TRUE(parsed.ok()) << parsed.error().ToString();
  EXPECT_EQ(parsed->docker_reference, kRepo);
  EXPECT_EQ(parsed->docker_manifest_digest, kDigest);
  EXPECT_EQ(parsed->optional_json, "");
  auto with_optional = ParseSimpleSigning(
      R"({"critical":{"identity":{"docker-reference":"r"},"image":{"docker-manifest-digest":")" +
      kDigest + R"("},"type":"cosign container image signature"},"optional":{"sig":"ci"}})");
  ASSERT_TRUE(with_optional.ok());
  EXPECT_EQ(with_optional->optional_json, R"({"sig":"ci"})");
}

TEST(CosignTest, MalformedPayloadsAreRefusedNamingTheField) {
  EXPECT_FALSE(ParseSimpleSigning("").ok());
  EXPECT_FALSE(ParseSimpleSigning("[]").ok());
  auto wrong_type =
      ParseSimpleSigning(R"({"critical":{"identity":{},"image":{"docker-manifest-digest":")" +
                         kDigest + R"("},"type":"atomic container signature"}})");
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.error().message.find("critical.type"), std::string::npos);
  auto by_tag = ParseSimpleSigning(
      R"({"critical":{"identity":{},"image":{"docker-manifest-digest":"latest"},)"
      R"("type":"cosign container image signature"}})");
  ASSERT_FALSE(by_tag.ok());
  EXPECT_NE(by_tag.error().message.find("docker-manifest-digest"), std::string::npos);
}

TEST(CosignTest, SignatureTagIsCosigns) {
  auto tag = CosignSignatureTag(kDigest);
  ASSERT_TRUE(tag.ok());
  EXPECT_EQ(*tag, "sha256-" + std::string(64, 'c') + ".sig");
  EXPECT_FALSE(CosignSignatureTag("latest").ok());
}

TEST(CosignTest, ValidSignatureFromTrustedKeyIsAccepted) {
  auto key = NewSigningKey();
  auto other = NewSigningKey();
  std::string payload = MakeSimpleSigning(kRepo, kDigest);
  std::string manifest = SignatureManifest(payload, SignBase64(key, payload));
  auto sigs = ExtractCosignSignatures(manifest, {{"sha256:" + Hex(Sha256(payload)), payload}});
  ASSERT_TRUE(sigs.ok()) << sigs.error().ToString();
  ASSERT_EQ(sigs->size(), 1u);
  auto verified = VerifyCosignSignatures(*sigs, {other.public_pem, key.public_pem}, kDigest);
  ASSERT_TRUE(verified.ok()) << verified.error().ToString();
  EXPECT_EQ(verified->key_index, 1u);
  EXPECT_EQ(verified->docker_reference, kRepo);
}

TEST(CosignTest, UnsignedUntrustedAndWrongDigestAreRefused) {
  auto key = NewSigningKey();
  auto untrusted = NewSigningKey();
  std::string payload = MakeSimpleSigning(kRepo, kDigest);

  auto unsigned_image = VerifyCosignSignatures({}, {key.public_pem}, kDigest);
  ASSERT_FALSE(unsigned_image.ok());
  EXPECT_EQ(unsigned_image.error().reason, "Unsigned");

  std::vector<CosignSignature> by_untrusted{{payload, SignBase64(untrusted, payload)}};
  auto r = VerifyCosignSignatures(by_untrusted, {key.public_pem}, kDigest);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "UntrustedSignature");

  // A trusted signature over another image, presented for this one.
  std::string other_payload = MakeSimpleSigning(kRepo, kOtherDigest);
  std::vector<CosignSignature> other_image{{other_payload, SignBase64(key, other_payload)}};
  r = VerifyCosignSignatures(other_image, {key.public_pem}, kDigest);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "DigestMismatch");

  // A payload edited after signing.
  std::string edited = payload;
  edited.replace(edited.find(kDigest), kDigest.size(), kOtherDigest);
  std::vector<CosignSignature> tampered{{edited, SignBase64(key, payload)}};
  r = VerifyCosignSignatures(tampered, {key.public_pem}, kOtherDigest);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "UntrustedSignature");

  // By tag: refused before any signature is looked at.
  std::vector<CosignSignature> good{{payload, SignBase64(key, payload)}};
  EXPECT_FALSE(VerifyCosignSignatures(good, {key.public_pem}, "latest").ok());
}

TEST(CosignTest, RegistryLayerWhoseBytesDoNotMatchItsDigestIsRefused) {
  auto key = NewSigningKey();
  std::string payload = MakeSimpleSigning(kRepo, kDigest);
  std::string manifest = SignatureManifest(payload, SignBase64(key, payload));
  auto sigs =
      ExtractCosignSignatures(manifest, {{"sha256:" + Hex(Sha256(payload)), payload + " "}});
  ASSERT_FALSE(sigs.ok());
  EXPECT_EQ(sigs.error().reason, "BlobDigestMismatch");
  auto missing = ExtractCosignSignatures(manifest, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Error::Code::kNotFound);
  EXPECT_FALSE(ExtractCosignSignatures("{", {}).ok());
}

}  // namespace
}  // namespace hyperslice::runners::attest
