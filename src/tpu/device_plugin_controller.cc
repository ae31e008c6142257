// The device-plugin DaemonSet's own controller (internal/nodegroup_phases.h): one key, woken by
// every TPUNodeGroup event; the DaemonSet is wanted while any group lives.
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/kube/client.h"
#include "src/tpu/internal/device_plugin.h"
#include "src/tpu/internal/nodegroup_phases.h"

namespace hyperslice::tpu::internal {

using jsonfield::ObjectField;

namespace {

constexpr char kKey[] = "device-plugin";

class DevicePluginReconciler {
 public:
  DevicePluginReconciler(OperatorOptions options, std::shared_ptr<kube::SharedInformer> groups)
      : options_(std::move(options)), groups_(std::move(groups)) {}

  Result<kube::ReconcileResult> Reconcile(const std::string& /*key*/) {
    // Any one live group will do: stop at the first (a full scan of a thousand groups on every
    // event would be quadratic in the number of groups).
    const bool needed = groups_->store().AnyOf([](const kube::Object& g) {
      const auto* meta = ObjectField(g, "metadata");
      return meta != nullptr && !meta->contains("deletionTimestamp");
    });
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (applied_ && *applied_ == needed) return kube::ReconcileResult{};
    }
    Status s = EnsureDevicePluginDaemonSet(*options_.client, options_.device_plugin_namespace,
                                           options_.device_plugin_image, needed);
    if (!s.ok()) {
      if (s.error().reason == "NotImplemented") return kube::ReconcileResult{};
      log::Warn("device-plugin DaemonSet", {{"needed", needed}, {"error", s.error().message}});
      return s.error();  // retried with the controller's backoff
    }
    std::lock_guard<std::mutex> lock(mu_);
    applied_ = needed;
    return kube::ReconcileResult{};
  }

 private:
  OperatorOptions options_;
  std::shared_ptr<kube::SharedInformer> groups_;
  std::mutex mu_;
  std::optional<bool> applied_;  // the need last applied successfully
};

}  // namespace

Status RegisterDevicePluginController(kube::Manager& mgr, const OperatorOptions& options,
                                      const std::shared_ptr<kube::SharedInformer>& groups) {
  auto reconciler = std::make_shared<DevicePluginReconciler>(options, groups);
  kube::ControllerOptions co;
  co.name = "tpu-device-plugin";
  co.max_concurrent_reconciles = 1;
  co.clock = options.clock;
  auto controller = std::make_shared<kube::Controller>(
      std::move(co), [reconciler](const std::string& key) { return reconciler->Reconcile(key); });
  std::weak_ptr<kube::Controller> weak = controller;
  auto wake = [weak](const kube::ObjectPtr& /*group*/) {
    if (auto c = weak.lock()) c->Enqueue(kKey);
  };
  groups->AddEventHandler(kube::OnEachObject(wake));
  mgr.Add(controller);
  return OkStatus();
}

}  // namespace hyperslice::tpu::internal
