// The normalisation tables (version kTablesVersion in normalize.h). Each provider's exact
// spellings come first; then a provider-independent rule set on a canonical key (upper case,
// vendor words and punctuation removed), so a provider's new spelling of a known GPU ("RTX_4090",
// "GeForce RTX 4090") still maps; anything else is returned unknown.
#include "src/gpu/normalize.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <tuple>

#include "src/base/strings.h"

namespace hyperslice::gpu {

namespace {

struct Alias {
  const char* provider;  // "" = any provider
  const char* spelling;
  const char* normalized;
};

// Exact spellings seen in each provider's API (and served by its simulator).
constexpr Alias kGpuExact[] = {
    // RunPod gpuTypes ids (runpod-python `get_gpus`; RunPod docs "GPU types").
    {"runpod", "NVIDIA GeForce RTX 4090", "RTX4090"},
    {"runpod", "NVIDIA GeForce RTX 3090", "RTX3090"},
    {"runpod", "NVIDIA GeForce RTX 5090", "RTX5090"},
    {"runpod", "NVIDIA A100 80GB PCIe", "A100-80GB"},
    {"runpod", "NVIDIA A100-SXM4-80GB", "A100-80GB"},
    {"runpod", "NVIDIA H100 80GB HBM3", "H100-SXM"},
    {"runpod", "NVIDIA H100 PCIe", "H100-PCIe"},
    {"runpod", "NVIDIA H100 NVL", "H100-NVL"},
    {"runpod", "NVIDIA RTX A6000", "A6000"},
    {"runpod", "NVIDIA RTX 6000 Ada Generation", "RTX6000-Ada"},
    {"runpod", "NVIDIA L40S", "L40S"},
    // Lambda instance types' gpu_description (Lambda Cloud API 1.8.3, /instance-types).
    {"lambdalabs", "A10 (24 GB PCIe)", "A10"},
    {"lambdalabs", "A100 (40 GB SXM4)", "A100-40GB"},
    {"lambdalabs", "A100 (40 GB PCIe)", "A100-40GB"},
    {"lambdalabs", "A100 (80 GB SXM4)", "A100-80GB"},
    {"lambdalabs", "H100 (80 GB PCIe)", "H100-PCIe"},
    {"lambdalabs", "H100 (80 GB SXM5)", "H100-SXM"},
    {"lambdalabs", "GH200 (96 GB)", "GH200"},
    {"lambdalabs", "B200 (180 GB SXM6)", "B200"},
    {"lambdalabs", "RTX 6000 (24 GB)", "RTX6000"},
    {"lambdalabs", "RTX A6000 (48 GB)", "A6000"},
    {"lambdalabs", "Tesla V100 (16 GB)", "V100"},
    {"lambdalabs", "RTX 4090 (24 GB PCIe)", "RTX4090"},
    // Paperspace machine types (Paperspace API v1, machines).
    {"paperspace", "A100", "A100-40GB"},
    {"paperspace", "A100-80G", "A100-80GB"},
    {"paperspace", "H100", "H100-PCIe"},
    {"paperspace", "A6000", "A6000"},
    {"paperspace", "A5000", "A5000"},
    {"paperspace", "A4000", "A4000"},
    {"paperspace", "RTX4000", "RTX4000"},
    {"paperspace", "RTX5000", "RTX5000"},
    {"paperspace", "P4000", "P4000"},
    {"paperspace", "P5000", "P5000"},
    {"paperspace", "P6000", "P6000"},
    {"paperspace", "V100", "V100"},
    {"paperspace", "V100-32G", "V100"},
    {"paperspace", "RTX4090", "RTX4090"},
    // Vast.ai bundles' gpu_name (vast-cli `search offers`).
    {"vastai", "RTX 4090", "RTX4090"},
    {"vastai", "RTX 3090", "RTX3090"},
    {"vastai", "RTX 5090", "RTX5090"},
    {"vastai", "RTX A6000", "A6000"},
    {"vastai", "RTX 6000Ada", "RTX6000-Ada"},
    {"vastai", "H100 SXM", "H100-SXM"},
    {"vastai", "H100 PCIE", "H100-PCIe"},
    {"vastai", "H100 NVL", "H100-NVL"},
    {"vastai", "L40S", "L40S"},
};

// Canonical key (see Key()) -> normalised name, for any provider.
const std::map<std::string, std::string>& GenericGpu() {
  static const std::map<std::string, std::string> m = {
      {"RTX4090", "RTX4090"},
      {"RTX4080", "RTX4080"},
      {"RTX3090", "RTX3090"},
      {"RTX3090TI", "RTX3090Ti"},
      {"RTX3080", "RTX3080"},
      {"RTX5090", "RTX5090"},
      {"RTXA6000", "A6000"},
      {"A6000", "A6000"},
      {"RTXA5000", "A5000"},
      {"A5000", "A5000"},
      {"RTXA4000", "A4000"},
      {"A4000", "A4000"},
      {"RTXA4500", "A4500"},
      {"A4500", "A4500"},
      {"RTX6000ADA", "RTX6000-Ada"},
      {"RTX6000", "RTX6000"},
      {"RTX4000", "RTX4000"},
      {"RTX5000", "RTX5000"},
      {"A40", "A40"},
      {"A10", "A10"},
      {"A10G", "A10G"},
      {"L40S", "L40S"},
      {"L40", "L40"},
      {"L4", "L4"},
      {"T4", "T4"},
      {"V100", "V100"},
      {"V100PCIE", "V100"},
      {"V100SXM2", "V100"},
      {"P4000", "P4000"},
      {"P5000", "P5000"},
      {"P6000", "P6000"},
      {"H200", "H200"},
      {"H200SXM", "H200"},
      {"B200", "B200"},
      {"GH200", "GH200"},
      {"MI300X", "MI300X"},
      {"MI300XOAM", "MI300X"},
  };
  return m;
}

const std::vector<std::string> kGpuTypes = {
    "A10",     "A10G",    "A100-40GB", "A100-80GB",   "A4000",    "A40",       "A4500",
    "A5000",   "A6000",   "B200",      "GH200",       "H100-NVL", "H100-PCIe", "H100-SXM",
    "H200",    "L4",      "L40",       "L40S",        "MI300X",   "P4000",     "P5000",
    "P6000",   "RTX3080", "RTX3090",   "RTX3090Ti",   "RTX4000",  "RTX4080",   "RTX4090",
    "RTX5000", "RTX5090", "RTX6000",   "RTX6000-Ada", "T4",       "V100",
};

std::string Upper(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// "NVIDIA GeForce RTX 4090" -> "RTX4090"; "NVIDIA A100-SXM4-80GB" -> "A100SXM4" with 80 GB.
std::string Key(std::string_view name, double* memory_gib) {
  std::string up = Upper(name);
  // A memory size is a number with G/GB standing on its own ("80GB", "-80G", "(40 GB"), not the
  // digits of a model name ("A10G", "RTX 4090").
  static const std::regex mem(R"((^|[^A-Z0-9])(\d+)\s*GB?(?![A-Z0-9]))");
  std::smatch m;
  if (std::regex_search(up, m, mem) && memory_gib && *memory_gib <= 0) {
    *memory_gib = std::stod(m[2].str());
  }
  up = std::regex_replace(up, mem, "$1 ");
  for (const char* word :
       {"NVIDIA", "GEFORCE", "TESLA", "QUADRO", "AMD", "INSTINCT", "GENERATION", "HBM3", "HBM3E"}) {
    for (size_t p; (p = up.find(word)) != std::string::npos;) up.erase(p, std::strlen(word));
  }
  std::string key;
  for (char c : up) {
    if (std::isalnum(static_cast<unsigned char>(c))) key.push_back(c);
  }
  return key;
}

struct RegionAlias {
  const char* provider;
  const char* spelling;
  const char* normalized;
};

constexpr RegionAlias kRegionExact[] = {
    // Lambda Cloud regions (/instance-types regions_with_capacity_available[].name).
    {"lambdalabs", "us-west-1", "us-west"},
    {"lambdalabs", "us-west-2", "us-west"},
    {"lambdalabs", "us-west-3", "us-west"},
    {"lambdalabs", "us-east-1", "us-east"},
    {"lambdalabs", "us-east-2", "us-east"},
    {"lambdalabs", "us-east-3", "us-east"},
    {"lambdalabs", "us-south-1", "us-south"},
    {"lambdalabs", "us-south-2", "us-south"},
    {"lambdalabs", "us-south-3", "us-south"},
    {"lambdalabs", "us-midwest-1", "us-central"},
    {"lambdalabs", "europe-central-1", "eu-central"},
    {"lambdalabs", "asia-northeast-1", "asia-northeast"},
    {"lambdalabs", "asia-northeast-2", "asia-northeast"},
    {"lambdalabs", "asia-south-1", "asia-south"},
    {"lambdalabs", "me-west-1", "me-west"},
    // Paperspace regions, by name and by data-center code.
    {"paperspace", "East Coast (NY2)", "us-east"},
    {"paperspace", "West Coast (CA1)", "us-west"},
    {"paperspace", "Europe (AMS1)", "eu-west"},
    {"paperspace", "NY2", "us-east"},
    {"paperspace", "CA1", "us-west"},
    {"paperspace", "AMS1", "eu-west"},
};

const std::vector<std::string> kRegions = {
    "asia-east",  "asia-northeast", "asia-south", "asia-southeast", "ca-east",  "ca-west",
    "eu-central", "eu-east",        "eu-north",   "eu-south",       "eu-west",  "me-west",
    "oceania",    "sa-east",        "us-central", "us-east",        "us-south", "us-west",
};

// US states (two-letter codes and names) by region.
const std::map<std::string, std::string>& UsStates() {
  static const std::map<std::string, std::string> m = [] {
    std::map<std::string, std::string> out;
    auto add = [&](const char* region,
                   std::initializer_list<std::pair<const char*, const char*>> l) {
      for (const auto& [code, name] : l) {
        out[code] = region;
        out[Upper(name)] = region;
      }
    };
    add("us-west", {{"CA", "California"},
                    {"OR", "Oregon"},
                    {"WA", "Washington"},
                    {"NV", "Nevada"},
                    {"AZ", "Arizona"},
                    {"UT", "Utah"},
                    {"ID", "Idaho"},
                    {"MT", "Montana"},
                    {"WY", "Wyoming"},
                    {"CO", "Colorado"},
                    {"NM", "New Mexico"},
                    {"AK", "Alaska"},
                    {"HI", "Hawaii"}});
    add("us-central", {{"ND", "North Dakota"},
                       {"SD", "South Dakota"},
                       {"NE", "Nebraska"},
                       {"KS", "Kansas"},
                       {"MN", "Minnesota"},
                       {"IA", "Iowa"},
                       {"MO", "Missouri"},
                       {"WI", "Wisconsin"},
                       {"IL", "Illinois"},
                       {"MI", "Michigan"},
                       {"IN", "Indiana"},
                       {"OH", "Ohio"}});
    add("us-south", {{"TX", "Texas"},
                     {"OK", "Oklahoma"},
                     {"AR", "Arkansas"},
                     {"LA", "Louisiana"},
                     {"MS", "Mississippi"},
                     {"AL", "Alabama"},
                     {"TN", "Tennessee"},
                     {"KY", "Kentucky"}});
    add("us-east", {{"FL", "Florida"},
                    {"GA", "Georgia"},
                    {"SC", "South Carolina"},
                    {"NC", "North Carolina"},
                    {"VA", "Virginia"},
                    {"WV", "West Virginia"},
                    {"MD", "Maryland"},
                    {"DE", "Delaware"},
                    {"NJ", "New Jersey"},
                    {"PA", "Pennsylvania"},
                    {"NY", "New York"},
                    {"CT", "Connecticut"},
                    {"RI", "Rhode Island"},
                    {"MA", "Massachusetts"},
                    {"VT", "Vermont"},
                    {"NH", "New Hampshire"},
                    {"ME", "Maine"},
                    {"DC", "District of Columbia"}});
    return out;
  }();
  return m;
}

// ISO 3166 alpha-2 country -> region (the US and Canada are split further by state/province).
const std::map<std::string, std::string>& Countries() {
  static const std::map<std::string, std::string> m = {
      {"GB", "eu-west"},        {"UK", "eu-west"},        {"IE", "eu-west"},
      {"FR", "eu-west"},        {"NL", "eu-west"},        {"BE", "eu-west"},
      {"LU", "eu-west"},        {"PT", "eu-west"},        {"ES", "eu-west"},
      {"DE", "eu-central"},     {"AT", "eu-central"},     {"CH", "eu-central"},
      {"CZ", "eu-central"},     {"PL", "eu-central"},     {"HU", "eu-central"},
      {"SK", "eu-central"},     {"SI", "eu-central"},     {"SE", "eu-north"},
      {"NO", "eu-north"},       {"FI", "eu-north"},       {"DK", "eu-north"},
      {"IS", "eu-north"},       {"EE", "eu-north"},       {"LV", "eu-north"},
      {"LT", "eu-north"},       {"IT", "eu-south"},       {"GR", "eu-south"},
      {"HR", "eu-south"},       {"MT", "eu-south"},       {"RO", "eu-east"},
      {"BG", "eu-east"},        {"UA", "eu-east"},        {"RS", "eu-east"},
      {"MD", "eu-east"},        {"JP", "asia-northeast"}, {"KR", "asia-northeast"},
      {"CN", "asia-east"},      {"HK", "asia-east"},      {"TW", "asia-east"},
      {"SG", "asia-southeast"}, {"MY", "asia-southeast"}, {"TH", "asia-southeast"},
      {"VN", "asia-southeast"}, {"ID", "asia-southeast"}, {"PH", "asia-southeast"},
      {"IN", "asia-south"},     {"AU", "oceania"},        {"NZ", "oceania"},
      {"BR", "sa-east"},        {"AR", "sa-east"},        {"CL", "sa-east"},
      {"AE", "me-west"},        {"IL", "me-west"},        {"SA", "me-west"},
  };
  return m;
}

std::optional<std::string> CanadianProvince(const std::string& p) {
  static const std::set<std::string> west = {
      "BC",       "AB", "SK", "MB", "BRITISH COLUMBIA", "ALBERTA", "SASKATCHEWAN",
      "MANITOBA", "YT", "NT", "NU"};
  static const std::set<std::string> east = {
      "QC",          "ON", "NB", "NS", "PE", "NL", "QUEBEC", "ONTARIO", "NEW BRUNSWICK",
      "NOVA SCOTIA", "MTL"};
  if (west.count(p)) return "ca-west";
  if (east.count(p)) return "ca-east";
  return std::nullopt;
}

// Country + subdivision -> region.
std::optional<std::string> ByPlace(const std::string& country, const std::string& sub) {
  if (country == "US") {
    auto it = UsStates().find(sub);
    if (it != UsStates().end()) return it->second;
    return std::nullopt;
  }
  if (country == "CA") {
    if (auto r = CanadianProvince(sub)) return r;
    return "ca-east";  // most Canadian GPU capacity is in Quebec and Ontario
  }
  auto it = Countries().find(country);
  if (it != Countries().end()) return it->second;
  return std::nullopt;
}

}  // namespace

namespace {

Normalized NormalizeGpuUncached(std::string_view provider, std::string_view name,
                                double gpu_memory_gib) {
  for (const auto& a : kGpuExact) {
    if (provider == a.provider && name == a.spelling) return {a.normalized, true};
  }
  double memory = gpu_memory_gib;
  std::string key = Key(name, &memory);
  if (key.rfind("A100", 0) == 0) {
    if (memory >= 60) return {"A100-80GB", true};
    if (memory > 0) return {"A100-40GB", true};
    return {std::string(name), false};
  }
  if (key.rfind("H100", 0) == 0) {
    if (key.find("NVL") != std::string::npos) return {"H100-NVL", true};
    if (key.find("PCIE") != std::string::npos) return {"H100-PCIe", true};
    return {"H100-SXM", true};
  }
  auto it = GenericGpu().find(key);
  if (it != GenericGpu().end()) return {it->second, true};
  return {std::string(name), false};
}

}  // namespace

// Offer lists repeat a few dozen spellings thousands of times: the rules (regular expressions) run
// once per distinct (provider, name, memory).
Normalized NormalizeGpu(std::string_view provider, std::string_view name, double gpu_memory_gib) {
  using CacheKey = std::tuple<std::string, std::string, double>;
  static std::mutex mu;
  static std::map<CacheKey, Normalized, std::less<>> cache;
  CacheKey key{std::string(provider), std::string(name), gpu_memory_gib};
  {
    std::lock_guard lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  Normalized n = NormalizeGpuUncached(provider, name, gpu_memory_gib);
  std::lock_guard lock(mu);
  if (cache.size() > 100000) cache.clear();  // bounded: names come from remote APIs
  cache.emplace(std::move(key), n);
  return n;
}

namespace {

Normalized NormalizeRegionUncached(std::string_view provider, std::string_view region) {
  for (const auto& a : kRegionExact) {
    if (provider == a.provider && region == a.spelling) return {a.normalized, true};
  }
  std::string up = Upper(region);
  // RunPod data centers: "US-CA-2", "CA-MTL-1", "EU-RO-1", "EUR-IS-1", "AP-JP-1", "OC-AU-1".
  static const std::regex dc(R"(^([A-Z]{2,3})-([A-Z]{2,3})-\d+$)");
  std::smatch m;
  if (std::regex_match(up, m, dc)) {
    std::string a = m[1].str(), b = m[2].str();
    std::optional<std::string> r;
    if (a == "US" || a == "CA") {
      r = ByPlace(a, b);
    } else {
      r = ByPlace(b, "");
    }
    if (r) return {*r, true};
  }
  // Vast geolocation: "California, US", "Quebec, CA", "Sweden, SE", "SE".
  auto comma = up.rfind(',');
  std::string country = TrimSpace(comma == std::string::npos ? up : up.substr(comma + 1));
  std::string sub = comma == std::string::npos ? "" : TrimSpace(up.substr(0, comma));
  if (country.size() == 2) {
    if (auto r = ByPlace(country, sub)) return {*r, true};
  }
  return {std::string(region), false};
}

}  // namespace

Normalized NormalizeRegion(std::string_view provider, std::string_view region) {
  using CacheKey = std::pair<std::string, std::string>;
  static std::mutex mu;
  static std::map<CacheKey, Normalized, std::less<>> cache;
  CacheKey key{std::string(provider), std::string(region)};
  {
    std::lock_guard lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  Normalized n = NormalizeRegionUncached(provider, region);
  std::lock_guard lock(mu);
  if (cache.size() > 100000) cache.clear();
  cache.emplace(std::move(key), n);
  return n;
}

const std::vector<std::string>& KnownGpuTypes() { return kGpuTypes; }
const std::vector<std::string>& KnownRegions() { return kRegions; }

}  // namespace hyperslice::gpu
