// The conditions a kubelet posts on its Node (MemoryPressure, DiskPressure, PIDPressure, Ready),
// with the kubelet's bookkeeping: a condition keeps its lastTransitionTime while its status and
// reason stay the same; every post carries the current lastHeartbeatTime; the status is posted
// again when anything changed or Ready's heartbeat is a report interval old. For every component
// that acts as a kubelet (sim/kubelet, the runners' control nodes). Pure; thread-safe.
#pragma once

#include <chrono>
#include <vector>

#include <boost/json/array.hpp>

#include "src/kube/resource.h"

namespace hyperslice::kube {

struct NodeCondition {
  const char* type;
  const char* status;
  const char* reason;
  const char* message;
};

struct NodeConditionsUpdate {
  boost::json::array conditions;  // `want`, in order, with their times
  bool changed = false;  // a status or reason differs, or Ready's heartbeat is due (or missing)
};

// `node` as read from the apiserver (its status.conditions); `now` the wall time of this post.
NodeConditionsUpdate KubeletNodeConditions(const Object& node,
                                           const std::vector<NodeCondition>& want,
                                           std::chrono::system_clock::time_point now,
                                           std::chrono::system_clock::duration report_interval);

}  // namespace hyperslice::kube
