#include "src/tpu/topology.h"

#include <charconv>
#include <string>

namespace hyperslice::tpu {
namespace {

Error Invalid(std::string message) {
  return Error::Make(Error::Code::kInvalidArgument, std::move(message), "Invalid");
}

bool IsPowerOfTwo(int v) { return v > 0 && (v & (v - 1)) == 0; }

// v6e topologies GKE and GCE accept for multi-host ct6e-standard-4t slices, single host included.
const std::vector<std::string>& V6eTopologies() {
  static const std::vector<std::string> kList = {"2x2", "2x4",  "4x4",  "4x8",
                                                 "8x8", "8x16", "16x16"};
  return kList;
}

std::string JoinList(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

// Returns "" when `t` is a topology `m` can form, else the reason and what is allowed.
std::string TopologyProblem(const MachineType& m, const Topology& t) {
  if (m.generation == Generation::kV6e) {
    if (t.rank != 2) {
      return "v6e topologies are 2D (AxB); " + m.name + " cannot form " + t.String();
    }
    if (m.chips_per_host == 1) {
      return t.String() == "1x1" ? ""
                                 : m.name + " forms only topology 1x1 (one chip); use " +
                                       "ct6e-standard-4t for " + t.String();
    }
    if (m.chips_per_host == 8) {
      return t.String() == "2x4" ? ""
                                 : m.name + " forms only topology 2x4 (one host); use " +
                                       "ct6e-standard-4t for multi-host topology " + t.String();
    }
    for (const std::string& ok : V6eTopologies()) {
      if (ok == t.String()) return "";
    }
    return m.name + " supports topologies " + JoinList(V6eTopologies()) + "; got " + t.String();
  }
  // tpu7x
  if (t.rank != 3) {
    return "tpu7x topologies are 3D (AxBxC, e.g. 2x2x1 or 2x2x2); got " + t.String();
  }
  if (t.String() == "2x2x1") return "";
  const auto& d = t.dims;
  for (int v : d) {
    if (!IsPowerOfTwo(v) || v < 2 || v > 16) {
      return "tpu7x topology dimensions are powers of two from 2 to 16 (2x2x1 is the one-host "
             "exception); got " +
             t.String();
    }
  }
  if (!(d[0] <= d[1] && d[1] <= d[2])) {
    return "tpu7x topologies are written in non-decreasing order (2x2x4, 2x4x4, 4x4x8, ...); got " +
           t.String();
  }
  return "";
}

Slice Compute(const MachineType& m, const Topology& t) {
  Slice s;
  s.machine_type = m;
  s.topology = t;
  s.chips = t.Chips();
  s.hosts = s.chips / m.chips_per_host;
  for (int i = 0; i < 3; ++i) s.host_bounds[i] = t.dims[i] / m.chips_per_host_bounds[i];
  int cores = m.generation == Generation::kTpu7x ? s.chips * 2 : s.chips;
  s.accelerator_type = std::string(GenerationName(m.generation)) + "-" + std::to_string(cores);
  return s;
}

}  // namespace

const std::vector<MachineType>& KnownMachineTypes() {
  static const std::vector<MachineType> kTypes = {
      {"ct6e-standard-1t", Generation::kV6e, 1, {1, 1, 1}},
      {"ct6e-standard-4t", Generation::kV6e, 4, {2, 2, 1}},
      {"ct6e-standard-8t", Generation::kV6e, 8, {2, 4, 1}},
      {"tpu7x-standard-4t", Generation::kTpu7x, 4, {2, 2, 1}},
  };
  return kTypes;
}

Result<MachineType> LookupMachineType(std::string_view name) {
  std::vector<std::string> names;
  for (const MachineType& m : KnownMachineTypes()) {
    if (m.name == name) return m;
    names.push_back(m.name);
  }
  return Invalid("machine type \"" + std::string(name) +
                 "\" is not a TPU machine type hyperslice " + "supports; use one of " +
                 JoinList(names));
}

const char* GenerationName(Generation g) { return g == Generation::kTpu7x ? "tpu7x" : "v6e"; }
const char* AcceleratorLabel(Generation g) {
  return g == Generation::kTpu7x ? "tpu7x" : "tpu-v6e-slice";
}

std::string Topology::String() const {
  std::string out = std::to_string(dims[0]) + "x" + std::to_string(dims[1]);
  if (rank == 3) out += "x" + std::to_string(dims[2]);
  return out;
}

std::string Topology::PaddedString() const {
  return std::to_string(dims[0]) + "x" + std::to_string(dims[1]) + "x" + std::to_string(dims[2]);
}

Result<Topology> ParseTopology(std::string_view s) {
  Topology t;
  std::string_view rest = s;
  int n = 0;
  while (true) {
    size_t x = rest.find('x');
    std::string_view part = rest.substr(0, x);
    int v = 0;
    auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || ptr != part.data() + part.size() || v <= 0 ||
        v > 1024 || n == 3) {
      return Invalid("topology \"" + std::string(s) +
                     "\" is not AxB or AxBxC with positive integers (e.g. 2x4 or 2x2x2)");
    }
    t.dims[n++] = v;
    if (x == std::string_view::npos) break;
    rest = rest.substr(x + 1);
  }
  if (n < 2) {
    return Invalid("topology \"" + std::string(s) +
                   "\" is not AxB or AxBxC with positive integers (e.g. 2x4 or 2x2x2)");
  }
  t.rank = n;
  return t;
}

Result<Slice> MakeSlice(std::string_view machine_type, std::string_view topology) {
  HS_ASSIGN_OR_RETURN(MachineType m, LookupMachineType(machine_type));
  HS_ASSIGN_OR_RETURN(Topology t, ParseTopology(topology));
  if (std::string problem = TopologyProblem(m, t); !problem.empty()) return Invalid(problem);
  return Compute(m, t);
}

Result<Slice> InferSlice(std::string_view topology, int node_count) {
  HS_ASSIGN_OR_RETURN(Topology t, ParseTopology(topology));
  if (node_count <= 0) return Invalid("nodeCount must be positive to infer the machine type");
  Generation g = t.rank == 3 ? Generation::kTpu7x : Generation::kV6e;
  if (t.Chips() % node_count == 0) {
    int per_host = t.Chips() / node_count;
    for (const MachineType& m : KnownMachineTypes()) {
      if (m.generation == g && m.chips_per_host == per_host && TopologyProblem(m, t).empty()) {
        return Compute(m, t);
      }
    }
  }
  return Invalid("no " + std::string(GenerationName(g)) + " machine type forms topology " +
                 t.String() + " with " + std::to_string(node_count) + " hosts");
}

std::string JoinBounds(const std::array<int, 3>& b) {
  return std::to_string(b[0]) + "," + std::to_string(b[1]) + "," + std::to_string(b[2]);
}

std::string Slice::TopologyEnv() const { return topology.PaddedString(); }
std::string Slice::ChipsPerHostBoundsEnv() const {
  return JoinBounds(machine_type.chips_per_host_bounds);
}
std::string Slice::HostBoundsEnv() const { return JoinBounds(host_bounds); }

}  // namespace hyperslice::tpu
