// The RunPod client against the RunPod simulator over loopback HTTP.
#include <gtest/gtest.h>

#include "src/gpu/providers/runpod/decode.h"
#include "test/integration/gpu_runpod/fixture.h"

namespace hyperslice::gpu::runpod_test {
namespace {

namespace json = boost::json;
namespace runpod = providers::runpod;

const Offer* Find(const std::vector<Offer>& offers, const std::string& gpu, const std::string& dc,
                  int count) {
  for (const auto& o : offers) {
    if (o.provider_gpu_name == gpu && o.provider_region == dc && o.gpu_count == count) return &o;
  }
  return nullptr;
}

LaunchRequest Launch(const Offer& o, const std::string& uid, bool spot = false) {
  LaunchRequest r;
  r.offer = &o;
  r.name = "claim-" + uid;
  r.claim_uid = uid;
  r.tags = {{"tgp.io/cluster", "c1"}, {"tgp.io/claim", uid}};
  r.spot = spot;
  r.payload.image = "ghcr.io/example/node:1";
  r.payload.env = {{"JOIN_TOKEN", "abc=def&x"}};
  r.payload.args = {"--join", "10.0.0.1"};
  return r;
}

// The pod as the client reads it once it reaches `state` (a default Instance if it never does).
Instance Await(Provider& p, const std::string& id, InstanceState state) {
  Instance got;
  bool reached = Eventually([&] {
    auto g = p.Get(id);
    if (g.ok()) got = *g;
    return g.ok() && g->state == state;
  });
  return reached ? got : Instance{};
}

// A simulator and a client of it; List() finds the offer a test launches in a fresh listing.
class RunPodClient : public ::testing::Test {
 protected:
  void List(const Offer*& o, const std::string& gpu, const std::string& dc, int count) {
    auto listed = p->ListOffers();
    ASSERT_TRUE(listed.ok()) << listed.error().message;
    offers = std::move(*listed);
    o = Find(offers, gpu, dc, count);
    ASSERT_NE(o, nullptr) << gpu << " x" << count << " in " << dc;
  }

  SimFixture f;
  std::unique_ptr<Provider> p = f.Client();
  std::vector<Offer> offers;  // the last listing
};

TEST_F(RunPodClient, OffersListedAndNormalised) {
  ASSERT_TRUE(p->CheckCredentials().ok());
  EXPECT_TRUE(p->capabilities().spot);
  const Offer* o = nullptr;
  ASSERT_NO_FATAL_FAILURE(List(o, "NVIDIA GeForce RTX 4090", "US-CA-2", 1));
  EXPECT_EQ(o->provider, kRunPod);
  EXPECT_EQ(o->gpu_type, "RTX4090");
  EXPECT_TRUE(o->gpu_type_known);
  EXPECT_EQ(o->region, "us-west");
  EXPECT_TRUE(o->region_known);
  EXPECT_EQ(o->on_demand_price, 690000);
  EXPECT_EQ(o->spot_price, 350000);
  EXPECT_EQ(o->gpu_memory_gib, 24);
  EXPECT_EQ(o->boot, BootKind::kContainer);
  EXPECT_EQ(o->available, -1);  // RunPod gives a stock level, not a count
  EXPECT_EQ(o->attributes.at("stockStatus"), "Medium");
  EXPECT_EQ(o->vcpus, 6);
  const Offer* two = Find(offers, "NVIDIA GeForce RTX 4090", "US-CA-2", 2);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(two->on_demand_price, 1380000);
  const Offer* h100 = Find(offers, "NVIDIA H100 80GB HBM3", "US-KS-2", 8);
  ASSERT_NE(h100, nullptr);
  EXPECT_EQ(h100->gpu_type, "H100-SXM");
  EXPECT_EQ(h100->on_demand_price, 8 * 2990000);
  // Every default GPU type and data center is in the tables.
  for (const auto& x : offers) {
    EXPECT_TRUE(x.gpu_type_known) << x.provider_gpu_name;
    EXPECT_TRUE(x.region_known) << x.provider_region;
  }
  const Offer* ro = Find(offers, "NVIDIA GeForce RTX 4090", "EU-RO-1", 1);
  ASSERT_NE(ro, nullptr);
  EXPECT_EQ(ro->gpu_type, "RTX4090");
  EXPECT_EQ(ro->region.rfind("eu-", 0), 0u) << ro->region;
  EXPECT_EQ(f.Counter("dataCenters"), 1);
}

// A pod that publishes no port has no public mapping: runtime.ports lists only what the create
// asked for (here nothing), so there is no public address to read.
TEST_F(RunPodClient, APodWithoutPublishedPortsHasNoPublicMapping) {
  const Offer* o = nullptr;
  ASSERT_NO_FATAL_FAILURE(List(o, "NVIDIA GeForce RTX 4090", "US-CA-2", 1));
  auto inst = p->Create(Launch(*o, "uid-np"));
  ASSERT_TRUE(inst.ok()) << inst.error().message;
  auto m = f.sim->market().Get(inst->id);
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->payload.contains("ports"));
  EXPECT_TRUE(m->tcp_ports.empty());
  Instance got = Await(*p, inst->id, InstanceState::kRunning);
  ASSERT_EQ(got.id, inst->id);
  EXPECT_TRUE(got.public_ip.empty()) << got.public_ip;
  auto bad = Launch(*o, "uid-bad");
  bad.payload.tcp_ports = {0};
  auto refused = p->Create(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(KindOf(refused.error()), ErrorKind::kInvalid);
  ASSERT_TRUE(p->Delete(inst->id).ok());
}

TEST_F(RunPodClient, OnDemandCreateRunningDelete) {
  const Offer* o = nullptr;
  ASSERT_NO_FATAL_FAILURE(List(o, "NVIDIA GeForce RTX 4090", "US-CA-2", 1));
  auto launch = Launch(*o, "uid-1");
  launch.payload.tcp_ports = {7443, 2222};
  auto inst = p->Create(launch);
  ASSERT_TRUE(inst.ok()) << inst.error().message;
  EXPECT_EQ(inst->provider, kRunPod);
  EXPECT_EQ(inst->id.size(), 14u);
  EXPECT_EQ(inst->name, "claim-uid-1");
  EXPECT_FALSE(inst->spot);
  EXPECT_EQ(inst->price, 690000);
  EXPECT_EQ(inst->tags.at("tgp.io/claim"), "uid-1");
  EXPECT_EQ(inst->offer_id, o->id);
  EXPECT_EQ(inst->gpu_type, "RTX4090");
  EXPECT_EQ(inst->region, "us-west");
  EXPECT_NE(inst->state, InstanceState::kRunning);  // runtime is null until the container runs

  // The simulated machine's boot payload: image, env (ours and the tags), docker args.
  auto m = f.sim->market().Get(inst->id);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->payload.at("image").as_string(), "ghcr.io/example/node:1");
  EXPECT_EQ(m->payload.at("env").at("JOIN_TOKEN").as_string(), "abc=def&x");
  EXPECT_EQ(m->payload.at("args").as_string(), "--join 10.0.0.1");
  EXPECT_FALSE(m->spot);
  // The published ports, in runpod-python's `ports` form; RunPod maps each to a public port.
  EXPECT_EQ(m->payload.at("ports").as_string(), "7443/tcp,2222/tcp");
  ASSERT_EQ(m->tcp_ports.size(), 2u);
  EXPECT_NE(m->tcp_ports.at(7443), 7443);

  Instance got = Await(*p, inst->id, InstanceState::kRunning);
  ASSERT_EQ(got.id, inst->id);
  EXPECT_EQ(got.provider_state, "RUNNING");
  EXPECT_FALSE(got.public_ip.empty());
  EXPECT_EQ(got.tags.at("tgp.io/cluster"), "c1");

  auto mine = p->List({{"tgp.io/cluster", "c1"}});
  ASSERT_TRUE(mine.ok());
  ASSERT_EQ(mine->size(), 1u);
  EXPECT_EQ((*mine)[0].id, inst->id);
  auto others = p->List({{"tgp.io/cluster", "other"}});
  ASSERT_TRUE(others.ok());
  EXPECT_TRUE(others->empty());

  ASSERT_TRUE(p->Delete(inst->id).ok());
  ASSERT_TRUE(Eventually([&] {
    auto g = p->Get(inst->id);
    return !g.ok() && KindOf(g.error()) == ErrorKind::kNotFound;
  }));
  EXPECT_EQ(f.sim->market().Get(inst->id)->state, sim::market::State::kTerminated);
  // Gone is success.
  auto again = p->Delete(inst->id);
  EXPECT_TRUE(again.ok()) << again.error().message;
  EXPECT_TRUE(p->List({{"tgp.io/cluster", "c1"}})->empty());
}

TEST_F(RunPodClient, SpotWithBidAndReclaim) {
  const Offer* o = nullptr;
  ASSERT_NO_FATAL_FAILURE(List(o, "NVIDIA GeForce RTX 4090", "US-CA-2", 2));
  ASSERT_EQ(o->spot_price, 700000);
  auto req = Launch(*o, "uid-spot", true);
  req.bid = 900001;  // whole pod; bidPerGpu is rounded up: 0.450001
  auto inst = p->Create(req);
  ASSERT_TRUE(inst.ok()) << inst.error().message;
  EXPECT_TRUE(inst->spot);
  EXPECT_EQ(f.Counter("podRentInterruptable"), 1);
  auto m = f.sim->market().Get(inst->id);
  ASSERT_TRUE(m.has_value());
  EXPECT_TRUE(m->spot);
  EXPECT_EQ(m->price, 900002);
  ASSERT_TRUE(Eventually([&] {
    auto g = p->Get(inst->id);
    return g.ok() && g->state == InstanceState::kRunning;
  }));
  // The provider takes it back: EXITED, reclaimed, still listed until we terminate it.
  ASSERT_EQ(f.Control("reclaim", {{"id", inst->id}}), 200);
  Instance got;
  ASSERT_TRUE(Eventually([&] {
    auto g = p->Get(inst->id);
    if (g.ok()) got = *g;
    return g.ok() && g->state == InstanceState::kTerminated;
  }));
  EXPECT_TRUE(got.reclaimed);
  EXPECT_EQ(got.provider_state, "EXITED");
  ASSERT_TRUE(p->Delete(inst->id).ok());
  auto g = p->Get(inst->id);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(KindOf(g.error()), ErrorKind::kNotFound);
}

TEST_F(RunPodClient, BidBelowMinimumIsInvalid) {
  const Offer* o = nullptr;
  ASSERT_NO_FATAL_FAILURE(List(o, "NVIDIA GeForce RTX 4090", "US-CA-2", 1));
  auto req = Launch(*o, "uid-low", true);
  req.bid = 100000;
  auto inst = p->Create(req);
  ASSERT_FALSE(inst.ok());
  EXPECT_EQ(KindOf(inst.error()), ErrorKind::kInvalid);
  EXPECT_NE(inst.error().message.find("minimum bid"), std::string::npos) << inst.error().message;
  EXPECT_EQ(inst.error().http_status, 200);
  EXPECT_TRUE(f.sim->market().List("").empty());
}

TEST_F(RunPodClient, TypedErrors) {
  // 401: a key the simulator does not know.
  auto bad = f.Client("not-a-key");
  auto s = bad->CheckCredentials();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(KindOf(s.error()), ErrorKind::kUnauthorized);
  EXPECT_EQ(s.error().http_status, 401);
  EXPECT_EQ(f.Counter("myself"), 0);  // refused before the API did anything

  // Not found.
  auto g = p->Get("nosuchpod00000");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(KindOf(g.error()), ErrorKind::kNotFound);
  // Invalid before any call: no image for a container-only provider.
  const Offer* o = nullptr;
  ASSERT_NO_FATAL_FAILURE(List(o, "NVIDIA GeForce RTX 4090", "US-CA-2", 1));
  auto req = Launch(*o, "uid-x");
  req.payload.image.clear();
  auto c = p->Create(req);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(KindOf(c.error()), ErrorKind::kInvalid);
  EXPECT_EQ(f.Counter("podFindAndDeployOnDemand"), 0);
}

TEST_F(RunPodClient, RateLimitedWaitsAsTold) {
  ASSERT_EQ(f.Control("faults", {{"method", "myself"}, {"kind", "rate_limited"}, {"count", 1}}),
            200);
  auto t0 = std::chrono::steady_clock::now();
  auto s = p->CheckCredentials();
  auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(s.ok()) << s.error().message;
  // The simulator answered 429 with Retry-After: 1; the client waited that long, then retried.
  EXPECT_GE(elapsed, std::chrono::milliseconds(1000));
  EXPECT_EQ(f.Counter("myself"), 2);
}

TEST_F(RunPodClient, AccountRateLimitAnswers429) {
  SimFixture limited([](sim::market::ServerOptions& o) {
    o.market.rate_limit_rps = 2;
    o.market.rate_limit_burst = 1;
  });
  auto r1 = limited.Graphql("query { myself { id } }");
  auto r2 = limited.Graphql("query { myself { id } }");
  EXPECT_EQ(r1.status, 200);
  EXPECT_EQ(r2.status, 429);
  EXPECT_EQ(r2.Header("retry-after"), "1");
  auto e = runpod::DecodeHttpError(r2.status, r2.body);
  EXPECT_EQ(KindOf(e), ErrorKind::kRateLimited);
  // The client waits the Retry-After out and gets through.
  EXPECT_TRUE(limited.Client()->CheckCredentials().ok());
}

TEST_F(RunPodClient, CapacityFailure) {
  const Offer* h100 = nullptr;
  ASSERT_NO_FATAL_FAILURE(List(h100, "NVIDIA H100 80GB HBM3", "US-KS-2", 8));
  EXPECT_EQ(h100->attributes.at("stockStatus"), "Low");
  ASSERT_TRUE(p->Create(Launch(*h100, "uid-a")).ok());
  auto second = p->Create(Launch(*h100, "uid-b"));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(KindOf(second.error()), ErrorKind::kCapacity);
  EXPECT_NE(second.error().message.find("There are no longer any instances available"),
            std::string::npos);
  // The market's injected capacity fault looks the same.
  const Offer* rtx = Find(offers, "NVIDIA GeForce RTX 4090", "US-CA-2", 1);
  ASSERT_EQ(f.Control("faults", {{"method", "podFindAndDeployOnDemand"}, {"kind", "capacity"}}),
            200);
  auto third = p->Create(Launch(*rtx, "uid-c"));
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(KindOf(third.error()), ErrorKind::kCapacity);
  // Out of stock: the offer is gone from the next listing.
  auto again = p->ListOffers();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Find(*again, "NVIDIA H100 80GB HBM3", "US-KS-2", 8), nullptr);
}

TEST_F(RunPodClient, AmbiguousCreateFoundByTag) {
  const Offer* o = nullptr;
  ASSERT_NO_FATAL_FAILURE(List(o, "NVIDIA GeForce RTX 4090", "EU-RO-1", 1));
  ASSERT_EQ(f.Control("faults",
                      {{"method", "podFindAndDeployOnDemand"}, {"kind", "swallow"}, {"count", 1}}),
            200);
  auto c = p->Create(Launch(*o, "uid-lost"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(KindOf(c.error()), ErrorKind::kAmbiguous) << c.error().message;
  EXPECT_EQ(f.Counter("podFindAndDeployOnDemand"), 1);  // never re-sent
  auto found = p->List({{"tgp.io/claim", "uid-lost"}});
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].name, "claim-uid-lost");
  EXPECT_EQ((*found)[0].tags.at("tgp.io/claim-uid"), "uid-lost");
}

TEST(RunPodSimulator, ValidationErrorsLikeAGraphQLServer) {
  SimFixture f;
  struct Case {
    std::string query, message;
  };
  for (const auto& c : std::vector<Case>{
           {"query { myself { id nosuch } }", "Cannot query field \"nosuch\" on type \"User\"."},
           {"query { pod(input: {podId: 5}) { id } }",
            "String cannot represent a non string value: 5"},
           {"query { pod(input: {podId: \"x\", extra: 1}) { id } }",
            "Field \"extra\" is not defined by type \"PodFilter\"."},
           {"query { pod { id } }",
            "Field \"pod\" argument \"input\" of type \"PodFilter!\" is required, but it was not "
            "provided."},
           {"query { gpuTypes { lowestPrice(input: {gpuCount: \"two\"}) { stockStatus } } }",
            "Int cannot represent non-integer value: \"two\""},
           {"mutation { podFindAndDeployOnDemand(input: {cloudType: CHEAP}) { id } }",
            "Value CHEAP does not exist in \"CloudTypeEnum\" enum."},
           {"query { myself }",
            "Field \"myself\" of type \"User\" must have a selection of subfields. Did you mean "
            "\"myself { ... }\"?"},
           {"mutation { podRentInterruptable(input: {gpuTypeId: \"x\"}) { id } }",
            "Field \"PodRentInterruptableInput.bidPerGpu\" of required type \"Float!\" was not "
            "provided."},
       }) {
    auto r = f.Graphql(c.query);
    EXPECT_EQ(r.status, 400) << c.query;
    auto v = json::parse(r.body);
    const auto& e = v.at("errors").at(0);
    EXPECT_EQ(e.at("message").as_string(), c.message) << c.query;
    EXPECT_EQ(e.at("extensions").at("code").as_string(), "GRAPHQL_VALIDATION_FAILED");
    EXPECT_TRUE(e.as_object().contains("locations"));
    EXPECT_EQ(KindOf(runpod::DecodeHttpError(r.status, r.body)), ErrorKind::kInvalid);
  }
  auto parse = f.Graphql("query { myself { id }");
  EXPECT_EQ(parse.status, 400);
  EXPECT_NE(parse.body.find("GRAPHQL_PARSE_FAILED"), std::string::npos);
  EXPECT_NE(parse.body.find("Syntax Error: Expected Name, found <EOF>."), std::string::npos);
  // Nothing was counted as an API call: validation refuses before execution.
  EXPECT_EQ(f.Counter("pod"), 0);
  EXPECT_EQ(f.Counter("myself"), 0);
}

TEST(RunPodSimulator, AnswersOnlyTheSelectedFields) {
  SimFixture f;
  auto r = f.Graphql(
      "query Q { gpuTypes(input: {id: \"NVIDIA GeForce RTX 4090\"}) { __typename id "
      "cheap: lowestPrice(input: {gpuCount: 1, dataCenterId: \"EU-RO-1\"}) { "
      "uninterruptablePrice stockStatus } } }");
  ASSERT_EQ(r.status, 200) << r.body;
  auto v = json::parse(r.body);
  const auto& types = v.at("data").at("gpuTypes").as_array();
  ASSERT_EQ(types.size(), 1u);
  const auto& g = types[0].as_object();
  EXPECT_EQ(g.size(), 3u);
  EXPECT_EQ(g.at("__typename").as_string(), "GpuType");
  EXPECT_EQ(g.at("cheap").at("uninterruptablePrice").as_double(), 0.59);
  EXPECT_EQ(g.at("cheap").at("stockStatus").as_string(), "Medium");
  EXPECT_EQ(g.at("cheap").as_object().size(), 2u);
  // The documented ?api_key= form authenticates too; a bad key is 401.
  net::Request q;
  q.method = "POST";
  q.target = "/graphql?api_key=sim-key";
  q.body = R"({"query":"query { myself { id } }"})";
  auto res = f.api->Do(q);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(f.Graphql("query { myself { id } }", "wrong").status, 401);
}

TEST(RunPodDecode, TagsRoundTrip) {
  std::map<std::string, std::string> tags = {
      {"tgp.io/cluster", "a b&c=d%"}, {"k", ""}, {"ünï", "cödé"}};
  EXPECT_EQ(runpod::DecodeTags(runpod::EncodeTags(tags)), tags);
  EXPECT_TRUE(runpod::DecodeTags("=x&%zz=1&a=%4").empty());
  EXPECT_EQ(runpod::GraphQLUsd(450001), "0.450001");
  EXPECT_EQ(runpod::GraphQLUsd(2000000), "2.0");
  EXPECT_EQ(runpod::GraphQLString("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
}

}  // namespace
}  // namespace hyperslice::gpu::runpod_test
