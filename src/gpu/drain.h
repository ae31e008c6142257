// Draining a rented machine's Node before the machine is returned (issue "Ephemeral GPUs 4/4"),
// as `kubectl drain` and Karpenter's terminator do it, one level-based step at a time:
//   1. the Node is tainted karpenter.sh/disrupted:NoSchedule (Karpenter's taint, so nothing new
//      lands on it);
//   2. each pod that must leave is evicted through the Eviction API (policy/v1), so the apiserver
//      enforces PodDisruptionBudgets and the pod's terminationGracePeriodSeconds applies; a 429
//      (a budget allows no disruption now) leaves the pod where it is, and the step says which
//      budget;
//   3. the step is done when no such pod is left on the Node (evicted pods are gone, not just
//      terminating).
// Pods that do not have to leave: finished ones (Succeeded/Failed), mirror pods, DaemonSet pods
// (they end with the Node) and pods that tolerate the disrupted taint. A pod annotated
// karpenter.sh/do-not-disrupt or tgp.io/do-not-disrupt is not evicted: the drain waits for it to
// finish. Past `force_after` (the pool's terminationGracePeriod after the drain began) pods that
// a budget or the annotation still holds are deleted instead, as Karpenter does.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/result.h"
#include "src/kube/resource.h"

namespace hyperslice::kube {
class Client;
}

namespace hyperslice::gpu {

inline constexpr char kTaintDisrupted[] = "karpenter.sh/disrupted";

// What the drain does with one pod of the Node.
enum class DrainAction {
  kIgnore,  // may stay (finished, mirror, DaemonSet, tolerates the disrupted taint)
  kEvict,   // ask the Eviction API
  kWait,    // already terminating: wait for it to go
  kHold,    // do-not-disrupt: wait for it to finish
};
DrainAction ClassifyForDrain(const boost::json::object& pod);

struct DrainProgress {
  bool done = false;
  int evicted = 0;  // evictions (or forced deletes) this step started
  // Pods still in the way, "<namespace>/<name>", and why the drain cannot move them now
  // (a disruption budget's answer, do-not-disrupt); empty when nothing blocks.
  std::vector<std::string> remaining;
  std::string blocked;
};

// One drain step for `node` with the pods bound to it. `now`/`force_after`: when past
// force_after, held pods are deleted rather than waited for.
Result<DrainProgress> DrainStep(kube::Client& client, const kube::Object& node,
                                const std::vector<const boost::json::object*>& pods,
                                std::chrono::system_clock::time_point now,
                                std::optional<std::chrono::system_clock::time_point> force_after);

}  // namespace hyperslice::gpu
