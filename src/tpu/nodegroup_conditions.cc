// How a TPUNodeGroup's conditions are set, reported and logged (internal/nodegroup_phases.h).
#include <set>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/kube/object_helpers.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/nodegroup_phases.h"
#include "src/tpu/internal/reasons.h"
#include "src/tpu/internal/status_condition.h"

namespace hyperslice::tpu::internal {

using jsonfield::ObjectField;
using jsonfield::StringValue;

namespace {

// Reasons that describe progress, not trouble: their False conditions are Normal events.
bool IsProgressReason(const std::string& r) {
  static const std::set<std::string> kProgress = {reason::kCreating,
                                                  reason::kWaitingForPrerequisites,
                                                  reason::kWaitingForInstances,
                                                  reason::kNodesNotJoined,
                                                  reason::kDeleting,
                                                  reason::kInstancesNotRunning,
                                                  reason::kNodeNotReady,
                                                  reason::kReconciling};
  return kProgress.count(r) > 0;
}

}  // namespace

std::string GroupCtx::Uid() const {
  const auto* meta = ObjectField(group, "metadata");
  return meta != nullptr ? StringValue(*meta, "uid") : std::string();
}

std::string JoinNames(const std::vector<std::string>& v, size_t max) {
  std::string out;
  for (size_t i = 0; i < v.size() && i < max; ++i) {
    if (!out.empty()) out += ", ";
    out += v[i];
  }
  if (v.size() > max) out += " and " + std::to_string(v.size() - max) + " more";
  return out;
}

void SetGroupCondition(GroupCtx& ctx, kube::EventRecorder* events, const std::string& type,
                       bool status, const std::string& reason, const std::string& message) {
  kube::Condition c;
  c.type = type;
  c.status = status ? "True" : "False";
  c.reason = reason;
  c.message = message.empty() ? reason : message;
  c.observed_generation = ctx.generation;
  auto before = SetStatusCondition(ctx.status, c);
  bool changed = !before || before->status != c.status || before->reason != c.reason ||
                 before->message != c.message;
  if (!changed) return;
  // Losing readiness is a warning whatever the reason; so is any reason that is not progress.
  const bool lost = before && before->status == "True" && !status;
  const bool warning = lost || (!status && !IsProgressReason(reason));
  // Events for what a user acts on: the Ready condition turning True or False, and a warning's
  // first appearance (per reason). The steps in between (reasons while creating, progress counts
  // in messages, the other conditions' normal progress) are in status, in the log and in the
  // children's own Events.
  const bool status_changed = !before || before->status != c.status;
  const bool new_warning = warning && (status_changed || before->reason != c.reason);
  if (events != nullptr && ((type == kCondReady && status_changed) || new_warning)) {
    events->Event(ctx.group, warning ? kube::EventType::kWarning : kube::EventType::kNormal, reason,
                  type + "=" + c.status + ": " + c.message);
  }
  log::Write(warning ? log::Level::kWarn : log::Level::kInfo, "tpunodegroup condition",
             {{"group", ctx.key},
              {"type", type},
              {"status", c.status},
              {"reason", reason},
              {"message", c.message}});
}

}  // namespace hyperslice::tpu::internal
