#include "src/runners/controlnode/class_protection.h"

#include <algorithm>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/gpu/api.h"
#include "src/kube/client.h"
#include "src/kube/events.h"
#include "src/kube/object_helpers.h"
#include "src/kube/store.h"
#include "src/runners/controlnode/api.h"
#include "src/runners/controlnode/market_runner.h"

namespace hyperslice::runners::controlnode {
namespace {

namespace json = boost::json;
using Code = Error::Code;

constexpr char kWaitingCondition[] = "RunnersReleased";

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

ClassProtection::ClassProtection(std::shared_ptr<kube::Client> client,
                                 std::shared_ptr<kube::EventRecorder> events)
    : client_(std::move(client)), events_(std::move(events)) {}

Result<ClassProtection::Use> ClassProtection::Protect(const std::string& cls, kube::Object* read) {
  auto obj = client_->Get(gpu::GPUNodeClasses(), "", cls);
  if (!obj.ok()) {
    if (obj.error().code == Code::kNotFound) return Use::kMissing;
    return obj.error();
  }
  if (read != nullptr) *read = *obj;
  if (kube::IsDeleting(*obj)) {
    // The apiserver takes no new finalizer on a deleting object; ours, if there, holds it.
    HS_ASSIGN_OR_RETURN(auto users, Users(cls, ""));
    HS_RETURN_IF_ERROR(NoteWaiting(*obj, users));
    return Use::kDeleting;
  }
  if (kube::HasFinalizer(*obj, kClassInUseFinalizer)) return Use::kProtected;
  json::array fins;
  if (const json::object* meta = jsonfield::ObjectField(*obj, "metadata")) {
    if (const json::array* f = jsonfield::ArrayField(*meta, "finalizers")) fins = *f;
  }
  fins.emplace_back(kClassInUseFinalizer);
  // resourceVersion: a class deleted or changed meanwhile conflicts and is read again.
  json::object patch{
      {"metadata", json::object{{"finalizers", std::move(fins)},
                                {"resourceVersion", std::string(kube::ResourceVersionOf(*obj))}}}};
  auto r = client_->Patch(gpu::GPUNodeClasses(), "", cls, kube::PatchType::kMerge,
                          json::serialize(patch));
  if (!r.ok()) return r.error();
  if (read != nullptr) *read = *r;
  log::Info("runners: GPUNodeClass kept while Runners rent with it", {{"class", cls}});
  return Use::kProtected;
}

Status ClassProtection::Release(const std::string& cls, const std::string& runner) {
  auto obj = client_->Get(gpu::GPUNodeClasses(), "", cls);
  if (!obj.ok()) return obj.error().code == Code::kNotFound ? OkStatus() : obj.error();
  if (!kube::HasFinalizer(*obj, kClassInUseFinalizer)) return OkStatus();
  HS_ASSIGN_OR_RETURN(auto users, Users(cls, runner));
  if (!users.empty()) return kube::IsDeleting(*obj) ? NoteWaiting(*obj, users) : OkStatus();
  std::string patch = kube::RemoveFinalizerPatch(*obj, kClassInUseFinalizer);
  auto r = client_->Patch(gpu::GPUNodeClasses(), "", cls, kube::PatchType::kJson, patch);
  if (!r.ok() && r.error().code != Code::kNotFound) return r.error();
  log::Info("runners: no Runner rents with the GPUNodeClass any more", {{"class", cls}});
  return OkStatus();
}

Result<std::vector<std::string>> ClassProtection::Users(const std::string& cls,
                                                        const std::string& except) {
  // Read from the apiserver, not a cache: a Runner created a moment ago holds the class too.
  HS_ASSIGN_OR_RETURN(auto runners, client_->List(Runners(), ""));
  std::vector<std::string> out;
  for (const auto& r : runners.items) {
    auto spec = ParseRunner(r);
    if (!spec.ok() || spec->placement != RunnerSpec::Placement::kMarketplace) continue;
    if (spec->market.gpu_node_class != cls || spec->name == except) continue;
    // A Runner being deleted whose machine is returned holds nothing any more (two Runners going
    // at once must not keep the class for each other).
    const json::object* machine =
        jsonfield::ObjectField(jsonfield::ObjectField(r, "status"), "machine");
    if (kube::IsDeleting(r) && !HoldsMachine(machine)) continue;
    out.push_back(spec->name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status ClassProtection::NoteWaiting(const kube::Object& cls,
                                    const std::vector<std::string>& users) {
  if (users.empty()) return OkStatus();
  const std::string message = "deletion waits for the Runners renting with this class (" +
                              Join(users) + "): their machines are returned through its providers";
  kube::Object desired = cls;
  bool changed = kube::SetCondition(desired, {.type = kWaitingCondition,
                                              .status = "False",
                                              .reason = "InUseByRunners",
                                              .message = message,
                                              .observed_generation = kube::Generation(cls)});
  if (!changed) return OkStatus();
  auto written = client_->Update(gpu::GPUNodeClasses(), "", desired, "status");
  if (!written.ok() && written.error().code != Code::kNotFound) return written.error();
  if (events_) {
    events_->Event(cls, kube::EventType::kWarning, "InUse",
                   "deletion waits for Runners " + Join(users));
  }
  return OkStatus();
}

}  // namespace hyperslice::runners::controlnode
