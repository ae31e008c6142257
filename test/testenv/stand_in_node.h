// The Node a stand-in GPU machine registers, for the GPU e2e tests whose machines do not boot a
// kubelet (test/e2e/gpu_provisioning, gpu_chaos, gpu_cost, bench/gpu_provisioning_bench.cc): what
// a machine's kubelet does on registration, and what kube-controller-manager's node lifecycle
// controller (not running there) does once the Node is Ready. Header-only.
#pragma once

#include <chrono>
#include <string>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/gpu/api.h"
#include "src/gpu/claim_controller.h"
#include "src/gpu/planner.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"

namespace hyperslice::testenv {

// Node `name` with spec.providerID `provider_id` and the registration taint, as a machine's
// kubelet creates it.
inline boost::json::object StandInNode(const std::string& name, const std::string& provider_id) {
  namespace bj = boost::json;
  return bj::object{
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata", bj::object{{"name", name}}},
      {"spec", bj::object{{"providerID", provider_id},
                          {"taints", bj::array{bj::object{{"key", gpu::kTaintUnregistered},
                                                          {"value", "true"},
                                                          {"effect", "NoExecute"}}}}}}};
}

// Posts Node `name`'s status as its kubelet would: Ready, `gpus` GPUs (16 CPUs, 64 GiB, 110 pods)
// allocatable, a loopback InternalIP.
inline Status PostStandInNodeStatus(kube::Client& client, const std::string& name, int gpus) {
  namespace bj = boost::json;
  bj::object resources{{gpu::kResourceGpu, std::to_string(gpus)},
                       {"cpu", "16"},
                       {"memory", "64Gi"},
                       {"pods", "110"}};
  auto now = kube::FormatTime(std::chrono::system_clock::now());
  bj::object status{
      {"capacity", resources},
      {"allocatable", resources},
      {"addresses", bj::array{bj::object{{"type", "InternalIP"}, {"address", "127.0.0.1"}}}},
      {"conditions", bj::array{bj::object{{"type", "Ready"},
                                          {"status", "True"},
                                          {"reason", "KubeletReady"},
                                          {"message", "stand-in machine"},
                                          {"lastHeartbeatTime", now},
                                          {"lastTransitionTime", now}}}}};
  kube::PatchOptions po;
  po.subresource = "status";
  auto r = client.Patch(kube::resources::Nodes(), "", name, kube::PatchType::kMerge,
                        bj::serialize(bj::object{{"status", status}}), po);
  return r.ok() ? OkStatus() : Status(r.error());
}

// Removes the node.kubernetes.io/not-ready taint the apiserver's admission put on Node `name`,
// against the version read (the claim controller edits taints too). True when the Node no longer
// has it (or is gone); false to try again.
inline bool DropNotReadyTaint(kube::Client& client, const std::string& name) {
  namespace bj = boost::json;
  auto n = client.Get(kube::resources::Nodes(), "", name);
  if (!n.ok()) return n.error().code == Error::Code::kNotFound;
  bj::array kept;
  bool had = false;
  if (const bj::object* spec = jsonfield::ObjectField(*n, "spec")) {
    if (const bj::array* t = jsonfield::ArrayField(*spec, "taints")) {
      for (const auto& taint : *t) {
        if (taint.is_object() &&
            jsonfield::StringField(taint.get_object(), "key") == "node.kubernetes.io/not-ready") {
          had = true;
        } else {
          kept.push_back(taint);
        }
      }
    }
  }
  if (!had) return true;
  (*n)["spec"].as_object()["taints"] = std::move(kept);
  return client.Update(kube::resources::Nodes(), "", *n).ok();
}

}  // namespace hyperslice::testenv
