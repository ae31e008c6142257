// TPU slice shapes: which topologies a machine type can form, how many hosts that takes, and the
// libtpu environment a workload on the slice needs (ARCHITECTURE.md §5, "Topology facts").
//
//   machine type        generation  chips/host  chips-per-host bounds  topologies
//   ct6e-standard-1t    v6e         1           1,1,1                  1x1
//   ct6e-standard-4t    v6e         4           2,2,1                  2x2 (one host), 2x4, 4x4,
//                                                                      4x8, 8x8, 8x16, 16x16
//   ct6e-standard-8t    v6e         8           2,4,1                  2x4 (one host)
//   tpu7x-standard-4t   tpu7x       4           2,2,1                  2x2x1 (one host), AxBxC with
//                                                                      A<=B<=C powers of two in
//                                                                      2..16 (2x2x2, 2x2x4, 2x4x4,
//                                                                      4x4x4, ...)
//
// hosts = chips / chips per host, and TPU_HOST_BOUNDS[i] = topology[i] / chips-per-host bounds[i].
// TPU_ACCELERATOR_TYPE is "<generation>-<cores>": cores = chips for v6e, chips x 2 for tpu7x (two
// TensorCores per Ironwood chip), so a 2x2x2 tpu7x slice is tpu7x-16.
//
// Pure functions; thread-safe. Errors are kInvalidArgument with a message that names the allowed
// values, so it can be shown to a user as is.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::tpu {

enum class Generation { kV6e, kTpu7x };

struct MachineType {
  std::string name;  // "tpu7x-standard-4t"
  Generation generation = Generation::kV6e;
  int chips_per_host = 0;
  std::array<int, 3> chips_per_host_bounds{};  // 4 → 2,2,1
};

// The machine types hyperslice knows (the table above).
const std::vector<MachineType>& KnownMachineTypes();
Result<MachineType> LookupMachineType(std::string_view name);

// "v6e" / "tpu7x" (the TPU_ACCELERATOR_TYPE prefix).
const char* GenerationName(Generation g);
// The node label cloud.google.com/gke-tpu-accelerator: "tpu-v6e-slice" / "tpu7x".
const char* AcceleratorLabel(Generation g);

// A parsed topology string: "2x4" (rank 2) or "2x2x2" (rank 3). dims[2] is 1 for rank 2.
struct Topology {
  std::array<int, 3> dims{1, 1, 1};
  int rank = 0;
  int Chips() const { return dims[0] * dims[1] * dims[2]; }
  std::string String() const;        // as written: "2x4", "2x2x2"
  std::string PaddedString() const;  // always 3D: "2x4x1"
};
Result<Topology> ParseTopology(std::string_view s);

// One slice: a topology formed by hosts of one machine type.
struct Slice {
  MachineType machine_type;
  Topology topology;
  int chips = 0;
  int hosts = 0;
  std::array<int, 3> host_bounds{};
  std::string accelerator_type;  // "tpu7x-16"

  // The libtpu variables, as injected into workloads.
  std::string TopologyEnv() const;            // TPU_TOPOLOGY: "2x2x2" (2D padded: "2x4x1")
  std::string ChipsPerHostBoundsEnv() const;  // TPU_CHIPS_PER_HOST_BOUNDS: "2,2,1"
  std::string HostBoundsEnv() const;          // TPU_HOST_BOUNDS: "1,1,2"
  const std::string& AcceleratorTypeEnv() const { return accelerator_type; }
};

// Checks that `topology` is one `machine_type` can form and computes the slice. Errors say which
// topologies that machine type supports.
Result<Slice> MakeSlice(std::string_view machine_type, std::string_view topology);

// For a group that names no machine type (it brings its own instance template): the machine type
// implied by the topology's rank (2D: v6e, 3D: tpu7x) and chips ÷ node count. Errors when no known
// machine type fits.
Result<Slice> InferSlice(std::string_view topology, int node_count);

// "2,2,1"
std::string JoinBounds(const std::array<int, 3>& b);

}  // namespace hyperslice::tpu
