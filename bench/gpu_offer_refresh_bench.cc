// Offer refresh (issue "Ephemeral GPUs 1/4"): offers decoded and normalised per second, on a
// recorded-shape 10,000-offer Vast.ai search answer (POST /api/v0/bundles/), and the equivalent
// 10,000-offer answers of the providers that list offers through an API: Lambda Cloud
// (GET /api/v1/instance-types: 1,000 instance types x 10 regions with capacity) and RunPod
// (GraphQL gpuTypes with lowestPrice for one data center: 2,500 GPU types x 4 GPU counts).
// Paperspace has no offer API (its offers come from a price table), so it has no case here.
//
// The answer is generated at start from seed 42 with the shape Vast returns: every offer carries
// the ~70 fields vast-cli 1.9.1 vastai/data/offer.py lists (ids, GPU, CPU, disk, network, prices,
// scores, host facts), GPU names from Vast's catalog spellings (some unknown to our tables),
// geolocations "State, CC" across North America, Europe and Asia, ints and doubles as Vast mixes
// them: about 24 MB of JSON (2.4 KB an offer, as Vast's are), generated rather than committed.
// Figures: items_per_second = offers decoded and normalised per second (whole body, one thread).
//   ninja -C build gpu_offer_refresh_bench && build/bench/gpu_offer_refresh_bench
#include <cstdio>
#include <random>
#include <string>
#include <utility>

#include <benchmark/benchmark.h>
#include <boost/json.hpp>

#include "src/gpu/providers/lambda/decode.h"
#include "src/gpu/providers/runpod/decode.h"
#include "src/gpu/providers/vast/decode.h"

namespace {

namespace json = boost::json;

std::string VastSearchAnswer(size_t n, uint64_t seed) {
  struct Gpu {
    const char* name;
    double ram_mb;
    double usd;
  };
  static const Gpu gpus[] = {
      {"RTX 4090", 24564, 0.35},   {"RTX 3090", 24576, 0.19},     {"RTX 5090", 32607, 0.62},
      {"A100 SXM4", 81920, 1.05},  {"A100 SXM4", 40960, 0.80},    {"A100 PCIE", 40960, 0.70},
      {"H100 SXM", 81559, 2.19},   {"H100 PCIE", 81559, 1.90},    {"L40S", 46068, 0.85},
      {"RTX A6000", 49140, 0.47},  {"RTX 6000Ada", 49140, 0.74},  {"RTX 3060", 12288, 0.07},
      {"Tesla V100", 16384, 0.25}, {"RTX 4070S Ti", 16376, 0.16}, {"Q RTX 8000", 49152, 0.40},
  };
  static const char* geos[] = {"California, US",  "Texas, US",     "Quebec, CA", "Ontario, CA",
                               "Germany, DE",     "Sweden, SE",    "Norway, NO", "France, FR",
                               "Netherlands, NL", "Poland, PL",    "Japan, JP",  "Taiwan, TW",
                               "Vietnam, VN",     "Australia, AU", "Brazil, BR", "Virginia, US",
                               "Oregon, US",      "Finland, FI",   "Spain, ES",  "Czechia, CZ"};
  std::mt19937_64 rng(seed);
  auto uni = [&](double lo, double hi) { return std::uniform_real_distribution<>(lo, hi)(rng); };
  json::array offers;
  offers.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Gpu& g = gpus[rng() % std::size(gpus)];
    static const int counts[] = {1, 1, 1, 1, 2, 2, 4, 8};
    int count = counts[rng() % std::size(counts)];
    double dph = g.usd * count * uni(0.8, 1.4) + uni(0.001, 0.02);
    int64_t id = 18000000 + static_cast<int64_t>(i) * 7 + static_cast<int64_t>(rng() % 7);
    double rel = uni(0.9, 0.9999);
    int vcpus = count * static_cast<int>(4 + rng() % 28);
    json::object o;
    o["id"] = id;
    o["ask_contract_id"] = id;
    o["bundle_id"] = id + 900000000;
    o["bundled_results"] = static_cast<int64_t>(rng() % 3);
    o["machine_id"] = static_cast<int64_t>(10000 + rng() % 40000);
    o["host_id"] = static_cast<int64_t>(1000 + rng() % 90000);
    o["num_gpus"] = count;
    o["gpu_name"] = g.name;
    o["gpu_ram"] = g.ram_mb;
    o["gpu_total_ram"] = g.ram_mb * count;
    o["gpu_frac"] = 1.0;
    o["gpu_arch"] = "nvidia";
    o["gpu_lanes"] = 16;
    o["gpu_mem_bw"] = uni(400, 3300);
    o["gpu_max_power"] = uni(200, 700);
    o["gpu_max_temp"] = 83.0;
    o["gpu_display_active"] = rng() % 5 == 0;
    o["compute_cap"] = 860 + static_cast<int64_t>(rng() % 4) * 10;
    o["cuda_max_good"] = 12.0 + static_cast<double>(rng() % 9) / 10;
    o["driver_version"] = "550.54.15";
    o["driver_vers"] = 550054015;
    o["bw_nvlink"] = 0.0;
    o["cpu_name"] = "AMD EPYC 7543 32-Core Processor";
    o["cpu_arch"] = "amd64";
    o["cpu_cores"] = vcpus * 2;
    o["cpu_cores_effective"] = static_cast<double>(vcpus);
    o["cpu_ghz"] = uni(2.0, 4.5);
    o["cpu_ram"] = std::floor(uni(16, 256) * 1024 * count);
    o["has_avx"] = 1;
    o["disk_space"] = uni(50, 4000);
    o["disk_bw"] = uni(500, 6000);
    o["disk_name"] = "Samsung SSD 980 PRO 2TB";
    o["inet_up"] = uni(50, 10000);
    o["inet_down"] = uni(50, 10000);
    o["inet_up_cost"] = uni(0, 0.02);
    o["inet_down_cost"] = uni(0, 0.02);
    o["direct_port_count"] = static_cast<int64_t>(rng() % 500);
    o["pci_gen"] = 4.0;
    o["pcie_bw"] = uni(3, 26);
    o["mobo_name"] = "ROMED8-2T";
    o["os_version"] = "22.04";
    o["dph_base"] = dph * 0.95;
    o["dph_total"] = dph;
    o["min_bid"] = dph * uni(0.4, 0.7);
    o["dlperf"] = uni(5, 300);
    o["dlperf_per_dphtotal"] = uni(10, 300);
    o["flops_per_dphtotal"] = uni(10, 500);
    o["total_flops"] = uni(10, 800);
    o["score"] = uni(10, 400);
    o["vram_costperhour"] = dph / (g.ram_mb / 1024);
    o["storage_cost"] = uni(0.05, 0.3);
    o["storage_total_cost"] = uni(0, 0.05);
    o["credit_discount_max"] = 0.4;
    o["rentable"] = true;
    o["rented"] = false;
    o["is_bid"] = false;
    o["external"] = false;
    o["hosting_type"] = static_cast<int64_t>(rng() % 2);
    o["hostname"] = nullptr;
    o["public_ipaddr"] = "192.0.2." + std::to_string(1 + rng() % 250);
    o["geolocation"] = geos[rng() % std::size(geos)];
    o["geolocode"] = static_cast<int64_t>(rng() % 100000);
    o["reliability"] = rel;
    o["reliability2"] = rel;
    o["reliability_mult"] = uni(0.9, 1.0);
    o["expected_reliability"] = rel;
    o["verification"] = rng() % 8 == 0 ? "unverified" : "verified";
    o["vericode"] = 1;
    o["static_ip"] = rng() % 2 == 0;
    o["vms_enabled"] = rng() % 4 == 0;
    o["is_vm_deverified"] = false;
    o["logo"] = "/static/logos/vastai_small2.png";
    o["webpage"] = nullptr;
    o["resource_type"] = "gpu";
    o["start_date"] = 1.7e9 + uni(0, 3e7);
    o["end_date"] = 1.8e9 + uni(0, 3e7);
    o["duration"] = uni(86400, 86400 * 180);
    o["cluster_id"] = nullptr;
    o["avail_vol_ask_id"] = nullptr;
    o["avail_vol_dph"] = nullptr;
    o["avail_vol_size"] = nullptr;
    o["platform_fee"] = 0.0;
    o["expected_reliability"] = rel;
    o["rn"] = static_cast<int64_t>(i + 1);
    json::object price{{"gpuCostPerHour", dph * 0.95},
                       {"diskHour", dph * 0.05},
                       {"totalHour", dph},
                       {"discountTotalHour", 0},
                       {"discountedTotalPerHour", dph}};
    o["search"] = price;
    o["instance"] = std::move(price);
    offers.emplace_back(std::move(o));
  }
  return json::serialize(json::object{{"offers", std::move(offers)}});
}

// Lambda Cloud OpenAPI 1.8.3 InstanceTypes: {"data": {"<name>": {"instance_type": {...},
// "regions_with_capacity_available": [{"name","description"}]}}}.
std::string LambdaInstanceTypes(size_t types, uint64_t seed) {
  static const char* gpus[] = {"H100 (80 GB SXM5)", "A100 (40 GB SXM4)",  "A100 (80 GB SXM4)",
                               "A10 (24 GB PCIe)",  "A6000 (48 GB)",      "H100 (80 GB PCIe)",
                               "GH200 (96 GB)",     "B200 (180 GB SXM6)", "V100 (16 GB)"};
  static const std::pair<const char*, const char*> regions[] = {
      {"us-east-1", "Virginia, USA"},  {"us-west-1", "California, USA"},
      {"us-west-2", "Arizona, USA"},   {"us-west-3", "Utah, USA"},
      {"us-south-1", "Texas, USA"},    {"us-midwest-1", "Illinois, USA"},
      {"europe-central-1", "Germany"}, {"asia-northeast-1", "Tokyo, Japan"},
      {"asia-south-1", "India"},       {"me-west-1", "Israel"}};
  std::mt19937_64 rng(seed);
  json::object data;
  for (size_t i = 0; i < types; ++i) {
    const char* g = gpus[rng() % std::size(gpus)];
    static const int counts[] = {1, 1, 2, 4, 8};
    int n = counts[rng() % std::size(counts)];
    std::string name = "gpu_" + std::to_string(n) + "x_type" + std::to_string(i);
    json::array avail;
    for (const auto& [rn, rd] : regions)
      avail.push_back(json::object{{"name", rn}, {"description", rd}});
    data[name] = json::object{
        {"instance_type",
         json::object{{"name", name},
                      {"description", std::to_string(n) + "x " + g},
                      {"gpu_description", g},
                      {"price_cents_per_hour", static_cast<int64_t>(50 + rng() % 3000) * n},
                      {"specs", json::object{{"vcpus", 8 * n + static_cast<int>(rng() % 24)},
                                             {"memory_gib", 64 * n},
                                             {"storage_gib", 512 * n},
                                             {"gpus", n}}}}},
        {"regions_with_capacity_available", std::move(avail)}};
  }
  return json::serialize(json::object{{"data", std::move(data)}});
}

// runpod-python's gpuTypes query with lowestPrice(input: {gpuCount: 1, dataCenterId: ...}).
std::string RunPodGpuTypes(size_t types, uint64_t seed) {
  static const std::pair<const char*, double> gpus[] = {{"NVIDIA GeForce RTX 4090", 24},
                                                        {"NVIDIA GeForce RTX 3090", 24},
                                                        {"NVIDIA A100 80GB PCIe", 80},
                                                        {"NVIDIA A100-SXM4-80GB", 80},
                                                        {"NVIDIA H100 80GB HBM3", 80},
                                                        {"NVIDIA H100 PCIe", 80},
                                                        {"NVIDIA L40S", 48},
                                                        {"NVIDIA RTX A6000", 48},
                                                        {"NVIDIA RTX 6000 Ada Generation", 48},
                                                        {"NVIDIA H200", 141}};
  std::mt19937_64 rng(seed);
  json::array list;
  for (size_t i = 0; i < types; ++i) {
    const auto& [id, mem] = gpus[rng() % std::size(gpus)];
    double usd = 0.2 + static_cast<double>(rng() % 3000) / 1000;
    list.push_back(
        json::object{{"id", id},
                     {"displayName", id},
                     {"memoryInGb", mem},
                     {"secureCloud", rng() % 2 == 0},
                     {"communityCloud", true},
                     {"lowestPrice", json::object{{"gpuName", id},
                                                  {"gpuTypeId", id},
                                                  {"uninterruptablePrice", usd},
                                                  {"minimumBidPrice", usd * 0.5},
                                                  {"stockStatus", "High"},
                                                  {"availableGpuCounts", json::array{1, 2, 4, 8}},
                                                  {"minVcpu", 8},
                                                  {"minMemory", 32}}}});
  }
  return json::serialize(json::object{{"data", json::object{{"gpuTypes", std::move(list)}}}});
}

const std::string& Answer() {
  static const std::string body = VastSearchAnswer(10000, 42);
  return body;
}

template <typename Decode>
void Refresh(benchmark::State& state, const std::string& body, Decode decode) {
  size_t decoded = 0, known_gpu = 0, known_region = 0;
  for (auto _ : state) {
    auto offers = decode(body);
    if (!offers.ok()) {
      state.SkipWithError(offers.error().message.c_str());
      return;
    }
    decoded = offers->size();
    known_gpu = known_region = 0;
    for (const auto& o : *offers) {
      known_gpu += o.gpu_type_known ? 1 : 0;
      known_region += o.region_known ? 1 : 0;
    }
    benchmark::DoNotOptimize(offers);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * decoded));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
  state.counters["offers"] = static_cast<double>(decoded);
  state.counters["known_gpu"] = static_cast<double>(known_gpu);
  state.counters["known_region"] = static_cast<double>(known_region);
  state.counters["body_kb"] = static_cast<double>(body.size()) / 1024;
}

void BM_LambdaOfferRefresh(benchmark::State& state) {
  static const std::string body = LambdaInstanceTypes(1000, 42);
  Refresh(state, body, [](const std::string& b) {
    return hyperslice::gpu::providers::lambda::DecodeInstanceTypes(b);
  });
}
BENCHMARK(BM_LambdaOfferRefresh)->Unit(benchmark::kMillisecond);

void BM_RunPodOfferRefresh(benchmark::State& state) {
  static const std::string body = RunPodGpuTypes(2500, 42);
  Refresh(state, body, [](const std::string& b) {
    return hyperslice::gpu::providers::runpod::DecodeOffers(b, "US-CA-2");
  });
}
BENCHMARK(BM_RunPodOfferRefresh)->Unit(benchmark::kMillisecond);

void BM_VastOfferRefresh(benchmark::State& state) {
  Refresh(state, Answer(),
          [](const std::string& b) { return hyperslice::gpu::providers::vast::DecodeOffers(b); });
}
BENCHMARK(BM_VastOfferRefresh)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
