// The Paperspace client (src/gpu/providers/paperspace) against the Paperspace simulator
// (sim/paperspace) over real loopback HTTP, and the simulator's validation with raw requests.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <boost/json.hpp>

#include "sim/paperspace/simulator.h"
#include "src/base/fake_clock.h"
#include "src/gpu/providers.h"
#include "src/net/http.h"

namespace hyperslice::gpu {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;

class PaperspaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sim::market::ServerOptions o;
    o.market.boot_delay = 50ms;
    o.market.running_delay = 50ms;
    o.market.terminate_delay = 50ms;
    o.market.tick = 10ms;
    auto s = sim::paperspace::Start(o);
    ASSERT_TRUE(s.ok()) << s.error().message;
    sim_ = std::move(*s);
  }
  void TearDown() override {
    if (sim_) sim_->Stop();
  }

  ProviderConfig Config(std::string key = "sim-key") {
    ProviderConfig c;
    c.name = kPaperspace;
    c.endpoint = sim_->api_endpoint();
    c.credentials = StaticCredential(std::move(key));
    c.requests_per_second = 1000;
    c.burst = 1000;
    c.retry.initial_backoff = 10ms;
    c.retry.max_backoff = 50ms;
    c.seed = 7;
    return c;
  }
  std::unique_ptr<Provider> Client(const ProviderConfig& c) {
    auto p = NewProvider(c);
    EXPECT_TRUE(p.ok()) << p.error().message;
    return p.ok() ? std::move(*p) : nullptr;
  }

  // A raw request to the simulator's API or control endpoint.
  net::Response Raw(const std::string& base, const std::string& method, const std::string& target,
                    const std::string& body = "", const std::string& key = "sim-key") {
    net::HttpClient::Options o;
    o.base_url = base;
    auto http = net::HttpClient::Create(o);
    EXPECT_TRUE(http.ok());
    net::Request r;
    r.method = method;
    r.target = target;
    r.body = body;
    if (!key.empty()) r.headers.emplace_back("Authorization", "Bearer " + key);
    if (!body.empty()) r.headers.emplace_back("Content-Type", "application/json");
    auto res = (*http)->Do(r);
    EXPECT_TRUE(res.ok()) << res.error().message;
    return res.ok() ? *res : net::Response{};
  }
  void Fault(const std::string& method, const std::string& kind, int count = 1) {
    json::object f{{"method", method}, {"kind", kind}, {"count", count}};
    auto r = Raw(sim_->control_endpoint(), "POST", "/control/faults", json::serialize(f), "");
    ASSERT_EQ(r.status, 200) << r.body;
  }
  int64_t Counter(const std::string& method) {
    auto c = sim_->market().Counters();
    return c.count(method) ? c[method] : 0;
  }

  static const Offer* Find(const std::vector<Offer>& offers, const std::string& id,
                           const std::string& region) {
    for (const auto& o : offers) {
      if (o.id == id && o.provider_region == region) return &o;
    }
    return nullptr;
  }

  // Polls Get() until `pred` holds (a positive wait on the machine's state) or 10 s pass.
  template <typename Pred>
  Result<Instance> WaitFor(Provider& p, const std::string& id, Pred pred) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (true) {
      auto i = p.Get(id);
      if (pred(i) || std::chrono::steady_clock::now() > deadline) return i;
      std::this_thread::sleep_for(20ms);
    }
  }

  std::unique_ptr<sim::market::MarketSimulator> sim_;
};

TEST_F(PaperspaceTest, OffersComeFromThePriceTableNormalised) {
  auto p = Client(Config());
  auto caps = p->capabilities();
  EXPECT_FALSE(caps.spot);
  EXPECT_FALSE(caps.price_api);
  EXPECT_FALSE(caps.tags);
  EXPECT_EQ(caps.max_user_data_bytes, 64u * 1024);
  ASSERT_TRUE(p->CheckCredentials().ok());
  auto offers = p->ListOffers();
  ASSERT_TRUE(offers.ok()) << offers.error().message;
  // One offer per machine type and region of the table; the simulator sells the same ones.
  EXPECT_EQ(offers->size(), sim::paperspace::DefaultListings().size());
  for (const auto& o : *offers) {
    EXPECT_EQ(o.provider, kPaperspace);
    EXPECT_TRUE(o.gpu_type_known) << o.id;
    EXPECT_TRUE(o.region_known) << o.provider_region;
    EXPECT_EQ(o.boot, BootKind::kStartupScript);
    EXPECT_EQ(o.available, -1);
    EXPECT_FALSE(o.spot_price.has_value());
    EXPECT_TRUE(sim_->market().FindListing(o.id + "@" + o.provider_region).has_value()) << o.id;
  }
  const Offer* a100 = Find(*offers, "A100-80G", "ny2");
  ASSERT_NE(a100, nullptr);
  EXPECT_EQ(a100->gpu_type, "A100-80GB");
  EXPECT_EQ(a100->provider_gpu_name, "A100-80G");
  EXPECT_EQ(a100->region, "us-east");
  EXPECT_EQ(a100->on_demand_price, 3180000);
  EXPECT_EQ(a100->gpu_memory_gib, 80);
  const Offer* ams = Find(*offers, "A100-80G", "ams1");
  ASSERT_NE(ams, nullptr);
  EXPECT_EQ(ams->region, "eu-west");
  const Offer* h8 = Find(*offers, "H100x8", "ny2");
  ASSERT_NE(h8, nullptr);
  EXPECT_EQ(h8->gpu_type, "H100-PCIe");
  EXPECT_EQ(h8->gpu_count, 8);
  EXPECT_EQ(Find(*offers, "A4000", "ca1")->region, "us-west");
}

TEST_F(PaperspaceTest, UserPriceTableOverridesAnEntry) {
  auto c = Config();
  c.price_table_yaml = R"(version: "acme-2"
machineTypes:
  A4000:
    gpu: A4000
    gpuCount: 1
    gpuMemoryGiB: 16
    vcpus: 8
    memoryGiB: 45
    priceUsd: "0.99"
    regions: [ny2]
)";
  auto p = Client(c);
  auto offers = p->ListOffers();
  ASSERT_TRUE(offers.ok());
  ASSERT_NE(Find(*offers, "A4000", "ny2"), nullptr);
  EXPECT_EQ(Find(*offers, "A4000", "ny2")->on_demand_price, 990000);
  EXPECT_EQ(Find(*offers, "A4000", "ca1"), nullptr);  // the user's entry replaced its regions
  EXPECT_NE(Find(*offers, "A4000", "ny2")->attributes.at("priceTableVersion").find("+acme-2"),
            std::string::npos);
  EXPECT_EQ(Find(*offers, "A6000", "ny2")->on_demand_price, 1890000);

  c.price_table_yaml = "version: x\nmachineTypes:\n  A4000: {gpu: A4000}\n";
  auto bad = NewProvider(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("machineTypes.A4000"), std::string::npos);
}

TEST_F(PaperspaceTest, CreateWithStartupScriptRunsThenDeletes) {
  auto p = Client(Config());
  auto offers = p->ListOffers();
  ASSERT_TRUE(offers.ok());
  const Offer* offer = Find(*offers, "A4000", "ny2");
  ASSERT_NE(offer, nullptr);
  LaunchRequest req;
  req.offer = offer;
  req.name = "gpu-claim-7f3a";
  req.claim_uid = "7f3a-uid";
  req.tags = {{"tgp.io/cluster", "c1"}, {"pool", "a,b=c%"}};
  req.payload.startup_script = "#!/bin/bash\necho joining\n";
  auto inst = p->Create(req);
  ASSERT_TRUE(inst.ok()) << inst.error().message;
  EXPECT_EQ(inst->provider, kPaperspace);
  EXPECT_EQ(inst->name, "gpu-claim-7f3a");
  EXPECT_EQ(inst->offer_id, "A4000");
  EXPECT_EQ(inst->region, "us-east");
  EXPECT_EQ(inst->gpu_type, "A4000");
  EXPECT_EQ(inst->state, InstanceState::kPending);
  EXPECT_EQ(inst->provider_state, "provisioning");
  EXPECT_EQ(inst->ProviderId(), "paperspace://" + inst->id);
  EXPECT_EQ(inst->tags.at("claim-uid"), "7f3a-uid");

  // The simulated machine keeps the script it boots from.
  auto m = sim_->market().Get(inst->id);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->payload.at("startup_script").as_string(), "#!/bin/bash\necho joining\n");
  EXPECT_EQ(m->payload.at("image").as_string(), "t0nspur5");

  auto ready = WaitFor(*p, inst->id, [](const Result<Instance>& i) {
    return i.ok() && i->state == InstanceState::kRunning;
  });
  ASSERT_TRUE(ready.ok()) << ready.error().message;
  EXPECT_EQ(ready->state, InstanceState::kRunning);
  EXPECT_EQ(ready->provider_state, "ready");
  EXPECT_EQ(ready->public_ip.rfind("192.0.2.", 0), 0u) << ready->public_ip;
  ASSERT_TRUE(ready->price.has_value());
  EXPECT_EQ(*ready->price, 760000);  // the simulator's usageRate

  // Listed by tag, tags read back from the startup script's name.
  auto mine = p->List({{"tgp.io/cluster", "c1"}});
  ASSERT_TRUE(mine.ok()) << mine.error().message;
  ASSERT_EQ(mine->size(), 1u);
  EXPECT_EQ((*mine)[0].id, inst->id);
  EXPECT_EQ((*mine)[0].tags.at("pool"), "a,b=c%");
  auto other = p->List({{"tgp.io/cluster", "c2"}});
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->empty());

  ASSERT_TRUE(p->Delete(inst->id).ok());
  auto gone = WaitFor(*p, inst->id, [](const Result<Instance>& i) {
    return !i.ok() && KindOf(i.error()) == ErrorKind::kNotFound;
  });
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(KindOf(gone.error()), ErrorKind::kNotFound);
  EXPECT_TRUE(p->Delete(inst->id).ok());  // already gone is success
  // The machine's startup script went with it.
  auto scripts = Raw(sim_->api_endpoint(), "GET", "/v1/startup-scripts");
  ASSERT_EQ(scripts.status, 200);
  EXPECT_TRUE(json::parse(scripts.body).at("items").as_array().empty()) << scripts.body;
}

TEST_F(PaperspaceTest, TypedErrors) {
  auto bad = Client(Config("not-a-key"));
  auto s = bad->CheckCredentials();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(KindOf(s.error()), ErrorKind::kUnauthorized);
  EXPECT_EQ(s.error().http_status, 401);
  EXPECT_EQ(s.error().message.find("not-a-key"), std::string::npos);

  auto p = Client(Config());
  auto missing = p->Get("psnothere");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(KindOf(missing.error()), ErrorKind::kNotFound);

  // A machine type Paperspace does not sell: refused as invalid, its message kept.
  Offer ghost;
  ghost.provider = kPaperspace;
  ghost.id = "Z9000";
  ghost.provider_region = "ny2";
  ghost.disk_gib = 50;
  LaunchRequest req;
  req.offer = &ghost;
  req.name = "gpu-claim-ghost";
  auto inv = p->Create(req);
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(KindOf(inv.error()), ErrorKind::kInvalid);
  EXPECT_EQ(inv.error().http_status, 400);
  EXPECT_NE(inv.error().message.find("Invalid machine type: Z9000"), std::string::npos)
      << inv.error().message;

  // Refused before any call: a script over the limit, and spot.
  auto offers = p->ListOffers();
  req.offer = Find(*offers, "A4000", "ny2");
  req.payload.startup_script.assign(64 * 1024 + 1, 'x');
  auto big = p->Create(req);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(KindOf(big.error()), ErrorKind::kInvalid);
  req.payload.startup_script.clear();
  req.spot = true;
  EXPECT_EQ(KindOf(p->Create(req).error()), ErrorKind::kInvalid);
  EXPECT_EQ(Counter("POST /v1/machines"), 1);  // only the ghost reached the API
}

TEST_F(PaperspaceTest, RateLimitedCallWaitsAsTold) {
  auto p = Client(Config());
  Fault("GET /v1/machines/{id}", "rate_limited");
  auto t0 = std::chrono::steady_clock::now();
  auto r = p->Get("psnothere");
  auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KindOf(r.error()), ErrorKind::kNotFound);  // the retry got the real answer
  EXPECT_GE(elapsed, 1000ms);                          // Retry-After: 1
  EXPECT_EQ(Counter("GET /v1/machines/{id}"), 2);
}

TEST_F(PaperspaceTest, CapacityRefusalMarksTheOfferUnavailableForAWhile) {
  FakeClock clock;
  auto c = Config();
  c.clock = &clock;
  auto p = Client(c);
  // No A4000 left in ny2: the real capacity answer, not an injected fault.
  auto l = sim_->market().FindListing("A4000@ny2");
  ASSERT_TRUE(l.has_value());
  l->capacity = 0;
  sim_->market().SetListing(*l);

  auto offers = p->ListOffers();
  ASSERT_TRUE(offers.ok());
  LaunchRequest req;
  req.offer = Find(*offers, "A4000", "ny2");
  req.name = "gpu-claim-cap";
  req.claim_uid = "cap-uid";
  auto r = p->Create(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KindOf(r.error()), ErrorKind::kCapacity);
  EXPECT_NE(r.error().message.find("out of capacity"), std::string::npos);

  auto available = [&](const std::string& type, const std::string& region) {
    auto o = p->ListOffers();
    EXPECT_TRUE(o.ok());
    return Find(*o, type, region)->available;
  };
  EXPECT_EQ(available("A4000", "ny2"), 0);
  EXPECT_EQ(available("A4000", "ca1"), -1);  // other regions and types are not affected
  EXPECT_EQ(available("A5000", "ny2"), -1);
  clock.Advance(9min);
  EXPECT_EQ(available("A4000", "ny2"), 0);
  clock.Advance(61s);
  EXPECT_EQ(available("A4000", "ny2"), -1);  // the 10-minute window passed

  // An injected capacity fault is the same answer; the orphaned scripts were removed.
  Fault("POST /v1/machines", "capacity");
  auto offers_now = p->ListOffers();  // kept: the request points into it
  ASSERT_TRUE(offers_now.ok());
  req.offer = Find(*offers_now, "A5000", "ams1");
  ASSERT_NE(req.offer, nullptr);
  auto r2 = p->Create(req);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(KindOf(r2.error()), ErrorKind::kCapacity);
  EXPECT_EQ(available("A5000", "ams1"), 0);
  auto scripts = Raw(sim_->api_endpoint(), "GET", "/v1/startup-scripts");
  EXPECT_TRUE(json::parse(scripts.body).at("items").as_array().empty()) << scripts.body;
}

TEST_F(PaperspaceTest, AmbiguousCreateIsFoundByTag) {
  auto p = Client(Config());
  Fault("POST /v1/machines", "swallow");
  auto offers = p->ListOffers();
  LaunchRequest req;
  req.offer = Find(*offers, "RTX4000", "ca1");
  req.name = "gpu-claim-amb";
  req.claim_uid = "amb-uid";
  req.tags = {{"tgp.io/cluster", "c1"}};
  auto r = p->Create(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KindOf(r.error()), ErrorKind::kAmbiguous);
  EXPECT_EQ(Counter("POST /v1/machines"), 1);  // never re-sent
  auto found = p->List({{"claim-uid", "amb-uid"}});
  ASSERT_TRUE(found.ok()) << found.error().message;
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].name, "gpu-claim-amb");
  EXPECT_EQ((*found)[0].offer_id, "RTX4000");
  EXPECT_EQ((*found)[0].region, "us-west");
  ASSERT_TRUE(p->Delete((*found)[0].id).ok());
}

TEST_F(PaperspaceTest, SimulatorValidatesBodiesAsPaperspaceDoes) {
  const std::string api = sim_->api_endpoint();
  auto script = Raw(api, "POST", "/v1/startup-scripts", R"({"name":"s","script":"echo"})");
  ASSERT_EQ(script.status, 200) << script.body;
  std::string sid(json::parse(script.body).at("id").as_string());
  json::object good{
      {"name", "m1"},    {"machineType", "A4000"}, {"templateId", "t0nspur5"}, {"diskSize", 50},
      {"region", "ny2"}, {"startupScriptId", sid}, {"publicIpType", "dynamic"}};

  auto issues = [](const net::Response& r) {
    auto v = json::parse(r.body).as_object();
    EXPECT_EQ(v.at("code").as_string(), "BAD_REQUEST");
    EXPECT_EQ(v.at("message").as_string(), "Input validation failed");
    return v.at("issues").as_array();
  };

  json::object unknown = good;
  unknown["gpuCount"] = 2;
  auto r1 = Raw(api, "POST", "/v1/machines", json::serialize(unknown));
  ASSERT_EQ(r1.status, 400) << r1.body;
  auto i1 = issues(r1);
  ASSERT_EQ(i1.size(), 1u);
  EXPECT_EQ(i1[0].at("code").as_string(), "unrecognized_keys");
  EXPECT_EQ(i1[0].at("message").as_string(), "Unrecognized key(s) in object: 'gpuCount'");

  json::object wrong = good;
  wrong["diskSize"] = "50";
  wrong["startOnCreate"] = "yes";
  auto r2 = Raw(api, "POST", "/v1/machines", json::serialize(wrong));
  ASSERT_EQ(r2.status, 400) << r2.body;
  auto i2 = issues(r2);
  ASSERT_EQ(i2.size(), 2u);
  EXPECT_EQ(i2[0].at("path").as_array()[0].as_string(), "diskSize");
  EXPECT_EQ(i2[0].at("message").as_string(), "Expected number, received string");
  EXPECT_EQ(i2[1].at("message").as_string(), "Expected boolean, received string");

  json::object missing = good;
  missing.erase("templateId");
  missing["region"] = "mars1";
  auto r3 = Raw(api, "POST", "/v1/machines", json::serialize(missing));
  ASSERT_EQ(r3.status, 400) << r3.body;
  auto i3 = issues(r3);
  ASSERT_EQ(i3.size(), 2u);
  EXPECT_EQ(i3[0].at("message").as_string(), "Required");
  EXPECT_EQ(i3[1].at("code").as_string(), "invalid_enum_value");

  auto r4 = Raw(api, "POST", "/v1/startup-scripts", R"({"name":"s","script":7})");
  ASSERT_EQ(r4.status, 400);
  EXPECT_EQ(issues(r4)[0].at("path").as_array()[0].as_string(), "script");

  auto r5 = Raw(api, "POST", "/v1/machines", "{not json");
  ASSERT_EQ(r5.status, 400);
  EXPECT_EQ(json::parse(r5.body).at("code").as_string(), "PARSE_ERROR");

  auto r6 = Raw(api, "GET", "/v1/machines", "", "wrong-key");
  ASSERT_EQ(r6.status, 401);
  EXPECT_EQ(json::parse(r6.body).at("code").as_string(), "UNAUTHORIZED");

  // The well-formed body (long region name accepted) makes a machine holding the script.
  good["region"] = "East Coast (NY2)";
  auto ok = Raw(api, "POST", "/v1/machines", json::serialize(good));
  ASSERT_EQ(ok.status, 200) << ok.body;
  auto created = json::parse(ok.body).as_object();
  EXPECT_EQ(created.at("data").at("state").as_string(), "provisioning");
  EXPECT_EQ(created.at("data").at("region").as_string(), "ny2");
  std::string mid(created.at("data").at("id").as_string());
  EXPECT_EQ(sim_->market().Get(mid)->payload.at("startup_script").as_string(), "echo");
  auto listed = Raw(api, "GET", "/v1/startup-scripts/" + sid);
  EXPECT_EQ(json::parse(listed.body).at("assignedMachineIds").as_array()[0].as_string(), mid);
  auto page = Raw(api, "GET", "/v1/machines?limit=500");
  EXPECT_EQ(page.status, 400);
}

}  // namespace
}  // namespace hyperslice::gpu
