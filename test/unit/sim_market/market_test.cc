#include "sim/market/market.h"

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "src/base/fake_clock.h"

namespace hyperslice::sim::market {
namespace {

using namespace std::chrono_literals;

Listing L(std::string id, MicroUsd price, int capacity, std::optional<MicroUsd> spot = {}) {
  Listing l;
  l.id = std::move(id);
  l.gpu_name = "RTX 4090";
  l.region = "us-west-1";
  l.price = price;
  l.spot_price = spot;
  l.capacity = capacity;
  return l;
}

struct Fixture {
  Fixture() {
    Options o;
    o.provider = "test";
    o.listings = {L("a", 690000, 2, 300000), L("b", 1000000, 1)};
    o.clock = &clock;
    o.manual_ticks = true;
    o.boot_delay = 1s;
    o.running_delay = 2s;
    o.terminate_delay = 1s;
    market = std::make_unique<Market>(o);
  }
  Market::CreateResult Create(const std::string& listing, bool spot = false,
                              std::optional<MicroUsd> bid = {}) {
    Market::CreateSpec s;
    s.listing_id = listing;
    s.name = "m";
    s.owner = "acct";
    s.spot = spot;
    s.bid = bid;
    return market->Create(s, [this] { return "i-" + std::to_string(++n); });
  }
  void Advance(Clock::Duration d) {
    clock.Advance(d);
    market->Tick();
  }
  FakeClock clock;
  std::unique_ptr<Market> market;
  int n = 0;
};

TEST(Market, LifecycleAndLedger) {
  Fixture f;
  auto r = f.Create("a");
  ASSERT_EQ(r.error, Market::CreateError::kNone);
  EXPECT_EQ(r.instance.state, State::kPending);
  f.Advance(1s);
  EXPECT_EQ(f.market->Get("i-1")->state, State::kBooting);
  f.Advance(2s);
  EXPECT_EQ(f.market->Get("i-1")->state, State::kRunning);
  f.Advance(3597s);  // one hour since the create was accepted
  ASSERT_TRUE(f.market->Terminate("i-1", "acct"));
  EXPECT_EQ(f.market->Get("i-1")->state, State::kStopping);
  f.Advance(1s);
  EXPECT_EQ(f.market->Get("i-1")->state, State::kTerminated);
  f.Advance(3600s);  // no longer billed
  auto ledger = f.market->Ledger();
  ASSERT_EQ(ledger.size(), 1u);
  EXPECT_DOUBLE_EQ(ledger[0].seconds, 3601);
  EXPECT_NEAR(f.market->TotalSpend(), 0.69 * 3601 / 3600, 1e-9);
}

TEST(Market, CapacityAndBids) {
  Fixture f;
  EXPECT_EQ(f.Create("b", true).error, Market::CreateError::kNotSold);  // no spot on b
  EXPECT_EQ(f.Create("b").error, Market::CreateError::kNone);
  EXPECT_EQ(f.Create("b").error, Market::CreateError::kCapacity);
  EXPECT_EQ(f.market->Available("b"), 0);
  EXPECT_EQ(f.Create("nope").error, Market::CreateError::kNoSuchListing);
  EXPECT_EQ(f.Create("a", true, 200000).error, Market::CreateError::kBidTooLow);
  auto spot = f.Create("a", true, 350000);
  ASSERT_EQ(spot.error, Market::CreateError::kNone);
  EXPECT_EQ(spot.instance.price, 350000);
  // A terminated machine frees its capacity.
  ASSERT_TRUE(f.market->Terminate("i-1", "acct"));
  f.Advance(1s);
  EXPECT_EQ(f.Create("b").error, Market::CreateError::kNone);
  // Another account cannot terminate our machine.
  EXPECT_FALSE(f.market->Terminate("i-2", "someone-else"));
}

TEST(Market, ReclaimOnlySpot) {
  Fixture f;
  f.Create("a");
  f.Create("a", true);
  f.Advance(3s);
  EXPECT_FALSE(f.market->Reclaim("i-1"));
  ASSERT_TRUE(f.market->Reclaim("i-2"));
  auto i = f.market->Get("i-2");
  EXPECT_TRUE(i->reclaimed);
  EXPECT_EQ(i->state, State::kStopping);
}

TEST(Market, FaultsCountAndRate) {
  Fixture f;
  f.market->SetFault("create", {Fault::Kind::kCapacity, 1.0, 2});
  EXPECT_EQ(f.market->Enter("create"), Fault::Kind::kCapacity);
  EXPECT_EQ(f.market->Enter("create"), Fault::Kind::kCapacity);
  EXPECT_EQ(f.market->Enter("create"), std::nullopt);  // count used up
  EXPECT_EQ(f.market->Enter("list"), std::nullopt);
  f.market->SetFault("*", {Fault::Kind::kServerError, 0.2, -1});
  int fired = 0;
  for (int i = 0; i < 1000; ++i) fired += f.market->Enter("list").has_value();
  EXPECT_GT(fired, 120);
  EXPECT_LT(fired, 280);
  EXPECT_EQ(f.market->Counters()["list"], 1001);
  f.market->ClearFaults();
  EXPECT_EQ(f.market->Enter("list"), std::nullopt);
}

TEST(Market, RateLimitPerAccount) {
  FakeClock clock;
  Options o;
  o.clock = &clock;
  o.manual_ticks = true;
  o.rate_limit_rps = 2;
  o.rate_limit_burst = 2;
  Market m(o);
  EXPECT_FALSE(m.Throttle("a"));
  EXPECT_FALSE(m.Throttle("a"));
  auto wait = m.Throttle("a");
  ASSERT_TRUE(wait);
  EXPECT_GE(*wait, 499ms);
  EXPECT_FALSE(m.Throttle("b"));  // another account has its own bucket
  clock.Advance(500ms);
  EXPECT_FALSE(m.Throttle("a"));
}

TEST(Market, ObserversSeeEveryChangeInOrder) {
  Fixture f;
  std::vector<std::string> seen;
  f.market->Subscribe([&](const Instance& i) { seen.push_back(i.id + ":" + StateName(i.state)); });
  f.Create("a");
  f.Advance(1s);
  f.Advance(2s);
  f.market->Terminate("i-1", "acct");
  f.Advance(1s);
  EXPECT_EQ(seen, (std::vector<std::string>{"i-1:pending", "i-1:booting", "i-1:running",
                                            "i-1:stopping", "i-1:terminated"}));
}

TEST(Market, ControlEndpoint) {
  Fixture f;
  auto r = HandleControl(*f.market, "POST", "/control/listings",
                         R"({"id":"c","gpuName":"H100 SXM","priceUsd":2.5,"capacity":3})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(f.market->FindListing("c")->price, 2500000);
  r = HandleControl(*f.market, "POST", "/control/faults", R"({"kind":"bogus"})");
  EXPECT_EQ(r->status, 400);
  r = HandleControl(*f.market, "POST", "/control/faults",
                    R"({"method":"create","kind":"swallow","count":1})");
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(f.market->Enter("create"), Fault::Kind::kSwallow);
  r = HandleControl(*f.market, "POST", "/control/api-keys", R"({"key":"k2","account":"b"})");
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(f.market->Authenticate("k2"), "b");
  EXPECT_EQ(f.market->Authenticate("nope"), std::nullopt);
  f.Create("a", true);
  f.Advance(3s);
  r = HandleControl(*f.market, "POST", "/control/reclaim", R"({"id":"i-1"})");
  EXPECT_EQ(r->status, 200);
  r = HandleControl(*f.market, "GET", "/control/ledger", "");
  auto ledger = boost::json::parse(r->body).as_object();
  EXPECT_EQ(ledger["entries"].as_array().size(), 1u);
  EXPECT_FALSE(HandleControl(*f.market, "GET", "/api/v1/instances", ""));
  r = HandleControl(*f.market, "DELETE", "/control/listings/c", "");
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(f.market->FindListing("c"));
}

}  // namespace
}  // namespace hyperslice::sim::market
