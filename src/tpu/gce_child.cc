// The GCE child controllers' phase runner (internal/gce_child.h).
#include "src/tpu/internal/gce_child.h"

#include <utility>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/kube/object_helpers.h"
#include "src/tpu/api.h"

namespace hyperslice::tpu::internal {

using jsonfield::ObjectField;

namespace json = boost::json;
using Next = Step::Next;

GceChildReconciler::GceChildReconciler(GceChildOptions options, std::unique_ptr<GceChildKind> kind)
    : options_(std::move(options)),
      kind_(std::move(kind)),
      cache_(options_.informer ? std::make_unique<kube::MutationCache>(&options_.informer->store())
                               : nullptr),
      schedule_({.backoff_initial = options_.backoff_initial,
                 .backoff_max = options_.backoff_max,
                 .drift_check_interval = options_.drift_check_interval,
                 .clock = options_.clock}),
      phases_({.compute = options_.compute.get(),
               .kind = kind_.get(),
               .schedule = &schedule_,
               .events = options_.events.get(),
               .cluster_id = options_.cluster_id,
               .operation_wait = options_.operation_wait,
               .record = [this](ChildCtx& ctx) { return WriteStatus(ctx); }}) {}

Result<kube::ReconcileResult> GceChildReconciler::Reconcile(const std::string& key) {
  ChildCtx ctx;
  ctx.key = key;
  std::tie(ctx.ns, ctx.name) = kube::Controller::SplitKey(key);
  if (cache_) {
    kube::ObjectPtr cached = cache_->Get(key);
    if (!cached) {
      schedule_.Forget(key);
      return kube::ReconcileResult{};
    }
    ctx.cr = kube::DeepCopy(*cached);
  } else {
    auto got = options_.client->Get(kind_->resource(), ctx.ns, ctx.name);
    if (!got.ok()) {
      if (got.error().code == Error::Code::kNotFound) {
        schedule_.Forget(key);
        return kube::ReconcileResult{};
      }
      return got.error();
    }
    ctx.cr = std::move(got).value();
  }
  if (const auto* s = ObjectField(ctx.cr, "spec")) ctx.spec = *s;
  if (const auto* s = ObjectField(ctx.cr, "status")) ctx.status = *s;
  ctx.written = ctx.status;
  if (ctx.cr.at("metadata").as_object().contains("deletionTimestamp")) {
    if (!kube::HasFinalizer(ctx.cr, kGceResourceFinalizer)) return kube::ReconcileResult{};
    HS_ASSIGN_OR_RETURN(Step step, phases_.Teardown(ctx));
    return Finish(ctx, step);
  }
  return ReconcileLive(ctx);
}

Result<kube::ReconcileResult> GceChildReconciler::ReconcileLive(ChildCtx& ctx) {
  // Our finalizer first, so the GCE resource is never created without a way to delete it.
  if (!kube::HasFinalizer(ctx.cr, kGceResourceFinalizer)) {
    kube::Object obj = ctx.cr;
    kube::AddFinalizer(obj, kGceResourceFinalizer);
    HS_ASSIGN_OR_RETURN(ctx.cr, options_.client->Update(kind_->resource(), ctx.ns, obj));
    if (cache_) cache_->Mutated(ctx.cr);
  }
  if (Step s = phases_.Admit(ctx); s.done()) return Finish(ctx, s);
  if (auto wait = phases_.SettledFor(ctx)) {
    return Finish(ctx, {.next = Next::kRequeueAfter, .after = *wait, .write_status = false});
  }
  if (Step s = phases_.ResumeOperation(ctx); s.done()) return Finish(ctx, s);
  if (Step s = phases_.RetryGate(ctx); s.done()) return Finish(ctx, s);
  HS_ASSIGN_OR_RETURN(Step provisioned, phases_.Provision(ctx));
  if (provisioned.done()) return Finish(ctx, provisioned);
  if (Step s = phases_.CheckOwner(ctx); s.done()) return Finish(ctx, s);
  HS_ASSIGN_OR_RETURN(Step compared, phases_.Compare(ctx));
  return Finish(ctx, compared);
}

Result<kube::ReconcileResult> GceChildReconciler::Finish(ChildCtx& ctx, const Step& step) {
  if (step.next == Next::kRemoveFinalizer) {
    HS_RETURN_IF_ERROR(RemoveFinalizer(ctx));
    return kube::ReconcileResult{};
  }
  if (step.write_status) HS_RETURN_IF_ERROR(WriteStatus(ctx));
  switch (step.next) {
    case Next::kBackoff:
      return kube::ReconcileResult{.requeue_after = schedule_.Backoff(ctx.key)};
    case Next::kFailed:
      return kube::ReconcileResult{.requeue_after = schedule_.Failed(ctx.key)};
    case Next::kDriftCheck:
      return kube::ReconcileResult{.requeue_after = schedule_.DriftCheck(ctx.key)};
    case Next::kRequeueAfter:
      return kube::ReconcileResult{.requeue_after = step.after};
    case Next::kContinue:
    case Next::kWaitForChange:
    case Next::kRemoveFinalizer:
      break;
  }
  return kube::ReconcileResult{};
}

Status GceChildReconciler::WriteStatus(ChildCtx& ctx) {
  if (ctx.status == ctx.written) return OkStatus();
  // A merge patch of the whole status (fields we dropped set to null): only this controller
  // writes a child's status, and one worker at a time per object, so no resourceVersion
  // precondition is needed; the parent's concurrent spec applies cannot make it conflict.
  json::object patch_status = ctx.status;
  for (const auto& [k, v] : ctx.written) {
    if (!patch_status.contains(k)) patch_status[k] = nullptr;
  }
  json::object patch{{"status", std::move(patch_status)}};
  auto updated = options_.client->Patch(
      kind_->resource(), ctx.ns, ctx.name, kube::PatchType::kMerge, json::serialize(patch),
      {.field_manager = kChildFieldManager, .subresource = "status"});
  if (!updated.ok()) return updated.error();
  ctx.cr = std::move(updated).value();
  if (cache_) cache_->Mutated(ctx.cr);
  ctx.written = ctx.status;
  return OkStatus();
}

Status GceChildReconciler::RemoveFinalizer(ChildCtx& ctx) {
  std::string patch = kube::RemoveFinalizerPatch(ctx.cr, kGceResourceFinalizer);
  if (patch.empty()) return OkStatus();
  auto updated =
      options_.client->Patch(kind_->resource(), ctx.ns, ctx.name, kube::PatchType::kJson, patch);
  if (!updated.ok()) {
    if (updated.error().code == Error::Code::kNotFound) return OkStatus();
    return updated.error();
  }
  ctx.cr = std::move(updated).value();
  if (cache_) cache_->Mutated(ctx.cr);  // a reconcile before the informer catches up sees it gone
  schedule_.Forget(ctx.key);
  return OkStatus();
}

}  // namespace hyperslice::tpu::internal
