// The live phases of a GCE child reconcile, and what they share with the teardown
// (internal/child_phases.h).
#include "src/tpu/internal/child_phases.h"

#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/kube/object_helpers.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/reasons.h"
#include "src/tpu/internal/status_condition.h"

namespace hyperslice::tpu::internal {

using jsonfield::StringValue;

namespace {

using Next = Step::Next;

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

}  // namespace

std::string ReasonOf(const Error& e) {
  if (!e.reason.empty()) return e.reason;
  return std::string("Gce") + CodeName(e.code);
}

ChildPhases::ChildPhases(ChildPhaseOptions options) : options_(std::move(options)) {}

std::string ChildPhases::Describe(const ChildCtx& ctx) const {
  return options_.kind->GceKind() + " " + ctx.gce_name;
}

// --- shared with the teardown --------------------------------------------------------------------

void ChildPhases::SetReady(ChildCtx& ctx, bool ready, const std::string& reason,
                           const std::string& message, bool warning) const {
  kube::Condition c;
  c.type = kCondReady;
  c.status = ready ? "True" : "False";
  c.reason = reason;
  c.message = message;
  c.observed_generation = kube::Generation(ctx.cr);
  auto before = SetStatusCondition(ctx.status, c);
  const bool changed = !before || before->status != c.status || before->reason != reason ||
                       before->message != message;
  // An Event per transition (status or reason) and per warning (the recorder aggregates repeats);
  // a message-only change, such as a progress count, is logged only.
  const bool transition = !before || before->status != c.status || before->reason != reason;
  if (options_.events != nullptr && (warning || transition)) {
    options_.events->Event(ctx.cr, warning ? kube::EventType::kWarning : kube::EventType::kNormal,
                           reason, message);
  }
  if (warning || changed) {
    log::Write(warning ? log::Level::kWarn : log::Level::kInfo, "gce child condition",
               {{"kind", options_.kind->resource().kind},
                {"object", ctx.key},
                {"ready", ready},
                {"reason", reason},
                {"message", message}});
  }
}

Step ChildPhases::Fail(ChildCtx& ctx, const Error& error, const std::string& message) const {
  SetReady(ctx, false, ReasonOf(error), message, true);
  return {.next = Next::kFailed};
}

ChildPhases::OpState ChildPhases::WaitOperation(const std::string& link, Error* failure) const {
  auto ref = gce::ParseOperationLink(link);
  if (!ref.ok()) return OpState::kGone;  // not an operation we can follow: re-read GCE
  auto done = options_.compute->Wait(*ref, options_.operation_wait);
  if (done.ok()) return OpState::kDone;
  if (done.error().reason == "operationNotDone") return OpState::kPending;
  // Either the operation failed or the wait call did: one plain read tells which.
  auto op = options_.compute->GetOperation(*ref);
  if (!op.ok()) {
    if (op.error().code == Error::Code::kNotFound) return OpState::kGone;
    return OpState::kPending;  // transient: try again later
  }
  if (!op->done()) return OpState::kPending;
  if (op->error) {
    *failure = *op->error;
    return OpState::kFailed;
  }
  return OpState::kDone;
}

Result<ChildPhases::OpState> ChildPhases::RecordAndWait(ChildCtx& ctx, const gce::Operation& op,
                                                        const std::string& reason,
                                                        const std::string& message, bool warning,
                                                        Error* failure) const {
  ctx.status["operation"] = op.self_link;
  SetReady(ctx, false, reason, message, warning);
  HS_RETURN_IF_ERROR(options_.record(ctx));
  return WaitOperation(op.self_link, failure);
}

Step ChildPhases::ResumeOperation(ChildCtx& ctx) const {
  const std::string link = StringValue(ctx.status, "operation");
  if (link.empty()) return {};
  Error failure;
  switch (WaitOperation(link, &failure)) {
    case OpState::kPending:
      return {.next = Next::kBackoff};
    case OpState::kFailed:
      ctx.status.erase("operation");
      return Fail(ctx, failure,
                  "GCE operation on " + Describe(ctx) + " failed: " + failure.message);
    case OpState::kDone:
    case OpState::kGone:
      ctx.status.erase("operation");
      break;
  }
  // An operation with no resource recorded yet was our insert.
  ctx.ours = !ctx.status.contains("selfLink");
  return {};
}

Step ChildPhases::RetryGate(const ChildCtx& ctx) const {
  // After a failure, GCE is left alone until the backoff has passed, whatever woke us (our own
  // status write does).
  if (auto wait = options_.schedule->RetryGate(ctx.key)) {
    return {.next = Next::kRequeueAfter, .after = *wait};
  }
  return {};
}

// --- live ----------------------------------------------------------------------------------------

Step ChildPhases::Admit(ChildCtx& ctx) const {
  const int64_t generation = kube::Generation(ctx.cr);
  // A spec the controller has not acted on yet: differences from GCE are the change asked for,
  // not drift (a MIG's targetSize is the one field that can change).
  const auto* observed = ctx.status.if_contains("observedGeneration");
  ctx.spec_changed =
      observed != nullptr && observed->is_int64() && observed->as_int64() != generation;
  ctx.status["observedGeneration"] = generation;
  if (auto valid = options_.kind->Validate(ctx.spec); !valid.ok()) {
    SetReady(ctx, false, reason::kInvalidSpec, valid.error().message, true);
    return {.next = Next::kWaitForChange};  // a spec change wakes us
  }
  ctx.gce_name = StringValue(ctx.spec, "name");
  return {};
}

std::optional<Clock::Duration> ChildPhases::SettledFor(const ChildCtx& ctx) const {
  // A settled child woken before its drift check is due (by our own status write, a relist, a
  // label change) is not looked at in GCE again: that is the drift check's job, on its schedule.
  if (ctx.spec_changed) return std::nullopt;
  if (ctx.status.contains("operation") || StringValue(ctx.status, "selfLink").empty()) {
    return std::nullopt;
  }
  auto ready = kube::FindCondition(ctx.cr, kCondReady);
  if (!ready || ready->status != "True" || ready->observed_generation != kube::Generation(ctx.cr)) {
    return std::nullopt;
  }
  return options_.schedule->UntilDriftCheck(ctx.key);
}

Result<Step> ChildPhases::Provision(ChildCtx& ctx) const {
  gce::Compute& compute = *options_.compute;
  const GceChildKind& kind = *options_.kind;
  auto resource = kind.Get(compute, ctx.spec);
  if (!resource.ok() && resource.error().code == Error::Code::kNotFound) {
    auto op = kind.Insert(compute, ctx.spec, OwnerOfChild(ctx.cr, options_.cluster_id));
    if (!op.ok() && op.error().code == Error::Code::kAlreadyExists) {
      resource = kind.Get(compute, ctx.spec);  // an earlier insert landed: adopt
    } else if (!op.ok()) {
      return Fail(ctx, op.error(), "creating " + Describe(ctx) + ": " + op.error().message);
    } else {
      ctx.status["adopted"] = false;
      Error failure;
      HS_ASSIGN_OR_RETURN(auto state, RecordAndWait(ctx, *op, reason::kCreating,
                                                    "creating " + Describe(ctx) + " (operation " +
                                                        op->ref.name + ")",
                                                    false, &failure));
      if (state == OpState::kPending) return Step{.next = Next::kBackoff};
      ctx.status.erase("operation");
      if (state == OpState::kFailed) {
        return Fail(ctx, failure, "creating " + Describe(ctx) + " failed: " + failure.message);
      }
      ctx.ours = true;
      resource = kind.Get(compute, ctx.spec);
    }
  }
  if (!resource.ok()) {
    return Fail(ctx, resource.error(),
                "reading " + Describe(ctx) + ": " + resource.error().message);
  }
  ctx.resource = std::move(resource).value();
  return Step{};
}

Step ChildPhases::CheckOwner(ChildCtx& ctx) const {
  // Someone else's resource of the same name is never touched.
  const GceOwner owner = OwnerOfChild(ctx.cr, options_.cluster_id);
  if (std::string foreign = ForeignOwnerMessage(options_.kind->OwnerOf(*ctx.resource), owner);
      !foreign.empty()) {
    SetReady(ctx, false, reason::kNameConflict,
             Describe(ctx) + " exists but " + foreign +
                 "; it is left alone (choose another name or delete it)",
             true);
    return {.next = Next::kDriftCheck};
  }
  if (!ctx.status.contains("adopted") || (!ctx.status.contains("selfLink") && !ctx.ours)) {
    ctx.status["adopted"] = !ctx.ours;
  }
  ctx.status["selfLink"] = StringValue(*ctx.resource, "selfLink");
  return {};
}

Result<Step> ChildPhases::Compare(ChildCtx& ctx) const {
  // The spec against GCE, then what only this kind knows (MIG instances, resize).
  std::vector<std::string> drift = options_.kind->Drift(ctx.spec, *ctx.resource);
  HS_ASSIGN_OR_RETURN(Observation obs, options_.kind->Observe(*options_.compute, ctx.spec,
                                                              *ctx.resource, drift, ctx.status));
  ctx.status["driftDetected"] = !drift.empty();
  if (obs.operation && ctx.spec_changed) {
    obs.reason = reason::kUpdating;
    obs.warning = false;
    ctx.status["driftDetected"] = false;
  }
  if (obs.operation) {
    Error failure;
    HS_ASSIGN_OR_RETURN(auto state, RecordAndWait(ctx, *obs.operation, obs.reason, obs.message,
                                                  obs.warning, &failure));
    if (state == OpState::kPending) return Step{.next = Next::kBackoff};
    ctx.status.erase("operation");
    if (state == OpState::kFailed) {
      return Fail(ctx, failure, obs.message + " failed: " + failure.message);
    }
    return Step{.next = Next::kBackoff};  // look again soon: the correction's effect is to be seen
  }
  if (!drift.empty()) {
    SetReady(ctx, false, reason::kDrifted,
             Describe(ctx) + " differs from the spec in: " + Join(drift) +
                 " (changed outside hyperslice; GCE cannot update these fields in place)",
             true);
    return Step{.next = Next::kDriftCheck};
  }
  if (!obs.ready) {
    SetReady(ctx, false, obs.reason, obs.message, obs.warning);
    if (obs.requeue_after) return Step{.next = Next::kRequeueAfter, .after = *obs.requeue_after};
    return Step{.next = Next::kBackoff};
  }
  const auto* adopted_v = ctx.status.if_contains("adopted");
  const bool adopted = adopted_v != nullptr && adopted_v->is_bool() && adopted_v->as_bool();
  SetReady(ctx, true, adopted ? reason::kAdopted : reason::kCreated,
           Describe(ctx) + (adopted ? " adopted" : " created"), false);
  return Step{.next = Next::kDriftCheck};
}

}  // namespace hyperslice::tpu::internal
