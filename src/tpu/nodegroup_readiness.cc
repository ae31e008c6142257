// Readiness (internal/nodegroup_phases.h): what the other phases found, turned into the group's
// NodesReady and Ready conditions and its nodeSummary. A pure function, unit-tested without a
// cluster (test/unit/tpu/nodegroup_readiness_test.cc).
#include <boost/json.hpp>

#include "src/tpu/api.h"
#include "src/tpu/internal/nodegroup_phases.h"
#include "src/tpu/internal/reasons.h"

namespace hyperslice::tpu::internal {

Readiness AssessReadiness(const NodeGroupSpec& s, const ChildrenState& children,
                          const NodesObservation& nodes, const std::vector<std::string>& errors) {
  const ChildState& policy = children.policy;
  const ChildState& tmpl = children.tmpl;
  const ChildState& mig = children.mig;
  const int desired = s.node_count;
  const auto n = [](size_t v) { return std::to_string(v); };
  Readiness out;

  ConditionValue& nodes_ready = out.nodes_ready;
  nodes_ready.type = kCondNodesReady;
  const bool all_vms = mig.ready && static_cast<int>(nodes.instances.size()) == desired;
  if (!mig.ready && nodes.instances.empty()) {
    nodes_ready.reason = reason::kWaitingForInstances;
    nodes_ready.message =
        "0 of " + std::to_string(desired) + " VMs exist; see ManagedInstanceGroupReady";
  } else if (!nodes.not_ready.empty()) {
    nodes_ready.reason = reason::kNodeNotReady;
    nodes_ready.message = JoinNames(nodes.not_ready);
  } else if (!nodes.chips_missing.empty()) {
    nodes_ready.reason = reason::kTpuChipsUnavailable;
    nodes_ready.message = JoinNames(nodes.chips_missing);
  } else if (!nodes.not_joined.empty()) {
    nodes_ready.reason = reason::kNodesNotJoined;
    nodes_ready.message = n(nodes.not_joined.size()) + " of " + std::to_string(desired) +
                          " VMs have no Node yet: " + JoinNames(nodes.not_joined);
  } else if (!all_vms) {
    nodes_ready.reason = reason::kWaitingForInstances;
    nodes_ready.message = std::to_string(nodes.ready) + " of " + std::to_string(desired) +
                          " Nodes Ready; the MIG is not Ready (" + mig.reason + ")";
  } else {
    nodes_ready.status = true;
    nodes_ready.reason = reason::kNodesReady;
    nodes_ready.message = "all " + std::to_string(desired) + " Nodes of the slice are Ready";
  }

  ConditionValue& ready = out.ready;
  ready.type = kCondReady;
  if (!errors.empty()) {
    ready.reason = reason::kApplyFailed;
    ready.message = JoinNames(errors, 3);
  } else if (nodes_ready.status && policy.ready && tmpl.ready && mig.ready) {
    ready.status = true;
    ready.reason = reason::kSliceReady;
    ready.message = "slice " + s.topology + " of " + std::to_string(desired) + " x " +
                    s.slice.machine_type.name + " is Ready";
  } else if (!policy.ready) {
    ready.reason = policy.reason;
    ready.message = "ResourcePolicy: " + policy.message;
  } else if (!tmpl.ready) {
    ready.reason = tmpl.reason;
    ready.message = "InstanceTemplate: " + tmpl.message;
  } else if (!nodes.not_ready.empty()) {
    // A lost or unhealthy host names itself, whatever the MIG is doing about it.
    ready.reason = reason::kNodeNotReady;
    ready.message = JoinNames(nodes.not_ready);
  } else if (!nodes.chips_missing.empty()) {
    ready.reason = reason::kTpuChipsUnavailable;
    ready.message = JoinNames(nodes.chips_missing);
  } else if (!mig.ready) {
    ready.reason = mig.reason;
    ready.message = "ManagedInstanceGroup: " + mig.message;
  } else {
    ready.reason = nodes_ready.reason;
    ready.message = nodes_ready.message.empty() ? nodes_ready.reason : nodes_ready.message;
  }

  out.node_summary = boost::json::object{{"desired", desired},
                                         {"running", nodes.running},
                                         {"joined", static_cast<int64_t>(nodes.joined.size())},
                                         {"ready", nodes.ready},
                                         {"failed", nodes.failed}};
  return out;
}

std::vector<ConditionValue> InvalidSpecConditions(const std::string& message) {
  std::vector<ConditionValue> out = {{kCondReady, false, reason::kInvalidSpec, message}};
  for (const char* t : {kCondResourcePolicyReady, kCondInstanceTemplateReady,
                        kCondManagedInstanceGroupReady, kCondNodesReady}) {
    out.push_back({t, false, reason::kInvalidSpec, "the spec is invalid; see Ready"});
  }
  return out;
}

}  // namespace hyperslice::tpu::internal
