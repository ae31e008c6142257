// The orphan sweep: GCE resources that carry this cluster's owner labels (or, for resource
// policies, owner description) but whose TPUNodeGroup no longer exists are deleted — MIGs first,
// then templates, then policies. Resources without our labels are never touched.
#pragma once

#include <string>
#include <vector>

#include "src/base/result.h"
#include "src/tpu/operator.h"

namespace hyperslice::kube {
class Manager;
}

namespace hyperslice::tpu::internal {

struct SweepReport {
  std::vector<std::string> deleted;  // GCE URLs
  std::vector<std::string> errors;
};

// One sweep over `projects` x their zones/regions known from live TPUNodeGroups and from
// `extra_locations` ("zone" entries). Exposed for tests.
Result<SweepReport> SweepOrphans(const OperatorOptions& options, const std::string& cluster_id,
                                 const std::vector<std::string>& projects,
                                 const std::vector<std::string>& zones);

// Adds a leader-only runnable that sweeps every options.orphan_sweep_interval.
Status RegisterOrphanSweep(kube::Manager& mgr, const OperatorOptions& options);

}  // namespace hyperslice::tpu::internal
