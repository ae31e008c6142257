// The Vast client's decoders on Vast's documented shapes, without a server: instance statuses,
// offers, labels and error classification.
#include <gtest/gtest.h>

#include "src/gpu/providers/vast/decode.h"

namespace hyperslice::gpu::providers::vast {
namespace {

TEST(VastDecode, InstanceStates) {
  struct Case {
    const char *actual, *intended, *cur;
    bool bid;
    InstanceState want;
    bool reclaimed;
  };
  const Case cases[] = {
      {"", "running", "stopped", false, InstanceState::kPending, false},
      {"created", "running", "stopped", true, InstanceState::kPending, false},
      {"loading", "running", "running", false, InstanceState::kPending, false},
      {"scheduling", "running", "stopped", false, InstanceState::kPending, false},
      {"running", "running", "running", false, InstanceState::kRunning, false},
      {"running", "stopped", "running", false, InstanceState::kStopping, false},
      {"exited", "stopped", "stopped", false, InstanceState::kTerminated, false},
      {"exited", "running", "stopped", true, InstanceState::kTerminated, true},
      {"exited", "running", "running", false, InstanceState::kTerminated, false},
      {"offline", "running", "running", false, InstanceState::kUnknown, false},
  };
  for (const auto& c : cases) {
    bool reclaimed = true;
    EXPECT_EQ(StateFrom(c.actual, c.intended, c.cur, c.bid, &reclaimed), c.want)
        << c.actual << "/" << c.intended << "/" << c.cur;
    EXPECT_EQ(reclaimed, c.reclaimed) << c.actual << "/" << c.intended << "/" << c.cur;
  }
}

TEST(VastDecode, Labels) {
  std::map<std::string, std::string> tags = {{"tgp.io/cluster", "c 1"}, {"claim-uid", "a=b%"}};
  std::string label = EncodeLabel("gpu claim", tags);
  EXPECT_EQ(label, "gpu%20claim claim-uid=a%3Db%25 tgp.io/cluster=c%201");
  std::string name;
  std::map<std::string, std::string> got;
  DecodeLabel(label, &name, &got);
  EXPECT_EQ(name, "gpu claim");
  EXPECT_EQ(got, tags);
  DecodeLabel("My ML Training Job", &name, &got);  // someone else's label
  EXPECT_EQ(name, "My ML Training Job");
  EXPECT_TRUE(got.empty());
  DecodeLabel("", &name, &got);
  EXPECT_TRUE(name.empty() && got.empty());
}

TEST(VastDecode, ErrorsByStatusAndCode) {
  auto kind = [](Call call, int status, std::string body, net::Headers h = {}) {
    net::Response r;
    r.status = status;
    r.body = std::move(body);
    r.headers = std::move(h);
    return DecodeError(call, r);
  };
  EXPECT_EQ(KindOf(kind(Call::kUser, 401, R"({"error":"auth_error","msg":"Invalid user key"})")),
            ErrorKind::kUnauthorized);
  EXPECT_EQ(KindOf(kind(Call::kCreate, 403, R"({"success":false,"error":"invalid_args"})")),
            ErrorKind::kInvalid);
  EXPECT_EQ(KindOf(kind(Call::kCreate, 410, R"({"success":false,"error":"no_such_ask"})")),
            ErrorKind::kCapacity);
  EXPECT_EQ(KindOf(kind(Call::kCreate, 404, R"({"success":false,"error":"invalid_args"})")),
            ErrorKind::kCapacity);
  EXPECT_EQ(KindOf(kind(Call::kDelete, 404, R"({"error":"not_found"})")), ErrorKind::kNotFound);
  EXPECT_EQ(KindOf(kind(Call::kOffers, 404, R"({"error":"auth_error","msg":"Invalid user key"})")),
            ErrorKind::kUnauthorized);
  EXPECT_EQ(KindOf(kind(Call::kOffers, 400, R"({"error":"invalid_args","msg":"x"})")),
            ErrorKind::kInvalid);
  EXPECT_EQ(KindOf(kind(Call::kGet, 503, "<html>503</html>")), ErrorKind::kTransient);
  // 429: the threshold in the body is the wait when no Retry-After came (plain-text body too).
  auto e = kind(Call::kGet, 429, "API requests too frequent: endpoint threshold=2.5");
  EXPECT_EQ(KindOf(e), ErrorKind::kRateLimited);
  EXPECT_EQ(e.retry_after, std::chrono::milliseconds(2500));
  e = kind(Call::kGet, 429, R"({"detail":"API requests too frequent endpoint threshold=5.5"})",
           {{"retry-after", "1"}});
  EXPECT_EQ(e.retry_after, std::chrono::milliseconds(1000));
  EXPECT_NE(e.message.find("threshold=5.5"), std::string::npos);
}

TEST(VastDecode, OffersKeepUnknownNamesAndSkipOffersWithoutId) {
  auto offers = DecodeOffers(
      R"({"offers":[{"id":1,"gpu_name":"Quantum QX 9","gpu_ram":16384,"geolocation":"Atlantis, ZZ",)"
      R"("dph_total":0.5,"min_bid":0.2,"rentable":true,"rented":false},{"gpu_name":"RTX 4090"}]})");
  ASSERT_TRUE(offers.ok()) << offers.error().ToString();
  ASSERT_EQ(offers->size(), 1u);
  EXPECT_EQ((*offers)[0].gpu_type, "Quantum QX 9");
  EXPECT_FALSE((*offers)[0].gpu_type_known);
  EXPECT_EQ((*offers)[0].region, "Atlantis, ZZ");
  EXPECT_EQ((*offers)[0].spot_price, 200000);
  EXPECT_FALSE(DecodeOffers("[]").ok());
  EXPECT_FALSE(DecodeOffers("{\"offers\":{}}").ok());
}

}  // namespace
}  // namespace hyperslice::gpu::providers::vast
