// The GPU provisioner (issue "Ephemeral GPUs 2/4", item 3): from pending pods to GPUNodeClaims.
//
// A pod the scheduler could not place (PodScheduled=False, reason Unschedulable) that asks for
// nvidia.com/gpu starts a batch; the batch closes after `batch_idle` without a new such pod, or
// `batch_max` after it opened (Karpenter's 1 s / 10 s, shorter here: the launch itself takes
// longer than the window). Then MakePlan (planner.h) decides, over the pools (weight first), their
// classes and the offer cache (less offers marked unavailable), which machines to rent; each
// machine becomes a GPUNodeClaim linked to its pool by labels (a namespaced pool cannot own a
// cluster-scoped claim) carrying the decision in annotations (requirements, planned offer and
// price) for the claim controller to launch. Pods placed on a claim are nominated to it and not
// counted again while it launches. The scheduler does not know nominations and may bind another
// pod onto that machine; when the pool's machines then no longer have room for all the pods
// nominated to them, the pods whose machine was taken are planned again at once (and a limit that
// holds them back shows in the pool's LimitsReached). Limits (pool and class
// maxNodes/maxHourlyCost, pool maxHourlyPrice) count claims still launching at their planned
// price.
// Events on pods: Nominated ("launching claim X: RTX4090 on lambdalabs us-west at $0.69/h"),
// NoMachine (why no machine can be rented for it). Pool status: nodes, hourlyCost, conditions
// Ready (its class exists and is Ready) and LimitsReached (which limit holds pending pods back).
#pragma once

#include <chrono>
#include <memory>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/gpu/controller_deps.h"
#include "src/gpu/offer_cache.h"
#include "src/gpu/unavailable_offers.h"

namespace hyperslice::gpu {

struct ProvisionerOptions : ControllerDeps {
  std::shared_ptr<OfferCache> cache;               // required
  std::shared_ptr<UnavailableOffers> unavailable;  // required
  Clock::Duration batch_idle = std::chrono::milliseconds(200);
  Clock::Duration batch_max = std::chrono::seconds(2);
  // A pod nominated to a claim that is Ready but still pending after this is planned again (it
  // did not fit the machine for a reason other than the room other pods took: affinity, ports).
  Clock::Duration nomination_grace = std::chrono::seconds(30);
  // Pool statuses are refreshed at least this often (and after every batch).
  Clock::Duration status_interval = std::chrono::seconds(10);
};

Status RegisterProvisioner(kube::Manager& mgr, ProvisionerOptions options);

}  // namespace hyperslice::gpu
