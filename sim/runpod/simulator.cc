// The RunPod simulator: POST /graphql (api.cc) and the shared /control endpoint over one market.
// A market listing is one GPU type in one data center sold as pods of `gpu_count` GPUs: id
// "<dataCenterId>/<slug>/x<count>" is the simulator's own (RunPod has no listing ids), gpu_name
// the RunPod gpuTypeId, region the dataCenterId, attributes displayName, manufacturer,
// secureCloud ("true": Secure Cloud, "false": Community Cloud) and cudaCores.
#include "sim/runpod/simulator.h"

#include <cctype>
#include <cmath>

#include "sim/runpod/internal.h"

namespace hyperslice::sim::runpod {

namespace {

struct Row {
  const char* gpu_type_id;
  const char* display;
  int memory_gb;
  int cuda_cores;
  const char* dc;
  int gpus;
  double price_per_gpu;  // on-demand, $/h
  double spot_per_gpu;   // minimum bid, $/h; 0: no spot
  int vcpus_per_gpu;
  int ram_per_gpu;
  int capacity;
  bool secure;
};

// Prices and specs in the range RunPod lists them (console "GPU Cloud" pricing, 2025).
constexpr Row kRows[] = {
    {"NVIDIA GeForce RTX 4090", "RTX 4090", 24, 16384, "US-CA-2", 1, 0.69, 0.35, 6, 41, 4, true},
    {"NVIDIA GeForce RTX 4090", "RTX 4090", 24, 16384, "US-CA-2", 2, 0.69, 0.35, 6, 41, 2, true},
    {"NVIDIA GeForce RTX 4090", "RTX 4090", 24, 16384, "EU-RO-1", 1, 0.59, 0.29, 5, 30, 3, false},
    {"NVIDIA A100 80GB PCIe", "A100 PCIe", 80, 6912, "US-TX-3", 1, 1.64, 0.82, 8, 117, 2, true},
    {"NVIDIA A100 80GB PCIe", "A100 PCIe", 80, 6912, "US-TX-3", 8, 1.64, 0.82, 8, 117, 1, true},
    {"NVIDIA H100 80GB HBM3", "H100 SXM", 80, 16896, "US-KS-2", 1, 2.99, 1.75, 16, 125, 2, true},
    {"NVIDIA H100 80GB HBM3", "H100 SXM", 80, 16896, "US-KS-2", 8, 2.99, 1.75, 16, 125, 1, true},
    {"NVIDIA RTX A6000", "RTX A6000", 48, 10752, "EU-SE-1", 1, 0.49, 0.25, 8, 50, 3, false},
    {"NVIDIA RTX A6000", "RTX A6000", 48, 10752, "CA-MTL-1", 1, 0.49, 0.0, 8, 50, 2, true},
    {"NVIDIA L40S", "L40S", 48, 18176, "EUR-IS-1", 1, 0.86, 0.43, 12, 62, 2, true},
};

std::string Slug(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  return out;
}

}  // namespace

std::vector<market::Listing> DefaultListings() {
  std::vector<market::Listing> out;
  for (const auto& r : kRows) {
    market::Listing l;
    l.id = std::string(r.dc) + "/" + Slug(r.gpu_type_id) + "/x" + std::to_string(r.gpus);
    l.gpu_name = r.gpu_type_id;
    l.gpu_count = r.gpus;
    l.gpu_memory_gb = r.memory_gb;
    l.vcpus = r.vcpus_per_gpu * r.gpus;
    l.memory_gb = r.ram_per_gpu * r.gpus;
    l.disk_gb = 200.0 * r.gpus;
    l.region = r.dc;
    l.price = std::llround(r.price_per_gpu * 1e6) * r.gpus;
    if (r.spot_per_gpu > 0) {
      l.spot_price = std::llround(r.spot_per_gpu * 1e6) * r.gpus;
    }
    l.capacity = r.capacity;
    l.attributes = {{"displayName", r.display},
                    {"manufacturer", "Nvidia"},
                    {"secureCloud", r.secure ? "true" : "false"},
                    {"cudaCores", std::to_string(r.cuda_cores)}};
    out.push_back(std::move(l));
  }
  return out;
}

Result<std::unique_ptr<market::MarketSimulator>> Start(market::ServerOptions options) {
  if (options.market.listings.empty()) options.market.listings = DefaultListings();
  options.market.provider = "runpod";
  return market::StartMarketSimulator(std::move(options),
                                      [](market::Market& m) { return NewApi(m); });
}

}  // namespace hyperslice::sim::runpod
