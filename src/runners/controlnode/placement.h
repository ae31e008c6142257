// Choosing runners for a pod bound to a control node, on plain data (no API, no network): what a
// kubelet's admission and the scheduler's fit check are for one Node, applied to the runners
// behind it.
//
// A pod runs on exactly one runner, unless it asks for a whole multi-host slice with the
// annotation runners.hyperslice.dev/slice-hosts: "<N>" (N >= 2): it then runs on N runners of one
// slice (RunnerCandidate::slice, distinct slice indexes), one copy per host. Its requests are the
// total over the slice (that is what the scheduler charged the control node's Node with); each
// host gets an even share, rounded up to the milli-unit.
//
// Thread-compatible: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hyperslice::runners::controlnode {

// Resource name -> amount in milli-units (kube::Quantity::MilliValue()).
using ResourceList = std::map<std::string, int64_t>;

struct RunnerCandidate {
  std::string name;
  bool healthy = false;  // linked and answering: only healthy runners take pods
  std::string slice;     // "" = not part of a multi-host slice
  int slice_index = 0;
  ResourceList capacity;  // allocatable on the runner
  ResourceList used;      // requests of the non-terminal pods already placed on it
  bool allow_host_network = false;
  bool require_digest = true;
};

struct PodNeeds {
  ResourceList requests;  // the pod's effective requests (total over the slice for slice pods)
  int hosts = 1;          // runners of one slice it needs (slice-hosts annotation); 1 = any one
  bool host_network = false;
  bool images_by_digest = true;  // every image is name@sha256:<hex>
};

struct PlacementDecision {
  std::vector<std::string> runners;  // chosen, ordered by slice index for slice pods
  // Empty when `runners` is set. Otherwise a reason a pod condition/Event can carry:
  //   NoRunnerFits        no healthy runner (or slice) could ever hold it (bigger than any)
  //   InsufficientRunnerCapacity  one could, but not with what is running now: wait
  //   HostNetworkForbidden        only runners that forbid hostNetwork could hold it
  //   ImageNotByDigest            only runners that require digests could hold it
  //   NoHealthyRunner             nothing is linked and healthy
  std::string reason;
  std::string message;
  // True when the reason is final for this pod (it will never fit as the runners are now
  // configured); false when waiting may help (capacity in use, runners unhealthy).
  bool permanent = false;
};

// Whether `need` fits into capacity - used for every resource it names. A resource the runner
// does not report has capacity 0 (so a GPU pod never lands on a CPU-only runner).
bool Fits(const ResourceList& need, const ResourceList& capacity, const ResourceList& used);

// Each host's share of a slice pod's requests (ceil(total / hosts) per resource).
ResourceList PerHostShare(const ResourceList& total, int hosts);

// Picks runners for a pod: among healthy runners whose policy admits it, the one (or the slice)
// where it fits with the least free capacity left of the scarcest requested resource (best fit,
// so large runners stay free for large pods); ties by name.
PlacementDecision Place(const PodNeeds& pod, const std::vector<RunnerCandidate>& runners);

// "sha256:..." digest references: name@sha256:<64 hex>.
bool IsDigestReference(const std::string& image);

}  // namespace hyperslice::runners::controlnode
