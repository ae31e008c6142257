// From a pod bound to a control node to the RunPod request its runner's agent receives. The agent
// never reads the API: env valueFrom/envFrom, Secret/ConfigMap/downwardAPI/projected volumes and
// the service-account token are resolved here, through a seam (PodInputs) so tests can feed them.
//
// Refusals are errors with code kInvalidArgument and a reason a pod condition can carry:
//   UnsupportedVolume   a volume type a runner cannot have (hostPath, PVCs, CSI, ...)
//   UnsupportedField    a field the control node cannot honour (e.g. resourceFieldRef divisor)
//   InvalidSliceHosts   a slice-hosts annotation that is not an integer >= 1
// (policy refusals — hostNetwork, tags instead of digests — are decided with the runner, in
// placement.h). A missing Secret/ConfigMap/key that is not optional is kNotFound (reason
// CreateContainerConfigError): the pod waits, as a kubelet keeps it Pending, and is retried.
//
// Thread-compatible.
#pragma once

#include <string>

#include "src/base/result.h"
#include "src/kube/resource.h"
#include "src/runners/agent.grpc.pb.h"
#include "src/runners/controlnode/placement.h"

namespace hyperslice::runners::controlnode {

// Where a pod's referenced inputs come from (the apiserver in the operator; maps in tests).
class PodInputs {
 public:
  virtual ~PodInputs() = default;
  // kNotFound when absent.
  virtual Result<kube::Object> Secret(const std::string& ns, const std::string& name) = 0;
  virtual Result<kube::Object> ConfigMap(const std::string& ns, const std::string& name) = 0;
  // A bound service-account token (TokenRequest) for a projected serviceAccountToken source.
  virtual Result<std::string> ServiceAccountToken(
      const std::string& ns, const std::string& service_account, const std::string& audience,
      int64_t expiration_seconds, const std::string& pod_name, const std::string& pod_uid) = 0;
};

// What placement needs of the pod (requests, slice hosts, hostNetwork, digests).
Result<PodNeeds> NeedsOf(const kube::Object& pod);

// The RunPod request for `pod` (node_name/host_ip feed fieldRef spec.nodeName/status.hostIP).
Result<v1::RunPodRequest> BuildRunPod(const kube::Object& pod, PodInputs& inputs,
                                      const std::string& node_name, const std::string& host_ip);

}  // namespace hyperslice::runners::controlnode
