// What the GPU controllers' Register* functions share: the informer-factory check and the event
// handler that hands the object of every add, update (the new one) and delete (the last one) to
// one function.
#pragma once

#include <functional>

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

// add(obj) -> fn(obj), update(old, cur) -> fn(cur), delete(last) -> fn(last).
inline kube::EventHandler OnEachObject(const std::function<void(const kube::ObjectPtr&)>& fn) {
  return {.on_add = fn,
          .on_update = [fn](const kube::ObjectPtr&, const kube::ObjectPtr& cur) { fn(cur); },
          .on_delete = [fn](const kube::ObjectPtr& last, bool) { fn(last); }};
}

}  // namespace hyperslice::gpu::internal
