// Paperspace's price table. Paperspace publishes no price or capacity API (its v1 API has machine
// types only as free-text labels), so what a machine type costs, what it holds and where it is
// sold comes from this versioned table: a built-in YAML document (price_table.cc) that a user's
// table (ProviderConfig::price_table_yaml, same shape) amends entry by entry.
//
// Shape (every key required unless marked):
//   version: "<date>.<n>"          # bumped whenever an entry changes
//   source: "<where the figures come from>"   # optional
//   machineTypes:
//     A100-80G:                     # the machine type label as the API spells it (machineType)
//       gpu: A100-80G               # the GPU as Paperspace names it (normalised by normalize.h)
//       gpuCount: 1
//       gpuMemoryGiB: 80            # per GPU
//       vcpus: 12
//       memoryGiB: 90
//       diskGiB: 50                 # optional, default 50: the diskSize the client asks for
//       priceUsd: "3.18"            # on-demand, whole machine, per hour; exact decimal
//       regions: [ny2, ams1]        # as the v1 API spells them
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"
#include "src/gpu/provider.h"

namespace hyperslice::gpu::providers::paperspace {

struct MachineTypePrice {
  std::string machine_type;
  std::string gpu;
  int gpu_count = 1;
  double gpu_memory_gib = 0;
  int vcpus = 0;
  double memory_gib = 0;
  double disk_gib = 50;
  MicroUsd price = 0;
  std::vector<std::string> regions;
};

struct PriceTable {
  std::string version;
  std::string source;
  std::vector<MachineTypePrice> entries;  // sorted by machine type
  const MachineTypePrice* Find(std::string_view machine_type) const;
};

// The built-in table's YAML text and version.
std::string_view BuiltInPriceTableYaml();

// Parses one table. Errors: kInvalidArgument naming the entry and key ("machineTypes.A4000.
// priceUsd: ...") for bad YAML, a missing or mistyped key, a non-positive price or count, or an
// entry without regions.
Result<PriceTable> ParsePriceTable(std::string_view yaml);

// The built-in table with `user_yaml`'s entries replacing (or adding) machine types; its version
// becomes "<built-in version>+<user version>". Empty `user_yaml`: the built-in table.
Result<PriceTable> LoadPriceTable(std::string_view user_yaml);

}  // namespace hyperslice::gpu::providers::paperspace
