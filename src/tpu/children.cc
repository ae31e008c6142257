// SCAFFOLD (session 2): replaced by the child-controllers engineer; keeps the parent linkable.
#include "src/tpu/internal/children.h"

namespace hyperslice::tpu::internal {

Status RegisterChildControllers(kube::Manager& /*mgr*/, const OperatorOptions& /*options*/) {
  return Error::Make(Error::Code::kInternal, "child controllers not implemented yet",
                     "NotImplemented");
}

}  // namespace hyperslice::tpu::internal
