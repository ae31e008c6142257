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
//  - budgets: at most `nodes` of the pool's machines ("3", or "10%" of the pool, rounded up) may be
//    being disrupted at once, counting claims already being deleted; budgets with a `schedule` are
//    not applied yet (they are reported, not enforced); no budgets: 10 %.
// Thread-safe (no state).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/result.h"

namespace hyperslice::gpu {

inline constexpr char kAnnotationDoNotDisrupt[] = "karpenter.sh/do-not-disrupt";
inline constexpr char kAnnotationTgpDoNotDisrupt[] = "tgp.io/do-not-disrupt";

enum class ConsolidationPolicy { kWhenEmpty, kWhenIdle };

struct DisruptionSpec {
  ConsolidationPolicy policy = ConsolidationPolicy::kWhenEmpty;
  std::optional<std::chrono::seconds> consolidate_after;  // nullopt: Never
  std::vector<std::string> budgets;                       // "nodes" of unscheduled budgets
  int scheduled_budgets_ignored = 0;
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

// How many more of a pool's machines may start being disrupted now: the smallest budget minus
// those already being disrupted (never below 0).
int DisruptionsAllowed(const std::vector<std::string>& budgets, int pool_size, int disrupting);

}  // namespace hyperslice::gpu
