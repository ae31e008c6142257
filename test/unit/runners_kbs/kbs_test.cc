// The key broker's release and its HTTPS endpoint: no token, a token for another audience, image or
// key, a token from another issuer — refused (401/403) without the secret in any answer; a valid
// token — the secret sealed to the caller's key, opened by the test with that key only.
#include "src/runners/kbs/kbs.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "src/base/log.h"
#include "src/net/http.h"
#include "src/net/pki.h"
#include "src/runners/attest/attest.h"
#include "test/unit/runners_attest/signing.h"

namespace hyperslice::runners::kbs {
namespace {

using attest::testing::NewSigningKey;
using attest::testing::SigningKey;

const std::string kIssuer = "https://controller.runners.test/attest";
const std::string kDigest = "sha256:" + std::string(64, 'd');
const std::string kSecret = "model-weights-key-0123456789abcdef";

class KbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto issuer = attest::TokenIssuer::Create(kIssuer);
    ASSERT_TRUE(issuer.ok());
    issuer_ = std::move(*issuer);
    verifier_ = {issuer_->Jwks(), kIssuer, std::chrono::system_clock::now()};
    policy_ = {"model-key", "kbs.runners.test", {kDigest}};
  }
  std::string Token(const std::string& audience, const std::string& digest,
                    const std::string& bound_key_pem, attest::TokenIssuer* by = nullptr) {
    attest::TokenClaims c;
    c.subject = "runner-a";
    c.audience = audience;
    c.issued_at = std::chrono::system_clock::now();
    c.expires_at = c.issued_at + std::chrono::minutes(5);
    c.hwmodel = "TPM2";
    c.dbgstat = "disabled-since-boot";
    c.image_digest = digest;
    c.eat_nonce = {"n0"};
    auto binding = KeyBinding(bound_key_pem);
    EXPECT_TRUE(binding.ok());
    c.extra_json = boost::json::serialize(boost::json::object{{kKeyBindingClaim, *binding}});
    auto t = (by ? by : issuer_.get())->Issue(c);
    EXPECT_TRUE(t.ok());
    return *t;
  }
  Result<std::string> Release(const std::string& token, const std::string& key_pem) {
    return kbs::Release({token, key_pem}, policy_, kSecret, verifier_);
  }
  static void ExpectNoSecret(const Result<std::string>& r) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message.find(kSecret), std::string::npos);
  }

  std::unique_ptr<attest::TokenIssuer> issuer_;
  Verifier verifier_;
  SecretPolicy policy_;
  SigningKey tee_ = NewSigningKey();
};

TEST_F(KbsTest, ValidTokenReleasesTheSecretSealedToTheBoundKey) {
  auto env = Release(Token("kbs.runners.test", kDigest, tee_.public_pem), tee_.public_pem);
  ASSERT_TRUE(env.ok()) << env.error().ToString();
  EXPECT_EQ(env->find(kSecret), std::string::npos);  // sealed, not in clear
  auto opened = Open(*env, tee_.private_pem);
  ASSERT_TRUE(opened.ok()) << opened.error().ToString();
  EXPECT_EQ(*opened, kSecret);
  // Nobody else opens it.
  EXPECT_FALSE(Open(*env, NewSigningKey().private_pem).ok());
  // An edited ciphertext fails the tag.
  auto v = boost::json::parse(*env).as_object();
  std::string ct(v["ciphertext"].as_string());
  ct[0] = ct[0] == 'A' ? 'B' : 'A';
  v["ciphertext"] = ct;
  EXPECT_FALSE(Open(boost::json::serialize(v), tee_.private_pem).ok());
}

TEST_F(KbsTest, NoTokenIs401) {
  auto r = Release("", tee_.public_pem);
  ExpectNoSecret(r);
  EXPECT_EQ(r.error().http_status, 401);
  EXPECT_EQ(r.error().reason, "TokenMissing");
}

TEST_F(KbsTest, TokenForAnotherAudienceIs401) {
  auto r = Release(Token("another-relying-party", kDigest, tee_.public_pem), tee_.public_pem);
  ExpectNoSecret(r);
  EXPECT_EQ(r.error().http_status, 401);
  EXPECT_EQ(r.error().reason, "TokenAudience");
}

TEST_F(KbsTest, TokenFromAnotherIssuerKeyIs401) {
  auto other = attest::TokenIssuer::Create(kIssuer);
  ASSERT_TRUE(other.ok());
  auto r =
      Release(Token("kbs.runners.test", kDigest, tee_.public_pem, other->get()), tee_.public_pem);
  ExpectNoSecret(r);
  EXPECT_EQ(r.error().http_status, 401);
}

TEST_F(KbsTest, TokenForAnotherImageIs403) {
  auto r = Release(Token("kbs.runners.test", "sha256:" + std::string(64, 'e'), tee_.public_pem),
                   tee_.public_pem);
  ExpectNoSecret(r);
  EXPECT_EQ(r.error().http_status, 403);
  EXPECT_NE(r.error().message.find("is not released to image sha256:eee"), std::string::npos);
}

TEST_F(KbsTest, KeyOtherThanTheBoundOneIs403) {
  SigningKey thief = NewSigningKey();
  // A valid token of the TEE, replayed by someone asking for the secret under their own key.
  auto r = Release(Token("kbs.runners.test", kDigest, tee_.public_pem), thief.public_pem);
  ExpectNoSecret(r);
  EXPECT_EQ(r.error().http_status, 403);
  EXPECT_NE(r.error().message.find("not the one the token binds"), std::string::npos);
}

}  // namespace
}  // namespace hyperslice::runners::kbs

// The resource endpoint over HTTPS on loopback (the project's server and client), with every log
// line the process writes captured: the secret and the token appear in none.

namespace hyperslice::runners::kbs {
namespace {

class KbsEndpointTest : public KbsTest {
 protected:
  void SetUp() override {
    KbsTest::SetUp();
    log::SetSink([this](std::string_view line) {
      std::lock_guard lock(log_mu_);
      logs_ += line;
      logs_ += '\n';
    });
    dir_ = std::filesystem::temp_directory_path() / ("hs-kbs-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    auto ca = net::pki::MakeCa("kbs-test-ca");
    ASSERT_TRUE(ca.ok());
    net::pki::CertRequest cr;
    cr.common_name = "kbs";
    cr.ip_addresses = {"127.0.0.1"};
    cr.server = true;
    auto kp = net::pki::Issue(*ca, cr);
    ASSERT_TRUE(kp.ok());
    std::ofstream(dir_ / "tls.crt") << kp->cert_pem;
    std::ofstream(dir_ / "tls.key") << kp->key_pem;
    net::HttpServer::Options so;
    so.tls = net::ServerTlsFiles{(dir_ / "tls.crt").string(), (dir_ / "tls.key").string()};
    auto server =
        net::HttpServer::Start(so, NewResourceHandler(
                                       [this](const std::string& name) -> Result<Secret> {
                                         if (name != policy_.name)
                                           return Error::Make(Error::Code::kNotFound, name);
                                         return Secret{policy_, kSecret};
                                       },
                                       [this] {
                                         Verifier v = verifier_;
                                         v.now = std::chrono::system_clock::now();
                                         return v;
                                       }));
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(*server);
    net::HttpClient::Options co;
    co.base_url = "https://127.0.0.1:" + std::to_string(server_->port());
    co.tls.ca_pem = ca->cert_pem;
    auto client = net::HttpClient::Create(co);
    ASSERT_TRUE(client.ok());
    client_ = *client;
  }
  void TearDown() override {
    server_.reset();
    log::SetSink(nullptr);
    std::filesystem::remove_all(dir_);
  }
  net::Response Post(const std::string& resource, const std::string& token,
                     const std::string& key_pem) {
    net::Request req;
    req.method = "POST";
    req.target = "/kbs/v0/resource/" + resource;
    if (!token.empty()) req.headers.emplace_back("Authorization", "Bearer " + token);
    req.body = boost::json::serialize(boost::json::object{{"publicKey", key_pem}});
    auto resp = client_->Do(req);
    EXPECT_TRUE(resp.ok()) << resp.error().ToString();
    return resp.ok() ? *resp : net::Response{};
  }

  std::filesystem::path dir_;
  std::unique_ptr<net::HttpServer> server_;
  std::shared_ptr<net::HttpClient> client_;
  std::mutex log_mu_;
  std::string logs_;
};

TEST_F(KbsEndpointTest, ReleasesOnlyToAValidBoundTokenAndLogsNoSecret) {
  const std::string good = Token("kbs.runners.test", kDigest, tee_.public_pem);
  net::Response none = Post("model-key", "", tee_.public_pem);
  EXPECT_EQ(none.status, 401) << none.body;
  net::Response aud = Post("model-key", Token("other", kDigest, tee_.public_pem), tee_.public_pem);
  EXPECT_EQ(aud.status, 401) << aud.body;
  net::Response img = Post(
      "model-key", Token("kbs.runners.test", "sha256:" + std::string(64, 'e'), tee_.public_pem),
      tee_.public_pem);
  EXPECT_EQ(img.status, 403) << img.body;
  net::Response thief = Post("model-key", good, NewSigningKey().public_pem);
  EXPECT_EQ(thief.status, 403) << thief.body;
  net::Response missing = Post("no-such-key", good, tee_.public_pem);
  EXPECT_EQ(missing.status, 404) << missing.body;
  net::Response ok = Post("model-key", good, tee_.public_pem);
  ASSERT_EQ(ok.status, 200) << ok.body;
  auto opened = Open(ok.body, tee_.private_pem);
  ASSERT_TRUE(opened.ok()) << opened.error().ToString();
  EXPECT_EQ(*opened, kSecret);
  for (const auto* r : {&none, &aud, &img, &thief, &missing, &ok}) {
    EXPECT_EQ(r->body.find(kSecret), std::string::npos);
  }
  std::lock_guard lock(log_mu_);
  EXPECT_NE(logs_.find("kbs: resource released"), std::string::npos) << logs_;
  EXPECT_NE(logs_.find("kbs: resource refused"), std::string::npos) << logs_;
  EXPECT_EQ(logs_.find(kSecret), std::string::npos) << logs_;
  EXPECT_EQ(logs_.find(good), std::string::npos);
}

}  // namespace
}  // namespace hyperslice::runners::kbs
