// A Node's readiness as kube-controller-manager and the scheduler read it: the status of its Ready
// condition. Header-only.
#pragma once

#include <string>

#include "src/kube/client.h"
#include "src/kube/object_helpers.h"

namespace hyperslice::testenv {

// "True", "False" or "Unknown"; "" when the Node cannot be read or has no Ready condition.
inline std::string NodeReadyStatus(kube::Client& client, const std::string& name) {
  auto n = client.Get(kube::resources::Nodes(), "", name);
  if (!n.ok()) return "";
  auto c = kube::FindCondition(*n, "Ready");
  return c ? c->status : "";
}

}  // namespace hyperslice::testenv
