// The kubelet API's Backend for control nodes (src/runners/kubeletapi): `kubectl logs` and
// `kubectl exec` on a pod bound to a control node go to the agent of the runner the pod runs on,
// over the control node's mutual-TLS channel (the agent's Logs and Exec calls). The runner never
// sees the apiserver; the apiserver never sees the runner.
#pragma once

#include <memory>

#include "src/runners/controlnode/controlnode.h"
#include "src/runners/kubeletapi/kubeletapi.h"

namespace hyperslice::kube {
class Client;
}  // namespace hyperslice::kube

namespace hyperslice::runners::controlnode {

// `client` reads the pod (its Node and uid); `set` finds the runner and its agent. Sealed control
// nodes (issue 21) will refuse exec in AdmitExec.
std::shared_ptr<kubeletapi::Backend> MakeKubeletBackend(std::shared_ptr<kube::Client> client,
                                                        std::shared_ptr<ControlNodeSet> set);

}  // namespace hyperslice::runners::controlnode
