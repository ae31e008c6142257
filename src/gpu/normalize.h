// Normalisation of providers' GPU and region names to the tgp.io label values
// (`tgp.io/gpu-type`, `tgp.io/region`). The tables are data with a version (kTablesVersion): a
// change of a normalised name is a change of label values users select on, so it bumps the version
// and the tests pin every entry.
//
// Unknown names are never dropped: Normalize*() returns the provider's own spelling with known =
// false, and the caller reports it (class status, metric) so the table can be extended.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hyperslice::gpu {

inline constexpr char kTablesVersion[] = "2026-11-24.1";

struct Normalized {
  std::string name;  // tgp.io value, or the provider's spelling when !known
  bool known = false;
};

// `provider` is kRunPod/kLambda/kPaperspace/kVast; `gpu_memory_gib` (per GPU, 0 if unknown)
// separates models sold in two memory sizes under one name (Vast's "A100 SXM4").
Normalized NormalizeGpu(std::string_view provider, std::string_view name, double gpu_memory_gib);
Normalized NormalizeRegion(std::string_view provider, std::string_view region);

// Every normalised GPU type and region the tables can produce (for admission: requirements on
// tgp.io/gpu-type with a value outside this list get a warning, not a refusal).
const std::vector<std::string>& KnownGpuTypes();
const std::vector<std::string>& KnownRegions();

}  // namespace hyperslice::gpu
