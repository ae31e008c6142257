// Which of a pool's machines to give back now (issue "Ephemeral GPUs 4/4": empty and idle
// consolidation), as pure functions of the pool's spec.disruption, its claims and the pods on their
// Nodes. Karpenter's disruption semantics where they apply:
//  - a Node is *empty* when no pod on it counts: pods that finished (Succeeded/Failed), are being
//    deleted, belong to a DaemonSet or are mirror pods do not count (WhenEmpty);
//  - a Node is *idle* when no counting pod asks for nvidia.com/gpu: its GPU work has finished,
//    whatever else still runs there (WhenIdle);
//  - a claim, its Node or any pod on it annotated `karpenter.sh/do-not-disrupt: "true"` (or
//    `tgp.io/do-not-disrupt: "true"`) is never chosen;
//  - a machine is returned once it has been empty/idle for `consolidateAfter` without a break
//    (`Never`: never);
//  - a machine older than `expireAfter` is *expired* (returned, or replaced first when pods run on
//    it and `expirePolicy` is Replace — disruption_controller.h);
//  - budgets: at most `nodes` of the pool's machines ("3", or "10%" of the pool, rounded up) may be
//    being disrupted at once, counting claims already being deleted; a budget with `reasons`
//    applies only to those (Empty, Idle, Expired); one with a `schedule` (cron, UTC) and
//    `duration` only within `duration` after each firing; no budgets: 10 %.
// Thread-safe (no state).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/result.h"
#include "src/gpu/cron.h"

namespace hyperslice::gpu {

inline constexpr char kAnnotationDoNotDisrupt[] = "karpenter.sh/do-not-disrupt";
inline constexpr char kAnnotationTgpDoNotDisrupt[] = "tgp.io/do-not-disrupt";

enum class ConsolidationPolicy { kWhenEmpty, kWhenIdle };
// What happens to an expired machine that still runs pods: a replacement first (Replace), or the
// drain sends its pods back to the provisioner (Return). An empty expired machine is returned.
enum class ExpirePolicy { kReplace, kReturn };

struct DisruptionBudget {
  std::string nodes = "10%";             // "3" or "10%"
  std::vector<std::string> reasons;      // empty: every reason; else of Empty, Idle, Expired
  std::optional<CronSchedule> schedule;  // with duration
  std::chrono::seconds duration{0};
};

struct DisruptionSpec {
  ConsolidationPolicy policy = ConsolidationPolicy::kWhenEmpty;
  std::optional<std::chrono::seconds> consolidate_after;  // nullopt: Never
  std::optional<std::chrono::seconds> expire_after;       // nullopt: Never
  ExpirePolicy expire_policy = ExpirePolicy::kReplace;
  std::vector<DisruptionBudget> budgets;
};

// spec.disruption of a GPUNodePool (defaults as the CRD's: WhenEmpty, 30s, 10%). Errors name the
// field (kInvalidArgument).
Result<DisruptionSpec> ParseDisruption(const boost::json::object& pool);
// "30s", "5m", "1h30m" → seconds; "Never" → nullopt.
Result<std::optional<std::chrono::seconds>> ParseDisruptionDuration(const std::string& text);

// Why a Node can be given back now ("" when it cannot): "empty" or "idle".
std::string Consolidatable(ConsolidationPolicy policy, const boost::json::object& claim,
                           const boost::json::object* node,
                           const std::vector<const boost::json::object*>& pods_on_node);

// Whether a machine created at `created` has expired at `now`.
bool Expired(const DisruptionSpec& spec, std::chrono::system_clock::time_point created,
             std::chrono::system_clock::time_point now);

// How many more of a pool's machines may start being disrupted now for `reason` ("empty",
// "idle", "expired"): the smallest budget that applies (its reasons name it, its schedule is
// active at `now`) minus those already being disrupted (never below 0). No budget applies: the
// whole pool.
int DisruptionsAllowed(const std::vector<DisruptionBudget>& budgets, std::string_view reason,
                       std::chrono::system_clock::time_point now, int pool_size, int disrupting);

}  // namespace hyperslice::gpu
