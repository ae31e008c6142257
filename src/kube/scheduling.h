// The scheduler's vocabulary, for controllers that decide where a pod could run without being the
// scheduler (the GPU provisioner choosing a machine for a pending pod, a control node choosing a
// runner): taints and tolerations, node-selector requirements, and a pod's effective requests —
// with kube-scheduler's semantics (k8s.io/api/core/v1 and k8s.io/component-helpers/scheduling).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/result.h"
#include "src/kube/quantity.h"

namespace hyperslice::kube {

struct Taint {
  std::string key, value, effect;  // effect: NoSchedule, PreferNoSchedule, NoExecute
};

struct Toleration {
  std::string key;
  std::string op = "Equal";  // Equal or Exists
  std::string value;
  std::string effect;  // empty: every effect
};

// v1.Toleration.ToleratesTaint.
bool Tolerates(const Toleration& t, const Taint& taint);
// The taints (NoSchedule and NoExecute; PreferNoSchedule is a preference) no toleration covers.
std::vector<Taint> Untolerated(const std::vector<Toleration>& tolerations,
                               const std::vector<Taint>& taints);

struct Requirement {
  std::string key;
  std::string op;  // In, NotIn, Exists, DoesNotExist, Gt, Lt
  std::vector<std::string> values;
};
using Labels = std::map<std::string, std::string>;
// NodeSelectorRequirement semantics; Gt/Lt compare integers (a non-integer value never matches).
bool Matches(const Requirement& r, const Labels& labels);
bool MatchesAll(const std::vector<Requirement>& rs, const Labels& labels);

// What the scheduler needs of a pod to place it.
struct PodPlacement {
  Labels node_selector;
  // requiredDuringSchedulingIgnoredDuringExecution: any one term (its matchExpressions ANDed)
  // must match; empty: no constraint.
  std::vector<std::vector<Requirement>> required_terms;
  std::vector<Toleration> tolerations;
  // Effective requests: max(sum over containers, each init container) per resource, plus
  // overhead; limits stand in for missing requests of extended resources (as the API defaults).
  std::map<std::string, Quantity> requests;
};
// Errors: kInvalidArgument for an unparsable quantity or a malformed term (naming the field).
Result<PodPlacement> PlacementOf(const boost::json::object& pod);

// Does a node with `labels` satisfy the pod's nodeSelector and required affinity?
bool NodeMatches(const PodPlacement& p, const Labels& labels);

// Parsing from API objects (spec.taints, spec.tolerations, matchExpressions).
std::vector<Taint> TaintsFrom(const boost::json::value* v);
std::vector<Toleration> TolerationsFrom(const boost::json::value* v);
Result<std::vector<Requirement>> RequirementsFrom(const boost::json::value* v);

}  // namespace hyperslice::kube
