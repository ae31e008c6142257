// The three child controllers (ResourcePolicy, InstanceTemplate, ManagedInstanceGroup): each owns
// exactly one GCE resource named by its spec.name (api.h lists the spec/status shapes).
#pragma once

#include "src/base/result.h"
#include "src/tpu/operator.h"

namespace hyperslice::kube {
class Manager;
}

namespace hyperslice::tpu::internal {

// Adds the three child controllers (and their informers) to `mgr`.
Status RegisterChildControllers(kube::Manager& mgr, const OperatorOptions& options);

}  // namespace hyperslice::tpu::internal
