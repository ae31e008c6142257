// The controller every GCE child kind shares (ResourcePolicy, InstanceTemplate,
// ManagedInstanceGroup): one CR owns exactly one GCE resource, named by spec.name.
//
// GceChildReconciler is the phase runner: it reads the CR (from the informer cache through its
// own writes), adds the finalizer, runs the phases of internal/child_phases.h in order until one
// ends the reconcile, writes the status once, and turns the phase's ending into a requeue through
// the RequeueSchedule. The pieces, one file each:
//   gce_child_kind.h (how a kind maps to GCE), child_phases.cc (live phases),
//   child_teardown.cc (deletion), owner_marks.cc, json_diff.cc, requeue_schedule.cc.
// Waits are bounded long-polls (operations/{op}/wait) inside the reconcile; an operation not DONE
// in time is requeued with a growing backoff, never polled in a tight loop.
// Thread-safety: Reconcile may be called by several workers at once (never for the same key:
// kube::Controller guarantees that).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "src/base/clock.h"
#include "src/base/json.h"
#include "src/base/result.h"
#include "src/gce/compute.h"
#include "src/kube/client.h"
#include "src/kube/controller.h"
#include "src/kube/events.h"
#include "src/kube/informer.h"
#include "src/kube/mutation_cache.h"
#include "src/kube/resource.h"
#include "src/tpu/internal/child_phases.h"
#include "src/tpu/internal/gce_child_kind.h"
#include "src/tpu/internal/json_diff.h"
#include "src/tpu/internal/owner_marks.h"
#include "src/tpu/internal/requeue_schedule.h"

namespace hyperslice::tpu::internal {

struct GceChildOptions {
  std::shared_ptr<kube::Client> client;
  std::shared_ptr<gce::Compute> compute;
  std::shared_ptr<kube::EventRecorder> events;
  // The kind's shared informer: reconciles read the child from its cache (through our own
  // writes, kube::MutationCache). nullptr = a live GET per reconcile.
  std::shared_ptr<kube::SharedInformer> informer;
  std::string cluster_id;
  Clock::Duration drift_check_interval = std::chrono::minutes(10);
  // One bounded operations.wait inside a reconcile.
  Clock::Duration operation_wait = std::chrono::seconds(3);
  // Requeue delay while something is not done yet (operation, instances, stockout, errors):
  // initial, doubled per attempt up to max; reset when the child is Ready.
  Clock::Duration backoff_initial = std::chrono::seconds(2);
  Clock::Duration backoff_max = std::chrono::seconds(60);
  Clock* clock = nullptr;  // nullptr = RealClock()
};

class GceChildReconciler {
 public:
  GceChildReconciler(GceChildOptions options, std::unique_ptr<GceChildKind> kind);
  Result<kube::ReconcileResult> Reconcile(const std::string& key);

 private:
  Result<kube::ReconcileResult> ReconcileLive(ChildCtx& ctx);
  // Ends the reconcile as `step` says: the status written (once), the finalizer removed, the
  // requeue taken from the schedule.
  Result<kube::ReconcileResult> Finish(ChildCtx& ctx, const Step& step);
  Status WriteStatus(ChildCtx& ctx);
  Status RemoveFinalizer(ChildCtx& ctx);

  GceChildOptions options_;
  std::unique_ptr<GceChildKind> kind_;
  std::unique_ptr<kube::MutationCache> cache_;  // when options_.informer is set
  RequeueSchedule schedule_;
  ChildPhases phases_;
};

}  // namespace hyperslice::tpu::internal
