// The runners.hyperslice.dev/v1alpha1 API (deploy/crds/runners.hyperslice.dev_*.yaml): resources,
// the names the control node writes on Nodes and pods, and the parsed specs the controllers read.
// src/runners/README.md ("API") documents them for users.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "src/base/result.h"
#include "src/kube/resource.h"
#include "src/kube/scheduling.h"
#include "src/runners/controlnode/placement.h"

namespace hyperslice::runners::controlnode {

const kube::Resource& ControlNodes();         // cluster-scoped
const kube::Resource& Runners();              // cluster-scoped
const kube::Resource& WorkloadPolicies();     // cluster-scoped (src/runners/policy)
const kube::Resource& AttestationPolicies();  // cluster-scoped (sealed runners, issue 21)

inline constexpr char kGroup[] = "runners.hyperslice.dev";
// Node label and taint key (value: the ControlNode's name); only pods tolerating the taint land.
inline constexpr char kControlNodeLabel[] = "runners.hyperslice.dev/control-node";
// Finalizer on a Runner with spec.gce: its instance is deleted before the Runner goes.
inline constexpr char kInstanceFinalizer[] = "runners.hyperslice.dev/instance";
// Pod annotation: the runner(s) a pod runs on, comma-separated (slice pods: in slice order).
inline constexpr char kRunnerAnnotation[] = "runners.hyperslice.dev/runner";
// Pod annotation asking for a whole multi-host slice: "<N>" runners of one slice.
inline constexpr char kSliceHostsAnnotation[] = "runners.hyperslice.dev/slice-hosts";
// Pod condition type set (True) when the control node refuses a pod it cannot run.
inline constexpr char kRefusedCondition[] = "runners.hyperslice.dev/Refused";
// Finalizer on a ControlNode: its Node and Lease are deleted before it goes.
inline constexpr char kNodeFinalizer[] = "runners.hyperslice.dev/node";
// Runner annotation recorded when its join token was consumed (no new token is minted while it
// is present and the runner never linked; remove it to get a new token).
inline constexpr char kJoinTokenConsumedAnnotation[] = "runners.hyperslice.dev/join-token-consumed";
// Pod status reason when its runner stopped answering for longer than the bound.
inline constexpr char kRunnerLostReason[] = "RunnerLost";
// Sealed runners (issue 21): the Runner's phase while its last appraisal failed, the pod status
// reason of its pods failed then, and the Runner condition that says whether it is attested.
inline constexpr char kUntrustedPhase[] = "Untrusted";
inline constexpr char kRunnerUntrustedReason[] = "RunnerUntrusted";
inline constexpr char kAttestedCondition[] = "Attested";

struct ControlNodeSpec {
  std::string name;                                  // the ControlNode's name
  std::string node_name;                             // spec.nodeName, default name
  std::map<std::string, std::string> match_labels;   // runnerSelector.matchLabels
  std::vector<kube::Requirement> match_expressions;  // runnerSelector.matchExpressions
  std::string address = "127.0.0.1";                 // InternalIP the apiserver dials
  int kubelet_port = 10250;
  std::map<std::string, std::string> labels;  // extra Node labels
  std::vector<kube::Taint> taints;            // extra Node taints
  ResourceList reserved;                      // capacityPolicy.reserved
  int max_pods_per_runner = 110;              // capacityPolicy.maxPodsPerRunner
  bool sealed = false;             // spec.sealed (issue 21): every runner it links is sealed
  std::string workload_policy;     // spec.workloadPolicy: a WorkloadPolicy's name
  std::string attestation_policy;  // spec.attestationPolicy: its runners' default
  int64_t generation = 0;
};
// Errors: kInvalidArgument naming the field.
Result<ControlNodeSpec> ParseControlNode(const kube::Object& obj);
bool Selects(const ControlNodeSpec& cn, const std::map<std::string, std::string>& runner_labels);

struct RunnerSpec {
  std::string name;
  std::string control_node;
  enum class Placement { kGce, kHost, kMarketplace } placement = Placement::kHost;
  std::string host_address;  // host: host:port of an existing agent
  struct Gce {               // spec.gce: the instance the operator creates (gce_runner.h)
    std::string project, zone, machine_type, accelerator_type;
    int64_t accelerator_count = 0;
  } gce;
  struct Market {  // spec.marketplace: a container machine the operator rents (market_runner.h)
    std::string gpu_node_class;  // the GPUNodeClass whose providers and credentials are used
    std::string gpu_type;        // normalised (tgp.io/gpu-type, "RTX4090"); empty: any
    int gpu_count = 1;
    std::vector<std::string> regions;  // normalised (tgp.io/region); empty: any
    std::string max_hourly_price;      // "0.80" per machine-hour; empty: no limit
    bool spot = false;                 // interruptible machines allowed (when cheaper)
  } market;
  std::string region, zone;
  std::string slice;
  int slice_index = 0;
  bool allow_host_network = false;
  bool require_digest = true;
  bool sealed = false;             // spec.sealed (a sealed ControlNode makes it sealed as well)
  std::string attestation_policy;  // spec.attestationPolicy ("" = the ControlNode's)
  std::map<std::string, std::string> labels;
  int64_t generation = 0;
};
// Errors: kInvalidArgument naming the field (exactly one placement, host:port, gce fields).
Result<RunnerSpec> ParseRunner(const kube::Object& obj);

// AttestationPolicy (deploy/crds/runners.hyperslice.dev_attestationpolicies.yaml): what a sealed
// runner must measure.
struct AttestationPolicySpec {
  std::string name;
  std::string ek_ca_pem;  // spec.ekCACertificates
  // spec.referenceValues as name -> allowed hex digests; spec.requiredMeasurements (default
  // agent/binary and agent/config). Workload measurements are checked against the pods the
  // control node sent, not listed here.
  std::map<std::string, std::vector<std::string>> reference_values;
  std::vector<std::string> required;
  std::chrono::seconds reattest_interval{60};
  std::chrono::seconds token_lifetime{300};
  int64_t generation = 0;
};
// Errors: kInvalidArgument naming the field.
Result<AttestationPolicySpec> ParseAttestationPolicy(const kube::Object& obj);

// "cpu" -> milli etc. from a {name: quantity} object; unparsable entries are an error.
Result<ResourceList> ParseResources(const boost::json::object* obj, const std::string& field);
// The other way: whole units where exact ("8", "32Gi" stays as bytes "34359738368"), else "500m".
std::string FormatQuantity(const std::string& resource, int64_t milli);

}  // namespace hyperslice::runners::controlnode
