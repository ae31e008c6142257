// Planner: which machines to rent for a batch of pending GPU pods — the provisioning decision of
// issue "Ephemeral GPUs 2/4", as a pure function the GPUNodeClaim controller calls once per batch
// window (Karpenter's scheduler, narrowed to GPUs).
//
// For each pod, most GPUs first:
//   1. the pools it may land on: it tolerates the pool's taints, and its nodeSelector and required
//      node affinity agree with the labels a machine of that pool would carry — label keys the
//      offer decides (tgp.io/gpu-type, tgp.io/region, tgp.io/provider, tgp.io/spot and their
//      well-known twins) become offer requirements, the others are checked against the pool's
//      template labels;
//   2. a machine already planned in this batch with room left (GPUs, vCPUs, memory) whose offer
//      also satisfies this pod: the pod shares it;
//   3. otherwise a new machine from the highest-weight pool with room under its limits: the offer
//      with the lowest price per GPU the batch will use (so two 1-GPU pods share a 2-GPU machine
//      when that is cheaper than two 1-GPU machines), then the lower price.
// Limits (maxNodes, maxHourlyCost, maxHourlyPrice) are never exceeded: the caller passes what is
// left after existing and launching machines, and the plan spends from it.
// Pods that cannot be placed come back with the reason a user reads in an Event.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "src/gpu/selection.h"
#include "src/kube/scheduling.h"

namespace hyperslice::gpu {

// Node label keys whose value a machine's offer decides.
inline constexpr char kLabelGpuType[] = "tgp.io/gpu-type";
inline constexpr char kLabelRegion[] = "tgp.io/region";
inline constexpr char kLabelProvider[] = "tgp.io/provider";
inline constexpr char kLabelSpot[] = "tgp.io/spot";
inline constexpr char kLabelNodePool[] = "tgp.io/nodepool";
inline constexpr char kLabelProvisioned[] = "tgp.io/provisioned";
inline constexpr char kResourceGpu[] = "nvidia.com/gpu";

struct PendingPod {
  std::string key;  // "<namespace>/<name>"
  kube::PodPlacement placement;
  int gpus = 0;  // nvidia.com/gpu requested
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
};
// Errors: kInvalidArgument (bad quantities or terms) naming the field.
Result<PendingPod> PendingPodFrom(const boost::json::object& pod);

// What a limit still allows (after existing and launching machines); nullopt: no limit.
struct Budget {
  std::optional<int> nodes_left;
  std::optional<MicroUsd> hourly_cost_left;
};

struct PoolView {
  std::string key;         // "<namespace>/<name>"
  std::string class_name;  // its GPUNodeClass, whose limits all its pools share
  int weight = 10;         // higher is tried first (Karpenter)
  // Labels every machine of the pool carries whatever its offer: template.metadata.labels plus
  // tgp.io/nodepool and tgp.io/provisioned.
  kube::Labels labels;
  std::vector<kube::Requirement> requirements;  // template.spec.requirements
  std::vector<kube::Taint> taints;              // template.spec.taints
  // The class's instance requirements and providers (priority), the pool's maxHourlyPrice.
  OfferRequirements base;
  Budget budget;  // the pool's own limits
};

struct PlannedMachine {
  size_t pool = 0;  // index into the pools given
  Choice choice;
  // What every pod on it needs of a machine, together (each pod's node selector and affinity
  // narrowed on the pool and class, intersected): the launch may buy any offer meeting it.
  OfferRequirements req;
  std::vector<size_t> pods;  // indexes into the pods given
  int gpus_used = 0;
  int64_t cpu_milli_used = 0, memory_bytes_used = 0;
};

struct Plan {
  std::vector<PlannedMachine> machines;
  std::map<size_t, std::string> unplaced;  // pod index -> why
};

using OfferSkip = std::function<bool(const Offer&)>;
// `class_budgets`: by class name, the class limits (maxNodes, maxHourlyCost) left.
Plan MakePlan(const std::vector<PendingPod>& pods, const std::vector<PoolView>& pools,
              const std::map<std::string, Budget>& class_budgets, const OfferCatalog& offers,
              const OfferSkip& skip = nullptr);

// Both at once: name sets intersected (empty means any), minimums maxed, prices min'ed.
OfferRequirements Intersect(const OfferRequirements& a, const OfferRequirements& b);

// Does `offer` satisfy `req` (as OfferCatalog::Select would see it), and at what price/spot?
std::optional<Choice> Satisfies(const Offer& offer, const OfferRequirements& req);

// `base` narrowed by node-selector requirements on offer-decided keys; requirements on other keys
// are checked against `static_labels`. nullopt when they cannot hold together (the reason in
// *why).
std::optional<OfferRequirements> Narrow(const OfferRequirements& base,
                                        const std::vector<kube::Requirement>& reqs,
                                        const kube::Labels& static_labels, std::string* why);

}  // namespace hyperslice::gpu
