// headscale v0.29.3's /api/v1 wire format (src/gpu/internal/headscale_wire.h). The answers below
// were recorded from headscale v0.29.3 built by scripts/build-mesh.sh (keys replaced); the real
// server is exercised end to end by test/integration/gpu_mesh.
#include "src/gpu/internal/headscale_wire.h"

#include <boost/json.hpp>

#include <gtest/gtest.h>

#include "test/unit/gpu/wire_answer.h"

namespace hyperslice::gpu::internal::headscale {
namespace {

namespace json = boost::json;

using wire_test::Answer;

TEST(HeadscaleWire, CreatePreAuthKeyRequestUsesProtoJsonNames) {
  AuthKeyRequest req;
  req.tags = {"tag:gpu", "tag:rented"};
  req.ephemeral = true;
  req.reusable = false;
  auto at = std::chrono::system_clock::from_time_t(1893456000);  // 2030-01-01T00:00:00Z
  json::value tagged = json::parse(EncodeCreatePreAuthKey(req, "", at));
  EXPECT_EQ(tagged, json::parse(R"({"reusable":false,"ephemeral":true,
      "expiration":"2030-01-01T00:00:00Z","aclTags":["tag:gpu","tag:rented"]})"));
  // A user id is a uint64, which protojson reads from a string.
  req.tags.clear();
  json::value owned = json::parse(EncodeCreatePreAuthKey(req, "7", at));
  EXPECT_EQ(owned.at("user"), json::value("7"));
  EXPECT_EQ(owned.at("aclTags"), json::array());
}

TEST(HeadscaleWire, CreatePreAuthKeyResponse) {
  auto key = DecodeCreatePreAuthKey(
      R"({"preAuthKey":{"user":null,"id":"1","key":"hskey-auth-XXXX","reusable":false,)"
      R"("ephemeral":true,"used":false,"expiration":"2030-01-01T00:00:00Z",)"
      R"("createdAt":"2026-11-26T07:39:24.469403250Z","aclTags":["tag:gpu"]}})");
  ASSERT_TRUE(key.ok()) << key.error().message;
  EXPECT_EQ(key->id, "1");
  EXPECT_EQ(key->key, "hskey-auth-XXXX");
  EXPECT_EQ(key->expires, std::chrono::system_clock::from_time_t(1893456000));

  for (const char* bad : {R"({"preAuthKey":{"id":"1"}})", R"({"preAuthKey":{"key":"k"}})", R"({})",
                          "not json", R"({"preAuthKey":{"id":"0","key":"k"}})"}) {
    auto r = DecodeCreatePreAuthKey(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(KindOf(r.error()), ErrorKind::kInternal);
  }
}

TEST(HeadscaleWire, Nodes) {
  auto none = DecodeNodes(R"({"nodes":[]})");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto nodes = DecodeNodes(
      R"({"nodes":[{"id":"3","machineKey":"mkey:aa","nodeKey":"nodekey:bb","discoKey":"discokey:cc",)"
      R"("ipAddresses":["100.64.0.3","fd7a:115c:a1e0::3"],"name":"gpu-a","user":null,)"
      R"("lastSeen":"2026-11-26T07:40:00Z","expiry":null,"preAuthKey":null,)"
      R"("createdAt":"2026-11-26T07:39:59Z","registerMethod":"REGISTER_METHOD_AUTH_KEY",)"
      R"("givenName":"gpu-a","online":true,"approvedRoutes":[],"availableRoutes":[],)"
      R"("subnetRoutes":[],"tags":["tag:gpu"]}]})");
  ASSERT_TRUE(nodes.ok()) << nodes.error().message;
  ASSERT_EQ(nodes->size(), 1u);
  const Device& d = nodes->front();
  EXPECT_EQ(d.id, "3");
  EXPECT_EQ(d.name, "gpu-a");
  EXPECT_EQ(d.hostname, "gpu-a");
  EXPECT_EQ(d.addresses, (std::vector<std::string>{"100.64.0.3", "fd7a:115c:a1e0::3"}));
  EXPECT_EQ(d.tags, std::vector<std::string>{"tag:gpu"});
  EXPECT_TRUE(d.online);
  EXPECT_FALSE(DecodeNodes(R"({"nodes":[{"name":"no id"}]})").ok());
  EXPECT_FALSE(DecodeNodes(R"({"nodes":{}})").ok());
}

TEST(HeadscaleWire, Users) {
  const char* body = R"({"users":[{"id":"1","name":"ops"},{"id":"4","name":"gpu-machines"}]})";
  EXPECT_EQ(*DecodeUserId(body, "gpu-machines"), "4");
  EXPECT_EQ(*DecodeUserId(body, "nobody"), "");
  EXPECT_EQ(*DecodeUserId(R"({"users":[]})", "ops"), "");
}

TEST(HeadscaleWire, Errors) {
  // Recorded: a bad tag, a user id that does not exist, a node that does not exist, a bad API key.
  auto bad_tag = DecodeError(
      Answer(400, R"({"code":3,"message":"tag must start with the string 'tag:'","details":[]})"));
  EXPECT_EQ(KindOf(bad_tag), ErrorKind::kInvalid);
  EXPECT_NE(bad_tag.message.find("tag must start"), std::string::npos);
  EXPECT_EQ(bad_tag.http_status, 400);
  // codes.Unknown (a handler's plain error) is a definite answer, not an outage: not retried.
  EXPECT_EQ(
      KindOf(DecodeError(Answer(500, R"({"code":2,"message":"user not found","details":[]})"))),
      ErrorKind::kInternal);
  EXPECT_EQ(
      KindOf(DecodeError(Answer(404, R"({"code":5,"message":"node not found","details":[]})"))),
      ErrorKind::kNotFound);
  EXPECT_EQ(KindOf(DecodeError(Answer(401, "Unauthorized"))), ErrorKind::kUnauthorized);
  EXPECT_EQ(KindOf(DecodeError(Answer(503, R"({"code":14,"message":"unavailable","details":[]})"))),
            ErrorKind::kTransient);
  // No gRPC body (a proxy in front): by HTTP status.
  EXPECT_EQ(KindOf(DecodeError(Answer(502, "<html>bad gateway</html>"))), ErrorKind::kTransient);
  EXPECT_EQ(KindOf(DecodeError(Answer(429, ""))), ErrorKind::kRateLimited);
}

// The key's expiration is RFC 3339 as protojson writes it (kube::ParseTime reads it): nanosecond
// fractions (kept to the microsecond) and numeric offsets read; a time without a zone does not.
TEST(HeadscaleWire, KeyExpirationForms) {
  auto epoch = std::chrono::system_clock::from_time_t(1893456000);
  auto expires = [](std::string_view expiration) {
    return DecodeCreatePreAuthKey(R"({"preAuthKey":{"id":"1","key":"k","expiration":")" +
                                  std::string(expiration) + R"("}})");
  };
  auto fraction = expires("2030-01-01T00:00:00.123456789Z");
  ASSERT_TRUE(fraction.ok()) << fraction.error().message;
  EXPECT_EQ(fraction->expires, epoch + std::chrono::microseconds(123456));
  auto offset = expires("2030-01-01T01:30:00+01:30");
  ASSERT_TRUE(offset.ok()) << offset.error().message;
  EXPECT_EQ(offset->expires, epoch);
  for (const char* bad : {"2030-01-01", "2030-01-01T00:00:00", ""}) {
    EXPECT_FALSE(expires(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace hyperslice::gpu::internal::headscale
