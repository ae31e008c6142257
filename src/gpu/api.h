// The tgp.io/v1 API (deploy/crds/tgp.io_*.yaml): resources, labels and field names the GPU
// controllers share. Seed 002's names are contracts.
#pragma once

#include "src/kube/resource.h"

namespace hyperslice::gpu {

const kube::Resource& GPUNodeClasses();  // cluster-scoped
const kube::Resource& GPUNodePools();    // namespaced
const kube::Resource& GPUNodeClaims();   // cluster-scoped

// Node labels (tgp.io/gpu-type, ...) are in planner.h, beside the code that decides them.

}  // namespace hyperslice::gpu
