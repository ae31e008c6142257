// The Lambda Cloud client against the Lambda simulator over real loopback HTTP.
#include <chrono>
#include <thread>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "sim/lambda/simulator.h"
#include "src/base/base64.h"
#include "src/gpu/providers.h"
#include "src/gpu/providers/lambda/decode.h"
#include "src/kube/metrics.h"
#include "src/net/http.h"

namespace hyperslice::gpu {
namespace {

namespace json = boost::json;
using Ms = std::chrono::milliseconds;

constexpr char kLaunch[] = "POST /api/v1/instance-operations/launch";
constexpr char kListTypes[] = "GET /api/v1/instance-types";

std::shared_ptr<net::HttpClient> Http(const std::string& url) {
  net::HttpClient::Options o;
  o.base_url = url;
  return net::HttpClient::Create(o).value();
}

class LambdaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sim::market::ServerOptions o;
    o.market.boot_delay = Ms(40);
    o.market.running_delay = Ms(40);
    o.market.terminate_delay = Ms(40);
    o.market.tick = Ms(5);
    sim_ = sim::lambda::Start(o).value();
    api_ = Http(sim_->api_endpoint());
    control_ = Http(sim_->control_endpoint());
  }

  // A client with the rate limit lifted (the documented 1/s and 1/12 s have their own test).
  std::unique_ptr<Provider> Client(const std::string& key = "sim-key", bool fast = true) {
    ProviderConfig c;
    c.name = kLambda;
    c.endpoint = sim_->api_endpoint();
    c.credentials = StaticCredential(key);
    c.metrics = &registry_;
    c.seed = 3;
    c.retry.initial_backoff = Ms(5);
    c.retry.max_backoff = Ms(20);
    if (fast) {
      c.requests_per_second = 1000;
      c.burst = 100;
    }
    return NewProvider(c).value();
  }

  Offer FindOffer(Provider& p, const std::string& type, const std::string& region) {
    auto offers = p.ListOffers();
    EXPECT_TRUE(offers.ok()) << offers.error().ToString();
    if (offers.ok()) {
      for (const auto& o : *offers) {
        if (o.id == type && o.provider_region == region) return o;
      }
    }
    ADD_FAILURE() << "no offer " << type << " in " << region;
    return {};
  }

  static LaunchRequest Launch(const Offer& offer, const std::string& uid) {
    LaunchRequest r;
    r.offer = &offer;
    r.name = "tgp-" + uid;
    r.claim_uid = uid;
    r.tags = {{"tgp.io/claim-uid", uid}, {"tgp.io/cluster", "test-cluster"}};
    r.payload.user_data = "#cloud-config\nruncmd:\n  - echo " + uid + "\n";
    r.payload.ssh_key_names = {"sim-ssh-key"};
    return r;
  }

  int64_t Counter(const std::string& method) {
    auto counters = sim_->market().Counters();
    auto it = counters.find(method);
    return it == counters.end() ? 0 : it->second;
  }

  void Control(const std::string& path, const json::object& body) {
    net::Request r;
    r.method = "POST";
    r.target = path;
    r.body = json::serialize(body);
    auto res = control_->Do(r);
    ASSERT_TRUE(res.ok()) << res.error().ToString();
    ASSERT_EQ(res->status, 200) << res->body;
  }

  // A raw API request, as any HTTP client would send it.
  net::Response Raw(const std::string& method, const std::string& target, const std::string& body,
                    const std::string& authorization = "Bearer sim-key") {
    net::Request r;
    r.method = method;
    r.target = target;
    r.body = body;
    if (!authorization.empty()) r.headers.emplace_back("Authorization", authorization);
    if (!body.empty()) r.headers.emplace_back("Content-Type", "application/json");
    auto res = api_->Do(r);
    EXPECT_TRUE(res.ok()) << res.error().ToString();
    return res.ok() ? *res : net::Response{};
  }

  // The member `key` of Lambda's {"error":{...}} body, "" when there is none.
  static std::string ErrorField(const net::Response& r, std::string_view key) {
    boost::system::error_code ec;
    auto v = json::parse(r.body, ec);
    if (ec || !v.is_object()) return "";
    const auto* e = v.get_object().if_contains("error");
    const auto* f = e && e->is_object() ? e->get_object().if_contains(key) : nullptr;
    return f && f->is_string() ? std::string(f->get_string()) : "";
  }

  // Polls the provider until `id` is in `state` (a positive condition; fails after 10 s).
  Instance WaitFor(Provider& p, const std::string& id, InstanceState state) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    Instance last;
    while (std::chrono::steady_clock::now() < deadline) {
      auto got = p.Get(id);
      EXPECT_TRUE(got.ok()) << got.error().ToString();
      if (!got.ok()) return last;
      last = *got;
      if (last.state == state) return last;
      std::this_thread::sleep_for(Ms(10));
    }
    ADD_FAILURE() << id << " never reached " << StateName(state) << "; last "
                  << last.provider_state;
    return last;
  }

  kube::metrics::Registry registry_;
  std::unique_ptr<sim::market::MarketSimulator> sim_;
  std::shared_ptr<net::HttpClient> api_, control_;
};

TEST_F(LambdaTest, OffersAreListedAndNormalised) {
  auto client = Client();
  EXPECT_EQ(std::string(client->name()), "lambdalabs");
  EXPECT_FALSE(client->capabilities().spot);
  EXPECT_EQ(client->capabilities().max_user_data_bytes, 1'000'000u);
  auto offers = client->ListOffers();
  ASSERT_TRUE(offers.ok()) << offers.error().ToString();

  // One offer per (instance type, region with capacity); sold-out types are left out.
  int with_capacity = 0;
  for (const auto& l : sim::lambda::DefaultListings()) with_capacity += l.capacity > 0 ? 1 : 0;
  EXPECT_EQ(static_cast<int>(offers->size()), with_capacity);
  for (const auto& o : *offers) {
    EXPECT_EQ(o.provider, kLambda);
    EXPECT_TRUE(o.gpu_type_known) << o.provider_gpu_name;
    EXPECT_TRUE(o.region_known) << o.provider_region;
    EXPECT_NE(o.id, "gpu_8x_v100");
    EXPECT_EQ(o.boot, BootKind::kUserData);
    EXPECT_FALSE(o.spot_price);
  }

  Offer a100 = FindOffer(*client, "gpu_1x_a100_sxm4", "us-west-1");
  EXPECT_EQ(a100.region, "us-west");
  EXPECT_EQ(a100.gpu_type, "A100-40GB");
  EXPECT_EQ(a100.provider_gpu_name, "A100 (40 GB SXM4)");
  EXPECT_EQ(a100.gpu_count, 1);
  EXPECT_DOUBLE_EQ(a100.gpu_memory_gib, 40);
  EXPECT_EQ(a100.vcpus, 30);
  EXPECT_DOUBLE_EQ(a100.memory_gib, 200);
  EXPECT_DOUBLE_EQ(a100.disk_gib, 512);
  ASSERT_TRUE(a100.on_demand_price);
  EXPECT_EQ(*a100.on_demand_price, 1'290'000);  // 129 cents an hour
  EXPECT_EQ(a100.available, 1);
  EXPECT_EQ(a100.attributes["region_description"], "California, USA");

  Offer h100 = FindOffer(*client, "gpu_8x_h100_sxm5", "europe-central-1");
  EXPECT_EQ(h100.region, "eu-central");
  EXPECT_EQ(h100.gpu_type, "H100-SXM");
  EXPECT_EQ(h100.gpu_count, 8);
  EXPECT_EQ(*h100.on_demand_price, 23'920'000);
}

TEST_F(LambdaTest, CreateRunsAndDeletes) {
  auto client = Client();
  ASSERT_TRUE(client->CheckCredentials().ok());
  Offer offer = FindOffer(*client, "gpu_1x_a10", "us-east-1");
  auto req = Launch(offer, "uid-create");
  req.payload.image = "ubuntu-lts";
  auto created = client->Create(req);
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  EXPECT_EQ(created->state, InstanceState::kPending);
  EXPECT_EQ(created->name, "tgp-uid-create");
  EXPECT_EQ(created->ProviderId(), "lambdalabs://" + created->id);
  EXPECT_EQ(created->id.size(), 32u);

  // What Lambda received is kept for the simulated machine to boot from, tags in Lambda's form.
  auto kept = sim_->market().Get(created->id);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->payload.at("user_data").as_string(), req.payload.user_data);
  EXPECT_EQ(kept->payload.at("name").as_string(), "tgp-uid-create");
  EXPECT_EQ(kept->payload.at("image").at("family").as_string(), "ubuntu-lts");
  EXPECT_FALSE(kept->payload.contains("quantity"));
  EXPECT_EQ(kept->tags.at("tgp:2eio:2fclaim-uid"), "uid-create");

  Instance running = WaitFor(*client, created->id, InstanceState::kRunning);
  EXPECT_EQ(running.provider_state, "active");
  EXPECT_EQ(running.public_ip.rfind("192.0.2.", 0), 0u) << running.public_ip;
  EXPECT_EQ(running.region, "us-east");
  EXPECT_EQ(running.gpu_type, "A10");
  EXPECT_EQ(running.gpu_count, 1);
  EXPECT_EQ(running.offer_id, "gpu_1x_a10");
  EXPECT_EQ(*running.price, 750'000);
  EXPECT_EQ(running.tags.at("tgp.io/claim-uid"), "uid-create");
  EXPECT_EQ(running.tags.at("tgp.io/cluster"), "test-cluster");

  auto mine = client->List({{"tgp.io/cluster", "test-cluster"}});
  ASSERT_TRUE(mine.ok()) << mine.error().ToString();
  ASSERT_EQ(mine->size(), 1u);
  EXPECT_EQ(mine->front().id, created->id);
  auto others = client->List({{"tgp.io/cluster", "another"}});
  ASSERT_TRUE(others.ok());
  EXPECT_TRUE(others->empty());

  ASSERT_TRUE(client->Delete(created->id).ok());
  Instance gone = WaitFor(*client, created->id, InstanceState::kTerminated);
  EXPECT_EQ(gone.provider_state, "terminated");
  // Gone is success, and a terminated instance is no longer listed.
  EXPECT_TRUE(client->Delete(created->id).ok());
  EXPECT_TRUE(client->Delete("00000000000000000000000000000000").ok());
  auto after = client->List({{"tgp.io/cluster", "test-cluster"}});
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->empty());
}

TEST_F(LambdaTest, BadKeyIsUnauthorized) {
  auto client = Client("not-a-key");
  auto offers = client->ListOffers();
  ASSERT_FALSE(offers.ok());
  EXPECT_EQ(KindOf(offers.error()), ErrorKind::kUnauthorized);
  EXPECT_EQ(offers.error().http_status, 401);
  EXPECT_NE(offers.error().message.find("global/invalid-api-key"), std::string::npos);
  EXPECT_EQ(offers.error().message.find("not-a-key"), std::string::npos)
      << "the key must never be in a message";
  EXPECT_FALSE(client->CheckCredentials().ok());

  // A deactivated account: 403 global/account-inactive.
  sim_->market().SetApiKey("old-key", "inactive-account");
  auto inactive = Client("old-key")->ListOffers();
  ASSERT_FALSE(inactive.ok());
  EXPECT_EQ(KindOf(inactive.error()), ErrorKind::kUnauthorized);
  EXPECT_EQ(inactive.error().http_status, 403);
  EXPECT_NE(inactive.error().message.find("global/account-inactive"), std::string::npos);
}

TEST_F(LambdaTest, UnknownInstanceIsNotFound) {
  auto client = Client();
  auto got = client->Get("ffffffffffffffffffffffffffffffff");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(KindOf(got.error()), ErrorKind::kNotFound);
  EXPECT_EQ(got.error().http_status, 404);
  EXPECT_NE(got.error().message.find("global/object-does-not-exist"), std::string::npos);
}

TEST_F(LambdaTest, InvalidRequestKeepsLambdasMessage) {
  auto client = Client();
  Offer offer = FindOffer(*client, "gpu_1x_a10", "us-west-1");
  Offer elsewhere = offer;
  elsewhere.provider_region = "mars-north-1";
  auto bad_region = client->Create(Launch(elsewhere, "uid-region"));
  ASSERT_FALSE(bad_region.ok());
  EXPECT_EQ(KindOf(bad_region.error()), ErrorKind::kInvalid);
  EXPECT_EQ(bad_region.error().http_status, 400);
  EXPECT_NE(bad_region.error().message.find("global/invalid-parameters: Region mars-north-1 does "
                                            "not exist"),
            std::string::npos)
      << bad_region.error().message;

  // An SSH key the account does not have: Lambda's 404 on launch is a bad request, not a
  // missing instance.
  auto req = Launch(offer, "uid-key");
  req.payload.ssh_key_names = {"no-such-key"};
  auto no_key = client->Create(req);
  ASSERT_FALSE(no_key.ok());
  EXPECT_EQ(KindOf(no_key.error()), ErrorKind::kInvalid);
  EXPECT_EQ(no_key.error().http_status, 404);
  EXPECT_NE(no_key.error().message.find("no-such-key"), std::string::npos);
  EXPECT_EQ(Counter(kLaunch), 2);
}

TEST_F(LambdaTest, RefusedBeforeAnyCall) {
  auto client = Client();
  Offer offer = FindOffer(*client, "gpu_1x_a10", "us-west-1");

  auto big = Launch(offer, "uid-big");
  big.payload.user_data.assign(1'000'001, '#');
  auto r = client->Create(big);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KindOf(r.error()), ErrorKind::kInvalid);
  EXPECT_NE(r.error().message.find("1000001 bytes"), std::string::npos) << r.error().message;

  auto keyless = Launch(offer, "uid-keyless");
  keyless.payload.ssh_key_names.clear();
  r = client->Create(keyless);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KindOf(r.error()), ErrorKind::kInvalid);
  EXPECT_NE(r.error().message.find("SSH key"), std::string::npos);

  auto spot = Launch(offer, "uid-spot");
  spot.spot = true;
  EXPECT_EQ(KindOf(client->Create(spot).error()), ErrorKind::kInvalid);

  auto bad_tag = Launch(offer, "uid-tag");
  bad_tag.tags["Upper/Case"] = "x";
  EXPECT_EQ(KindOf(client->Create(bad_tag).error()), ErrorKind::kInvalid);

  EXPECT_EQ(Counter(kLaunch), 0);
}

TEST_F(LambdaTest, RateLimitedWaitsAsTold) {
  Control("/control/faults", {{"method", kListTypes}, {"kind", "rate_limited"}, {"count", 1}});
  auto client = Client();
  auto t0 = std::chrono::steady_clock::now();
  auto offers = client->ListOffers();
  auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(offers.ok()) << offers.error().ToString();
  EXPECT_FALSE(offers->empty());
  EXPECT_GE(elapsed, Ms(1000));  // the simulator's Retry-After: 1
  EXPECT_EQ(Counter(kListTypes), 2);

  // The raw answer: Lambda's edge, not the API, answers it.
  Control("/control/faults", {{"method", kListTypes}, {"kind", "rate_limited"}, {"count", 1}});
  auto raw = Raw("GET", "/api/v1/instance-types", "");
  EXPECT_EQ(raw.status, 429);
  EXPECT_EQ(raw.body, "error code: 1015");
  EXPECT_EQ(raw.Header("retry-after"), "1");
}

TEST_F(LambdaTest, SoldOutIsCapacity) {
  auto client = Client();
  Offer offer = FindOffer(*client, "gpu_1x_h100_pcie", "us-south-1");  // one machine in stock
  auto first = client->Create(Launch(offer, "uid-first"));
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  auto second = client->Create(Launch(offer, "uid-second"));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(KindOf(second.error()), ErrorKind::kCapacity);
  EXPECT_EQ(second.error().http_status, 400);
  EXPECT_NE(second.error().message.find("instance-operations/launch/insufficient-capacity"),
            std::string::npos);
  // The region is no longer listed with capacity for that type.
  auto offers = client->ListOffers();
  ASSERT_TRUE(offers.ok());
  for (const auto& o : *offers) {
    EXPECT_FALSE(o.id == "gpu_1x_h100_pcie" && o.provider_region == "us-south-1");
  }
  // And the injected form of the same answer.
  Offer a10 = FindOffer(*client, "gpu_1x_a10", "us-west-1");
  Control("/control/faults", {{"method", kLaunch}, {"kind", "capacity"}, {"count", 1}});
  auto injected = client->Create(Launch(a10, "uid-injected"));
  ASSERT_FALSE(injected.ok());
  EXPECT_EQ(KindOf(injected.error()), ErrorKind::kCapacity);
}

TEST_F(LambdaTest, LostAnswerIsAmbiguousAndFoundByTag) {
  auto client = Client();
  Offer offer = FindOffer(*client, "gpu_1x_a100_sxm4", "us-west-1");
  Control("/control/faults", {{"method", kLaunch}, {"kind", "swallow"}, {"count", 1}});
  auto created = client->Create(Launch(offer, "uid-lost"));
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(KindOf(created.error()), ErrorKind::kAmbiguous) << created.error().ToString();
  EXPECT_EQ(Counter(kLaunch), 1);  // never re-sent

  auto found = client->List({{"tgp.io/claim-uid", "uid-lost"}});
  ASSERT_TRUE(found.ok()) << found.error().ToString();
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ(found->front().name, "tgp-uid-lost");
  EXPECT_EQ(found->front().offer_id, "gpu_1x_a100_sxm4");
}

TEST_F(LambdaTest, SimulatorValidatesRequestsAgainstTheSchema) {
  const std::string valid =
      R"({"region_name":"us-west-1","instance_type_name":"gpu_1x_a10","ssh_key_names":["sim-ssh-key"])";
  auto expect_invalid = [&](const std::string& body, const std::string& field) {
    auto r = Raw("POST", "/api/v1/instance-operations/launch", body);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_EQ(ErrorField(r, "code"), "global/invalid-parameters") << r.body;
    EXPECT_NE(r.body.find(field), std::string::npos) << r.body;
  };
  expect_invalid(valid + R"(,"colour":"red"})", "colour");  // unknown field
  expect_invalid(R"({"region_name":"us-west-1","instance_type_name":"gpu_1x_a10",)"
                 R"("ssh_key_names":"sim-ssh-key"})",
                 "ssh_key_names");                   // wrong type
  expect_invalid(valid + R"(,"name":42})", "name");  // wrong type
  expect_invalid(valid + R"(,"tags":[{"key":"Bad.Key","value":"v"}]})", "tags[0].key");
  expect_invalid(valid + R"(,"tags":[{"key":"ok","value":"v","extra":1}]})", "tags[0].extra");
  expect_invalid(R"({"region_name":"us-west-1","ssh_key_names":["sim-ssh-key"]})",
                 "instance_type_name");  // required
  expect_invalid(R"({"region_name":"us-west-1","instance_type_name":"gpu_1x_a10",)"
                 R"("ssh_key_names":["a","b"]})",
                 "exactly one SSH key");
  expect_invalid("not json", "not valid JSON");
  auto term = Raw("POST", "/api/v1/instance-operations/terminate", R"({"instance_ids":"abc"})");
  EXPECT_EQ(term.status, 400);
  EXPECT_NE(term.body.find("instance_ids"), std::string::npos);
  EXPECT_EQ(Counter("GET /api/v1/instances"), 0);

  // The valid body launches; older clients' "quantity": 1 is accepted.
  auto ok = Raw("POST", "/api/v1/instance-operations/launch", valid + R"(,"quantity":1})");
  EXPECT_EQ(ok.status, 200) << ok.body;

  // Basic auth with the key as user name (curl -u KEY:) works; no key gets Lambda's 401 body.
  auto basic = Raw("GET", "/api/v1/ssh-keys", "", "Basic " + Base64Encode("sim-key:"));
  EXPECT_EQ(basic.status, 200) << basic.body;
  EXPECT_NE(basic.body.find("sim-ssh-key"), std::string::npos);
  auto anonymous = Raw("GET", "/api/v1/instances", "", "");
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_EQ(ErrorField(anonymous, "code"), "global/invalid-api-key");
  EXPECT_EQ(ErrorField(anonymous, "message"), "API key was invalid, expired, or deleted.");
  EXPECT_FALSE(ErrorField(anonymous, "suggestion").empty());
}

TEST_F(LambdaTest, SimulatorRateLimitIsWaitedOut) {
  sim::market::ServerOptions o;
  o.market.rate_limit_rps = 1;
  o.market.rate_limit_burst = 1;
  sim_ = sim::lambda::Start(o).value();
  auto client = Client();  // its own limit lifted: the simulator's 429 paces it
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(client->ListOffers().ok());
  auto second = client->ListOffers();
  ASSERT_TRUE(second.ok()) << second.error().ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, Ms(1000));
  EXPECT_EQ(Counter(kListTypes), 3);  // the second call was answered 429 once
  EXPECT_EQ(
      registry_
          .GetCounter(
              "hyperslice_gpu_provider_requests_total", "",
              {{"provider", "lambdalabs"}, {"method", "instance-types.list"}, {"code", "429"}})
          .Value(),
      1);
}

TEST_F(LambdaTest, DocumentedRateLimitPacesCalls) {
  auto client = Client("sim-key", /*fast=*/false);  // 1 request per second, burst 1
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client->ListOffers().ok());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, Ms(1900));
  EXPECT_EQ(Counter(kListTypes), 3);
}

TEST(LambdaTags, KeysAreEscapedReversibly) {
  using providers::lambda::DecodeTagKey;
  using providers::lambda::EncodeTagKey;
  EXPECT_EQ(EncodeTagKey("tgp.io/claim-uid").value(), "tgp:2eio:2fclaim-uid");
  EXPECT_EQ(DecodeTagKey("tgp:2eio:2fclaim-uid"), "tgp.io/claim-uid");
  EXPECT_EQ(EncodeTagKey("pool").value(), "pool");
  EXPECT_EQ(DecodeTagKey("team:ml"), "team:ml");  // set by hand: kept as it is
  EXPECT_EQ(DecodeTagKey("a:2d"), "a:2d");        // '-' is never escaped, so not an escape
  EXPECT_FALSE(EncodeTagKey("Upper").ok());
  EXPECT_FALSE(EncodeTagKey("x").ok());
  EXPECT_TRUE(EncodeTagKey(std::string(40, 'a') + "/////").ok());  // 55: the limit
  EXPECT_FALSE(EncodeTagKey(std::string(41, 'a') + "/////").ok());
}

}  // namespace
}  // namespace hyperslice::gpu
