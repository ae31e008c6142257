// An in-memory gce::Compute for unit tests of the controllers (Karpenter keeps a fake
// CloudProvider for the same reason): resources live in maps, mutations return operations that
// complete on command or on a clock, errors are injected per method, and every call is counted.
//
// Semantics, close enough to GCE for a controller's logic:
// - A mutation returns a RUNNING operation; its effect (the resource created, deleted, resized,
//   its metadata set) happens when the operation completes. Until then a GET still sees the old
//   state, and an insert of a name whose insert is pending is alreadyExists.
// - Operations complete when CompleteOperations() is called, or, with SetOperationDuration(d),
//   once `d` has passed on the clock (checked at every call). Duration zero: DONE at once.
// - Wait(op, timeout) returns at once: DONE (ok, or the operation's error), or, when the
//   operation is due within `timeout` on the clock, completes it first (the long-poll would have
//   seen it end); otherwise kTimeout with reason "operationNotDone". It never blocks or sleeps.
// - Errors: InjectError(method, error, n) makes the next n calls of a method ("<collection>.<verb>"
//   as in gce::CallCounters, e.g. "resourcePolicies.get") return the error without effect;
//   FailNextOperation(method, error) lets the call succeed but its operation end DONE with the
//   error (a stockout, a quota) and no effect.
// - Counters: one per call, result "200", or the HTTP status the error stands for.
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/gce/compute.h"

namespace hyperslice::testenv {

class FakeCompute final : public gce::Compute {
 public:
  // `clock` drives operations with a duration; nullptr = RealClock().
  explicit FakeCompute(Clock* clock = nullptr);

  // --- resources ---------------------------------------------------------------------------
  // `collection` is the API's ("resourcePolicies", "instanceTemplates", "instanceGroupManagers",
  // "instances", "subnetworks", "reservations"); `location` the region or zone ("" for global).
  // Put stores `resource` under resource["name"] as is, adding a selfLink when it has none.
  void Put(std::string_view collection, std::string_view project, std::string_view location,
           boost::json::object resource);
  std::optional<boost::json::object> Find(std::string_view collection, std::string_view project,
                                          std::string_view location, std::string_view name) const;
  void Erase(std::string_view collection, std::string_view project, std::string_view location,
             std::string_view name);
  size_t Count(std::string_view collection) const;
  // What ListManagedInstances / ListInstanceGroupManagerErrors answer for one MIG.
  void SetManagedInstances(std::string_view project, std::string_view zone, std::string_view igm,
                           std::vector<boost::json::object> managed_instances);
  void SetManagedInstanceErrors(std::string_view project, std::string_view zone,
                                std::string_view igm, std::vector<boost::json::object> errors);

  // --- operations --------------------------------------------------------------------------
  // nullopt (the default): operations stay RUNNING until CompleteOperations().
  void SetOperationDuration(std::optional<Clock::Duration> duration);
  // Completes every RUNNING operation (applying its effect); returns how many.
  int CompleteOperations();
  size_t PendingOperations() const;
  // The next operation `method` starts ends DONE with `error` (reason = the operation's code).
  void FailNextOperation(std::string_view method, Error error);

  // --- errors and counters -----------------------------------------------------------------
  void InjectError(std::string_view method, const Error& error, int times = 1);
  // Calls of `method`, every result; Calls() of all methods.
  uint64_t Calls(std::string_view method) const { return counters_.Total(method); }
  uint64_t Calls() const;
  gce::CallCounters& counters() override { return counters_; }

  // --- gce::Compute --------------------------------------------------------------------------
  Result<gce::Operation> InsertResourcePolicy(const std::string& project, const std::string& region,
                                              const boost::json::object& policy) override;
  Result<boost::json::object> GetResourcePolicy(const std::string& project,
                                                const std::string& region,
                                                const std::string& name) override;
  Result<std::vector<boost::json::object>> ListResourcePolicies(
      const std::string& project, const std::string& region,
      const gce::ListOptions& options) override;
  Result<gce::Operation> DeleteResourcePolicy(const std::string& project, const std::string& region,
                                              const std::string& name) override;
  Result<gce::Operation> InsertInstanceTemplate(const std::string& project,
                                                const boost::json::object& tmpl) override;
  Result<boost::json::object> GetInstanceTemplate(const std::string& project,
                                                  const std::string& name) override;
  Result<std::vector<boost::json::object>> ListInstanceTemplates(
      const std::string& project, const gce::ListOptions& options) override;
  Result<gce::Operation> DeleteInstanceTemplate(const std::string& project,
                                                const std::string& name) override;
  Result<gce::Operation> InsertInstanceGroupManager(const std::string& project,
                                                    const std::string& zone,
                                                    const boost::json::object& igm) override;
  Result<boost::json::object> GetInstanceGroupManager(const std::string& project,
                                                      const std::string& zone,
                                                      const std::string& name) override;
  Result<std::vector<boost::json::object>> ListInstanceGroupManagers(
      const std::string& project, const std::string& zone,
      const gce::ListOptions& options) override;
  Result<gce::Operation> DeleteInstanceGroupManager(const std::string& project,
                                                    const std::string& zone,
                                                    const std::string& name) override;
  Result<gce::Operation> ResizeInstanceGroupManager(const std::string& project,
                                                    const std::string& zone,
                                                    const std::string& name, int64_t size) override;
  Result<std::vector<boost::json::object>> ListManagedInstances(
      const std::string& project, const std::string& zone, const std::string& name,
      const gce::ListOptions& options) override;
  Result<std::vector<boost::json::object>> ListInstanceGroupManagerErrors(
      const std::string& project, const std::string& zone, const std::string& name,
      const gce::ListOptions& options) override;
  Result<gce::Operation> InsertInstance(const std::string& project, const std::string& zone,
                                        const boost::json::object& instance) override;
  Result<boost::json::object> GetInstance(const std::string& project, const std::string& zone,
                                          const std::string& name) override;
  Result<std::vector<boost::json::object>> ListInstances(const std::string& project,
                                                         const std::string& zone,
                                                         const gce::ListOptions& options) override;
  Result<gce::Operation> SetInstanceMetadata(const std::string& project, const std::string& zone,
                                             const std::string& name,
                                             const boost::json::object& metadata) override;
  Result<gce::Operation> DeleteInstance(const std::string& project, const std::string& zone,
                                        const std::string& name) override;
  Result<boost::json::object> GetSubnetwork(const std::string& project, const std::string& region,
                                            const std::string& name) override;
  Result<boost::json::object> GetReservation(const std::string& project, const std::string& zone,
                                             const std::string& name) override;
  Result<gce::Operation> GetOperation(const gce::OperationRef& op) override;
  Result<gce::Operation> Wait(const gce::OperationRef& op, Clock::Duration timeout) override;

 private:
  struct PendingOp {
    boost::json::object json;  // the Operation resource
    Clock::TimePoint due;      // when it completes by the clock (max() = on command)
    std::optional<Error> failure;
    std::function<void()> effect;  // runs under mu_ when it completes without failure
  };
  using Lock = std::unique_lock<std::mutex>;

  // Counts the call, completes due operations, and returns an injected error if one is set.
  std::optional<Error> Begin(const Lock& lock, std::string_view method);
  Error Count(std::string_view method, Error e);
  void Settle(const Lock& lock);
  void Complete(const Lock& lock, PendingOp& op);
  Result<gce::Operation> StartOperation(const Lock& lock, std::string_view method,
                                        std::string_view project, gce::Scope scope,
                                        std::string_view location, std::string_view target,
                                        std::function<void()> effect);
  Result<gce::Operation> Insert(std::string_view method, std::string_view collection,
                                const std::string& project, gce::Scope scope,
                                const std::string& location, const boost::json::object& body);
  Result<gce::Operation> Delete(std::string_view method, std::string_view collection,
                                const std::string& project, gce::Scope scope,
                                const std::string& location, const std::string& name);
  Result<boost::json::object> Get(std::string_view method, std::string_view collection,
                                  const std::string& project, const std::string& location,
                                  const std::string& name);
  Result<std::vector<boost::json::object>> List(std::string_view method,
                                                std::string_view collection,
                                                const std::string& project,
                                                const std::string& location);
  static std::string Key(std::string_view collection, std::string_view project,
                         std::string_view location, std::string_view name);

  Clock& clock_;
  gce::CallCounters counters_;
  mutable std::mutex mu_;
  std::map<std::string, boost::json::object, std::less<>> resources_;  // by Key()
  std::map<std::string, std::vector<boost::json::object>, std::less<>> managed_, errors_;
  std::map<std::string, PendingOp, std::less<>> operations_;   // by operation name
  std::map<std::string, std::string, std::less<>> inserting_;  // Key() → operation name
  std::map<std::string, std::deque<Error>, std::less<>> injected_;
  std::map<std::string, Error, std::less<>> fail_next_;
  std::optional<Clock::Duration> op_duration_;
  uint64_t next_op_ = 1;
  uint64_t fingerprint_ = 1;
};

}  // namespace hyperslice::testenv
