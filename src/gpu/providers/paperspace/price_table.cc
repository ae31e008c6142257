#include "src/gpu/providers/paperspace/price_table.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <exception>
#include <map>

namespace hyperslice::gpu::providers::paperspace {

namespace {

// Version 2025-11-25.1. Figures: Paperspace's public pricing page for Core machines (on-demand,
// hourly, per machine) and its machine-type specifications; regions as the v1 API spells them
// (`ny2`, `ca1`, `ams1`). Paperspace changes these without an API to read them from: the table is
// what the client believes, and a user's price_table_yaml overrides any entry.
constexpr std::string_view kBuiltIn = R"(version: "2025-11-25.1"
source: "Paperspace pricing page (Core machines, on-demand hourly) and machine type specifications"
machineTypes:
  H100:
    gpu: H100
    gpuCount: 1
    gpuMemoryGiB: 80
    vcpus: 20
    memoryGiB: 250
    diskGiB: 100
    priceUsd: "5.95"
    regions: [ny2]
  H100x8:
    gpu: H100
    gpuCount: 8
    gpuMemoryGiB: 80
    vcpus: 128
    memoryGiB: 1638
    diskGiB: 500
    priceUsd: "47.60"
    regions: [ny2]
  A100-80G:
    gpu: A100-80G
    gpuCount: 1
    gpuMemoryGiB: 80
    vcpus: 12
    memoryGiB: 90
    diskGiB: 100
    priceUsd: "3.18"
    regions: [ny2, ams1]
  A100-80Gx8:
    gpu: A100-80G
    gpuCount: 8
    gpuMemoryGiB: 80
    vcpus: 96
    memoryGiB: 640
    diskGiB: 500
    priceUsd: "25.44"
    regions: [ny2]
  A100:
    gpu: A100
    gpuCount: 1
    gpuMemoryGiB: 40
    vcpus: 12
    memoryGiB: 90
    diskGiB: 100
    priceUsd: "3.09"
    regions: [ny2]
  A6000:
    gpu: A6000
    gpuCount: 1
    gpuMemoryGiB: 48
    vcpus: 8
    memoryGiB: 45
    priceUsd: "1.89"
    regions: [ny2, ca1, ams1]
  A5000:
    gpu: A5000
    gpuCount: 1
    gpuMemoryGiB: 24
    vcpus: 8
    memoryGiB: 45
    priceUsd: "1.38"
    regions: [ny2, ca1, ams1]
  A4000:
    gpu: A4000
    gpuCount: 1
    gpuMemoryGiB: 16
    vcpus: 8
    memoryGiB: 45
    priceUsd: "0.76"
    regions: [ny2, ca1, ams1]
  RTX4000:
    gpu: RTX4000
    gpuCount: 1
    gpuMemoryGiB: 8
    vcpus: 8
    memoryGiB: 30
    priceUsd: "0.56"
    regions: [ny2, ca1, ams1]
  P5000:
    gpu: P5000
    gpuCount: 1
    gpuMemoryGiB: 16
    vcpus: 8
    memoryGiB: 30
    priceUsd: "0.78"
    regions: [ny2, ca1, ams1]
  P4000:
    gpu: P4000
    gpuCount: 1
    gpuMemoryGiB: 8
    vcpus: 8
    memoryGiB: 30
    priceUsd: "0.51"
    regions: [ny2, ca1, ams1]
)";

Error Bad(const std::string& where, const std::string& what) {
  return Error::Make(Error::Code::kInvalidArgument,
                     "paperspace price table: " + where + ": " + what);
}

// yaml-cpp reports problems by throwing; everything below catches at the parser boundary.
Result<double> Number(const YAML::Node& entry, const std::string& where, const char* key,
                      bool required, double fallback) {
  YAML::Node n = entry[key];
  if (!n) {
    if (required) return Bad(where + "." + key, "missing");
    return fallback;
  }
  if (!n.IsScalar()) return Bad(where + "." + key, "must be a number");
  try {
    return n.as<double>();
  } catch (const std::exception&) {
    return Bad(where + "." + key, "must be a number, got \"" + n.Scalar() + "\"");
  }
}

Result<MachineTypePrice> Entry(const std::string& type, const YAML::Node& e) {
  std::string where = "machineTypes." + type;
  if (!e.IsMap()) return Bad(where, "must be a mapping");
  MachineTypePrice p;
  p.machine_type = type;
  YAML::Node gpu = e["gpu"];
  if (!gpu || !gpu.IsScalar() || gpu.Scalar().empty()) return Bad(where + ".gpu", "missing");
  p.gpu = gpu.Scalar();
  auto count = Number(e, where, "gpuCount", true, 0);
  if (!count.ok()) return count.error();
  if (*count < 1 || *count != static_cast<int>(*count)) {
    return Bad(where + ".gpuCount", "must be a whole number >= 1");
  }
  p.gpu_count = static_cast<int>(*count);
  auto gmem = Number(e, where, "gpuMemoryGiB", true, 0);
  if (!gmem.ok()) return gmem.error();
  p.gpu_memory_gib = *gmem;
  auto vcpus = Number(e, where, "vcpus", true, 0);
  if (!vcpus.ok()) return vcpus.error();
  if (*vcpus < 1 || *vcpus != static_cast<int>(*vcpus)) {
    return Bad(where + ".vcpus", "must be a whole number >= 1");
  }
  p.vcpus = static_cast<int>(*vcpus);
  auto mem = Number(e, where, "memoryGiB", true, 0);
  if (!mem.ok()) return mem.error();
  p.memory_gib = *mem;
  auto disk = Number(e, where, "diskGiB", false, 50);
  if (!disk.ok()) return disk.error();
  p.disk_gib = *disk;
  if (p.gpu_memory_gib <= 0 || p.memory_gib <= 0 || p.disk_gib <= 0) {
    return Bad(where, "gpuMemoryGiB, memoryGiB and diskGiB must be positive");
  }
  YAML::Node price = e["priceUsd"];
  if (!price) return Bad(where + ".priceUsd", "missing");
  if (!price.IsScalar()) return Bad(where + ".priceUsd", "must be a decimal like \"0.76\"");
  auto usd = ParseUsd(price.Scalar());
  if (!usd.ok()) {
    return Bad(where + ".priceUsd",
               "\"" + price.Scalar() + "\" is not a decimal dollar amount like \"0.76\"");
  }
  if (*usd <= 0) return Bad(where + ".priceUsd", "must be greater than zero");
  p.price = *usd;
  YAML::Node regions = e["regions"];
  if (!regions || !regions.IsSequence() || regions.size() == 0) {
    return Bad(where + ".regions", "must be a non-empty list of regions (ny2, ca1, ams1)");
  }
  for (const auto& r : regions) {
    if (!r.IsScalar() || r.Scalar().empty()) return Bad(where + ".regions", "must be strings");
    p.regions.push_back(r.Scalar());
  }
  return p;
}

Result<PriceTable> ParseUnsafe(std::string_view yaml) {
  YAML::Node root = YAML::Load(std::string(yaml));
  if (!root.IsMap()) return Bad("document", "must be a mapping with version and machineTypes");
  PriceTable t;
  YAML::Node version = root["version"];
  if (!version || !version.IsScalar() || version.Scalar().empty()) {
    return Bad("version", "missing (the table's version, e.g. \"2025-11-25.1\")");
  }
  t.version = version.Scalar();
  if (YAML::Node source = root["source"]; source && source.IsScalar()) t.source = source.Scalar();
  YAML::Node types = root["machineTypes"];
  if (!types || !types.IsMap()) return Bad("machineTypes", "must be a mapping by machine type");
  for (const auto& kv : types) {
    if (!kv.first.IsScalar() || kv.first.Scalar().empty()) {
      return Bad("machineTypes", "keys must be machine type names");
    }
    auto e = Entry(kv.first.Scalar(), kv.second);
    if (!e.ok()) return e.error();
    t.entries.push_back(std::move(*e));
  }
  std::sort(t.entries.begin(), t.entries.end(),
            [](const auto& a, const auto& b) { return a.machine_type < b.machine_type; });
  return t;
}

}  // namespace

const MachineTypePrice* PriceTable::Find(std::string_view machine_type) const {
  for (const auto& e : entries) {
    if (e.machine_type == machine_type) return &e;
  }
  return nullptr;
}

std::string_view BuiltInPriceTableYaml() { return kBuiltIn; }

Result<PriceTable> ParsePriceTable(std::string_view yaml) {
  try {
    return ParseUnsafe(yaml);
  } catch (const YAML::Exception& e) {
    return Bad("YAML", e.what());
  } catch (const std::exception& e) {
    return Bad("YAML", e.what());
  }
}

Result<PriceTable> LoadPriceTable(std::string_view user_yaml) {
  auto base = ParsePriceTable(kBuiltIn);
  if (!base.ok()) return base.error();
  if (user_yaml.empty()) return base;
  auto user = ParsePriceTable(user_yaml);
  if (!user.ok()) return user.error();
  std::map<std::string, MachineTypePrice> merged;
  for (auto& e : base->entries) merged[e.machine_type] = std::move(e);
  for (auto& e : user->entries) merged[e.machine_type] = std::move(e);
  PriceTable t;
  t.version = base->version + "+" + user->version;
  t.source = base->source;
  if (!user->source.empty()) t.source += "; overrides: " + user->source;
  for (auto& [k, e] : merged) t.entries.push_back(std::move(e));
  return t;
}

}  // namespace hyperslice::gpu::providers::paperspace
