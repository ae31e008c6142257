// What the GPU controllers' Register* functions share: the informer-factory check. (Their event
// handlers are kube::OnEachObject.)
#pragma once

#include "src/base/result.h"
#include "src/kube/informer.h"
#include "src/kube/manager.h"

namespace hyperslice::gpu::internal {

// kInvalidArgument when `mgr` has no informer factory (every GPU controller watches through it).
inline Status RequireInformers(const kube::Manager& mgr) {
  if (mgr.informers() == nullptr) {
    return Error::Make(Error::Code::kInvalidArgument, "the manager has no informer factory");
  }
  return OkStatus();
}

}  // namespace hyperslice::gpu::internal
