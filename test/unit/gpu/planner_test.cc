#include "src/gpu/planner.h"

#include <gtest/gtest.h>
#include <boost/json.hpp>

namespace hyperslice::gpu {
namespace {

Offer O(std::string provider, std::string id, std::string gpu, std::string region, MicroUsd price,
        int count = 1, std::optional<MicroUsd> spot = std::nullopt) {
  Offer o;
  o.provider = std::move(provider);
  o.id = std::move(id);
  o.gpu_type = std::move(gpu);
  o.region = std::move(region);
  o.on_demand_price = price;
  o.spot_price = spot;
  o.gpu_count = count;
  o.gpu_memory_gib = 24;
  o.vcpus = 16 * count;
  o.memory_gib = 64.0 * count;
  return o;
}

PendingPod Pod(const std::string& name, const std::string& extra_spec, int gpus = 1) {
  std::string text =
      R"({"metadata":{"namespace":"default","name":")" + name +
      R"("},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":)" +
      std::to_string(gpus) + R"(}}}])" + extra_spec + "}}";
  auto p = PendingPodFrom(boost::json::parse(text).as_object());
  EXPECT_TRUE(p.ok()) << text;
  return *p;
}

const char* kTolerate =
    R"(,"tolerations":[{"key":"gpu-node","operator":"Equal","value":"true","effect":"NoSchedule"}])";

// Seed 002's pool on seed 002's class.
PoolView SeedPool() {
  PoolView p;
  p.key = "default/ml-workload-pool";
  p.class_name = "standard-gpu-class";
  p.labels = {{kLabelNodePool, "ml-workload-pool"}, {kLabelProvisioned, "true"}};
  p.requirements = {{kLabelGpuType, "In", {"RTX4090"}},
                    {kLabelRegion, "In", {"us-west", "us-east"}}};
  p.taints = {{"gpu-node", "true", "NoSchedule"}};
  p.base.gpu_types = {"RTX4090", "RTX3090"};
  p.base.spot_allowed = true;
  p.base.max_price = 2000000;
  p.base.provider_priority = {{kRunPod, 1}, {kLambda, 2}};
  return p;
}

OfferCatalog Market() {
  return OfferCatalog({
      O(kRunPod, "rp-4090", "RTX4090", "us-west", 740000),
      O(kLambda, "l-4090", "RTX4090", "us-west", 690000),
      O(kVast, "v-4090-eu", "RTX4090", "eu-north", 300000),     // wrong region
      O(kVast, "v-3090", "RTX3090", "us-west", 200000),         // wrong GPU for the pool
      O(kPaperspace, "p-4090", "RTX4090", "us-east", 2500000),  // over maxHourlyPrice
  });
}

TEST(Planner, SeedPoolPicksTheCheapestFittingOffer) {
  auto offers = Market();
  std::vector<PendingPod> pods = {
      Pod("train", std::string(kTolerate) + R"(,"nodeSelector":{"tgp.io/gpu-type":"RTX4090"})")};
  auto plan = MakePlan(pods, {SeedPool()}, {}, offers);
  ASSERT_EQ(plan.machines.size(), 1u)
      << (plan.unplaced.empty() ? "" : plan.unplaced.begin()->second);
  EXPECT_EQ(plan.machines[0].choice.offer->id, "l-4090");
  EXPECT_EQ(plan.machines[0].choice.price, 690000);
}

TEST(Planner, TaintsMustBeTolerated) {
  auto offers = Market();
  auto plan = MakePlan({Pod("p", "")}, {SeedPool()}, {}, offers);
  EXPECT_TRUE(plan.machines.empty());
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_EQ(plan.unplaced.at(0),
            "it does not tolerate pool default/ml-workload-pool's taint gpu-node=true:NoSchedule");
}

TEST(Planner, ConflictingSelectorIsExplained) {
  auto offers = Market();
  auto plan = MakePlan(
      {Pod("p", std::string(kTolerate) + R"(,"nodeSelector":{"tgp.io/gpu-type":"A100-80GB"})")},
      {SeedPool()}, {}, offers);
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_NE(plan.unplaced.at(0).find("tgp.io/gpu-type In [A100-80GB]"), std::string::npos)
      << plan.unplaced.at(0);
  plan = MakePlan({Pod("p", std::string(kTolerate) + R"(,"nodeSelector":{"team":"ml"})")},
                  {SeedPool()}, {}, offers);
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_NE(plan.unplaced.at(0).find("team In [ml]"), std::string::npos) << plan.unplaced.at(0);
}

TEST(Planner, ClassNodeLimitCountsTheBatch) {
  OfferCatalog offers({O(kLambda, "l-4090", "RTX4090", "us-west", 690000)});
  std::vector<PendingPod> pods;
  for (int i = 0; i < 12; ++i) pods.push_back(Pod("p" + std::to_string(100 + i), kTolerate));
  std::map<std::string, Budget> classes = {{"standard-gpu-class", {10, std::nullopt}}};
  auto plan = MakePlan(pods, {SeedPool()}, classes, offers);
  EXPECT_EQ(plan.machines.size(), 10u);
  ASSERT_EQ(plan.unplaced.size(), 2u);
  for (const auto& [i, why] : plan.unplaced) {
    EXPECT_EQ(why, "GPUNodeClass standard-gpu-class has reached its node limit");
  }
}

TEST(Planner, HourlyCostLimit) {
  OfferCatalog offers({O(kLambda, "l-4090", "RTX4090", "us-west", 1000000)});
  std::vector<PendingPod> pods;
  for (int i = 0; i < 5; ++i) pods.push_back(Pod("p" + std::to_string(i), kTolerate));
  std::map<std::string, Budget> classes = {{"standard-gpu-class", {std::nullopt, 3500000}}};
  auto plan = MakePlan(pods, {SeedPool()}, classes, offers);
  EXPECT_EQ(plan.machines.size(), 3u);  // $3/h spent, $0.50 left: a $1 machine does not fit
  EXPECT_EQ(plan.unplaced.size(), 2u);
  // The reason names the limit, not the market: the offer exists, the budget does not reach it.
  for (const auto& [i, why] : plan.unplaced) {
    EXPECT_EQ(why,
              "GPUNodeClass standard-gpu-class has reached its hourly cost limit: $0.50/h left, "
              "the cheapest fitting offer costs $1.00/h");
  }
}

TEST(Planner, PodsShareAMachineWhenThatIsCheaper) {
  OfferCatalog offers({O(kLambda, "one", "RTX4090", "us-west", 1000000, 1),
                       O(kLambda, "two", "RTX4090", "us-west", 1500000, 2)});
  auto pool = SeedPool();
  pool.base.max_price.reset();
  auto plan = MakePlan({Pod("a", kTolerate), Pod("b", kTolerate)}, {pool}, {}, offers);
  ASSERT_EQ(plan.machines.size(), 1u);
  EXPECT_EQ(plan.machines[0].choice.offer->id, "two");
  EXPECT_EQ(plan.machines[0].pods.size(), 2u);
  // Alone, a pod gets the cheaper 1-GPU machine.
  plan = MakePlan({Pod("a", kTolerate)}, {pool}, {}, offers);
  ASSERT_EQ(plan.machines.size(), 1u);
  EXPECT_EQ(plan.machines[0].choice.offer->id, "one");
}

TEST(Planner, HigherWeightPoolFirst) {
  OfferCatalog offers({O(kLambda, "l-4090", "RTX4090", "us-west", 690000),
                       O(kRunPod, "rp-4090", "RTX4090", "us-east", 740000)});
  auto cheap = SeedPool();
  cheap.key = "default/west";
  cheap.requirements = {{kLabelRegion, "In", {"us-west"}}};
  auto heavy = SeedPool();
  heavy.key = "default/east";
  heavy.weight = 50;
  heavy.requirements = {{kLabelRegion, "In", {"us-east"}}};
  auto plan = MakePlan({Pod("p", kTolerate)}, {cheap, heavy}, {}, offers);
  ASSERT_EQ(plan.machines.size(), 1u);
  EXPECT_EQ(plan.machines[0].pool, 1u);
  EXPECT_EQ(plan.machines[0].choice.offer->id, "rp-4090");
}

TEST(Planner, CapacityTypeSelectsSpot) {
  OfferCatalog offers({O(kRunPod, "rp", "RTX4090", "us-west", 740000, 1, 340000),
                       O(kLambda, "l", "RTX4090", "us-west", 690000)});
  auto pool = SeedPool();
  auto plan =
      MakePlan({Pod("p", std::string(kTolerate) +
                             R"(,"nodeSelector":{"karpenter.sh/capacity-type":"on-demand"})")},
               {pool}, {}, offers);
  ASSERT_EQ(plan.machines.size(), 1u);
  EXPECT_FALSE(plan.machines[0].choice.spot);
  EXPECT_EQ(plan.machines[0].choice.offer->id, "l");
  plan = MakePlan({Pod("p", kTolerate)}, {pool}, {}, offers);  // spot allowed and cheaper
  ASSERT_EQ(plan.machines.size(), 1u);
  EXPECT_TRUE(plan.machines[0].choice.spot);
  EXPECT_EQ(plan.machines[0].choice.price, 340000);
  pool.base.spot_allowed = false;
  plan = MakePlan({Pod("p", std::string(kTolerate) + R"(,"nodeSelector":{"tgp.io/spot":"true"})")},
                  {pool}, {}, offers);
  ASSERT_EQ(plan.unplaced.size(), 1u);
  EXPECT_NE(plan.unplaced.at(0).find("spot is not allowed"), std::string::npos)
      << plan.unplaced.at(0);
}

TEST(Planner, SkippedOffersAreNotChosen) {
  auto offers = Market();
  auto plan = MakePlan({Pod("p", kTolerate)}, {SeedPool()}, {}, offers,
                       [](const Offer& o) { return o.id == "l-4090"; });
  ASSERT_EQ(plan.machines.size(), 1u);
  EXPECT_EQ(plan.machines[0].choice.offer->id, "rp-4090");
}

TEST(Planner, PodWithoutGpusIsNotProvisioned) {
  auto offers = Market();
  auto p = PendingPodFrom(
      boost::json::parse(
          R"({"metadata":{"namespace":"d","name":"web"},"spec":{"containers":[{"name":"c"}]}})")
          .as_object());
  ASSERT_TRUE(p.ok());
  auto plan = MakePlan({*p}, {SeedPool()}, {}, offers);
  EXPECT_EQ(plan.unplaced.at(0), "it asks for no nvidia.com/gpu");
}

}  // namespace
}  // namespace hyperslice::gpu
