// ManagedInstanceGroup → one zonal GCE instanceGroupManager, and the state of its VMs.
//
// Beyond the shared lifecycle (gce_child.h): targetSize drift is corrected with resize (a MIG is
// mutable); every look lists the managed instances into status.instances and copies the IGM's
// targetSize and bulkInstanceOperation. Ready only when targetSize instances are RUNNING with
// currentAction NONE, so a BULK slice is never Ready in part. A stockout (lastAttempt errors or
// the bulk operation's last progress check) is Ready=False with GCE's code and message and is
// retried with the reconciler's backoff: GCE has no watch, so while VMs are not all RUNNING the
// group is looked at again on a growing delay; once Ready only at the drift interval.
// instanceGroupManagers carry no labels, so the owner marker lives in the description.
#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/gce_child.h"
#include "src/tpu/internal/reasons.h"

namespace hyperslice::tpu::internal {

using jsonfield::ObjectField;
using jsonfield::StringValue;

namespace {

namespace json = boost::json;

constexpr const char* kCopiedFields[] = {"baseInstanceName", "instanceTemplate",
                                         "targetSize",       "targetSizePolicy",
                                         "resourcePolicies", "instanceLifecyclePolicy"};

int64_t IntAt(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  if (v == nullptr) return 0;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64()) return static_cast<int64_t>(v->as_uint64());
  if (v->is_double()) return static_cast<int64_t>(v->as_double());
  if (v->is_string()) {
    try {
      return std::stoll(std::string(v->as_string()));
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

std::string LastSegment(std::string_view url) {
  size_t slash = url.rfind('/');
  return std::string(slash == std::string_view::npos ? url : url.substr(slash + 1));
}

// The first error of an Error object ({errors:[{code,message}]}).
std::optional<std::pair<std::string, std::string>> FirstError(const json::object* error) {
  if (error == nullptr) return std::nullopt;
  const auto* list = error->if_contains("errors");
  if (list == nullptr || !list->is_array() || list->as_array().empty() ||
      !list->as_array()[0].is_object()) {
    return std::nullopt;
  }
  const auto& first = list->as_array()[0].as_object();
  return std::make_pair(StringValue(first, "code"), StringValue(first, "message"));
}

// Whether `previous` (the child's status) already shows `want` RUNNING instances with the group
// Ready, and the IGM's own summary agrees: stable, every instance's current action NONE.
bool Settled(const json::object& igm, const json::object& previous, int64_t want) {
  const auto* conditions = previous.if_contains("conditions");
  bool ready = false;
  if (conditions != nullptr && conditions->is_array()) {
    for (const auto& c : conditions->as_array()) {
      if (c.is_object() && StringValue(c.as_object(), "type") == kCondReady) {
        ready = StringValue(c.as_object(), "status") == "True";
      }
    }
  }
  if (!ready) return false;
  const auto* instances = previous.if_contains("instances");
  if (instances == nullptr || !instances->is_array() ||
      static_cast<int64_t>(instances->as_array().size()) != want) {
    return false;
  }
  for (const auto& i : instances->as_array()) {
    if (!i.is_object() || StringValue(i.as_object(), "instanceStatus") != "RUNNING" ||
        StringValue(i.as_object(), "currentAction") != "NONE") {
      return false;
    }
  }
  const auto* st = ObjectField(igm, "status");
  const auto* actions = ObjectField(igm, "currentActions");
  if (st == nullptr || actions == nullptr) return false;
  const auto* stable = st->if_contains("isStable");
  if (stable == nullptr || !stable->is_bool() || !stable->as_bool()) return false;
  int64_t busy = 0;
  for (const auto& [k, v] : *actions) {
    if (k != "none") busy += IntAt(*actions, k);
  }
  return busy == 0 && IntAt(*actions, "none") == want;
}

// While the group is still creating VMs and neither the instances nor the bulk operation say
// why, GCE's error list (listErrors, newest first by timestamp) may: e.g. a stockout reported
// only there. One call, made only in that state.
std::optional<Error> NewestListedError(gce::Compute& compute, const std::string& project,
                                       const std::string& zone, const std::string& name,
                                       const std::vector<json::object>& managed) {
  bool creating = managed.empty();
  for (const auto& mi : managed) {
    if (StringValue(mi, "currentAction").rfind("CREATING", 0) == 0) creating = true;
  }
  if (!creating) return std::nullopt;
  auto errors = compute.ListInstanceGroupManagerErrors(project, zone, name, {});
  if (!errors.ok()) return std::nullopt;  // only a better message was at stake
  const json::object* newest = nullptr;
  for (const auto& e : *errors) {
    if (newest == nullptr || StringValue(e, "timestamp") > StringValue(*newest, "timestamp")) {
      newest = &e;
    }
  }
  if (newest == nullptr) return std::nullopt;
  auto err = gce::ManagedInstanceError(*newest);
  if (!err || err->reason.empty()) return std::nullopt;
  return err;
}

class ManagedInstanceGroupKind final : public GceChildKind {
 public:
  const kube::Resource& resource() const override { return ManagedInstanceGroups(); }
  std::string GceKind() const override { return "instanceGroupManager"; }

  Status Validate(const json::object& spec) const override {
    HS_RETURN_IF_ERROR(RequireSpecFields(
        spec, {"project", "zone", "name", "baseInstanceName", "instanceTemplate"}));
    if (!spec.contains("targetSize")) {
      return Error::Make(Error::Code::kInvalidArgument, "spec.targetSize is required");
    }
    return OkStatus();
  }

  Result<json::object> Get(gce::Compute& compute, const json::object& spec) const override {
    return compute.GetInstanceGroupManager(StringValue(spec, "project"), StringValue(spec, "zone"),
                                           StringValue(spec, "name"));
  }

  Result<gce::Operation> Insert(gce::Compute& compute, const json::object& spec,
                                const GceOwner& owner) const override {
    json::object body{
        {"name", StringValue(spec, "name")},
        {"description", DescriptionWithOwner(StringValue(spec, "description"), owner)}};
    for (const char* f : kCopiedFields) {
      if (const auto* v = spec.if_contains(f)) body[f] = *v;
    }
    return compute.InsertInstanceGroupManager(StringValue(spec, "project"),
                                              StringValue(spec, "zone"), body);
  }

  Result<gce::Operation> Delete(gce::Compute& compute, const json::object& spec) const override {
    return compute.DeleteInstanceGroupManager(StringValue(spec, "project"),
                                              StringValue(spec, "zone"), StringValue(spec, "name"));
  }

  std::vector<std::string> Drift(const json::object& spec,
                                 const json::object& resource) const override {
    std::vector<std::string> out;
    for (const char* f : kCopiedFields) FieldDifferences(spec, resource, f, out);
    return out;
  }

  Result<Observation> Observe(gce::Compute& compute, const json::object& spec,
                              const json::object& resource, std::vector<std::string>& /*drift*/,
                              json::object& status) const override {
    const std::string project = StringValue(spec, "project");
    const std::string zone = StringValue(spec, "zone");
    const std::string name = StringValue(spec, "name");
    const int64_t want = IntAt(spec, "targetSize");
    const int64_t have = IntAt(resource, "targetSize");
    status["targetSize"] = have;

    // Bulk operation state, as GCE reports it.
    std::optional<std::pair<std::string, std::string>> bulk_error;
    status.erase("bulkInstanceOperation");
    if (const auto* st = ObjectField(resource, "status")) {
      if (const auto* bulk = ObjectField(*st, "bulkInstanceOperation")) {
        json::object out;
        const auto* in_progress = bulk->if_contains("inProgress");
        const bool busy =
            in_progress != nullptr && in_progress->is_bool() && in_progress->as_bool();
        out["inProgress"] = busy;
        if (const auto* check = ObjectField(*bulk, "lastProgressCheck")) {
          auto err = FirstError(ObjectField(*check, "error"));
          if (err) {
            out["lastError"] = json::object{{"code", err->first}, {"message", err->second}};
            if (busy) bulk_error = std::move(err);  // an old error of a finished attempt is history
          }
        }
        status["bulkInstanceOperation"] = std::move(out);
      }
    }

    // targetSize changed behind our back: the one field GCE lets us put right.
    if (want != have) {
      HS_ASSIGN_OR_RETURN(auto op, compute.ResizeInstanceGroupManager(project, zone, name, want));
      Observation obs;
      obs.ready = false;
      obs.reason = reason::kDrifted;
      obs.message = "instanceGroupManager " + name + " has targetSize " + std::to_string(have) +
                    " in GCE, the spec wants " + std::to_string(want) + ": resizing";
      obs.warning = true;
      obs.operation = std::move(op);
      return obs;
    }

    // A settled group (Ready before, GCE says stable with every VM's action NONE) keeps its
    // instance list: the drift check of a settled slice costs one GET per child, nothing more.
    if (Settled(resource, status, want)) return Observation{};

    HS_ASSIGN_OR_RETURN(auto managed, compute.ListManagedInstances(project, zone, name, {}));
    json::array instances;
    int64_t running = 0;
    std::optional<Error> attempt_error;
    for (const auto& mi : managed) {
      std::string vm = StringValue(mi, "name");
      if (vm.empty()) vm = LastSegment(StringValue(mi, "instance"));
      json::object item{{"name", vm},
                        {"zone", zone},
                        {"instanceStatus", StringValue(mi, "instanceStatus")},
                        {"currentAction", StringValue(mi, "currentAction")},
                        {"providerID", ProviderId(project, zone, vm)}};
      if (auto err = gce::LastAttemptError(mi)) {
        item["lastAttempt"] = json::object{{"code", err->reason}, {"message", err->message}};
        if (!attempt_error) attempt_error = err;
      }
      if (StringValue(mi, "instanceStatus") == "RUNNING" &&
          StringValue(mi, "currentAction") == "NONE") {
        ++running;
      }
      instances.push_back(std::move(item));
    }
    status["instances"] = std::move(instances);

    Observation obs;
    if (running >= want && static_cast<int64_t>(managed.size()) == want) return obs;
    obs.ready = false;
    if (attempt_error) {
      obs.reason = attempt_error->reason;
      obs.message = attempt_error->message;
      obs.warning = true;
    } else if (bulk_error && !bulk_error->first.empty() && running < want) {
      obs.reason = bulk_error->first;
      obs.message = bulk_error->second;
      obs.warning = true;
    } else if (auto listed = NewestListedError(compute, project, zone, name, managed)) {
      obs.reason = listed->reason;
      obs.message = listed->message;
      obs.warning = true;
    } else {
      obs.reason = reason::kInstancesNotRunning;
      obs.message =
          std::to_string(running) + " of " + std::to_string(want) + " instances are RUNNING";
    }
    return obs;
  }
};

}  // namespace

std::unique_ptr<GceChildKind> NewManagedInstanceGroupKind() {
  return std::make_unique<ManagedInstanceGroupKind>();
}

}  // namespace hyperslice::tpu::internal
