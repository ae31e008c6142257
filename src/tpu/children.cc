// RegisterChildControllers: the ResourcePolicy, InstanceTemplate and ManagedInstanceGroup
// controllers, each a kube::Controller driven by its kind's shared informer and running the
// shared GCE-child lifecycle (internal/gce_child.h).
#include <algorithm>
#include <memory>
#include <utility>

#include "src/base/json.h"
#include "src/kube/controller.h"
#include "src/kube/events.h"
#include "src/kube/informer.h"
#include "src/kube/manager.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/children.h"
#include "src/tpu/internal/gce_child.h"

namespace hyperslice::tpu::internal {

using jsonfield::StringValue;

namespace {

// The uid of kube-system: a stable, unique id of this cluster.
Result<std::string> ClusterUid(kube::Client& client) {
  HS_ASSIGN_OR_RETURN(auto ns, client.Get(kube::resources::Namespaces(), "", "kube-system"));
  std::string uid = StringValue(ns.at("metadata").as_object(), "uid");
  if (uid.empty()) return Error::Make(Error::Code::kInternal, "kube-system has no uid");
  return uid;
}

}  // namespace

Status RegisterChildControllers(kube::Manager& mgr, const OperatorOptions& options) {
  if (!options.client || !options.compute) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "tpu child controllers need a Kubernetes client and a GCE client");
  }
  if (mgr.informers() == nullptr) {
    return Error::Make(Error::Code::kInvalidArgument, "the manager has no informer factory");
  }
  std::string cluster_id = options.cluster_id;
  if (cluster_id.empty()) {
    HS_ASSIGN_OR_RETURN(cluster_id, ClusterUid(*options.client));
  }
  kube::EventRecorderOptions event_options;
  event_options.component = "hyperslice-gce";
  event_options.clock = options.clock;
  auto events = std::make_shared<kube::EventRecorder>(options.client, event_options);

  struct Child {
    const char* controller;
    std::unique_ptr<GceChildKind> kind;
  };
  Child children[] = {{"resourcepolicy", NewResourcePolicyKind()},
                      {"instancetemplate", NewInstanceTemplateKind()},
                      {"managedinstancegroup", NewManagedInstanceGroupKind()}};
  for (auto& child : children) {
    const kube::Resource& resource = child.kind->resource();
    GceChildOptions o;
    o.client = options.client;
    o.compute = options.compute;
    o.events = events;
    o.informer = mgr.informers()->For(resource);
    o.cluster_id = cluster_id;
    o.drift_check_interval = options.drift_check_interval;
    o.clock = options.clock;
    auto reconciler = std::make_shared<GceChildReconciler>(std::move(o), std::move(child.kind));
    kube::ControllerOptions co;
    co.name = child.controller;
    co.max_concurrent_reconciles = std::max(1, options.workers);
    co.clock = options.clock;
    auto controller = std::make_shared<kube::Controller>(
        std::move(co), [reconciler](const std::string& key) { return reconciler->Reconcile(key); });
    controller->Watch(*mgr.informers()->For(resource));  // the same informer as o.informer
    mgr.Add(controller);
  }
  return OkStatus();
}

}  // namespace hyperslice::tpu::internal
