#include "src/gpu/selection.h"

#include <gtest/gtest.h>

namespace hyperslice::gpu {
namespace {

Offer MakeOffer(std::string provider, std::string id, std::string gpu, std::string region,
                std::optional<MicroUsd> od, std::optional<MicroUsd> spot = std::nullopt,
                int count = 1) {
  Offer o;
  o.provider = std::move(provider);
  o.id = std::move(id);
  o.gpu_type = std::move(gpu);
  o.gpu_type_known = true;
  o.region = std::move(region);
  o.region_known = true;
  o.on_demand_price = od;
  o.spot_price = spot;
  o.gpu_count = count;
  o.gpu_memory_gib = 24;
  o.vcpus = 16;
  o.memory_gib = 64;
  return o;
}

TEST(Selection, CheapestFittingOffer) {
  OfferCatalog cat({
      MakeOffer(kRunPod, "a", "RTX4090", "us-west", 740000),
      MakeOffer(kLambda, "b", "RTX4090", "us-west", 690000),
      MakeOffer(kVast, "c", "RTX4090", "eu-north", 300000),
      MakeOffer(kVast, "d", "A100-80GB", "us-west", 100000),
  });
  OfferRequirements req;
  req.gpu_types = {"RTX4090"};
  req.regions = {"us-west", "us-east"};
  auto c = cat.Select(req);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->offer->id, "b");
  EXPECT_EQ(c->price, 690000);
  EXPECT_FALSE(c->spot);
}

TEST(Selection, SpotOnlyWhenAllowedAndCheaper) {
  OfferCatalog cat({MakeOffer(kRunPod, "a", "RTX4090", "us-west", 740000, 350000),
                    MakeOffer(kLambda, "b", "RTX4090", "us-west", 690000)});
  OfferRequirements req;
  req.gpu_types = {"RTX4090"};
  EXPECT_EQ(cat.Select(req)->offer->id, "b");
  req.spot_allowed = true;
  auto c = cat.Select(req);
  EXPECT_EQ(c->offer->id, "a");
  EXPECT_TRUE(c->spot);
  EXPECT_EQ(c->price, 350000);
}

TEST(Selection, PriorityBreaksPriceTies) {
  OfferCatalog cat({MakeOffer(kVast, "a", "RTX4090", "us-west", 500000),
                    MakeOffer(kRunPod, "b", "RTX4090", "us-west", 500000)});
  OfferRequirements req;
  req.provider_priority = {{kRunPod, 1}, {kVast, 2}};
  EXPECT_EQ(cat.Select(req)->offer->id, "b");
  req.provider_priority = {{kRunPod, 3}, {kVast, 2}};
  EXPECT_EQ(cat.Select(req)->offer->id, "a");
}

TEST(Selection, LimitsAndSkip) {
  OfferCatalog cat({MakeOffer(kRunPod, "a", "RTX4090", "us-west", 300000),
                    MakeOffer(kLambda, "b", "RTX4090", "us-west", 690000, std::nullopt, 2)});
  OfferRequirements req;
  req.max_price = 500000;
  EXPECT_EQ(cat.Select(req)->offer->id, "a");
  EXPECT_FALSE(cat.Select(req, [](const Offer& o) { return o.id == "a"; }));
  req.max_price.reset();
  EXPECT_EQ(cat.Select(req, [](const Offer& o) { return o.id == "a"; })->offer->id, "b");
  req.min_gpu_count = 2;
  EXPECT_EQ(cat.Select(req)->offer->id, "b");
  req.excluded_gpu_types = {"RTX4090"};
  EXPECT_FALSE(cat.Select(req));
}

TEST(Selection, UnknownRequiredNameMatchesNothing) {
  OfferCatalog cat({MakeOffer(kRunPod, "a", "RTX4090", "us-west", 300000)});
  OfferRequirements req;
  req.gpu_types = {"RTX9999"};
  EXPECT_FALSE(cat.Select(req));
  EXPECT_NE(cat.Explain(req).find("of GPU type RTX9999"), std::string::npos) << cat.Explain(req);
}

TEST(Selection, ExplainNamesThePriceLimit) {
  OfferCatalog cat({MakeOffer(kRunPod, "a", "RTX4090", "us-west", 2350000)});
  OfferRequirements req;
  req.gpu_types = {"RTX4090"};
  req.regions = {"us-west"};
  req.max_price = 2000000;
  EXPECT_FALSE(cat.Select(req));
  EXPECT_EQ(cat.Explain(req),
            "no offer of GPU type RTX4090 in us-west with at least 1 GPU(s) on demand available "
            "now at or under $2.00/h (the cheapest is $2.35/h)");
}

TEST(Selection, UnavailableOffersAreSkipped) {
  auto full = MakeOffer(kRunPod, "a", "RTX4090", "us-west", 100000);
  full.available = 0;
  OfferCatalog cat({full, MakeOffer(kLambda, "b", "RTX4090", "us-west", 690000)});
  EXPECT_EQ(cat.Select({})->offer->id, "b");
}

}  // namespace
}  // namespace hyperslice::gpu
