// The phases of one GCE child reconcile, each a step the runner (GceChildReconciler) takes in
// order until one ends the reconcile:
//
//   live:     Admit (generation, spec) → [settled? sleep until the drift check] →
//             ResumeOperation → [failure gate] → Provision (GET, insert or adopt) →
//             CheckOwner → Compare (drift, kind observation, correction) → Ready
//   deletion: Teardown (child_teardown.cc): resume, gate, GET, DELETE, wait, gone → finalizer
//
// Phases change only the ChildCtx (the status being built) and call GCE; the runner writes the
// status once at the end. The one write a phase makes itself is the operation record: an
// operation's selfLink is stored (through ChildPhaseOptions::record) before it is waited for, so a
// restarted operator resumes waiting instead of mutating again. Without a kube client, phases are
// unit-tested on a fake gce::Compute (test/unit/tpu/child_phases_test.cc).
// Thread-safety: one ChildPhases serves every worker; a ChildCtx belongs to one reconcile.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <boost/json/object.hpp>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/gce/compute.h"
#include "src/kube/events.h"
#include "src/kube/resource.h"
#include "src/tpu/internal/gce_child_kind.h"
#include "src/tpu/internal/requeue_schedule.h"

namespace hyperslice::tpu::internal {

// One reconcile's view of a child CR.
struct ChildCtx {
  std::string key, ns, name;
  kube::Object cr;
  boost::json::object spec;
  boost::json::object status;   // being built; the runner writes it when it differs from `written`
  boost::json::object written;  // status as last read or written
  // Filled by the phases for the ones after them.
  std::string gce_name;       // spec.name
  bool spec_changed = false;  // a generation not acted on yet: differences are the change asked for
  bool ours = false;          // the resource was (or is being) created by this controller
  std::optional<boost::json::object> resource;  // the GCE resource, once read
};

// How a phase ends: go on, or end the reconcile with a requeue the runner computes from the
// RequeueSchedule.
struct Step {
  enum class Next {
    kContinue,
    kBackoff,          // something not done yet
    kFailed,           // backoff, and GCE left alone until it has passed
    kDriftCheck,       // settled: look again at the drift interval
    kRequeueAfter,     // `after`
    kWaitForChange,    // nothing to do until the object changes
    kRemoveFinalizer,  // the GCE resource is gone (or never ours): let the CR go; no status write
  };
  Next next = Next::kContinue;
  Clock::Duration after{};
  bool write_status = true;  // false: end without writing the status
  bool done() const { return next != Next::kContinue; }
};

struct ChildPhaseOptions {
  gce::Compute* compute = nullptr;
  const GceChildKind* kind = nullptr;
  RequeueSchedule* schedule = nullptr;
  kube::EventRecorder* events = nullptr;  // nullptr: conditions are logged only
  std::string cluster_id;
  Clock::Duration operation_wait = std::chrono::seconds(3);  // one bounded operations.wait
  // Writes ctx.status now (the operation record); updates ctx.cr and ctx.written.
  std::function<Status(ChildCtx&)> record;
};

class ChildPhases {
 public:
  explicit ChildPhases(ChildPhaseOptions options);

  // Live (child_phases.cc).
  Step Admit(ChildCtx& ctx) const;
  // Time left before a Ready, settled child (no operation, this generation observed, not woken
  // by a spec change) is due for its drift check; nullopt when the reconcile should go on.
  std::optional<Clock::Duration> SettledFor(const ChildCtx& ctx) const;
  // Finishes waiting for status.operation (an operation started earlier, maybe before a restart).
  Step ResumeOperation(ChildCtx& ctx) const;
  Step RetryGate(const ChildCtx& ctx) const;
  Result<Step> Provision(ChildCtx& ctx) const;
  Step CheckOwner(ChildCtx& ctx) const;
  Result<Step> Compare(ChildCtx& ctx) const;

  // Deletion (child_teardown.cc): the whole sequence; ends with kRemoveFinalizer when the GCE
  // resource is gone or not ours.
  Result<Step> Teardown(ChildCtx& ctx) const;

  // Sets the Ready condition (an Event when it changed or is a warning).
  void SetReady(ChildCtx& ctx, bool ready, const std::string& reason, const std::string& message,
                bool warning) const;

 private:
  enum class OpState { kDone, kPending, kFailed, kGone };
  // Waits (bounded) for the operation at `link`; on kFailed `failure` holds GCE's error.
  OpState WaitOperation(const std::string& link, Error* failure) const;
  // Records `op` in status.operation (written at once), then waits for it.
  Result<OpState> RecordAndWait(ChildCtx& ctx, const gce::Operation& op, const std::string& reason,
                                const std::string& message, bool warning, Error* failure) const;
  // A failed GCE call or operation: Ready=False with GCE's reason, a warning, kFailed.
  Step Fail(ChildCtx& ctx, const Error& error, const std::string& message) const;
  std::string Describe(const ChildCtx& ctx) const;  // "resourcePolicy <name>"

  ChildPhaseOptions options_;
};

// The condition reason for a GCE error: GCE's own reason, else "Gce<Code>".
std::string ReasonOf(const Error& e);

}  // namespace hyperslice::tpu::internal
