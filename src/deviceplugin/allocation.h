// Topology-aware choice of chips and the TPU environment of an allocation. Pure functions;
// thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::deviceplugin {

struct Candidate {
  std::string id;
  int index = -1;
  int numa_node = -1;
};

// Chooses `size` chips among `available` that include every ID of `must_include`. Preference, in
// order: fewest NUMA nodes (one when possible), fewest holes between the lowest and highest chip
// index (contiguous chips), lowest indices. Exact search up to 16 available chips; above that a
// greedy fill around the must-include chips. Errors (kInvalidArgument) when `size` is out of range
// or a must-include ID is not available. The result is ordered by chip index.
Result<std::vector<std::string>> ChoosePreferred(const std::vector<Candidate>& available,
                                                 const std::vector<std::string>& must_include,
                                                 int size);

// The TPU environment for a container given the chip indices it was allocated and the number of
// chips on the host:
//   TPU_VISIBLE_CHIPS              comma-separated indices, ascending (always)
//   TPU_CHIPS_PER_PROCESS_BOUNDS   1 chip "1,1,1"; 2 "1,2,1"; 4 "2,2,1"; 8 "2,4,1"
//   TPU_PROCESS_BOUNDS             "1,1,1" (one process sees this sub-host slice)
// The two bounds are set only for a part of the host with one of those sizes; for the whole host
// libtpu derives them from the hardware, and other sizes have no rectangular shape, so both are
// left out.
std::map<std::string, std::string> TpuEnv(std::vector<int> chip_indices, int host_chips);

}  // namespace hyperslice::deviceplugin
