// The shared lifecycle of the GCE child controllers (internal/gce_child.h).
#include "src/tpu/internal/gce_child.h"

#include <algorithm>
#include <utility>

#include <boost/json.hpp>

#include "src/base/log.h"
#include "src/kube/object_helpers.h"
#include "src/tpu/api.h"

namespace hyperslice::tpu::internal {

namespace json = boost::json;
using kube::Object;

std::string StringAt(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

const json::object* ObjectAt(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v != nullptr && v->is_object() ? &v->as_object() : nullptr;
}

// --- owner marks -----------------------------------------------------------------------------

std::map<std::string, std::string> OwnerLabels(const GceOwner& owner) {
  return {{kGceLabelManaged, "true"},
          {kGceLabelCluster, GceLabelValue(owner.cluster)},
          {kGceLabelGroupUid, GceLabelValue(owner.uid)},
          {kGceLabelGroup, GceLabelValue(owner.ns + "-" + owner.name)}};
}

std::string OwnerDescription(const GceOwner& owner) {
  return "hyperslice owner=" + owner.ns + "/" + owner.name + " uid=" + owner.uid +
         " cluster=" + owner.cluster;
}

std::string DescriptionWithOwner(std::string_view description, const GceOwner& owner) {
  if (description.empty()) return OwnerDescription(owner);
  return std::string(description) + "; " + OwnerDescription(owner);
}

OwnerMarks OwnerMarksFromLabels(const json::object& labels) {
  return {StringAt(labels, kGceLabelGroupUid), StringAt(labels, kGceLabelCluster)};
}

OwnerMarks OwnerMarksFromDescription(std::string_view description) {
  OwnerMarks marks;
  size_t at = description.find("hyperslice owner=");
  if (at == std::string_view::npos) return marks;
  std::string_view rest = description.substr(at);
  auto token = [&](std::string_view key) -> std::string {
    size_t p = rest.find(key);
    if (p == std::string_view::npos) return {};
    p += key.size();
    size_t end = rest.find_first_of(" ;\n", p);
    return std::string(rest.substr(p, end == std::string_view::npos ? end : end - p));
  };
  marks.uid = token(" uid=");
  marks.cluster = token(" cluster=");
  return marks;
}

std::string ForeignOwnerMessage(const OwnerMarks& marks, const GceOwner& owner) {
  if (!marks.cluster.empty() && marks.cluster != GceLabelValue(owner.cluster) &&
      marks.cluster != owner.cluster) {
    return "belongs to another cluster (" + marks.cluster + ")";
  }
  if (!marks.uid.empty() && marks.uid != GceLabelValue(owner.uid) && marks.uid != owner.uid) {
    return "belongs to another TPUNodeGroup (uid " + marks.uid + ")";
  }
  return {};
}

// --- drift -----------------------------------------------------------------------------------

namespace {

std::string Scalar(const json::value& v) {
  if (v.is_string()) return std::string(v.as_string());
  return json::serialize(v);
}

bool UrlEqual(std::string_view a, std::string_view b) {
  if (a == b) return true;
  if (a.size() > b.size()) std::swap(a, b);
  // a is the shorter: a suffix of b starting after a '/'.
  return !a.empty() && b.size() > a.size() && b.substr(b.size() - a.size()) == a &&
         (b[b.size() - a.size() - 1] == '/' || a.front() == '/');
}

}  // namespace

void JsonDifferences(const json::value& desired, const json::value& actual, const std::string& path,
                     std::vector<std::string>& out) {
  if (desired.is_object()) {
    if (!actual.is_object()) {
      out.push_back(path);
      return;
    }
    for (const auto& [k, v] : desired.as_object()) {
      std::string sub = path.empty() ? std::string(k) : path + "." + std::string(k);
      const auto* a = actual.as_object().if_contains(k);
      if (a == nullptr) {
        // An empty desired value and an absent one are the same to GCE.
        bool empty = v.is_null() || (v.is_object() && v.as_object().empty()) ||
                     (v.is_array() && v.as_array().empty()) ||
                     (v.is_string() && v.as_string().empty());
        if (!empty) out.push_back(sub);
        continue;
      }
      JsonDifferences(v, *a, sub, out);
    }
    return;
  }
  if (desired.is_array()) {
    if (!actual.is_array() || actual.as_array().size() != desired.as_array().size()) {
      out.push_back(path);
      return;
    }
    std::vector<std::string> inner;
    for (size_t i = 0; i < desired.as_array().size(); ++i) {
      JsonDifferences(desired.as_array()[i], actual.as_array()[i], path, inner);
    }
    if (!inner.empty()) out.push_back(path);
    return;
  }
  if (desired.is_null()) return;
  if (actual.is_object() || actual.is_array() || actual.is_null()) {
    out.push_back(path);
    return;
  }
  std::string d = Scalar(desired), a = Scalar(actual);
  if (d == a) return;
  if (desired.is_string() && actual.is_string() && UrlEqual(d, a)) return;
  out.push_back(path);
}

// --- the reconciler ----------------------------------------------------------------------------

namespace {

constexpr char kReasonCreating[] = "Creating";
constexpr char kReasonCreated[] = "Created";
constexpr char kReasonAdopted[] = "Adopted";
constexpr char kReasonDeleting[] = "Deleting";
constexpr char kReasonDrifted[] = "Drifted";
constexpr char kReasonUpdating[] = "Updating";
constexpr char kReasonNameConflict[] = "NameConflict";
constexpr char kReasonInvalidSpec[] = "InvalidSpec";

std::string ReasonOf(const Error& e) {
  if (!e.reason.empty()) return e.reason;
  return std::string("Gce") + CodeName(e.code);
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

}  // namespace

struct GceChildReconciler::Ctx {
  std::string key, ns, name;
  Object cr;
  json::object spec;
  json::object status;   // the status being built; written by WriteStatus when it changed
  json::object written;  // status as last read or written
};

GceChildReconciler::GceChildReconciler(GceChildOptions options, std::unique_ptr<GceChildKind> kind)
    : options_(std::move(options)),
      kind_(std::move(kind)),
      cache_(options_.informer ? std::make_unique<kube::MutationCache>(&options_.informer->store())
                               : nullptr),
      schedule_({.backoff_initial = options_.backoff_initial,
                 .backoff_max = options_.backoff_max,
                 .drift_check_interval = options_.drift_check_interval,
                 .clock = options_.clock}) {}

GceOwner GceChildReconciler::OwnerOf(const Object& cr) const {
  GceOwner owner;
  const auto& meta = cr.at("metadata").as_object();
  owner.ns = StringAt(meta, "namespace");
  owner.name = StringAt(meta, "name");
  owner.uid = StringAt(meta, "uid");
  owner.cluster = options_.cluster_id;
  if (const auto* refs = meta.if_contains("ownerReferences"); refs && refs->is_array()) {
    for (const auto& r : refs->as_array()) {
      if (!r.is_object()) continue;
      const auto* c = r.as_object().if_contains("controller");
      if (c != nullptr && c->is_bool() && c->as_bool()) {
        owner.name = StringAt(r.as_object(), "name");
        owner.uid = StringAt(r.as_object(), "uid");
        break;
      }
    }
  }
  return owner;
}

kube::ReconcileResult GceChildReconciler::Backoff(const std::string& key) {
  return {.requeue = false, .requeue_after = schedule_.Backoff(key)};
}

kube::ReconcileResult GceChildReconciler::Failed(const std::string& key) {
  return {.requeue = false, .requeue_after = schedule_.Failed(key)};
}

kube::ReconcileResult GceChildReconciler::DriftRequeue(const std::string& key) {
  return {.requeue = false, .requeue_after = schedule_.DriftCheck(key)};
}

std::optional<Clock::Duration> GceChildReconciler::SettledUntil(const Ctx& ctx,
                                                                int64_t generation) {
  if (ctx.status.contains("operation") || StringAt(ctx.status, "selfLink").empty()) {
    return std::nullopt;
  }
  auto ready = kube::FindCondition(ctx.cr, kCondReady);
  if (!ready || ready->status != "True" || ready->observed_generation != generation) {
    return std::nullopt;
  }
  return schedule_.UntilDriftCheck(ctx.key);
}

Result<kube::ReconcileResult> GceChildReconciler::Reconcile(const std::string& key) {
  Ctx ctx;
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
  if (const auto* s = ObjectAt(ctx.cr, "spec")) ctx.spec = *s;
  if (const auto* s = ObjectAt(ctx.cr, "status")) ctx.status = *s;
  ctx.written = ctx.status;
  const auto& meta = ctx.cr.at("metadata").as_object();
  if (meta.contains("deletionTimestamp")) return ReconcileDeletion(ctx);
  return ReconcileLive(ctx);
}

GceChildReconciler::OpState GceChildReconciler::WaitOperation(const std::string& link,
                                                              Error* failure) {
  auto ref = gce::ParseOperationLink(link);
  if (!ref.ok()) return OpState::kGone;  // not an operation we can follow: re-read GCE
  auto done = options_.compute->Wait(*ref, options_.operation_wait);
  if (done.ok()) return OpState::kDone;
  if (done.error().reason == "operationNotDone") return OpState::kPending;
  // Either the operation failed or the wait call did: one plain read tells which.
  auto op = options_.compute->GetOperation(*ref);
  if (!op.ok()) {
    if (op.error().code == Error::Code::kNotFound) return OpState::kGone;
    return OpState::kPending;  // transient: try again later
  }
  if (!op->done()) return OpState::kPending;
  if (op->error) {
    *failure = *op->error;
    return OpState::kFailed;
  }
  return OpState::kDone;
}

Status GceChildReconciler::WriteStatus(Ctx& ctx) {
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

Status GceChildReconciler::RemoveFinalizer(Ctx& ctx) {
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

void GceChildReconciler::SetReady(Ctx& ctx, bool ready, const std::string& reason,
                                  const std::string& message, bool warning) {
  Object holder{{"status", ctx.status}};
  auto before = kube::FindCondition(holder, kCondReady);
  kube::Condition c;
  c.type = kCondReady;
  c.status = ready ? "True" : "False";
  c.reason = reason;
  c.message = message;
  c.observed_generation = kube::Generation(ctx.cr);
  kube::SetCondition(holder, c);
  ctx.status = holder.at("status").as_object();
  bool changed = !before || before->status != c.status || before->reason != reason ||
                 before->message != message;
  // An Event per transition (status or reason) and per warning (the recorder aggregates repeats);
  // a message-only change, such as a progress count, is logged only.
  const bool transition = !before || before->status != c.status || before->reason != reason;
  if (options_.events && (warning || transition)) {
    options_.events->Event(ctx.cr, warning ? kube::EventType::kWarning : kube::EventType::kNormal,
                           reason, message);
  }
  if (warning || changed) {
    log::Write(warning ? log::Level::kWarn : log::Level::kInfo, "gce child condition",
               {{"kind", kind_->resource().kind},
                {"object", ctx.key},
                {"ready", ready},
                {"reason", reason},
                {"message", message}});
  }
}

Result<GceChildReconciler::OpState> GceChildReconciler::RecordAndWait(
    Ctx& ctx, const gce::Operation& op, const std::string& reason, const std::string& message,
    bool warning, Error* failure) {
  ctx.status["operation"] = op.self_link;
  SetReady(ctx, false, reason, message, warning);
  HS_RETURN_IF_ERROR(WriteStatus(ctx));
  return WaitOperation(op.self_link, failure);
}

Result<kube::ReconcileResult> GceChildReconciler::ReconcileLive(Ctx& ctx) {
  const std::string gce_kind = kind_->GceKind();
  // 1. Our finalizer first, so the GCE resource is never created without a way to delete it.
  if (!kube::HasFinalizer(ctx.cr, kGceResourceFinalizer)) {
    Object obj = ctx.cr;
    kube::AddFinalizer(obj, kGceResourceFinalizer);
    HS_ASSIGN_OR_RETURN(ctx.cr, options_.client->Update(kind_->resource(), ctx.ns, obj));
    if (cache_) cache_->Mutated(ctx.cr);
  }
  const int64_t generation = kube::Generation(ctx.cr);
  // A spec the controller has not acted on yet: differences from GCE are the change asked for,
  // not drift (a MIG's targetSize is the one field that can change).
  const auto* observed = ctx.status.if_contains("observedGeneration");
  const bool spec_changed =
      observed != nullptr && observed->is_int64() && observed->as_int64() != generation;
  ctx.status["observedGeneration"] = generation;

  if (auto valid = kind_->Validate(ctx.spec); !valid.ok()) {
    SetReady(ctx, false, kReasonInvalidSpec, valid.error().message, true);
    HS_RETURN_IF_ERROR(WriteStatus(ctx));
    return kube::ReconcileResult{};  // a spec change wakes us
  }
  const std::string gce_name = StringAt(ctx.spec, "name");

  // A settled child woken before its drift check is due (by our own status write, a relist, a
  // label change) is not looked at in GCE again: that is the drift check's job, on its schedule.
  if (!spec_changed) {
    if (auto wait = SettledUntil(ctx, generation)) {
      return kube::ReconcileResult{.requeue_after = *wait};
    }
  }

  // 2. An operation we started earlier (maybe before a restart): finish waiting for it.
  bool ours = false;  // the resource was (or is being) created by this controller
  if (std::string link = StringAt(ctx.status, "operation"); !link.empty()) {
    Error failure;
    switch (WaitOperation(link, &failure)) {
      case OpState::kPending:
        HS_RETURN_IF_ERROR(WriteStatus(ctx));
        return Backoff(ctx.key);
      case OpState::kFailed:
        ctx.status.erase("operation");
        SetReady(ctx, false, ReasonOf(failure),
                 "GCE operation on " + gce_kind + " " + gce_name + " failed: " + failure.message,
                 true);
        HS_RETURN_IF_ERROR(WriteStatus(ctx));
        return Failed(ctx.key);
      case OpState::kDone:
      case OpState::kGone:
        ctx.status.erase("operation");
        break;
    }
    ours = !ctx.status.contains("selfLink");
  }
  // After a failure, GCE is left alone until the backoff has passed, whatever woke us (our own
  // status write does).
  if (auto wait = schedule_.RetryGate(ctx.key)) {
    HS_RETURN_IF_ERROR(WriteStatus(ctx));
    return kube::ReconcileResult{.requeue_after = *wait};
  }

  // 3. Read the resource by name; create it when absent.
  auto resource = kind_->Get(*options_.compute, ctx.spec);
  if (!resource.ok() && resource.error().code == Error::Code::kNotFound) {
    const GceOwner owner = OwnerOf(ctx.cr);
    auto op = kind_->Insert(*options_.compute, ctx.spec, owner);
    if (!op.ok() && op.error().code == Error::Code::kAlreadyExists) {
      resource = kind_->Get(*options_.compute, ctx.spec);  // an earlier insert landed: adopt
    } else if (!op.ok()) {
      SetReady(ctx, false, ReasonOf(op.error()),
               "creating " + gce_kind + " " + gce_name + ": " + op.error().message, true);
      HS_RETURN_IF_ERROR(WriteStatus(ctx));
      return Failed(ctx.key);
    } else {
      ctx.status["adopted"] = false;
      Error failure;
      HS_ASSIGN_OR_RETURN(auto state, RecordAndWait(ctx, *op, kReasonCreating,
                                                    "creating " + gce_kind + " " + gce_name +
                                                        " (operation " + op->ref.name + ")",
                                                    false, &failure));
      if (state == OpState::kPending) return Backoff(ctx.key);
      ctx.status.erase("operation");
      if (state == OpState::kFailed) {
        SetReady(ctx, false, ReasonOf(failure),
                 "creating " + gce_kind + " " + gce_name + " failed: " + failure.message, true);
        HS_RETURN_IF_ERROR(WriteStatus(ctx));
        return Failed(ctx.key);
      }
      ours = true;
      resource = kind_->Get(*options_.compute, ctx.spec);
    }
  }
  if (!resource.ok()) {
    SetReady(ctx, false, ReasonOf(resource.error()),
             "reading " + gce_kind + " " + gce_name + ": " + resource.error().message, true);
    HS_RETURN_IF_ERROR(WriteStatus(ctx));
    return Failed(ctx.key);
  }

  // 4. Someone else's resource of the same name is never touched.
  const GceOwner owner = OwnerOf(ctx.cr);
  if (std::string foreign = ForeignOwnerMessage(kind_->OwnerOf(*resource), owner);
      !foreign.empty()) {
    SetReady(ctx, false, kReasonNameConflict,
             gce_kind + " " + gce_name + " exists but " + foreign +
                 "; it is left alone (choose another name or delete it)",
             true);
    HS_RETURN_IF_ERROR(WriteStatus(ctx));
    return DriftRequeue(ctx.key);
  }
  if (!ctx.status.contains("adopted") || (!ctx.status.contains("selfLink") && !ours)) {
    ctx.status["adopted"] = !ours;
  }
  ctx.status["selfLink"] = StringAt(*resource, "selfLink");

  // 5. Compare with the spec, then what only this kind knows (MIG instances, resize).
  std::vector<std::string> drift = kind_->Drift(ctx.spec, *resource);
  HS_ASSIGN_OR_RETURN(Observation obs,
                      kind_->Observe(*options_.compute, ctx.spec, *resource, drift, ctx.status));
  ctx.status["driftDetected"] = !drift.empty();
  if (obs.operation && spec_changed) {
    obs.reason = kReasonUpdating;
    obs.warning = false;
    ctx.status["driftDetected"] = false;
  }
  if (obs.operation) {
    Error failure;
    HS_ASSIGN_OR_RETURN(auto state, RecordAndWait(ctx, *obs.operation, obs.reason, obs.message,
                                                  obs.warning, &failure));
    if (state == OpState::kPending) return Backoff(ctx.key);
    ctx.status.erase("operation");
    if (state == OpState::kFailed) {
      SetReady(ctx, false, ReasonOf(failure), obs.message + " failed: " + failure.message, true);
      HS_RETURN_IF_ERROR(WriteStatus(ctx));
      return Failed(ctx.key);
    }
    HS_RETURN_IF_ERROR(WriteStatus(ctx));
    return Backoff(ctx.key);  // look again soon: the correction's effect is still to be seen
  }
  if (!drift.empty()) {
    SetReady(ctx, false, kReasonDrifted,
             gce_kind + " " + gce_name + " differs from the spec in: " + Join(drift) +
                 " (changed outside hyperslice; GCE cannot update these fields in place)",
             true);
    HS_RETURN_IF_ERROR(WriteStatus(ctx));
    return DriftRequeue(ctx.key);
  }
  if (!obs.ready) {
    SetReady(ctx, false, obs.reason, obs.message, obs.warning);
    HS_RETURN_IF_ERROR(WriteStatus(ctx));
    if (obs.requeue_after) return kube::ReconcileResult{.requeue_after = *obs.requeue_after};
    return Backoff(ctx.key);
  }
  const bool adopted = ctx.status.at("adopted").is_bool() && ctx.status.at("adopted").as_bool();
  SetReady(ctx, true, adopted ? kReasonAdopted : kReasonCreated,
           gce_kind + " " + gce_name + (adopted ? " adopted" : " created"), false);
  HS_RETURN_IF_ERROR(WriteStatus(ctx));
  return DriftRequeue(ctx.key);
}

Result<kube::ReconcileResult> GceChildReconciler::ReconcileDeletion(Ctx& ctx) {
  if (!kube::HasFinalizer(ctx.cr, kGceResourceFinalizer)) return kube::ReconcileResult{};
  const std::string gce_kind = kind_->GceKind();
  if (auto valid = kind_->Validate(ctx.spec); !valid.ok()) {
    // Nothing can have been created from a spec that never validated.
    HS_RETURN_IF_ERROR(RemoveFinalizer(ctx));
    return kube::ReconcileResult{};
  }
  const std::string gce_name = StringAt(ctx.spec, "name");

  // An operation in flight (an insert, a resize or our delete) is finished first.
  if (std::string link = StringAt(ctx.status, "operation"); !link.empty()) {
    Error failure;
    switch (WaitOperation(link, &failure)) {
      case OpState::kPending:
        return Backoff(ctx.key);
      case OpState::kFailed:
        ctx.status.erase("operation");
        SetReady(ctx, false, ReasonOf(failure),
                 "GCE operation on " + gce_kind + " " + gce_name + " failed: " + failure.message,
                 true);
        HS_RETURN_IF_ERROR(WriteStatus(ctx));
        return Failed(ctx.key);
      case OpState::kDone:
      case OpState::kGone:
        ctx.status.erase("operation");
        break;
    }
  }
  if (auto wait = schedule_.RetryGate(ctx.key)) {
    HS_RETURN_IF_ERROR(WriteStatus(ctx));
    return kube::ReconcileResult{.requeue_after = *wait};
  }

  auto resource = kind_->Get(*options_.compute, ctx.spec);
  if (!resource.ok()) {
    if (resource.error().code == Error::Code::kNotFound) {
      HS_RETURN_IF_ERROR(RemoveFinalizer(ctx));  // gone already (deleted by hand, or by us)
      return kube::ReconcileResult{};
    }
    SetReady(ctx, false, ReasonOf(resource.error()),
             "reading " + gce_kind + " " + gce_name + ": " + resource.error().message, true);
    HS_RETURN_IF_ERROR(WriteStatus(ctx));
    return Failed(ctx.key);
  }
  if (std::string foreign = ForeignOwnerMessage(kind_->OwnerOf(*resource), OwnerOf(ctx.cr));
      !foreign.empty()) {
    HS_RETURN_IF_ERROR(RemoveFinalizer(ctx));  // not ours: released without touching it
    return kube::ReconcileResult{};
  }

  auto op = kind_->Delete(*options_.compute, ctx.spec);
  if (!op.ok()) {
    if (op.error().code == Error::Code::kNotFound) {
      HS_RETURN_IF_ERROR(RemoveFinalizer(ctx));
      return kube::ReconcileResult{};
    }
    SetReady(ctx, false, ReasonOf(op.error()),
             "deleting " + gce_kind + " " + gce_name + ": " + op.error().message, true);
    HS_RETURN_IF_ERROR(WriteStatus(ctx));
    return Failed(ctx.key);
  }
  Error failure;
  HS_ASSIGN_OR_RETURN(auto state, RecordAndWait(ctx, *op, kReasonDeleting,
                                                "deleting " + gce_kind + " " + gce_name +
                                                    " (operation " + op->ref.name + ")",
                                                false, &failure));
  switch (state) {
    case OpState::kPending:
      return Backoff(ctx.key);
    case OpState::kFailed:
      ctx.status.erase("operation");
      SetReady(ctx, false, ReasonOf(failure),
               "deleting " + gce_kind + " " + gce_name + " failed: " + failure.message, true);
      HS_RETURN_IF_ERROR(WriteStatus(ctx));
      return Failed(ctx.key);
    case OpState::kDone:
    case OpState::kGone:
      break;
  }
  // Only a resource that is gone lets the CR go.
  auto after = kind_->Get(*options_.compute, ctx.spec);
  if (after.ok() || after.error().code != Error::Code::kNotFound) return Backoff(ctx.key);
  HS_RETURN_IF_ERROR(RemoveFinalizer(ctx));
  return kube::ReconcileResult{};
}

}  // namespace hyperslice::tpu::internal
