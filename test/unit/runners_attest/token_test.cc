// Attestation tokens: ES256 JWTs, the JWKS and the OIDC discovery body.
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include "src/net/pki.h"
#include "src/runners/attest/attest.h"

namespace hyperslice::runners::attest {
namespace {

using std::chrono::seconds;
constexpr char kIssuer[] = "https://link.hyperslice.test";

class TokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto issuer = TokenIssuer::Create(kIssuer);
    ASSERT_TRUE(issuer.ok()) << issuer.error().ToString();
    issuer_ = std::move(*issuer);
    now_ = std::chrono::system_clock::time_point(seconds(1'800'000'000));
  }
  TokenClaims Claims() {
    TokenClaims c;
    c.subject = "runner/gpu-eu-1";
    c.audience = "https://kbs.hyperslice.test";
    c.issued_at = now_;
    c.expires_at = now_ + seconds(300);
    c.hwmodel = "TPM2";
    c.dbgstat = "disabled-since-boot";
    c.image_digest = "sha256:" + std::string(64, 'a');
    c.eat_nonce = {"n-0123"};
    c.extra_json = R"({"submods":{"container":{"image_reference":"r/x@sha256:aa"}},"iss":"x"})";
    return c;
  }
  std::unique_ptr<TokenIssuer> issuer_;
  std::chrono::system_clock::time_point now_;
};

TEST_F(TokenTest, TokenVerifiesAgainstJwksWithItsClaims) {
  auto token = issuer_->Issue(Claims());
  ASSERT_TRUE(token.ok()) << token.error().ToString();
  auto claims = VerifyToken(*token, issuer_->Jwks(), kIssuer, "https://kbs.hyperslice.test",
                            now_ + seconds(10));
  ASSERT_TRUE(claims.ok()) << claims.error().ToString();
  EXPECT_EQ(claims->issuer, kIssuer);
  EXPECT_EQ(claims->subject, "runner/gpu-eu-1");
  EXPECT_EQ(claims->hwmodel, "TPM2");
  EXPECT_EQ(claims->dbgstat, "disabled-since-boot");
  EXPECT_EQ(claims->image_digest, "sha256:" + std::string(64, 'a'));
  ASSERT_EQ(claims->eat_nonce.size(), 1u);
  EXPECT_EQ(claims->eat_nonce[0], "n-0123");
  EXPECT_EQ(claims->expires_at, now_ + seconds(300));
  // Extra claims travel; they cannot override the issuer.
  EXPECT_NE(claims->extra_json.find("image_reference"), std::string::npos);
}

TEST_F(TokenTest, TokenForAnotherAudienceIsRefused) {
  auto token = issuer_->Issue(Claims());
  ASSERT_TRUE(token.ok());
  auto claims = VerifyToken(*token, issuer_->Jwks(), kIssuer, "https://other.test", now_);
  ASSERT_FALSE(claims.ok());
  EXPECT_EQ(claims.error().reason, "TokenAudience");
}

TEST_F(TokenTest, ExpiredTokenIsRefusedAfterLeeway) {
  auto token = issuer_->Issue(Claims());
  ASSERT_TRUE(token.ok());
  auto aud = "https://kbs.hyperslice.test";
  EXPECT_TRUE(VerifyToken(*token, issuer_->Jwks(), kIssuer, aud, now_ + seconds(320)).ok());
  auto late = VerifyToken(*token, issuer_->Jwks(), kIssuer, aud, now_ + seconds(331));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error().reason, "TokenExpired");
  auto early = VerifyToken(*token, issuer_->Jwks(), kIssuer, aud, now_ - seconds(60));
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.error().reason, "TokenNotYetValid");
}

TEST_F(TokenTest, OtherIssuersKeyAndTamperingAreRefused) {
  auto token = issuer_->Issue(Claims());
  ASSERT_TRUE(token.ok());
  auto aud = "https://kbs.hyperslice.test";
  auto other = TokenIssuer::Create(kIssuer);
  ASSERT_TRUE(other.ok());
  auto wrong_key = VerifyToken(*token, (*other)->Jwks(), kIssuer, aud, now_);
  ASSERT_FALSE(wrong_key.ok());
  EXPECT_EQ(wrong_key.error().reason, "TokenSignature");
  // A claims part swapped for one naming another image.
  auto forged_claims = Claims();
  forged_claims.image_digest = "sha256:" + std::string(64, 'b');
  auto forged = (*other)->Issue(forged_claims);
  ASSERT_TRUE(forged.ok());
  std::string spliced = token->substr(0, token->find('.')) +
                        forged->substr(forged->find('.'), forged->rfind('.') - forged->find('.')) +
                        token->substr(token->rfind('.'));
  auto r = VerifyToken(spliced, issuer_->Jwks(), kIssuer, aud, now_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "TokenSignature");
  // alg "none" with no signature.
  std::string none = "eyJhbGciOiJub25lIn0" + token->substr(token->find('.'));
  none = none.substr(0, none.rfind('.') + 1);
  EXPECT_FALSE(VerifyToken(none, issuer_->Jwks(), kIssuer, aud, now_).ok());
  EXPECT_EQ(VerifyToken(*token, issuer_->Jwks(), "https://evil.test", aud, now_).error().reason,
            "TokenIssuer");
  EXPECT_EQ(VerifyToken("a.b", issuer_->Jwks(), kIssuer, aud, now_).error().reason,
            "TokenMalformed");
}

TEST_F(TokenTest, JwksAndDiscoveryDescribeTheKey) {
  auto jwks = boost::json::parse(issuer_->Jwks()).as_object();
  const auto& key = jwks["keys"].as_array().at(0).as_object();
  EXPECT_EQ(key.at("kty").as_string(), "EC");
  EXPECT_EQ(key.at("crv").as_string(), "P-256");
  EXPECT_EQ(key.at("alg").as_string(), "ES256");
  EXPECT_EQ(key.at("kid").as_string(), issuer_->key_id());
  EXPECT_EQ(issuer_->key_id().size(), 43u);  // base64url SHA-256 thumbprint
  auto discovery = boost::json::parse(issuer_->OidcDiscovery()).as_object();
  EXPECT_EQ(discovery.at("issuer").as_string(), kIssuer);
  EXPECT_EQ(discovery.at("jwks_uri").as_string(), std::string(kIssuer) + "/jwks");
  EXPECT_EQ(discovery.at("id_token_signing_alg_values_supported").as_array().at(0).as_string(),
            "ES256");
}

TEST_F(TokenTest, IssuerFromPemKeepsItsKeyId) {
  // A P-256 key as a Secret would hold it (PKCS#8 PEM).
  auto ca = net::pki::MakeCa("token key");
  ASSERT_TRUE(ca.ok());
  const std::string& pem = ca->key_pem;
  auto a = TokenIssuer::FromPrivateKeyPem(kIssuer, pem);
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  auto b = TokenIssuer::FromPrivateKeyPem(kIssuer, pem);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*a)->key_id(), (*b)->key_id());
  EXPECT_FALSE(TokenIssuer::FromPrivateKeyPem(kIssuer, "not a key").ok());
}

}  // namespace
}  // namespace hyperslice::runners::attest
