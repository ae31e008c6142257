// The pure parts of the client: JWT signing (verified with the public key by OpenSSL), Google's
// error bodies, failed operations, operation links, and the backoff schedule.
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <memory>
#include <set>

#include <gtest/gtest.h>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "src/base/base64.h"
#include "src/gce/auth.h"
#include "src/gce/compute.h"
#include "src/gce/internal/errors.h"
#include "src/gce/internal/jwt.h"
#include "src/net/pki.h"

namespace hyperslice::gce {
namespace {

// Verifies an RS256 signature over `input` with a SubjectPublicKeyInfo PEM public key.
bool VerifyRs256(const std::string& public_pem, const std::string& input, const std::string& sig) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(public_pem.data(), static_cast<int>(public_pem.size())), BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  if (!key) return false;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key.get()) != 1) return false;
  return EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                          reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1;
}

struct SplitJwt {
  std::string header, claims, signature, signing_input;
};
SplitJwt Split(const std::string& jwt) {
  auto d1 = jwt.find('.');
  auto d2 = jwt.find('.', d1 + 1);
  EXPECT_NE(d1, std::string::npos);
  EXPECT_NE(d2, std::string::npos);
  SplitJwt s;
  s.header = Base64UrlDecode(jwt.substr(0, d1)).value();
  s.claims = Base64UrlDecode(jwt.substr(d1 + 1, d2 - d1 - 1)).value();
  s.signature = Base64UrlDecode(jwt.substr(d2 + 1)).value();
  s.signing_input = jwt.substr(0, d2);
  return s;
}

TEST(Jwt, SignatureVerifiesWithThePublicKeyAndClaimsAreGoogles) {
  auto kp = net::pki::MakeRsaKey();
  ASSERT_TRUE(kp.ok()) << kp.error().ToString();
  ServiceAccountKey key;
  key.client_email = "sa@my-gcp-project.iam.gserviceaccount.com";
  key.private_key_id = "kid-123";
  key.private_key = kp->key_pem;
  auto jwt = internal::MakeJwtAssertion(key, "http://127.0.0.1:1/token", {kCloudPlatformScope},
                                        1'700'000'000);
  ASSERT_TRUE(jwt.ok()) << jwt.error().ToString();
  auto s = Split(*jwt);
  auto header = boost::json::parse(s.header).as_object();
  EXPECT_EQ(header.at("alg"), "RS256");
  EXPECT_EQ(header.at("typ"), "JWT");
  EXPECT_EQ(header.at("kid"), "kid-123");
  auto claims = boost::json::parse(s.claims).as_object();
  EXPECT_EQ(claims.at("iss"), "sa@my-gcp-project.iam.gserviceaccount.com");
  EXPECT_EQ(claims.at("scope"), "https://www.googleapis.com/auth/cloud-platform");
  EXPECT_EQ(claims.at("aud"), "http://127.0.0.1:1/token");
  EXPECT_EQ(claims.at("iat").as_int64(), 1'700'000'000);
  EXPECT_EQ(claims.at("exp").as_int64(), 1'700'003'600);

  EXPECT_EQ(s.signature.size(), 256u);  // RSA-2048
  EXPECT_TRUE(VerifyRs256(kp->cert_pem, s.signing_input, s.signature));
  // The same signature does not verify for altered claims, nor under another key.
  std::string tampered = s.signing_input;
  tampered.back() = tampered.back() == 'A' ? 'B' : 'A';
  EXPECT_FALSE(VerifyRs256(kp->cert_pem, tampered, s.signature));
  auto other = net::pki::MakeRsaKey();
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(VerifyRs256(other->cert_pem, s.signing_input, s.signature));
}

TEST(Jwt, UnreadableKeyIsInvalidArgument) {
  ServiceAccountKey key;
  key.client_email = "sa@x";
  key.private_key = "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n";
  auto jwt = internal::MakeJwtAssertion(key, "aud", {kCloudPlatformScope}, 1);
  ASSERT_FALSE(jwt.ok());
  EXPECT_EQ(jwt.error().code, Error::Code::kInvalidArgument);
  EXPECT_EQ(jwt.error().message.find("not a key"), std::string::npos);  // no key material echoed
}

TEST(ServiceAccountKeyFile, ParsesFieldsAndDefaultsTokenUri) {
  auto k = ParseServiceAccountKey(
      R"({"type":"service_account","project_id":"p","private_key_id":"k1",
          "private_key":"PEM","client_email":"a@b"})");
  ASSERT_TRUE(k.ok()) << k.error().ToString();
  EXPECT_EQ(k->token_uri, kDefaultTokenUri);
  EXPECT_EQ(k->private_key_id, "k1");
  EXPECT_FALSE(ParseServiceAccountKey(R"({"type":"authorized_user"})").ok());
  EXPECT_FALSE(ParseServiceAccountKey(R"({"type":"service_account","client_email":"a"})").ok());
  EXPECT_FALSE(ParseServiceAccountKey("nope").ok());
}

TEST(RequestId, IsUuidV4AndUnique) {
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    auto id = internal::NewRequestId();
    ASSERT_EQ(id.size(), 36u);
    EXPECT_EQ(id[8], '-');
    EXPECT_EQ(id[14], '4');
    EXPECT_TRUE(id[19] == '8' || id[19] == '9' || id[19] == 'a' || id[19] == 'b') << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 200u);
}

TEST(GoogleErrors, ReasonAndCodeFromTheErrorBody) {
  struct Case {
    int status;
    const char* reason;
    Error::Code code;
  } cases[] = {
      {404, "notFound", Error::Code::kNotFound},
      {409, "alreadyExists", Error::Code::kAlreadyExists},
      {412, "conditionNotMet", Error::Code::kConflict},
      {429, "rateLimitExceeded", Error::Code::kTooManyRequests},
      {403, "rateLimitExceeded", Error::Code::kTooManyRequests},
      {403, "forbidden", Error::Code::kForbidden},
      {401, "authError", Error::Code::kUnauthorized},
      {400, "invalid", Error::Code::kInvalidArgument},
      {503, "backendError", Error::Code::kUnavailable},
      {500, "internalError", Error::Code::kUnavailable},
  };
  for (const auto& c : cases) {
    std::string body =
        R"({"error":{"code":)" + std::to_string(c.status) +
        R"(,"message":"The thing went wrong","errors":[{"message":"inner","domain":"global","reason":")" +
        c.reason + R"("}],"status":"X"}})";
    auto e = internal::ErrorFromResponse(c.status, body, "");
    EXPECT_EQ(e.code, c.code) << c.status << " " << c.reason;
    EXPECT_EQ(e.reason, c.reason);
    EXPECT_EQ(e.message, "The thing went wrong");
    EXPECT_EQ(e.http_status, c.status);
    EXPECT_EQ(e.Retryable(), c.status == 429 || c.status >= 500 ||
                                 std::string_view(c.reason) == "rateLimitExceeded");
  }
}

TEST(GoogleErrors, NonJsonBodiesAndRetryAfter) {
  auto e = internal::ErrorFromResponse(503, "<html>upstream connect error</html>", "7");
  EXPECT_EQ(e.code, Error::Code::kUnavailable);
  EXPECT_TRUE(e.reason.empty());
  EXPECT_NE(e.message.find("upstream"), std::string::npos);
  ASSERT_TRUE(e.retry_after.has_value());
  EXPECT_EQ(*e.retry_after, std::chrono::seconds(7));
  auto bad = internal::ErrorFromResponse(429, "", "soon");
  EXPECT_FALSE(bad.retry_after.has_value());
  EXPECT_EQ(bad.code, Error::Code::kTooManyRequests);
  // A status-only body (no errors[]) falls back to the canonical status as the reason.
  auto status_only =
      internal::ErrorFromResponse(404, R"({"error":{"code":404,"status":"NOT_FOUND"}})", "");
  EXPECT_EQ(status_only.reason, "NOT_FOUND");
  EXPECT_EQ(status_only.code, Error::Code::kNotFound);
}

TEST(Operations, DoneWithErrorCarriesTheFirstErrorCode) {
  auto json = boost::json::parse(R"({
    "kind":"compute#operation","name":"operation-1","status":"DONE",
    "selfLink":"https://compute.googleapis.com/compute/v1/projects/p/zones/us-central1-a/operations/operation-1",
    "targetLink":"https://compute.googleapis.com/compute/v1/projects/p/zones/us-central1-a/instanceGroupManagers/m",
    "httpErrorStatusCode":503,"httpErrorMessage":"SERVICE UNAVAILABLE",
    "error":{"errors":[{"code":"ZONE_RESOURCE_POOL_EXHAUSTED","message":"no tpu7x in us-central1-a"},
                       {"code":"OTHER","message":"x"}]}})");
  auto op = OperationFromJson(json.as_object());
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  EXPECT_TRUE(op->done());
  EXPECT_EQ(op->ref.project, "p");
  EXPECT_EQ(op->ref.scope, Scope::kZone);
  EXPECT_EQ(op->ref.location, "us-central1-a");
  EXPECT_EQ(op->ref.name, "operation-1");
  ASSERT_TRUE(op->error.has_value());
  EXPECT_EQ(op->error->reason, "ZONE_RESOURCE_POOL_EXHAUSTED");
  EXPECT_EQ(op->error->code, Error::Code::kUnavailable);
  EXPECT_EQ(op->error->http_status, 503);
  EXPECT_NE(op->error->message.find("no tpu7x in us-central1-a"), std::string::npos);

  auto running = OperationFromJson(
      boost::json::parse(R"({"name":"op-2","status":"RUNNING","region":"https://x/regions/r1"})")
          .as_object());
  ASSERT_TRUE(running.ok());
  EXPECT_FALSE(running->done());
  EXPECT_FALSE(running->error.has_value());
  EXPECT_EQ(running->ref.scope, Scope::kRegion);
  EXPECT_EQ(running->ref.location, "r1");
  EXPECT_FALSE(OperationFromJson(boost::json::object{{"items", 1}}).ok());
}

TEST(Operations, ParseOperationLinkScopes) {
  auto g = ParseOperationLink("http://127.0.0.1:5/compute/v1/projects/p1/global/operations/o1");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->scope, Scope::kGlobal);
  EXPECT_EQ(g->project, "p1");
  EXPECT_EQ(g->name, "o1");
  auto r = ParseOperationLink("projects/p2/regions/us-central1/operations/o2");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->scope, Scope::kRegion);
  EXPECT_EQ(r->location, "us-central1");
  EXPECT_FALSE(ParseOperationLink("projects/p/zones/z/instances/i").ok());
  EXPECT_FALSE(ParseOperationLink("").ok());
}

TEST(Backoff, FullJitterDoublesUpToTheCap) {
  RetryPolicy p;
  p.initial_backoff = std::chrono::milliseconds(1000);
  p.max_backoff = std::chrono::milliseconds(30000);
  // The ceiling (random → 1) doubles per retry until the cap.
  const int64_t want[] = {1000, 2000, 4000, 8000, 16000, 30000, 30000};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(BackoffDelay(p, i, 1.0).count(), want[i]) << i;
    EXPECT_EQ(BackoffDelay(p, i, 0.5).count(), want[i] / 2) << i;
    EXPECT_EQ(BackoffDelay(p, i, 0.0).count(), 0) << i;
  }
  EXPECT_EQ(BackoffDelay(p, 500, 1.0).count(), 30000);  // no overflow far out
}

TEST(ManagedInstances, StockoutErrorsFromLastAttemptAndListErrors) {
  auto mi = boost::json::parse(R"({"instance":"x","instanceStatus":"","currentAction":"CREATING",
      "lastAttempt":{"errors":{"errors":[{"code":"ZONE_RESOURCE_POOL_EXHAUSTED","message":"m"}]}}})");
  auto e = LastAttemptError(mi.as_object());
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->reason, "ZONE_RESOURCE_POOL_EXHAUSTED");
  EXPECT_EQ(e->code, Error::Code::kUnavailable);
  EXPECT_FALSE(LastAttemptError(boost::json::object{{"instance", "y"}}).has_value());
  auto item = boost::json::parse(R"({"error":{"code":"QUOTA_EXCEEDED","message":"q"}})");
  auto le = ManagedInstanceError(item.as_object());
  ASSERT_TRUE(le.has_value());
  EXPECT_EQ(le->reason, "QUOTA_EXCEEDED");
}

TEST(Bodies, HighThroughputWorkloadPolicyIsTheApisShape) {
  auto p = HighThroughputWorkloadPolicy("g-policy-abc", "2x2x2", "owned by ns/g");
  EXPECT_EQ(
      boost::json::serialize(p),
      R"({"name":"g-policy-abc","description":"owned by ns/g","workloadPolicy":{"type":"HIGH_THROUGHPUT","acceleratorTopology":"2x2x2"}})");
  auto items = MetadataItemsOf(
      boost::json::parse(
          R"({"fingerprint":"f","items":[{"key":"a","value":"1"},{"key":"b","value":""}]})")
          .as_object());
  EXPECT_EQ(items, (MetadataItems{{"a", "1"}, {"b", ""}}));
}

}  // namespace
}  // namespace hyperslice::gce
