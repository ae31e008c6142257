// Token sources against a loopback token endpoint / metadata server: the service-account JWT is
// checked with the key's public half, tokens are cached and refreshed before expiry (fake clock).
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "src/base/base64.h"
#include "src/base/fake_clock.h"
#include "src/gce/auth.h"
#include "src/gce/internal/jwt.h"
#include "src/net/pki.h"
#include "test/unit/gce/scripted_server.h"

namespace hyperslice::gce {
namespace {

using testing::Scripted;
using testing::ScriptedServer;
using namespace std::chrono_literals;

bool VerifyRs256(const std::string& public_pem, const std::string& input, const std::string& sig) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(public_pem.data(), static_cast<int>(public_pem.size())), BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  return key && EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key.get()) == 1 &&
         EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                          reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1;
}

std::map<std::string, std::string> ParseForm(const std::string& body) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    auto amp = body.find('&', pos);
    if (amp == std::string::npos) amp = body.size();
    auto pair = body.substr(pos, amp - pos);
    auto eq = pair.find('=');
    std::string k = pair.substr(0, eq), v = eq == std::string::npos ? "" : pair.substr(eq + 1);
    std::string dec;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] == '%' && i + 2 < v.size()) {
        dec += static_cast<char>(std::stoi(v.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        dec += v[i] == '+' ? ' ' : v[i];
      }
    }
    out[k] = dec;
    pos = amp + 1;
  }
  return out;
}

// A token endpoint that accepts only JWTs signed by `public_pem` and issues numbered tokens.
struct TokenEndpoint {
  ScriptedServer server;
  std::string public_pem;
  std::atomic<int> issued{0};
  std::atomic<int> refused{0};
  std::string last_aud;
  explicit TokenEndpoint(std::string pub, int64_t expires_in = 3600) : public_pem(std::move(pub)) {
    server.Fallback([this, expires_in](const net::ServerRequest& req) -> Scripted {
      auto form = ParseForm(req.body);
      const std::string& jwt = form["assertion"];
      auto d2 = jwt.rfind('.');
      bool ok = req.method == "POST" && req.path == "/token" &&
                req.Header("content-type") == "application/x-www-form-urlencoded" &&
                form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer" &&
                d2 != std::string::npos;
      if (ok) {
        auto sig = Base64UrlDecode(jwt.substr(d2 + 1));
        ok = sig.ok() && VerifyRs256(public_pem, jwt.substr(0, d2), *sig);
        auto claims = Base64UrlDecode(jwt.substr(jwt.find('.') + 1, d2 - jwt.find('.') - 1));
        if (ok && claims.ok()) {
          last_aud = std::string(boost::json::parse(*claims).as_object().at("aud").as_string());
        }
      }
      if (!ok) {
        ++refused;
        return {400, R"({"error":"invalid_grant","error_description":"Invalid JWT Signature."})"};
      }
      int n = ++issued;
      return {200, R"({"access_token":"ya29.token-)" + std::to_string(n) + R"(","expires_in":)" +
                       std::to_string(expires_in) + R"(,"token_type":"Bearer"})"};
    });
  }
  std::string uri() const { return server.url() + "/token"; }
};

ServiceAccountKey KeyFor(const net::pki::KeyPair& kp, const std::string& token_uri) {
  ServiceAccountKey k;
  k.client_email = "hyperslice@my-gcp-project.iam.gserviceaccount.com";
  k.private_key_id = "0123abcd";
  k.private_key = kp.key_pem;
  k.token_uri = token_uri;
  return k;
}

TEST(ServiceAccountTokens, ExchangedForATokenAndRefreshedBeforeExpiry) {
  auto kp = net::pki::MakeRsaKey().value();
  TokenEndpoint endpoint(kp.cert_pem);
  FakeClock clock;
  TokenSourceOptions o;
  o.clock = &clock;
  auto src = ServiceAccountTokenSource(KeyFor(kp, endpoint.uri()), o);
  ASSERT_TRUE(src.ok()) << src.error().ToString();
  auto t1 = (*src)->Token();
  ASSERT_TRUE(t1.ok()) << t1.error().ToString();
  EXPECT_EQ(*t1, "ya29.token-1");
  EXPECT_EQ(endpoint.last_aud, endpoint.uri());
  EXPECT_EQ((*src)->Describe(),
            "service-account:hyperslice@my-gcp-project.iam.gserviceaccount.com");

  // Cached until 5 minutes before expiry (3600 s lifetime → refresh at 3300 s).
  clock.Advance(3299s);
  EXPECT_EQ((*src)->Token().value(), "ya29.token-1");
  EXPECT_EQ(endpoint.issued, 1);
  clock.Advance(2s);
  EXPECT_EQ((*src)->Token().value(), "ya29.token-2");
  EXPECT_EQ(endpoint.issued, 2);
  // Invalidate (after a 401) forces a new token at once.
  (*src)->Invalidate();
  EXPECT_EQ((*src)->Token().value(), "ya29.token-3");
}

TEST(ServiceAccountTokens, ShortLivedTokensRefreshAtHalfLife) {
  auto kp = net::pki::MakeRsaKey().value();
  TokenEndpoint endpoint(kp.cert_pem, /*expires_in=*/120);
  FakeClock clock;
  TokenSourceOptions o;
  o.clock = &clock;
  auto src = ServiceAccountTokenSource(
                 KeyFor(kp, "https://unused.invalid/token"),
                 [&] {
                   o.token_uri = endpoint.uri();  // the override wins over the key's token_uri
                   return o;
                 }())
                 .value();
  EXPECT_EQ(src->Token().value(), "ya29.token-1");
  EXPECT_EQ(endpoint.last_aud, endpoint.uri());
  clock.Advance(59s);
  EXPECT_EQ(src->Token().value(), "ya29.token-1");
  clock.Advance(1s);
  EXPECT_EQ(src->Token().value(), "ya29.token-2");
}

TEST(ServiceAccountTokens, AWrongKeyIsRefusedAsUnauthorized) {
  auto kp = net::pki::MakeRsaKey().value();
  auto other = net::pki::MakeRsaKey().value();
  TokenEndpoint endpoint(other.cert_pem);  // trusts a different key
  auto src = ServiceAccountTokenSource(KeyFor(kp, endpoint.uri()), {}).value();
  auto t = src->Token();
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code, Error::Code::kUnauthorized);
  EXPECT_EQ(t.error().reason, "invalid_grant");
  EXPECT_EQ(endpoint.refused, 1);
}

TEST(ServiceAccountTokens, ABadPrivateKeyFailsAtCreation) {
  net::pki::KeyPair kp{"", "garbage"};
  auto src = ServiceAccountTokenSource(KeyFor(kp, "http://127.0.0.1:1/token"), {});
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.error().code, Error::Code::kInvalidArgument);
}

TEST(MetadataTokens, AsksWithMetadataFlavorAndCaches) {
  ScriptedServer md;
  const std::string path = "/computeMetadata/v1/instance/service-accounts/default/token";
  std::atomic<int> served{0};
  md.Fallback([&](const net::ServerRequest& req) -> Scripted {
    if (req.Header("metadata-flavor") != "Google") return {403, "Missing Metadata-Flavor"};
    if (req.path != path) return {404, "not found"};
    return {200, R"({"access_token":"md-)" + std::to_string(++served) +
                     R"(","expires_in":3599,"token_type":"Bearer"})"};
  });
  FakeClock clock;
  TokenSourceOptions o;
  o.clock = &clock;
  o.metadata_host = "127.0.0.1:" + md.url().substr(md.url().rfind(':') + 1);
  auto src = MetadataTokenSource(o).value();
  EXPECT_EQ(src->Token().value(), "md-1");
  EXPECT_EQ(src->Token().value(), "md-1");
  clock.Advance(3599s - 300s);
  EXPECT_EQ(src->Token().value(), "md-2");
  EXPECT_EQ(md.Requests().size(), 2u);
}

TEST(MetadataTokens, GceMetadataHostSelectsTheServer) {
  ScriptedServer md;
  md.Fallback([](const net::ServerRequest&) -> Scripted {
    return {200, R"({"access_token":"from-env","expires_in":3600})"};
  });
  auto host = md.url().substr(std::string("http://").size());
  ::setenv("GCE_METADATA_HOST", host.c_str(), 1);
  ::unsetenv("GOOGLE_APPLICATION_CREDENTIALS");
  auto home = std::filesystem::temp_directory_path() / "hs-gce-empty-home";
  std::filesystem::create_directories(home);
  ::setenv("CLOUDSDK_CONFIG", home.c_str(), 1);  // no gcloud well-known file here
  auto src = DefaultTokenSource({});
  ::unsetenv("GCE_METADATA_HOST");
  ::unsetenv("CLOUDSDK_CONFIG");
  ASSERT_TRUE(src.ok()) << src.error().ToString();
  EXPECT_EQ((*src)->Describe(), "metadata");
  EXPECT_EQ((*src)->Token().value(), "from-env");
}

TEST(DefaultCredentials, GoogleApplicationCredentialsNamesAServiceAccountKey) {
  auto kp = net::pki::MakeRsaKey().value();
  TokenEndpoint endpoint(kp.cert_pem);
  boost::json::object file{{"type", "service_account"},
                           {"project_id", "my-gcp-project"},
                           {"private_key_id", "k9"},
                           {"private_key", kp.key_pem},
                           {"client_email", "sa@my-gcp-project.iam.gserviceaccount.com"},
                           {"token_uri", endpoint.uri()}};
  auto path = std::filesystem::temp_directory_path() / "hs-gce-adc-key.json";
  std::ofstream(path) << boost::json::serialize(file);
  ::setenv("GOOGLE_APPLICATION_CREDENTIALS", path.c_str(), 1);
  auto src = DefaultTokenSource({});
  ::unsetenv("GOOGLE_APPLICATION_CREDENTIALS");
  std::filesystem::remove(path);
  ASSERT_TRUE(src.ok()) << src.error().ToString();
  EXPECT_EQ((*src)->Token().value(), "ya29.token-1");
}

TEST(DefaultCredentials, AuthorizedUserFileUsesItsRefreshToken) {
  ScriptedServer endpoint;
  endpoint.Fallback([](const net::ServerRequest& req) -> Scripted {
    auto form = ParseForm(req.body);
    if (form["grant_type"] != "refresh_token" || form["refresh_token"] != "1//rt" ||
        form["client_id"] != "cid") {
      return {400, R"({"error":"invalid_grant"})"};
    }
    return {200, R"({"access_token":"user-token","expires_in":3600})"};
  });
  auto path = std::filesystem::temp_directory_path() / "hs-gce-adc-user.json";
  std::ofstream(path) << R"({"type":"authorized_user","client_id":"cid","client_secret":"cs",
                             "refresh_token":"1//rt"})";
  TokenSourceOptions o;
  o.token_uri = endpoint.url() + "/token";
  auto src = CredentialsFileTokenSource(path.string(), o);
  std::filesystem::remove(path);
  ASSERT_TRUE(src.ok()) << src.error().ToString();
  EXPECT_EQ((*src)->Token().value(), "user-token");
}

TEST(StaticTokens, ReturnTheGivenToken) {
  auto src = StaticTokenSource("abc");
  EXPECT_EQ(src->Token().value(), "abc");
  src->Invalidate();
  EXPECT_EQ(src->Token().value(), "abc");
}

}  // namespace
}  // namespace hyperslice::gce
