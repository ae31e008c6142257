// Choosing the cheapest fitting offer among 100,000 normalised offers (issue "Ephemeral GPUs 1/4":
// aim p99 < 5 ms per selection).
//
// The offers are generated deterministically (seed 42) across the four providers, 30 GPU types,
// 18 regions, 1-8 GPUs, on-demand and spot prices; about 1 in 10 has nothing available. Each
// selection is a pod's requirements as the provisioner builds them (a GPU type or two, regions,
// GPU count, minimum memory and vCPUs, a price cap, spot allowed half the time, provider
// priorities) and skips the offers an unavailable-offers cache holds (1 %).
// Figures: Google Benchmark's time per selection, plus p50/p99 over 2,000 timed selections printed
// at the end, and the time to build the catalog (done once per offer refresh).
//   ninja -C build gpu_select_bench && build/bench/gpu_select_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <unordered_set>

#include <benchmark/benchmark.h>

#include "src/gpu/normalize.h"
#include "src/gpu/selection.h"

namespace {

using hyperslice::gpu::MicroUsd;
using hyperslice::gpu::Offer;
using hyperslice::gpu::OfferCatalog;
using hyperslice::gpu::OfferRequirements;

std::vector<Offer> MakeOffers(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto& gpus = hyperslice::gpu::KnownGpuTypes();
  const auto& regions = hyperslice::gpu::KnownRegions();
  const char* providers[] = {"runpod", "lambdalabs", "paperspace", "vastai"};
  std::vector<Offer> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    Offer o;
    o.provider = providers[rng() % 4];
    o.id = o.provider + "-" + std::to_string(i);
    o.gpu_type = gpus[rng() % gpus.size()];
    o.gpu_type_known = true;
    o.region = regions[rng() % regions.size()];
    o.region_known = true;
    static const int counts[] = {1, 1, 1, 2, 2, 4, 8};
    o.gpu_count = counts[rng() % 7];
    o.gpu_memory_gib = static_cast<double>(16 + 8 * (rng() % 10));
    o.vcpus = 4 * o.gpu_count + static_cast<int>(rng() % 16);
    o.memory_gib = 16.0 * o.gpu_count + static_cast<double>(rng() % 64);
    MicroUsd base = static_cast<MicroUsd>(150000 + rng() % 3000000) * o.gpu_count;
    if (rng() % 10 != 0) o.on_demand_price = base;
    if (o.provider == std::string("runpod") || o.provider == std::string("vastai")) {
      o.spot_price = base / 2 + static_cast<MicroUsd>(rng() % 100000);
    }
    o.available = (rng() % 10 == 0) ? 0 : static_cast<int>(rng() % 20) - 1;
    out.push_back(std::move(o));
  }
  return out;
}

std::vector<OfferRequirements> MakeRequests(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto& gpus = hyperslice::gpu::KnownGpuTypes();
  const auto& regions = hyperslice::gpu::KnownRegions();
  std::vector<OfferRequirements> out;
  for (size_t i = 0; i < n; ++i) {
    OfferRequirements r;
    r.gpu_types.insert(gpus[rng() % gpus.size()]);
    if (rng() % 2) r.gpu_types.insert(gpus[rng() % gpus.size()]);
    for (int k = 0; k < 3; ++k) r.regions.insert(regions[rng() % regions.size()]);
    r.min_gpu_count = static_cast<int>(1 + rng() % 2);
    r.min_gpu_memory_gib = 16;
    r.min_vcpus = 4;
    r.spot_allowed = rng() % 2;
    r.max_price = static_cast<MicroUsd>(2000000 + rng() % 4000000);
    r.provider_priority = {{"runpod", 1}, {"lambdalabs", 2}, {"paperspace", 3}, {"vastai", 4}};
    out.push_back(std::move(r));
  }
  return out;
}

const OfferCatalog& Catalog() {
  static const OfferCatalog c(MakeOffers(100000, 42));
  return c;
}

std::unordered_set<std::string> Unavailable() {
  std::unordered_set<std::string> s;
  for (size_t i = 0; i < 100000; i += 100) s.insert(Catalog().offers()[i].id);
  return s;
}

void SelectCheapest(benchmark::State& state) {
  const auto& cat = Catalog();
  auto reqs = MakeRequests(256, 7);
  auto skip = Unavailable();
  size_t i = 0, found = 0;
  for (auto _ : state) {
    auto c =
        cat.Select(reqs[i++ % reqs.size()], [&](const Offer& o) { return skip.count(o.id) > 0; });
    found += c.has_value();
    benchmark::DoNotOptimize(c);
  }
  state.counters["offers"] = static_cast<double>(cat.size());
  state.counters["found_fraction"] =
      static_cast<double>(found) / static_cast<double>(state.iterations());
}
BENCHMARK(SelectCheapest)->Unit(benchmark::kMicrosecond);

void BuildCatalog(benchmark::State& state) {
  auto offers = MakeOffers(100000, 42);
  for (auto _ : state) {
    OfferCatalog c(offers);
    benchmark::DoNotOptimize(c);
  }
}
BENCHMARK(BuildCatalog)->Unit(benchmark::kMillisecond);

void PrintPercentiles() {
  const auto& cat = Catalog();
  auto reqs = MakeRequests(2000, 11);
  auto skip = Unavailable();
  std::vector<double> us;
  for (const auto& r : reqs) {
    auto t0 = std::chrono::steady_clock::now();
    auto c = cat.Select(r, [&](const Offer& o) { return skip.count(o.id) > 0; });
    benchmark::DoNotOptimize(c);
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::printf("selection over %zu offers, %zu requests: p50 %.1f us, p99 %.1f us, max %.1f us\n",
              cat.size(), us.size(), us[us.size() / 2], us[us.size() * 99 / 100], us.back());
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  PrintPercentiles();
  benchmark::Shutdown();
  return 0;
}
