// The TPU device-plugin DaemonSet the operator deploys (internal/device_plugin.h). It mirrors
// deploy/device-plugin/daemonset.yaml (the same container, mounts and security context) under
// the operator's own name, so the static manifest and the operator's object are told apart.
#include "src/tpu/internal/device_plugin.h"

#include <boost/json.hpp>

#include "src/base/log.h"
#include "src/kube/client.h"
#include "src/tpu/api.h"

namespace hyperslice::tpu::internal {

namespace json = boost::json;

namespace {

json::object Labels() {
  return {{"app.kubernetes.io/name", kDevicePluginDaemonSetName},
          {"app.kubernetes.io/component", "device-plugin"},
          {"app.kubernetes.io/part-of", "hyperslice"},
          {"app.kubernetes.io/managed-by", kParentFieldManager}};
}

json::object HostPathVolume(const char* name, const char* path) {
  return {{"name", name}, {"hostPath", json::object{{"path", path}, {"type", "Directory"}}}};
}

}  // namespace

kube::Object DevicePluginDaemonSet(const std::string& ns, const std::string& image) {
  json::object container{
      {"name", "device-plugin"},
      {"image", image},
      {"imagePullPolicy", "IfNotPresent"},
      {"args",
       json::array{"device-plugin", "--root=/", "--plugin-dir=/var/lib/kubelet/device-plugins",
                   "--mode=auto", "--rescan-interval=5"}},
      // privileged: the health probe opens /dev/accel<N>; root: the kubelet's socket folder.
      {"securityContext",
       json::object{{"privileged", true}, {"runAsUser", 0}, {"readOnlyRootFilesystem", true}}},
      {"resources", json::object{{"requests", json::object{{"cpu", "10m"}, {"memory", "32Mi"}}},
                                 {"limits", json::object{{"memory", "128Mi"}}}}},
      {"volumeMounts", json::array{json::object{{"name", "device-plugins"},
                                                {"mountPath", "/var/lib/kubelet/device-plugins"}},
                                   json::object{{"name", "dev"}, {"mountPath", "/dev"}}}}};

  json::object affinity{
      {"nodeAffinity",
       json::object{{"requiredDuringSchedulingIgnoredDuringExecution",
                     json::object{{"nodeSelectorTerms",
                                   json::array{json::object{
                                       {"matchExpressions",
                                        json::array{json::object{{"key", kLabelAccelerator},
                                                                 {"operator", "Exists"}}}}}}}}}}}};

  json::object pod_spec{
      {"priorityClassName", "system-node-critical"},
      {"automountServiceAccountToken", false},  // the plugin never talks to the apiserver
      {"affinity", std::move(affinity)},
      {"tolerations", json::array{json::object{
                          {"key", kTaintKey}, {"operator", "Exists"}, {"effect", kTaintEffect}}}},
      {"terminationGracePeriodSeconds", 10},
      {"containers", json::array{std::move(container)}},
      {"volumes", json::array{HostPathVolume("device-plugins", "/var/lib/kubelet/device-plugins"),
                              HostPathVolume("dev", "/dev")}}};

  return {
      {"apiVersion", "apps/v1"},
      {"kind", "DaemonSet"},
      {"metadata",
       json::object{{"name", kDevicePluginDaemonSetName}, {"namespace", ns}, {"labels", Labels()}}},
      {"spec",
       json::object{
           {"selector", json::object{{"matchLabels", json::object{{"app.kubernetes.io/name",
                                                                   kDevicePluginDaemonSetName}}}}},
           {"updateStrategy", json::object{{"type", "RollingUpdate"},
                                           {"rollingUpdate", json::object{{"maxUnavailable", 1}}}}},
           {"template", json::object{{"metadata", json::object{{"labels", Labels()}}},
                                     {"spec", std::move(pod_spec)}}}}}};
}

Status EnsureDevicePluginDaemonSet(kube::Client& client, const std::string& ns,
                                   const std::string& image, bool needed) {
  const auto& daemonsets = kube::resources::DaemonSets();
  if (!needed) {
    auto st = client.Delete(daemonsets, ns, kDevicePluginDaemonSetName);
    if (!st.ok() && st.error().code != Error::Code::kNotFound) return st.error();
    if (st.ok()) log::Info("device-plugin DaemonSet deleted", {{"namespace", ns}});
    return OkStatus();
  }
  kube::PatchOptions opts;
  opts.field_manager = kParentFieldManager;
  opts.force = true;  // the operator owns this object; take back fields edited by hand
  auto applied = client.Patch(daemonsets, ns, kDevicePluginDaemonSetName, kube::PatchType::kApply,
                              json::serialize(DevicePluginDaemonSet(ns, image)), opts);
  if (!applied.ok()) {
    Error e = applied.error();
    if (e.code == Error::Code::kNotFound) {
      e.message = "namespace " + ns +
                  " for the TPU device-plugin DaemonSet does not exist; create it or set the "
                  "operator's device-plugin namespace (" +
                  e.message + ")";
    }
    return e;
  }
  return OkStatus();
}

}  // namespace hyperslice::tpu::internal
