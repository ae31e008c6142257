// The verifier's pieces that need no TPM: the event log, nonces, hostile quote bytes.
#include <gtest/gtest.h>

#include "src/runners/attest/attest.h"

namespace hyperslice::runners::attest {
namespace {

TEST(EventLogTest, RoundTripsThroughJson) {
  EventLog log{Measure(kAgentPcr, "agent/binary", "bin"), Measure(kWorkloadPcr, "w/spec", "{}")};
  auto back = EventLogFromJson(EventLogToJson(log));
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].name, "agent/binary");
  EXPECT_EQ((*back)[0].pcr, kAgentPcr);
  EXPECT_EQ((*back)[1].digest, Sha256("{}"));
  EXPECT_FALSE(EventLogFromJson(R"([{"pcr":24,"name":"x","digest":""}])").ok());
  EXPECT_FALSE(EventLogFromJson(R"([{"pcr":23,"name":"x","digest":"ABC"}])").ok());
  EXPECT_FALSE(EventLogFromJson("{}").ok());
}

TEST(EventLogTest, ImageDigestIsMeasuredAsItsOwnBytes) {
  std::string hex(64, 'e');
  auto m = MeasureImageDigest(kWorkloadPcr, "workload/a/image", "sha256:" + hex);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(Hex(m->digest), hex);
  EXPECT_FALSE(MeasureImageDigest(kWorkloadPcr, "w", "nginx:latest").ok());
}

TEST(NonceRegistryTest, EachNonceIsAcceptedOnceBeforeItExpires) {
  auto t = std::chrono::steady_clock::time_point{};
  NonceRegistry nonces(std::chrono::seconds(60), [&] { return t; });
  std::string a = nonces.Issue();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_TRUE(nonces.Consume(a).ok());
  EXPECT_EQ(nonces.Consume(a).error().reason, "NonceReplayed");
  EXPECT_EQ(nonces.Consume("never issued").error().reason, "NonceUnknown");
  std::string b = nonces.Issue();
  t += std::chrono::seconds(61);
  EXPECT_EQ(nonces.Consume(b).error().reason, "NonceExpired");
  t += std::chrono::seconds(120);
  EXPECT_EQ(nonces.Consume(a).error().reason, "NonceUnknown");  // swept, still refused
}

TEST(AppraiseQuoteTest, HostileQuoteBytesAreRefusedNotTrusted) {
  EnrolledAk ak;
  Evidence e;
  ReferenceValues ref;
  for (const std::string& attest :
       {std::string(), std::string("\xff\x54\x43\x47\x80\x18", 6), std::string(200, '\xff'),
        std::string("\xff\x54\x43\x47\x80\x17")}) {
    e.attest = attest;
    auto r = AppraiseQuote(ak, e, std::string(32, 'n'), "", ref);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Error::Code::kUnauthorized);
  }
}

}  // namespace
}  // namespace hyperslice::runners::attest
