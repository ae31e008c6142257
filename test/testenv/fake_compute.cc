// The in-memory gce::Compute of unit tests (fake_compute.h).
#include "test/testenv/fake_compute.h"

#include <limits>
#include <utility>

#include <boost/json.hpp>

#include "src/base/json.h"

namespace hyperslice::testenv {
namespace {

namespace json = boost::json;
using gce::Scope;
using jsonfield::StringField;

constexpr char kEndpoint[] = "https://compute.googleapis.com/compute/v1/";

// The HTTP status an error stands for, as the real client counts it.
std::string ResultOf(const Error& e) {
  switch (e.code) {
    case Error::Code::kInvalidArgument:
      return "400";
    case Error::Code::kUnauthorized:
      return "401";
    case Error::Code::kForbidden:
      return "403";
    case Error::Code::kNotFound:
      return "404";
    case Error::Code::kAlreadyExists:
      return "409";
    case Error::Code::kConflict:
      return "412";
    case Error::Code::kTooManyRequests:
      return "429";
    case Error::Code::kUnavailable:
      return "503";
    default:
      return "error";
  }
}

std::string ScopePath(std::string_view project, Scope scope, std::string_view location) {
  std::string p = std::string(kEndpoint) + "projects/" + std::string(project) + "/";
  switch (scope) {
    case Scope::kGlobal:
      return p + "global/";
    case Scope::kRegion:
      return p + "regions/" + std::string(location) + "/";
    case Scope::kZone:
      return p + "zones/" + std::string(location) + "/";
  }
  return p;
}

Scope ScopeOf(std::string_view collection) {
  if (collection == "instanceTemplates") return Scope::kGlobal;
  if (collection == "resourcePolicies" || collection == "subnetworks") return Scope::kRegion;
  return Scope::kZone;
}

Error NotFound(std::string_view what) {
  return Error::Make(Error::Code::kNotFound,
                     "The resource '" + std::string(what) + "' was not found", "notFound");
}

}  // namespace

FakeCompute::FakeCompute(Clock* clock) : clock_(clock != nullptr ? *clock : RealClock()) {}

std::string FakeCompute::Key(std::string_view collection, std::string_view project,
                             std::string_view location, std::string_view name) {
  std::string k(collection);
  for (std::string_view part : {project, location, name}) k.append("/").append(part);
  return k;
}

// --- test controls -------------------------------------------------------------------------------

void FakeCompute::Put(std::string_view collection, std::string_view project,
                      std::string_view location, json::object resource) {
  const std::string name(StringField(resource, "name"));
  if (StringField(resource, "selfLink").empty()) {
    resource["selfLink"] =
        ScopePath(project, ScopeOf(collection), location) + std::string(collection) + "/" + name;
  }
  std::lock_guard lock(mu_);
  resources_[Key(collection, project, location, name)] = std::move(resource);
}

std::optional<json::object> FakeCompute::Find(std::string_view collection, std::string_view project,
                                              std::string_view location,
                                              std::string_view name) const {
  std::lock_guard lock(mu_);
  auto it = resources_.find(Key(collection, project, location, name));
  if (it == resources_.end()) return std::nullopt;
  return it->second;
}

void FakeCompute::Erase(std::string_view collection, std::string_view project,
                        std::string_view location, std::string_view name) {
  std::lock_guard lock(mu_);
  resources_.erase(Key(collection, project, location, name));
}

size_t FakeCompute::Count(std::string_view collection) const {
  std::lock_guard lock(mu_);
  const std::string prefix = std::string(collection) + "/";
  size_t n = 0;
  for (const auto& [k, _] : resources_) n += k.rfind(prefix, 0) == 0 ? 1 : 0;
  return n;
}

void FakeCompute::SetManagedInstances(std::string_view project, std::string_view zone,
                                      std::string_view igm, std::vector<json::object> list) {
  std::lock_guard lock(mu_);
  managed_[Key("instanceGroupManagers", project, zone, igm)] = std::move(list);
}

void FakeCompute::SetManagedInstanceErrors(std::string_view project, std::string_view zone,
                                           std::string_view igm, std::vector<json::object> list) {
  std::lock_guard lock(mu_);
  errors_[Key("instanceGroupManagers", project, zone, igm)] = std::move(list);
}

void FakeCompute::SetOperationDuration(std::optional<Clock::Duration> duration) {
  std::lock_guard lock(mu_);
  op_duration_ = duration;
}

int FakeCompute::CompleteOperations() {
  Lock lock(mu_);
  int n = 0;
  for (auto& [_, op] : operations_) {
    if (StringField(op.json, "status") == "DONE") continue;
    Complete(lock, op);
    ++n;
  }
  return n;
}

size_t FakeCompute::PendingOperations() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [_, op] : operations_) n += StringField(op.json, "status") != "DONE" ? 1 : 0;
  return n;
}

void FakeCompute::FailNextOperation(std::string_view method, Error error) {
  std::lock_guard lock(mu_);
  fail_next_.insert_or_assign(std::string(method), std::move(error));
}

void FakeCompute::InjectError(std::string_view method, const Error& error, int times) {
  std::lock_guard lock(mu_);
  auto& q = injected_[std::string(method)];
  for (int i = 0; i < times; ++i) q.push_back(error);
}

uint64_t FakeCompute::Calls() const {
  uint64_t n = 0;
  for (const auto& s : counters_.Snapshot()) n += s.count;
  return n;
}

// --- machinery -----------------------------------------------------------------------------------

std::optional<Error> FakeCompute::Begin(const Lock& lock, std::string_view method) {
  Settle(lock);
  auto it = injected_.find(method);
  if (it == injected_.end() || it->second.empty()) return std::nullopt;
  Error e = std::move(it->second.front());
  it->second.pop_front();
  return Count(method, std::move(e));
}

Error FakeCompute::Count(std::string_view method, Error e) {
  counters_.Increment(method, ResultOf(e));
  return e;
}

void FakeCompute::Settle(const Lock& lock) {
  const auto now = clock_.Now();
  for (auto& [_, op] : operations_) {
    if (StringField(op.json, "status") != "DONE" && op.due <= now) Complete(lock, op);
  }
}

void FakeCompute::Complete(const Lock& /*lock*/, PendingOp& op) {
  op.json["status"] = "DONE";
  op.json["progress"] = 100;
  if (op.failure) {
    op.json["error"] =
        json::object{{"errors", json::array{json::object{{"code", op.failure->reason},
                                                         {"message", op.failure->message}}}}};
  } else if (op.effect) {
    op.effect();
  }
  op.effect = nullptr;
  for (auto it = inserting_.begin(); it != inserting_.end();) {
    it = it->second == StringField(op.json, "name") ? inserting_.erase(it) : std::next(it);
  }
}

Result<gce::Operation> FakeCompute::StartOperation(const Lock& lock, std::string_view method,
                                                   std::string_view project, Scope scope,
                                                   std::string_view location,
                                                   std::string_view target,
                                                   std::function<void()> effect) {
  const std::string name = "operation-" + std::to_string(next_op_++);
  PendingOp op;
  op.json = json::object{{"kind", "compute#operation"},
                         {"name", name},
                         {"operationType", method.substr(method.find('.') + 1)},
                         {"status", "RUNNING"},
                         {"targetLink", target},
                         {"selfLink", ScopePath(project, scope, location) + "operations/" + name}};
  op.due = op_duration_ ? clock_.Now() + *op_duration_ : Clock::TimePoint::max();
  if (auto f = fail_next_.find(method); f != fail_next_.end()) {
    op.failure = std::move(f->second);
    fail_next_.erase(f);
  }
  op.effect = std::move(effect);
  auto& stored = operations_[name] = std::move(op);
  if (op_duration_ && *op_duration_ <= Clock::Duration::zero()) Complete(lock, stored);
  counters_.Increment(method, "200");
  return gce::OperationFromJson(stored.json);
}

Result<gce::Operation> FakeCompute::Insert(std::string_view method, std::string_view collection,
                                           const std::string& project, Scope scope,
                                           const std::string& location, const json::object& body) {
  Lock lock(mu_);
  if (auto e = Begin(lock, method)) return *e;
  const std::string name(StringField(body, "name"));
  const std::string key = Key(collection, project, location, name);
  if (resources_.count(key) > 0 || inserting_.count(key) > 0) {
    return Count(method,
                 Error::Make(Error::Code::kAlreadyExists,
                             "The resource '" + name + "' already exists", "alreadyExists"));
  }
  json::object resource = body;
  resource["kind"] = "compute#" + std::string(collection).substr(0, collection.size() - 1);
  resource["selfLink"] = ScopePath(project, scope, location) + std::string(collection) + "/" + name;
  resource["id"] = std::to_string(next_op_);
  if (collection == "instanceGroupManagers") {
    resource["status"] = json::object{{"isStable", true}};
  }
  const std::string target(StringField(resource, "selfLink"));
  auto op =
      StartOperation(lock, method, project, scope, location, target,
                     [this, key, resource]() mutable { resources_[key] = std::move(resource); });
  if (op.ok() && !op->done()) inserting_[key] = op->ref.name;
  return op;
}

Result<gce::Operation> FakeCompute::Delete(std::string_view method, std::string_view collection,
                                           const std::string& project, Scope scope,
                                           const std::string& location, const std::string& name) {
  Lock lock(mu_);
  if (auto e = Begin(lock, method)) return *e;
  const std::string key = Key(collection, project, location, name);
  auto it = resources_.find(key);
  if (it == resources_.end()) return Count(method, NotFound(name));
  const std::string target(StringField(it->second, "selfLink"));
  return StartOperation(lock, method, project, scope, location, target,
                        [this, key] { resources_.erase(key); });
}

Result<json::object> FakeCompute::Get(std::string_view method, std::string_view collection,
                                      const std::string& project, const std::string& location,
                                      const std::string& name) {
  Lock lock(mu_);
  if (auto e = Begin(lock, method)) return *e;
  auto it = resources_.find(Key(collection, project, location, name));
  if (it == resources_.end()) return Count(method, NotFound(name));
  counters_.Increment(method, "200");
  return it->second;
}

Result<std::vector<json::object>> FakeCompute::List(std::string_view method,
                                                    std::string_view collection,
                                                    const std::string& project,
                                                    const std::string& location) {
  Lock lock(mu_);
  if (auto e = Begin(lock, method)) return *e;
  // The filter is not evaluated: a test seeds what the list should see.
  const std::string prefix = Key(collection, project, location, "");
  std::vector<json::object> out;
  for (auto it = resources_.lower_bound(prefix); it != resources_.end(); ++it) {
    if (it->first.rfind(prefix, 0) != 0) break;
    out.push_back(it->second);
  }
  counters_.Increment(method, "200");
  return out;
}

// --- gce::Compute --------------------------------------------------------------------------------

Result<gce::Operation> FakeCompute::InsertResourcePolicy(const std::string& project,
                                                         const std::string& region,
                                                         const json::object& policy) {
  return Insert("resourcePolicies.insert", "resourcePolicies", project, Scope::kRegion, region,
                policy);
}
Result<json::object> FakeCompute::GetResourcePolicy(const std::string& project,
                                                    const std::string& region,
                                                    const std::string& name) {
  return Get("resourcePolicies.get", "resourcePolicies", project, region, name);
}
Result<std::vector<json::object>> FakeCompute::ListResourcePolicies(
    const std::string& project, const std::string& region, const gce::ListOptions& /*options*/) {
  return List("resourcePolicies.list", "resourcePolicies", project, region);
}
Result<gce::Operation> FakeCompute::DeleteResourcePolicy(const std::string& project,
                                                         const std::string& region,
                                                         const std::string& name) {
  return Delete("resourcePolicies.delete", "resourcePolicies", project, Scope::kRegion, region,
                name);
}

Result<gce::Operation> FakeCompute::InsertInstanceTemplate(const std::string& project,
                                                           const json::object& tmpl) {
  return Insert("instanceTemplates.insert", "instanceTemplates", project, Scope::kGlobal, "", tmpl);
}
Result<json::object> FakeCompute::GetInstanceTemplate(const std::string& project,
                                                      const std::string& name) {
  return Get("instanceTemplates.get", "instanceTemplates", project, "", name);
}
Result<std::vector<json::object>> FakeCompute::ListInstanceTemplates(
    const std::string& project, const gce::ListOptions& /*options*/) {
  return List("instanceTemplates.list", "instanceTemplates", project, "");
}
Result<gce::Operation> FakeCompute::DeleteInstanceTemplate(const std::string& project,
                                                           const std::string& name) {
  return Delete("instanceTemplates.delete", "instanceTemplates", project, Scope::kGlobal, "", name);
}

Result<gce::Operation> FakeCompute::InsertInstanceGroupManager(const std::string& project,
                                                               const std::string& zone,
                                                               const json::object& igm) {
  return Insert("instanceGroupManagers.insert", "instanceGroupManagers", project, Scope::kZone,
                zone, igm);
}
Result<json::object> FakeCompute::GetInstanceGroupManager(const std::string& project,
                                                          const std::string& zone,
                                                          const std::string& name) {
  return Get("instanceGroupManagers.get", "instanceGroupManagers", project, zone, name);
}
Result<std::vector<json::object>> FakeCompute::ListInstanceGroupManagers(
    const std::string& project, const std::string& zone, const gce::ListOptions& /*options*/) {
  return List("instanceGroupManagers.list", "instanceGroupManagers", project, zone);
}
Result<gce::Operation> FakeCompute::DeleteInstanceGroupManager(const std::string& project,
                                                               const std::string& zone,
                                                               const std::string& name) {
  return Delete("instanceGroupManagers.delete", "instanceGroupManagers", project, Scope::kZone,
                zone, name);
}

Result<gce::Operation> FakeCompute::ResizeInstanceGroupManager(const std::string& project,
                                                               const std::string& zone,
                                                               const std::string& name,
                                                               int64_t size) {
  constexpr char kMethod[] = "instanceGroupManagers.resize";
  Lock lock(mu_);
  if (auto e = Begin(lock, kMethod)) return *e;
  const std::string key = Key("instanceGroupManagers", project, zone, name);
  auto it = resources_.find(key);
  if (it == resources_.end()) return Count(kMethod, NotFound(name));
  const std::string target(StringField(it->second, "selfLink"));
  return StartOperation(lock, kMethod, project, Scope::kZone, zone, target, [this, key, size] {
    if (auto r = resources_.find(key); r != resources_.end()) r->second["targetSize"] = size;
  });
}

Result<std::vector<json::object>> FakeCompute::ListManagedInstances(
    const std::string& project, const std::string& zone, const std::string& name,
    const gce::ListOptions& /*options*/) {
  constexpr char kMethod[] = "instanceGroupManagers.listManagedInstances";
  Lock lock(mu_);
  if (auto e = Begin(lock, kMethod)) return *e;
  const std::string key = Key("instanceGroupManagers", project, zone, name);
  if (resources_.count(key) == 0) return Count(kMethod, NotFound(name));
  counters_.Increment(kMethod, "200");
  auto it = managed_.find(key);
  return it == managed_.end() ? std::vector<json::object>{} : it->second;
}

Result<std::vector<json::object>> FakeCompute::ListInstanceGroupManagerErrors(
    const std::string& project, const std::string& zone, const std::string& name,
    const gce::ListOptions& /*options*/) {
  constexpr char kMethod[] = "instanceGroupManagers.listErrors";
  Lock lock(mu_);
  if (auto e = Begin(lock, kMethod)) return *e;
  const std::string key = Key("instanceGroupManagers", project, zone, name);
  if (resources_.count(key) == 0) return Count(kMethod, NotFound(name));
  counters_.Increment(kMethod, "200");
  auto it = errors_.find(key);
  return it == errors_.end() ? std::vector<json::object>{} : it->second;
}

Result<gce::Operation> FakeCompute::InsertInstance(const std::string& project,
                                                   const std::string& zone,
                                                   const json::object& instance) {
  return Insert("instances.insert", "instances", project, Scope::kZone, zone, instance);
}
Result<json::object> FakeCompute::GetInstance(const std::string& project, const std::string& zone,
                                              const std::string& name) {
  return Get("instances.get", "instances", project, zone, name);
}
Result<std::vector<json::object>> FakeCompute::ListInstances(const std::string& project,
                                                             const std::string& zone,
                                                             const gce::ListOptions& /*options*/) {
  return List("instances.list", "instances", project, zone);
}

Result<gce::Operation> FakeCompute::SetInstanceMetadata(const std::string& project,
                                                        const std::string& zone,
                                                        const std::string& name,
                                                        const json::object& metadata) {
  constexpr char kMethod[] = "instances.setMetadata";
  Lock lock(mu_);
  if (auto e = Begin(lock, kMethod)) return *e;
  const std::string key = Key("instances", project, zone, name);
  auto it = resources_.find(key);
  if (it == resources_.end()) return Count(kMethod, NotFound(name));
  const auto* have = jsonfield::ObjectField(it->second, "metadata");
  const std::string_view fingerprint = have ? StringField(*have, "fingerprint") : "";
  if (StringField(metadata, "fingerprint") != fingerprint) {
    return Count(kMethod, Error::Make(Error::Code::kConflict,
                                      "Supplied fingerprint does not match current metadata "
                                      "fingerprint.",
                                      "conditionNotMet"));
  }
  // The fingerprint changes when the call is accepted, so a second writer with the old one is
  // refused even while this operation runs.
  json::object next = metadata;
  next["fingerprint"] = "fp-" + std::to_string(fingerprint_++);
  it->second["metadata"] = next;
  const std::string target(StringField(it->second, "selfLink"));
  return StartOperation(lock, kMethod, project, Scope::kZone, zone, target, nullptr);
}

Result<gce::Operation> FakeCompute::DeleteInstance(const std::string& project,
                                                   const std::string& zone,
                                                   const std::string& name) {
  return Delete("instances.delete", "instances", project, Scope::kZone, zone, name);
}

Result<json::object> FakeCompute::GetSubnetwork(const std::string& project,
                                                const std::string& region,
                                                const std::string& name) {
  return Get("subnetworks.get", "subnetworks", project, region, name);
}
Result<json::object> FakeCompute::GetReservation(const std::string& project,
                                                 const std::string& zone, const std::string& name) {
  return Get("reservations.get", "reservations", project, zone, name);
}

// --- operations ----------------------------------------------------------------------------------

namespace {
std::string OperationsMethod(Scope scope, std::string_view verb) {
  const char* base = scope == Scope::kGlobal   ? "globalOperations"
                     : scope == Scope::kRegion ? "regionOperations"
                                               : "zoneOperations";
  return std::string(base) + "." + std::string(verb);
}
}  // namespace

Result<gce::Operation> FakeCompute::GetOperation(const gce::OperationRef& ref) {
  const std::string method = OperationsMethod(ref.scope, "get");
  Lock lock(mu_);
  if (auto e = Begin(lock, method)) return *e;
  auto it = operations_.find(ref.name);
  if (it == operations_.end()) return Count(method, NotFound(ref.name));
  counters_.Increment(method, "200");
  return gce::OperationFromJson(it->second.json);
}

Result<gce::Operation> FakeCompute::Wait(const gce::OperationRef& ref, Clock::Duration timeout) {
  const std::string method = OperationsMethod(ref.scope, "wait");
  Lock lock(mu_);
  if (auto e = Begin(lock, method)) return *e;
  auto it = operations_.find(ref.name);
  if (it == operations_.end()) return Count(method, NotFound(ref.name));
  PendingOp& op = it->second;
  if (StringField(op.json, "status") != "DONE" && op.due != Clock::TimePoint::max() &&
      op.due <= clock_.Now() + timeout) {
    Complete(lock, op);
  }
  counters_.Increment(method, "200");
  HS_ASSIGN_OR_RETURN(auto done, gce::OperationFromJson(op.json));
  if (!done.done()) {
    return Error::Make(Error::Code::kTimeout, "operation " + ref.name + " is not DONE yet",
                       "operationNotDone");
  }
  if (done.error) return *done.error;
  return done;
}

}  // namespace hyperslice::testenv
