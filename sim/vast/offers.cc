// The Vast.ai market the simulator sells and how one listing looks as a search result.
// Offer fields and units follow vast-cli 1.9.1 vastai/data/offer.py and the search offers help
// (gpu_ram and cpu_ram in MB, disk_space in GB, prices in $/h for the whole offer, geolocation
// "State, CC"); openapi.yaml GET /api/v0/bundles/ lists the core ones.
#include <cmath>

#include "sim/vast/internal.h"
#include "sim/vast/simulator.h"

namespace hyperslice::sim::vast {

namespace internal {

namespace {

std::string Attr(const market::Listing& l, const std::string& key, const char* fallback) {
  auto it = l.attributes.find(key);
  return it == l.attributes.end() ? std::string(fallback) : it->second;
}

double AttrNum(const market::Listing& l, const std::string& key, double fallback) {
  auto it = l.attributes.find(key);
  if (it == l.attributes.end()) return fallback;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  return end && *end == '\0' ? v : fallback;
}

int64_t AsInt(const std::string& s, int64_t fallback) {
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  return end && *end == '\0' && !s.empty() ? v : fallback;
}

double Usd(market::MicroUsd m) { return static_cast<double>(m) / 1e6; }

}  // namespace

json::object OfferJson(const market::Listing& l, int available, std::string_view type) {
  int64_t id = AsInt(l.id, 0);
  std::string verification = Attr(l, "verification", "verified");
  double reliability = AttrNum(l, "reliability", 0.995);
  double gpu_ram_mb = std::round(l.gpu_memory_gb * 1024);
  double min_bid = l.spot_price ? Usd(*l.spot_price) : 0;
  // With type "bid" Vast prices the search at the interruptible minimum.
  double dph = type == "bid" && l.spot_price ? min_bid : Usd(l.price);
  double storage_cost = AttrNum(l, "storage_cost", 0.15);  // $/GB/month
  json::object o;
  o["id"] = id;
  o["ask_contract_id"] = id;
  o["bundle_id"] = id + 1000000;
  o["bundled_results"] = 0;
  o["machine_id"] = AsInt(Attr(l, "machine_id", "0"), 0);
  o["host_id"] = AsInt(Attr(l, "host_id", "0"), 0);
  o["num_gpus"] = l.gpu_count;
  o["gpu_name"] = l.gpu_name;
  o["gpu_ram"] = gpu_ram_mb;
  o["gpu_total_ram"] = gpu_ram_mb * l.gpu_count;
  o["gpu_frac"] = 1.0;
  o["gpu_arch"] = "nvidia";
  o["gpu_lanes"] = 16;
  o["gpu_display_active"] = false;
  o["gpu_max_power"] = AttrNum(l, "gpu_max_power", 450);
  o["gpu_max_temp"] = 83.0;
  o["gpu_mem_bw"] = AttrNum(l, "gpu_mem_bw", 1000);
  o["compute_cap"] = static_cast<int64_t>(AttrNum(l, "compute_cap", 890));
  o["cuda_max_good"] = AttrNum(l, "cuda_max_good", 12.4);
  o["driver_version"] = Attr(l, "driver_version", "550.54.15");
  o["bw_nvlink"] = 0.0;
  o["cpu_name"] = Attr(l, "cpu_name", "AMD EPYC 7543 32-Core Processor");
  o["cpu_arch"] = "amd64";
  o["cpu_cores"] = l.vcpus * 2;
  o["cpu_cores_effective"] = static_cast<double>(l.vcpus);
  o["cpu_ghz"] = 2.8;
  o["cpu_ram"] = std::round(l.memory_gb * 1024);
  o["has_avx"] = 1;
  o["disk_space"] = l.disk_gb;
  o["disk_bw"] = 2000.0;
  o["disk_name"] = "Samsung SSD 980 PRO 2TB";
  o["inet_up"] = AttrNum(l, "inet_up", 800);
  o["inet_down"] = AttrNum(l, "inet_down", 900);
  o["inet_up_cost"] = 0.005;
  o["inet_down_cost"] = 0.005;
  o["direct_port_count"] = 64;
  o["pci_gen"] = 4.0;
  o["pcie_bw"] = 24.5;
  o["mobo_name"] = "H12SSL-i";
  o["os_version"] = "22.04";
  o["dph_base"] = dph;
  o["dph_total"] = dph;
  o["min_bid"] = min_bid;
  o["storage_cost"] = storage_cost;
  // The price breakdown searches carry (openapi.yaml Instance/searchOffers "search").
  json::object breakdown{{"gpuCostPerHour", dph},
                         {"diskHour", 0.0},
                         {"totalHour", dph},
                         {"discountTotalHour", 0.0},
                         {"discountedTotalPerHour", dph}};
  o["search"] = breakdown;
  o["instance"] = std::move(breakdown);
  o["storage_total_cost"] = 0.0;
  o["dlperf"] = AttrNum(l, "dlperf", 40.0 * l.gpu_count);
  o["dlperf_per_dphtotal"] = dph > 0 ? AttrNum(l, "dlperf", 40.0 * l.gpu_count) / dph : 0.0;
  o["total_flops"] = AttrNum(l, "total_flops", 80.0 * l.gpu_count);
  o["flops_per_dphtotal"] = dph > 0 ? AttrNum(l, "total_flops", 80.0 * l.gpu_count) / dph : 0.0;
  o["score"] = reliability * 100;
  o["rentable"] = available > 0;
  o["rented"] = false;
  o["is_bid"] = false;
  o["external"] = false;
  o["datacenter"] = Attr(l, "datacenter", "true") == "true";
  o["hosting_type"] = Attr(l, "datacenter", "true") == "true" ? 1 : 0;
  o["geolocation"] = l.region;
  o["geolocode"] = static_cast<int64_t>(AttrNum(l, "geolocode", 0));
  o["reliability"] = reliability;
  o["reliability2"] = reliability;
  o["expected_reliability"] = reliability;
  o["reliability_mult"] = 1.0;
  o["verification"] = verification;
  o["verified"] = verification == "verified";
  o["static_ip"] = true;
  o["vms_enabled"] = Attr(l, "vms_enabled", "false") == "true";
  o["public_ipaddr"] = "192.0.2." + std::to_string(1 + id % 250);  // TEST-NET-1, never dialed
  o["duration"] = 30.0 * 86400;
  o["resource_type"] = "gpu";
  return o;
}

const std::vector<std::string>& OfferFields() {
  static const std::vector<std::string> fields = [] {
    std::vector<std::string> f;
    for (const auto& [k, v] : OfferJson(market::Listing{}, 1, "on-demand")) f.emplace_back(k);
    // vast-cli offers_fields that the rendered offer does not carry are still filterable
    // (they match null).
    for (const char* k :
         {"cuda_vers", "dph", "gpu_ram_free_min", "ubuntu_version", "flops_usd", "dlperf_usd",
          "display_active", "cluster_id", "target_reliability", "has_sla", "country_code"}) {
      f.emplace_back(k);
    }
    return f;
  }();
  return fields;
}

const std::vector<std::string>& InstanceFields() {
  static const std::vector<std::string> fields = [] {
    std::vector<std::string> f = FilterableInstanceFields();
    for (const char* k : {"dph_total", "dph_base", "min_bid", "num_gpus", "gpu_ram", "cpu_ram",
                          "cpu_cores_effective", "disk_space", "reliability2", "uptime_mins",
                          "geolocation", "public_ipaddr", "duration"}) {
      f.emplace_back(k);
    }
    return f;
  }();
  return fields;
}

// openapi.yaml showInstances: "Filterable columns: actual_status, gpu_name, verification, id,
// label, and other columns stored directly on the contract record"; computed ones are not.
const std::vector<std::string>& FilterableInstanceFields() {
  static const std::vector<std::string> fields = {
      "id",         "machine_id",   "host_id",         "actual_status", "intended_status",
      "cur_state",  "next_state",   "image_uuid",      "image_runtype", "label",
      "gpu_name",   "verification", "is_bid",          "start_date",    "end_date",
      "status_msg", "template_id",  "template_hash_id"};
  return fields;
}

}  // namespace internal

// A small, plausible Vast.ai market: consumer and datacenter GPUs from hosts in North America and
// Europe, prices in the range Vast showed for each GPU, one machine per ask (an ask is rented
// once), a few asks with more than one identical machine behind them.
std::vector<market::Listing> DefaultListings() {
  struct Row {
    const char* id;
    const char* gpu;
    int count;
    double mem_gb;
    int vcpus;
    double ram_gb;
    double disk_gb;
    const char* geo;
    double usd;
    double bid;
    int capacity;
    const char* machine;
    const char* host;
    const char* reliability;
  };
  static const Row rows[] = {
      {"18420311", "RTX 4090", 1, 24, 16, 64, 500, "California, US", 0.35, 0.18, 2, "31204",
       "48112", "0.9961"},
      {"18420377", "RTX 4090", 2, 24, 32, 128, 1000, "Quebec, CA", 0.69, 0.36, 1, "30877", "51430",
       "0.9978"},
      {"18421502", "RTX 4090", 1, 24, 12, 48, 300, "Germany, DE", 0.41, 0.21, 1, "29551", "40019",
       "0.9902"},
      {"18422040", "RTX 3090", 1, 24, 8, 32, 250, "Texas, US", 0.19, 0.09, 2, "22718", "37701",
       "0.9893"},
      {"18422118", "RTX 3090", 4, 24, 32, 128, 1500, "Germany, DE", 0.74, 0.38, 1, "27180", "40019",
       "0.9935"},
      {"18423006", "A100 SXM4", 1, 80, 28, 240, 1000, "Quebec, CA", 1.05, 0.62, 1, "33410", "51430",
       "0.9990"},
      {"18423091", "A100 SXM4", 8, 40, 128, 1024, 4000, "California, US", 6.40, 3.90, 1, "33952",
       "48112", "0.9987"},
      {"18424210", "H100 SXM", 1, 80, 24, 250, 1000, "California, US", 2.19, 1.40, 1, "35020",
       "55211", "0.9994"},
      {"18424288", "H100 SXM", 8, 80, 192, 2000, 8000, "Quebec, CA", 17.20, 11.00, 1, "35107",
       "51430", "0.9996"},
  };
  std::vector<market::Listing> out;
  for (const auto& r : rows) {
    market::Listing l;
    l.id = r.id;
    l.gpu_name = r.gpu;
    l.gpu_count = r.count;
    l.gpu_memory_gb = r.mem_gb;
    l.vcpus = r.vcpus;
    l.memory_gb = r.ram_gb;
    l.disk_gb = r.disk_gb;
    l.region = r.geo;
    l.price = static_cast<market::MicroUsd>(std::llround(r.usd * 1e6));
    l.spot_price = static_cast<market::MicroUsd>(std::llround(r.bid * 1e6));
    l.capacity = r.capacity;
    l.attributes = {{"machine_id", r.machine},
                    {"host_id", r.host},
                    {"reliability", r.reliability},
                    {"verification", "verified"}};
    out.push_back(std::move(l));
  }
  return out;
}

market::Listing Rtx4090Listing(const std::string& id, bool vm, market::MicroUsd price) {
  market::Listing l = DefaultListings().front();  // 18420311, California
  l.id = id;
  l.price = price;
  l.spot_price = price / 2;
  l.capacity = 1;
  if (vm) l.attributes["vms_enabled"] = "true";
  return l;
}

}  // namespace hyperslice::sim::vast
