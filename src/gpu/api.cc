#include "src/gpu/api.h"

namespace hyperslice::gpu {

const kube::Resource& GPUNodeClasses() {
  static const kube::Resource r{"tgp.io", "v1", "gpunodeclasses", "GPUNodeClass", false};
  return r;
}

const kube::Resource& GPUNodePools() {
  static const kube::Resource r{"tgp.io", "v1", "gpunodepools", "GPUNodePool", true};
  return r;
}

const kube::Resource& GPUNodeClaims() {
  static const kube::Resource r{"tgp.io", "v1", "gpunodeclaims", "GPUNodeClaim", false};
  return r;
}

}  // namespace hyperslice::gpu
