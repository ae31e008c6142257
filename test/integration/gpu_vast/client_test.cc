// The Vast.ai client against the simulator over loopback HTTP: offers normalised, the instance
// lifecycle on demand and interruptible, and every typed error the interface promises.
#include <algorithm>

#include "src/gpu/normalize.h"
#include "test/integration/gpu_vast/fixture.h"

namespace hyperslice::gpu::vast_testing {
namespace {

LaunchRequest Launch(const Offer& offer, const std::string& uid) {
  LaunchRequest r;
  r.offer = &offer;
  r.name = "gpu-claim-" + uid;
  r.claim_uid = uid;
  r.tags = {{"tgp.io/cluster", "test cluster"}, {"tgp.io/pool", "default"}};
  r.payload.image = "ghcr.io/hyperslice/gpu-node:1.2.3";
  r.payload.env = {{"HS_JOIN_TOKEN", "abc.def"}, {"HS_CLAIM", uid}};
  r.payload.startup_script = "#!/bin/sh\necho joining\n";
  return r;
}

TEST_F(VastSimTest, OffersAreListedCheapestFirstAndNormalised) {
  auto offers = provider_->ListOffers();
  ASSERT_TRUE(offers.ok()) << offers.error().ToString();
  ASSERT_EQ(offers->size(), sim::vast::DefaultListings().size());
  for (size_t i = 1; i < offers->size(); ++i) {
    EXPECT_LE((*offers)[i - 1].on_demand_price, (*offers)[i].on_demand_price) << i;
  }
  Offer ca = OfferById("18420311");
  EXPECT_EQ(ca.provider, kVast);
  EXPECT_EQ(ca.provider_gpu_name, "RTX 4090");
  EXPECT_EQ(ca.gpu_type, "RTX4090");
  EXPECT_TRUE(ca.gpu_type_known);
  EXPECT_EQ(ca.gpu_count, 1);
  EXPECT_DOUBLE_EQ(ca.gpu_memory_gib, 24);
  EXPECT_EQ(ca.vcpus, 16);
  EXPECT_DOUBLE_EQ(ca.memory_gib, 64);
  EXPECT_EQ(ca.provider_region, "California, US");
  EXPECT_EQ(ca.region, "us-west");
  EXPECT_TRUE(ca.region_known);
  EXPECT_EQ(ca.on_demand_price, 350000);
  EXPECT_EQ(ca.spot_price, 180000);
  EXPECT_EQ(ca.available, 1);
  EXPECT_EQ(ca.boot, BootKind::kContainer);
  EXPECT_EQ(ca.attributes["machine_id"], "31204");
  EXPECT_EQ(ca.attributes["host_id"], "48112");
  EXPECT_EQ(ca.attributes["verification"], "verified");
  EXPECT_EQ(OfferById("18420377").region, "ca-east");  // Quebec, CA
  EXPECT_EQ(OfferById("18423006").gpu_type, "A100-80GB");
  EXPECT_EQ(OfferById("18423091").gpu_type, "A100-40GB");
  EXPECT_EQ(OfferById("18424210").gpu_type, "H100-SXM");
  EXPECT_EQ(OfferById("18422040").gpu_type, "RTX3090");
}

TEST_F(VastSimTest, UnknownNamesAreKeptNotDropped) {
  Control("POST", "/control/listings",
          json::object{{"id", "19000001"},
                       {"gpuName", "Quantum QX 9"},
                       {"gpuCount", 1},
                       {"gpuMemoryGb", 32},
                       {"region", "Atlantis, ZZ"},
                       {"priceUsd", 0.5},
                       {"spotPriceUsd", 0.3},
                       {"capacity", 1},
                       {"attributes", json::object{{"verification", "verified"}}}});
  Offer o = OfferById("19000001");
  EXPECT_FALSE(o.gpu_type_known);
  EXPECT_EQ(o.gpu_type, "Quantum QX 9");
  EXPECT_FALSE(o.region_known);
  EXPECT_EQ(o.region, "Atlantis, ZZ");
}

TEST_F(VastSimTest, OnDemandCreateRunsAndDeletes) {
  Offer offer = OfferById("18422040");
  auto created = provider_->Create(Launch(offer, "uid-1"));
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  EXPECT_EQ(created->state, InstanceState::kPending);
  EXPECT_FALSE(created->spot);
  auto early = provider_->Get(created->id);  // before it runs: created or loading, not gone
  ASSERT_TRUE(early.ok()) << early.error().ToString();
  EXPECT_TRUE(early->state == InstanceState::kPending || early->state == InstanceState::kRunning)
      << StateName(early->state) << " " << early->provider_state;
  auto running = WaitFor(created->id, InstanceState::kRunning);
  ASSERT_TRUE(running.ok()) << running.error().ToString();
  EXPECT_EQ(running->state, InstanceState::kRunning);
  EXPECT_EQ(running->provider_state, "running");
  EXPECT_EQ(running->name, "gpu-claim-uid-1");
  EXPECT_EQ(running->tags.at("claim-uid"), "uid-1");
  EXPECT_EQ(running->tags.at("tgp.io/cluster"), "test cluster");
  EXPECT_EQ(running->gpu_type, "RTX3090");
  EXPECT_EQ(running->region, "us-south");
  EXPECT_EQ(running->price, 190000);
  EXPECT_EQ(running->public_ip.rfind("192.0.2.", 0), 0u) << running->public_ip;
  EXPECT_EQ(running->ProviderId(), "vastai://" + created->id);

  // The simulator kept what the machine boots from.
  auto inst = sim_->market().Get(created->id);
  ASSERT_TRUE(inst.has_value());
  EXPECT_FALSE(inst->spot);
  EXPECT_EQ(inst->payload.at("image").as_string(), "ghcr.io/hyperslice/gpu-node:1.2.3");
  EXPECT_EQ(inst->payload.at("env").at("HS_JOIN_TOKEN").as_string(), "abc.def");
  EXPECT_EQ(inst->payload.at("onstart").as_string(), "#!/bin/sh\necho joining\n");
  EXPECT_EQ(inst->payload.at("runtype").as_string(), "ssh");

  auto listed = provider_->List({{"tgp.io/cluster", "test cluster"}});
  ASSERT_TRUE(listed.ok()) << listed.error().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].id, created->id);
  auto other = provider_->List({{"tgp.io/cluster", "another"}});
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->empty());

  ASSERT_TRUE(provider_->Delete(created->id).ok());
  auto gone = provider_->Get(created->id);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(KindOf(gone.error()), ErrorKind::kNotFound) << gone.error().ToString();
  EXPECT_TRUE(provider_->Delete(created->id).ok()) << "gone is success";
  auto after = provider_->List({});
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->empty());
}

// A container that publishes a port: the create carries it as vast-cli's docker option in env
// ("-p <port>:<port>": "1"), Vast maps it to a public port of its choosing and shows the mapping
// in the instance's `ports` once it runs.
TEST_F(VastSimTest, APublishedPortIsADockerOptionInEnvAndMapped) {
  Offer offer = OfferById("18420311");
  LaunchRequest r = Launch(offer, "uid-ports");
  r.payload.startup_script.clear();
  r.payload.args = {"runner-agent", "--listen", "0.0.0.0:7443"};
  r.payload.tcp_ports = {7443};
  auto created = provider_->Create(r);
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  auto inst = sim_->market().Get(created->id);
  ASSERT_TRUE(inst.has_value());
  EXPECT_EQ(inst->payload.at("env").at("-p 7443:7443").as_string(), "1");
  EXPECT_EQ(inst->payload.at("runtype").as_string(), "args");
  ASSERT_EQ(inst->tcp_ports.size(), 1u);  // args mode: no ssh port
  const int mapped = inst->tcp_ports.at(7443);
  ASSERT_TRUE(WaitFor(created->id, InstanceState::kRunning).ok());
  auto shown = sim_->market().Get(created->id);
  ASSERT_TRUE(shown.has_value());
  EXPECT_EQ(shown->tcp_ports.at(7443), mapped);
  // A key that is not a variable name (a docker option smuggled in env) is refused.
  LaunchRequest bad = Launch(offer, "uid-bad-env");
  bad.payload.env["-v /:/host"] = "1";
  auto refused = provider_->Create(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(KindOf(refused.error()), ErrorKind::kInvalid);
  ASSERT_TRUE(provider_->Delete(created->id).ok());
}

TEST_F(VastSimTest, InterruptibleWithABid) {
  Offer offer = OfferById("18420311");
  LaunchRequest r = Launch(offer, "uid-spot");
  r.spot = true;
  r.bid = 250000;  // $0.25/h, over the $0.18 minimum
  auto created = provider_->Create(r);
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  auto running = WaitFor(created->id, InstanceState::kRunning);
  ASSERT_TRUE(running.ok()) << running.error().ToString();
  EXPECT_TRUE(running->spot);
  EXPECT_EQ(running->price, 250000);
  auto inst = sim_->market().Get(created->id);
  ASSERT_TRUE(inst.has_value());
  EXPECT_TRUE(inst->spot);
  EXPECT_EQ(inst->price, 250000);

  // Outbid: the host stops it; Vast keeps it listed, meant to run.
  Control("POST", "/control/reclaim", json::object{{"id", created->id}});
  auto reclaimed = provider_->Get(created->id);
  ASSERT_TRUE(reclaimed.ok()) << reclaimed.error().ToString();
  EXPECT_TRUE(reclaimed->reclaimed);
  EXPECT_EQ(reclaimed->state, InstanceState::kTerminated);
  EXPECT_TRUE(provider_->Delete(created->id).ok());

  // A bid under the offer's minimum: this offer cannot be bought at that price.
  r.bid = 100000;
  auto low = provider_->Create(r);
  ASSERT_FALSE(low.ok());
  EXPECT_EQ(KindOf(low.error()), ErrorKind::kCapacity) << low.error().ToString();
  EXPECT_NE(low.error().message.find("invalid_price"), std::string::npos);
}

TEST_F(VastSimTest, BadKeyIsUnauthorized) {
  auto bad = NewClient("not-a-key");
  auto s = bad->CheckCredentials();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(KindOf(s.error()), ErrorKind::kUnauthorized) << s.error().ToString();
  EXPECT_EQ(s.error().http_status, 401);
  EXPECT_NE(s.error().message.find("Invalid user key"), std::string::npos);
  EXPECT_TRUE(provider_->CheckCredentials().ok());
  auto get = bad->Get("27400001");
  ASSERT_FALSE(get.ok());
  EXPECT_EQ(KindOf(get.error()), ErrorKind::kUnauthorized);
  // The wire: Vast's 401 body, and a missing key.
  auto raw = Api("GET", "/api/v0/users/current/", "", "not-a-key");
  EXPECT_EQ(raw.status, 401);
  EXPECT_EQ(json::parse(raw.body),
            json::parse(R"({"success":false,"error":"auth_error","msg":"Invalid user key"})"));
  auto none = Api("GET", "/api/v0/instances/1/", "", "");
  EXPECT_EQ(none.status, 403);
  EXPECT_EQ(
      json::parse(none.body),
      json::parse(R"({"success":false,"error":"auth_error","msg":"This action requires login."})"));
}

TEST_F(VastSimTest, MissingInstanceIsNotFound) {
  auto got = provider_->Get("99999999");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(KindOf(got.error()), ErrorKind::kNotFound);
  EXPECT_TRUE(provider_->Delete("99999999").ok());
  // The wire: show instance answers {"instances": null}; destroy answers 404 not_found.
  auto raw = Api("GET", "/api/v0/instances/99999999/?owner=me");
  EXPECT_EQ(raw.status, 200);
  EXPECT_EQ(json::parse(raw.body), json::parse(R"({"instances":null})"));
  auto del = Api("DELETE", "/api/v0/instances/99999999/", "{}");
  EXPECT_EQ(del.status, 404);
  EXPECT_EQ(json::parse(del.body).at("error").as_string(), "not_found");
}

TEST_F(VastSimTest, InvalidRequestCarriesVastsMessage) {
  Offer offer = OfferById("18422040");
  offer.disk_gib = 0.5;  // a disk Vast refuses
  auto r = provider_->Create(Launch(offer, "uid-bad"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KindOf(r.error()), ErrorKind::kInvalid) << r.error().ToString();
  EXPECT_EQ(r.error().http_status, 400);
  EXPECT_NE(r.error().message.find("'disk' must be at least 1 GB"), std::string::npos)
      << r.error().message;
  // Refused before any call: no image.
  int64_t before = Counter("PUT /api/v0/asks/{id}/");
  LaunchRequest no_image = Launch(offer, "uid-noimage");
  no_image.payload.image.clear();
  auto local = provider_->Create(no_image);
  ASSERT_FALSE(local.ok());
  EXPECT_EQ(KindOf(local.error()), ErrorKind::kInvalid);
  EXPECT_EQ(Counter("PUT /api/v0/asks/{id}/"), before);
  // The wire: unknown fields and wrong types are refused with invalid_args.
  auto unknown = Api("PUT", "/api/v0/asks/18422040/", R"({"image":"x","colour":"red"})");
  EXPECT_EQ(unknown.status, 400);
  auto body = json::parse(unknown.body);
  EXPECT_EQ(body.at("error").as_string(), "invalid_args");
  EXPECT_NE(std::string(body.at("msg").as_string()).find("unknown field 'colour'"),
            std::string::npos);
  auto wrong = Api("PUT", "/api/v0/asks/18422040/", R"({"image":"x","disk":"big"})");
  EXPECT_EQ(wrong.status, 400);
  EXPECT_EQ(json::parse(wrong.body).at("ask_id").as_int64(), 18422040);
  EXPECT_TRUE(sim_->market().List("").empty());
}

// A market with one RTX 4090 ask on a machine that runs VMs (vms_enabled) besides the defaults.
class VastVmTest : public VastSimTest {
 protected:
  void Customize(sim::market::ServerOptions& o) override {
    o.market.listings = sim::vast::DefaultListings();
    o.market.listings.push_back(sim::vast::Rtx4090Listing("18425001", /*vm=*/true, 420000));
  }
};

TEST_F(VastVmTest, AVmAskBootsItsOnstartAsAStartupScriptAndIsCreatedAsAVm) {
  Offer vm = OfferById("18425001");
  EXPECT_EQ(vm.boot, BootKind::kStartupScript);
  EXPECT_EQ(vm.attributes["vm"], "true");
  EXPECT_EQ(vm.gpu_type, "RTX4090");
  EXPECT_EQ(vm.on_demand_price, 420000);
  EXPECT_EQ(OfferById("18420311").boot, BootKind::kContainer);
  // What the payload builder gives a Vast VM: a startup script, no image, no args.
  LaunchRequest r = Launch(vm, "uid-vm");
  r.payload.image.clear();
  r.payload.env.clear();
  auto created = provider_->Create(r);
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  auto running = WaitFor(created->id, InstanceState::kRunning);
  ASSERT_TRUE(running.ok()) << running.error().ToString();
  auto inst = sim_->market().Get(created->id);
  ASSERT_TRUE(inst.has_value());
  EXPECT_TRUE(inst->payload.at("vm").as_bool());
  EXPECT_EQ(inst->payload.at("image").as_string(), "vastai/kvm:ubuntu_cli_22.04-2025-11-21");
  EXPECT_EQ(inst->payload.at("runtype").as_string(), "ssh");
  EXPECT_EQ(inst->payload.at("onstart").as_string(), "#!/bin/sh\necho joining\n");
  // A container ask is created as a container.
  auto container = provider_->Create(Launch(OfferById("18422040"), "uid-container"));
  ASSERT_TRUE(container.ok()) << container.error().ToString();
  EXPECT_FALSE(sim_->market().Get(container->id)->payload.at("vm").as_bool());
  // A VM launches in SSH mode only: args are refused before any call.
  int64_t before = Counter("PUT /api/v0/asks/{id}/");
  LaunchRequest with_args = Launch(vm, "uid-vm-args");
  with_args.payload.args = {"sleep", "infinity"};
  auto refused = provider_->Create(with_args);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(KindOf(refused.error()), ErrorKind::kInvalid);
  EXPECT_EQ(Counter("PUT /api/v0/asks/{id}/"), before);
  // The wire: a VM on an ask whose machine runs no VMs, or in a launch mode VMs lack.
  auto not_vm = Api("PUT", "/api/v0/asks/18421502/", R"({"image":"x","vm":true})");
  EXPECT_EQ(not_vm.status, 400);
  EXPECT_EQ(json::parse(not_vm.body).at("error").as_string(), "invalid_args");
  auto jupyter =
      Api("PUT", "/api/v0/asks/18425001/", R"({"image":"x","vm":true,"runtype":"jupyter"})");
  EXPECT_EQ(jupyter.status, 400);
  EXPECT_EQ(json::parse(jupyter.body).at("error").as_string(), "invalid_args");
}

TEST_F(VastVmTest, AnOnstartOverTheLimitIsRefusedAsVastRefusesIt) {
  // The wire: Vast's createInstance 400 (openapi.yaml: success false, error invalid_args, msg,
  // ask_id); the 4048th character is accepted, the 4049th is not.
  json::object body{{"image", "vastai/kvm:ubuntu_cli_22.04-2025-11-21"},
                    {"vm", true},
                    {"onstart", std::string(4049, '#')}};
  auto over = Api("PUT", "/api/v0/asks/18425001/", json::serialize(body));
  EXPECT_EQ(over.status, 400);
  auto answer = json::parse(over.body).as_object();
  EXPECT_FALSE(answer.at("success").as_bool());
  EXPECT_EQ(answer.at("error").as_string(), "invalid_args");
  EXPECT_EQ(answer.at("ask_id").as_int64(), 18425001);
  EXPECT_NE(std::string(answer.at("msg").as_string()).find("4048"), std::string::npos)
      << answer.at("msg");
  EXPECT_TRUE(sim_->market().List("").empty());
  body["onstart"] = std::string(4048, '#');
  EXPECT_EQ(Api("PUT", "/api/v0/asks/18425001/", json::serialize(body)).status, 200);
  // The client refuses a longer script before any call.
  int64_t before = Counter("PUT /api/v0/asks/{id}/");
  const Offer offer = OfferById("18420311");  // the request points at it: it must outlive r
  LaunchRequest r = Launch(offer, "uid-long");
  r.payload.startup_script = std::string(4049, '#');
  auto refused = provider_->Create(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(KindOf(refused.error()), ErrorKind::kInvalid);
  EXPECT_EQ(Counter("PUT /api/v0/asks/{id}/"), before);
}

TEST_F(VastSimTest, RateLimitedWaitsAsTold) {
  Offer offer = OfferById("18422040");
  auto created = provider_->Create(Launch(offer, "uid-429"));
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  const std::string method = "GET /api/v0/instances/{id}/";
  Fault(method, "rate_limited");
  int64_t before = Counter(method);
  auto t0 = std::chrono::steady_clock::now();
  auto got = provider_->Get(created->id);
  auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_GE(elapsed, std::chrono::seconds(1));  // Retry-After: 1
  EXPECT_EQ(Counter(method) - before, 2);
  // The wire: Vast's 429 body and the header.
  Fault(method, "rate_limited");
  auto raw = Api("GET", "/api/v0/instances/" + created->id + "/");
  EXPECT_EQ(raw.status, 429);
  EXPECT_EQ(raw.Header("retry-after"), "1");
  EXPECT_EQ(json::parse(raw.body).at("msg").as_string(),
            "API requests too frequent endpoint threshold=1.0");
}

class VastRateLimitedTest : public VastSimTest {
 protected:
  void Customize(sim::market::ServerOptions& o) override {
    o.market.rate_limit_rps = 1;
    o.market.rate_limit_burst = 1;
  }
};

TEST_F(VastRateLimitedTest, SimulatorRateLimitAnswersLikeVast) {
  EXPECT_EQ(Api("GET", "/api/v0/users/current/").status, 200);
  auto limited = Api("GET", "/api/v0/users/current/");
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(limited.Header("retry-after"), "1");
  auto body = json::parse(limited.body);
  EXPECT_EQ(body.at("error").as_string(), "rate_limit_exceeded");
  // The client waits as told and gets through.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(provider_->CheckCredentials().ok());
  EXPECT_TRUE(provider_->CheckCredentials().ok());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(900));
}

TEST_F(VastSimTest, CapacityFailures) {
  // One machine behind the ask: the second create finds it rented.
  Offer offer = OfferById("18421502");
  auto first = provider_->Create(Launch(offer, "uid-c1"));
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  auto second = provider_->Create(Launch(offer, "uid-c2"));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(KindOf(second.error()), ErrorKind::kCapacity) << second.error().ToString();
  EXPECT_EQ(second.error().http_status, 410);
  EXPECT_NE(second.error().message.find("no_such_ask"), std::string::npos);
  // The rented offer is no longer offered as rentable.
  auto offers = provider_->ListOffers();
  ASSERT_TRUE(offers.ok());
  EXPECT_TRUE(std::none_of(offers->begin(), offers->end(),
                           [](const Offer& o) { return o.id == "18421502"; }));
  // An injected capacity failure on a create.
  Fault("PUT /api/v0/asks/{id}/", "capacity");
  auto third = provider_->Create(Launch(OfferById("18422040"), "uid-c3"));
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(KindOf(third.error()), ErrorKind::kCapacity);
  // An offer id that never existed.
  Offer ghost = offer;
  ghost.id = "12345";
  auto fourth = provider_->Create(Launch(ghost, "uid-c4"));
  ASSERT_FALSE(fourth.ok());
  EXPECT_EQ(KindOf(fourth.error()), ErrorKind::kCapacity);
  EXPECT_EQ(fourth.error().http_status, 404);
}

TEST_F(VastSimTest, SwallowedCreateIsAmbiguousAndFoundByTag) {
  Fault("PUT /api/v0/asks/{id}/", "swallow");
  Offer offer = OfferById("18420311");
  int64_t before = Counter("PUT /api/v0/asks/{id}/");
  auto r = provider_->Create(Launch(offer, "uid-lost"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KindOf(r.error()), ErrorKind::kAmbiguous) << r.error().ToString();
  EXPECT_EQ(Counter("PUT /api/v0/asks/{id}/") - before, 1) << "a create is never re-sent";
  auto found = provider_->List({{"claim-uid", "uid-lost"}});
  ASSERT_TRUE(found.ok()) << found.error().ToString();
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].name, "gpu-claim-uid-lost");
  EXPECT_EQ(sim_->market().List("").size(), 1u);
}

TEST_F(VastSimTest, ServerErrorsOnReadsAreRetried) {
  Fault("POST /api/v0/bundles/", "unavailable", 2);
  auto offers = provider_->ListOffers();
  ASSERT_TRUE(offers.ok()) << offers.error().ToString();
  EXPECT_FALSE(offers->empty());
  EXPECT_EQ(Counter("POST /api/v0/bundles/"), 3);
}

TEST_F(VastSimTest, ListPagesThroughV1) {
  // More instances than one v1 page (25) holds.
  for (int i = 0; i < 27; ++i) {
    sim::market::Listing l;
    l.id = std::to_string(19100000 + i);
    l.gpu_name = "RTX 3090";
    l.region = "Texas, US";
    l.price = 200000;
    l.spot_price = 100000;
    l.attributes = {{"verification", "verified"}};
    sim_->market().SetListing(l);
  }
  auto offers = provider_->ListOffers();
  ASSERT_TRUE(offers.ok());
  int made = 0;
  for (const auto& o : *offers) {
    if (o.id.rfind("191000", 0) != 0) continue;
    auto c = provider_->Create(Launch(o, "page-" + o.id));
    ASSERT_TRUE(c.ok()) << c.error().ToString();
    ++made;
  }
  ASSERT_EQ(made, 27);
  auto all = provider_->List({{"tgp.io/pool", "default"}});
  ASSERT_TRUE(all.ok()) << all.error().ToString();
  EXPECT_EQ(all->size(), 27u);
  EXPECT_GE(Counter("GET /api/v1/instances/"), 2);
}

}  // namespace
}  // namespace hyperslice::gpu::vast_testing
