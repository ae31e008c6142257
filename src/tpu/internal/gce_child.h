// The lifecycle every child controller shares (ResourcePolicy, InstanceTemplate,
// ManagedInstanceGroup): one CR owns exactly one GCE resource, named by spec.name.
//
//   finalizer → wait for a recorded operation → GET by name → insert (or adopt) → compare with
//   the spec (drift) → kind-specific observation (MIG instances) → Ready → requeue for drift;
//   on deletion: DELETE, wait for the operation, then drop the finalizer.
//
// The operation of every mutation is written to status.operation before it is waited for, so a
// restarted operator resumes waiting on it instead of mutating again. Waits are bounded
// long-polls (operations/{op}/wait) inside the reconcile; an operation not DONE in time is
// requeued with a growing backoff, never polled in a tight loop.
//
// A GceChildKind says how one kind maps to GCE; GceChildReconciler runs the lifecycle.
// Thread-safety: a GceChildReconciler may be called by several workers at once (never for the
// same key: kube::Controller guarantees that); GceChildKind implementations are stateless.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/gce/compute.h"
#include "src/kube/client.h"
#include "src/kube/controller.h"
#include "src/kube/events.h"
#include "src/kube/informer.h"
#include "src/kube/mutation_cache.h"
#include "src/kube/resource.h"
#include "src/tpu/internal/requeue_schedule.h"

namespace hyperslice::tpu::internal {

// Who a GCE resource belongs to: the TPUNodeGroup that owns the child CR (its controller owner
// reference; the CR itself when it has none) and the cluster.
struct GceOwner {
  std::string ns, name, uid, cluster;
};

// GCE labels naming the owner (kGceLabel* of api.h).
std::map<std::string, std::string> OwnerLabels(const GceOwner& owner);
// "hyperslice owner=<ns>/<name> uid=<uid> cluster=<id>", the owner marker in a description
// (resourcePolicies and instanceGroupManagers have no labels).
std::string OwnerDescription(const GceOwner& owner);
// `description` followed by the owner marker ("<description>; hyperslice owner=...").
std::string DescriptionWithOwner(std::string_view description, const GceOwner& owner);

// Owner facts found on an existing GCE resource; empty strings when absent.
struct OwnerMarks {
  std::string uid, cluster;
};
OwnerMarks OwnerMarksFromLabels(const boost::json::object& labels);
OwnerMarks OwnerMarksFromDescription(std::string_view description);
// Empty when `marks` do not name another owner (absent marks: a resource made by hand, adopted);
// else a message naming the other owner.
std::string ForeignOwnerMessage(const OwnerMarks& marks, const GceOwner& owner);

// Paths (dotted, e.g. "properties.machineType") where `desired` is not found in `actual`:
// every field of `desired` must be present in `actual` with an equal value; arrays match
// element-wise with the same length; a string and a number are equal when they print the same
// (GCE's int64-as-string); URL strings match when one is a suffix of the other at a '/'
// ("projects/p/..." versus "https://.../projects/p/..."). Fields only in `actual` are ignored.
void JsonDifferences(const boost::json::value& desired, const boost::json::value& actual,
                     const std::string& path, std::vector<std::string>& out);

// String field of an object, "" when absent or not a string.
std::string StringAt(const boost::json::object& o, std::string_view key);
// Object field, nullptr when absent or not an object.
const boost::json::object* ObjectAt(const boost::json::object& o, std::string_view key);

// What a kind-specific observation found (after the resource exists and is ours).
struct Observation {
  bool ready = true;
  std::string reason;    // when not ready: GCE's code or our CamelCase reason
  std::string message;   // when not ready
  bool warning = false;  // emit a Warning Event with reason/message
  // A corrective mutation that was started (MIG resize); recorded and waited for.
  std::optional<gce::Operation> operation;
  // Replaces the default "not ready" requeue delay (the backoff) when set.
  std::optional<Clock::Duration> requeue_after;
};

class GceChildKind {
 public:
  virtual ~GceChildKind() = default;
  virtual const kube::Resource& resource() const = 0;
  // "resourcePolicy", for messages.
  virtual std::string GceKind() const = 0;
  // Checks the spec's required fields; the error message says what to fix.
  virtual Status Validate(const boost::json::object& spec) const = 0;

  virtual Result<boost::json::object> Get(gce::Compute& compute,
                                          const boost::json::object& spec) const = 0;
  // Inserts the resource the spec describes, marked with `owner`.
  virtual Result<gce::Operation> Insert(gce::Compute& compute, const boost::json::object& spec,
                                        const GceOwner& owner) const = 0;
  virtual Result<gce::Operation> Delete(gce::Compute& compute,
                                        const boost::json::object& spec) const = 0;
  virtual OwnerMarks OwnerOf(const boost::json::object& resource) const = 0;
  // The fields we set that differ between the spec and the GCE resource (GCE field paths).
  virtual std::vector<std::string> Drift(const boost::json::object& spec,
                                         const boost::json::object& resource) const = 0;
  // Kind-specific observation of an existing, owned resource; may fill `status` (MIG
  // instances) and start a correction. `drift` may be edited (fields being corrected removed).
  virtual Result<Observation> Observe(gce::Compute& /*compute*/,
                                      const boost::json::object& /*spec*/,
                                      const boost::json::object& /*resource*/,
                                      std::vector<std::string>& /*drift*/,
                                      boost::json::object& /*status*/) const {
    return Observation{};
  }
};

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
  struct Ctx;
  enum class OpState { kDone, kPending, kFailed, kGone };
  Result<kube::ReconcileResult> ReconcileLive(Ctx& ctx);
  Result<kube::ReconcileResult> ReconcileDeletion(Ctx& ctx);
  // Waits (bounded) for status.operation; on kFailed `failure` holds GCE's error.
  OpState WaitOperation(const std::string& link, Error* failure);
  // Records `op` in status.operation (written at once), then waits for it.
  Result<OpState> RecordAndWait(Ctx& ctx, const gce::Operation& op, const std::string& reason,
                                const std::string& message, bool warning, Error* failure);
  Status WriteStatus(Ctx& ctx);
  Status RemoveFinalizer(Ctx& ctx);
  // Sets the Ready condition (and emits an Event when it changed or is a warning).
  void SetReady(Ctx& ctx, bool ready, const std::string& reason, const std::string& message,
                bool warning);
  kube::ReconcileResult Backoff(const std::string& key);
  kube::ReconcileResult Failed(const std::string& key);
  kube::ReconcileResult DriftRequeue(const std::string& key);
  // Time left before a Ready, settled child (no operation, this generation observed) is due for
  // its drift check; nullopt when it is not settled or the check is due.
  std::optional<Clock::Duration> SettledUntil(const Ctx& ctx, int64_t generation);
  GceOwner OwnerOf(const kube::Object& cr) const;

  GceChildOptions options_;
  std::unique_ptr<GceChildKind> kind_;
  std::unique_ptr<kube::MutationCache> cache_;  // when options_.informer is set
  RequeueSchedule schedule_;
};

// The three kinds (resource_policy_controller.cc, instance_template_controller.cc,
// managed_instance_group_controller.cc).
std::unique_ptr<GceChildKind> NewResourcePolicyKind();
std::unique_ptr<GceChildKind> NewInstanceTemplateKind();
std::unique_ptr<GceChildKind> NewManagedInstanceGroupKind();

}  // namespace hyperslice::tpu::internal
