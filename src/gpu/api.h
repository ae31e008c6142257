// The tgp.io/v1 API (deploy/crds/tgp.io_*.yaml): resources, labels and field names the GPU
// controllers share. Seed 002's names are contracts.
#pragma once

#include "src/kube/resource.h"

namespace hyperslice::gpu {

const kube::Resource& GPUNodeClasses();  // cluster-scoped
const kube::Resource& GPUNodePools();    // namespaced
const kube::Resource& GPUNodeClaims();   // cluster-scoped

// Labels on Nodes, claims and in pool requirements (ARCHITECTURE.md §8).
inline constexpr char kLabelGpuType[] = "tgp.io/gpu-type";
inline constexpr char kLabelProvider[] = "tgp.io/provider";
inline constexpr char kLabelRegion[] = "tgp.io/region";
inline constexpr char kLabelSpot[] = "tgp.io/spot";
inline constexpr char kLabelNodePool[] = "tgp.io/nodepool";
inline constexpr char kLabelProvisioned[] = "tgp.io/provisioned";

}  // namespace hyperslice::gpu
