// libFuzzer target over the TPU topology math (src/tpu/topology.h): ParseTopology, MakeSlice for
// every known machine type, and InferSlice.
//
// Input: byte 0 is the node count for InferSlice (0..255), the rest is the topology string.
// Invariants checked besides "no crash, no UB": a parsed topology has rank 2 or 3 and positive
// dimensions and parses back to the same dimensions from its String(); a slice's hosts times
// chips per host is its chips, which is the topology's chips; host bounds multiply to the hosts;
// results are deterministic.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "src/tpu/topology.h"

namespace {

using hyperslice::tpu::Slice;

void Check(bool ok, const char* what, std::string_view input) {
  if (ok) return;
  std::fprintf(stderr, "topology fuzz: %s (input \"%.*s\")\n", what, static_cast<int>(input.size()),
               input.data());
  std::abort();
}

void CheckSlice(const Slice& s, std::string_view in) {
  Check(s.chips == s.topology.Chips(), "slice chips differ from the topology's", in);
  Check(s.hosts >= 1 && s.hosts * s.machine_type.chips_per_host == s.chips,
        "hosts x chips per host is not the chips", in);
  Check(s.host_bounds[0] * s.host_bounds[1] * s.host_bounds[2] == s.hosts,
        "host bounds do not multiply to the hosts", in);
  Check(!s.accelerator_type.empty() && !s.TopologyEnv().empty(), "empty slice strings", in);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  int node_count = data[0];
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);

  auto t = hyperslice::tpu::ParseTopology(in);
  if (t.ok()) {
    Check(t->rank == 2 || t->rank == 3, "rank not 2 or 3", in);
    for (int i = 0; i < 3; ++i) Check(t->dims[i] >= 1, "non-positive dimension", in);
    Check(t->rank == 3 || t->dims[2] == 1, "2D topology with a third dimension", in);
    auto again = hyperslice::tpu::ParseTopology(t->String());
    Check(again.ok() && again->dims == t->dims && again->rank == t->rank,
          "String() does not parse back to the same topology", in);
    auto padded = hyperslice::tpu::ParseTopology(t->PaddedString());
    Check(padded.ok() && padded->dims == t->dims, "PaddedString() changes the dimensions", in);
  }
  for (const auto& m : hyperslice::tpu::KnownMachineTypes()) {
    auto s = hyperslice::tpu::MakeSlice(m.name, in);
    if (!t.ok()) Check(!s.ok(), "MakeSlice accepted a topology ParseTopology refuses", in);
    if (s.ok()) {
      CheckSlice(*s, in);
      auto s2 = hyperslice::tpu::MakeSlice(m.name, in);
      Check(s2.ok() && s2->hosts == s->hosts && s2->accelerator_type == s->accelerator_type,
            "MakeSlice not deterministic", in);
    } else {
      Check(!s.error().message.empty(), "refusal without a message", in);
    }
  }
  auto inferred = hyperslice::tpu::InferSlice(in, node_count);
  if (inferred.ok()) {
    CheckSlice(*inferred, in);
    Check(inferred->hosts == node_count, "InferSlice hosts differ from the node count", in);
    auto made = hyperslice::tpu::MakeSlice(inferred->machine_type.name, in);
    Check(made.ok() && made->hosts == inferred->hosts,
          "InferSlice picked a machine type MakeSlice refuses", in);
  }
  return 0;
}
