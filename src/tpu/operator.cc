// RegisterOperator: the TPU operator's composition on one kube::Manager — the TPUNodeGroup
// controller, the three child controllers and the orphan sweep, sharing the manager's informers
// and one cluster id.
#include "src/tpu/operator.h"

#include <utility>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/kube/client.h"
#include "src/kube/manager.h"
#include "src/tpu/internal/children.h"
#include "src/tpu/internal/gce_child.h"
#include "src/tpu/internal/nodegroup_controller.h"
#include "src/tpu/internal/orphans.h"

namespace hyperslice::tpu {

using jsonfield::StringValue;

Status RegisterOperator(kube::Manager& mgr, OperatorOptions options) {
  if (!options.client || !options.compute) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "the TPU operator needs a Kubernetes client and a GCE client");
  }
  if (options.cluster_id.empty()) {
    // The uid of kube-system: stable for the cluster's life and unique across clusters.
    HS_ASSIGN_OR_RETURN(auto ns,
                        options.client->Get(kube::resources::Namespaces(), "", "kube-system"));
    options.cluster_id = StringValue(ns.at("metadata").as_object(), "uid");
    if (options.cluster_id.empty()) {
      return Error::Make(Error::Code::kInternal, "namespace kube-system has no uid");
    }
  }
  log::Info("tpu operator", {{"cluster_id", options.cluster_id}});
  HS_RETURN_IF_ERROR(internal::RegisterNodeGroupController(mgr, options));
  HS_RETURN_IF_ERROR(internal::RegisterChildControllers(mgr, options));
  if (options.orphan_sweep_interval > Clock::Duration::zero()) {
    Status sweep = internal::RegisterOrphanSweep(mgr, options);
    if (!sweep.ok()) {
      if (sweep.error().reason != "NotImplemented") return sweep;
      log::Warn("orphan sweep not available in this build");
    }
  }
  return OkStatus();
}

}  // namespace hyperslice::tpu
