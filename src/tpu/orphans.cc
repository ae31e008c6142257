// SCAFFOLD (session 2): replaced by the orphan-sweep engineer; keeps the parent linkable.
#include "src/tpu/internal/orphans.h"

namespace hyperslice::tpu::internal {

Result<SweepReport> SweepOrphans(const OperatorOptions& /*options*/,
                                 const std::string& /*cluster_id*/,
                                 const std::vector<std::string>& /*projects*/,
                                 const std::vector<std::string>& /*zones*/) {
  return Error::Make(Error::Code::kInternal, "orphan sweep not implemented yet", "NotImplemented");
}

Status RegisterOrphanSweep(kube::Manager& /*mgr*/, const OperatorOptions& /*options*/) {
  return Error::Make(Error::Code::kInternal, "orphan sweep not implemented yet", "NotImplemented");
}

}  // namespace hyperslice::tpu::internal
