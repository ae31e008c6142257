// Compute Engine v1 REST client: the part of the API hyperslice provisions TPU slices with.
//
// Bodies are boost::json objects exactly as the API defines them (camelCase names, int64 values as
// strings); the client does not translate resources, so what a controller builds is what GCE gets.
//
// Contract:
// - Every mutation carries a requestId (UUID v4); retries of one logical call reuse it, so a
// retried
//   insert whose first attempt reached GCE creates nothing new.
// - 429, 5xx, rate-limit reasons and transport failures are retried with full-jitter exponential
//   backoff, bounded by attempts and elapsed time; other 4xx (400/404/409/412...) are returned at
//   once. A 401 drops the cached token and is retried once.
// - Errors are hyperslice::Error with `reason` = Google's errors[0].reason (notFound,
//   alreadyExists, conditionNotMet, rateLimitExceeded...) or, for failed operations, the
//   operation's first error code (ZONE_RESOURCE_POOL_EXHAUSTED...).
// - Waiting uses operations/{op}/wait, which GCE long-polls server-side; never a tight loop.
// - List calls follow nextPageToken to the end.
// Thread-safe: one Compute may be shared by all controllers.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/gce/auth.h"
#include "src/net/http.h"

namespace hyperslice::gce {

inline constexpr char kDefaultEndpoint[] = "https://compute.googleapis.com/compute/v1/";

// Where an operation lives: operations are global, regional or zonal like the resource they touch.
enum class Scope { kGlobal, kRegion, kZone };

struct OperationRef {
  std::string project;
  Scope scope = Scope::kGlobal;
  std::string location;  // region or zone name; empty for global
  std::string name;
};
// Parses an operation's selfLink (".../projects/p/zones/z/operations/op" and the region/global
// forms), e.g. one a controller stored in its status to resume waiting after a restart.
Result<OperationRef> ParseOperationLink(std::string_view self_link);

struct Operation {
  OperationRef ref;
  std::string status;  // PENDING, RUNNING, DONE
  std::string self_link;
  std::string target_link;
  boost::json::object json;    // the Operation resource as GCE returned it
  std::optional<Error> error;  // when DONE with error: reason = first errors[].code
  bool done() const { return status == "DONE"; }
};
// Builds an Operation from its JSON (exposed for fakes and tests).
Result<Operation> OperationFromJson(boost::json::object json);

struct ListOptions {
  std::string filter;     // GCE filter syntax, e.g. labels.hyperslice-owner="ns.name"
  std::string order_by;   // orderBy
  int64_t page_size = 0;  // maxResults per page; 0 = the server's default
};

// Per-method call counts by result, one count per HTTP attempt. Method names are
// "<collection>.<verb>" ("instanceGroupManagers.insert"); results are the HTTP status ("200",
// "503") or "error" when no response arrived. Thread-safe; the operator exports them.
class CallCounters {
 public:
  struct Sample {
    std::string method;
    std::string result;
    uint64_t count = 0;
  };
  void Increment(std::string_view method, std::string_view result);
  uint64_t Get(std::string_view method, std::string_view result) const;
  uint64_t Total(std::string_view method) const;  // all results
  std::vector<Sample> Snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, uint64_t, std::less<>> counts_;
};

struct RetryPolicy {
  int max_attempts = 6;  // attempts of one logical call, the first included
  std::chrono::milliseconds initial_backoff{1000};
  std::chrono::milliseconds max_backoff{30000};
  std::chrono::milliseconds max_elapsed{120000};  // no retry starts after this much time
  // Seams for tests: how to wait, and a uniform random number in [0, 1).
  std::function<void(std::chrono::milliseconds)> sleep;  // default: std::this_thread::sleep_for
  std::function<double()> random;                        // default: a seeded mt19937_64
};
// Full jitter (AWS architecture blog): uniform in [0, min(max_backoff, initial * 2^retry)),
// retry = 0 for the wait before the second attempt. `unit_random` is in [0, 1).
std::chrono::milliseconds BackoffDelay(const RetryPolicy& policy, int retry, double unit_random);

struct ComputeOptions {
  std::string endpoint = kDefaultEndpoint;  // ".../compute/v1/"; a private or simulated endpoint
  net::TlsConfig tls;
  std::shared_ptr<TokenSource> tokens;  // required
  RetryPolicy retry;
  std::chrono::milliseconds request_timeout{60000};
  // One operations.wait exchange; GCE answers within about two minutes.
  std::chrono::milliseconds wait_request_timeout{150000};
  // If a wait call answers "not DONE" sooner than this, the next one starts only after it: a
  // server that does not long-poll cannot turn Wait into a tight loop.
  std::chrono::milliseconds min_wait_interval{1000};
  Clock* clock = nullptr;                  // nullptr = RealClock()
  std::shared_ptr<CallCounters> counters;  // nullptr = the client makes its own
  std::string user_agent = "hyperslice";
};

// Metadata items of an instance, key → value.
using MetadataItems = std::map<std::string, std::string>;

class Compute {
 public:
  virtual ~Compute() = default;
  static Result<std::unique_ptr<Compute>> Create(ComputeOptions options);

  // regions/{region}/resourcePolicies
  virtual Result<Operation> InsertResourcePolicy(const std::string& project,
                                                 const std::string& region,
                                                 const boost::json::object& policy) = 0;
  virtual Result<boost::json::object> GetResourcePolicy(const std::string& project,
                                                        const std::string& region,
                                                        const std::string& name) = 0;
  virtual Result<std::vector<boost::json::object>> ListResourcePolicies(
      const std::string& project, const std::string& region, const ListOptions& options) = 0;
  virtual Result<Operation> DeleteResourcePolicy(const std::string& project,
                                                 const std::string& region,
                                                 const std::string& name) = 0;

  // global/instanceTemplates
  virtual Result<Operation> InsertInstanceTemplate(const std::string& project,
                                                   const boost::json::object& tmpl) = 0;
  virtual Result<boost::json::object> GetInstanceTemplate(const std::string& project,
                                                          const std::string& name) = 0;
  virtual Result<std::vector<boost::json::object>> ListInstanceTemplates(
      const std::string& project, const ListOptions& options) = 0;
  virtual Result<Operation> DeleteInstanceTemplate(const std::string& project,
                                                   const std::string& name) = 0;

  // zones/{zone}/instanceGroupManagers
  virtual Result<Operation> InsertInstanceGroupManager(const std::string& project,
                                                       const std::string& zone,
                                                       const boost::json::object& igm) = 0;
  virtual Result<boost::json::object> GetInstanceGroupManager(const std::string& project,
                                                              const std::string& zone,
                                                              const std::string& name) = 0;
  virtual Result<std::vector<boost::json::object>> ListInstanceGroupManagers(
      const std::string& project, const std::string& zone, const ListOptions& options) = 0;
  virtual Result<Operation> DeleteInstanceGroupManager(const std::string& project,
                                                       const std::string& zone,
                                                       const std::string& name) = 0;
  virtual Result<Operation> ResizeInstanceGroupManager(const std::string& project,
                                                       const std::string& zone,
                                                       const std::string& name, int64_t size) = 0;
  // ManagedInstance objects (instance, instanceStatus, currentAction, lastAttempt.errors...).
  virtual Result<std::vector<boost::json::object>> ListManagedInstances(
      const std::string& project, const std::string& zone, const std::string& name,
      const ListOptions& options) = 0;
  // InstanceManagedByIgmError objects (error{code,message}, instanceActionDetails, timestamp).
  virtual Result<std::vector<boost::json::object>> ListInstanceGroupManagerErrors(
      const std::string& project, const std::string& zone, const std::string& name,
      const ListOptions& options) = 0;

  // zones/{zone}/instances
  // `instance` is an Instance: name, machineType (a URL or zones/{zone}/machineTypes/{mt} path),
  // guestAccelerators, disks, networkInterfaces, metadata{items}, labels, scheduling. A name that
  // exists is kAlreadyExists (reason alreadyExists); a stockout is the operation's error
  // (ZONE_RESOURCE_POOL_EXHAUSTED).
  virtual Result<Operation> InsertInstance(const std::string& project, const std::string& zone,
                                           const boost::json::object& instance) = 0;
  virtual Result<boost::json::object> GetInstance(const std::string& project,
                                                  const std::string& zone,
                                                  const std::string& name) = 0;
  virtual Result<std::vector<boost::json::object>> ListInstances(const std::string& project,
                                                                 const std::string& zone,
                                                                 const ListOptions& options) = 0;
  // `metadata` is a Metadata object: {fingerprint, items[{key,value}]}. A stale fingerprint is
  // kConflict (reason conditionNotMet, HTTP 412); see UpdateInstanceMetadata.
  virtual Result<Operation> SetInstanceMetadata(const std::string& project, const std::string& zone,
                                                const std::string& name,
                                                const boost::json::object& metadata) = 0;
  virtual Result<Operation> DeleteInstance(const std::string& project, const std::string& zone,
                                           const std::string& name) = 0;

  // regions/{region}/subnetworks, zones/{zone}/reservations
  virtual Result<boost::json::object> GetSubnetwork(const std::string& project,
                                                    const std::string& region,
                                                    const std::string& name) = 0;
  virtual Result<boost::json::object> GetReservation(const std::string& project,
                                                     const std::string& zone,
                                                     const std::string& name) = 0;

  // Operations. GetOperation reads the current state (an operation DONE with error is returned
  // as an Operation whose `error` is set). Wait long-polls operations/{op}/wait until the
  // operation is DONE or `timeout` has passed: ok only for DONE without error; the operation's
  // error when it failed; kTimeout (reason "operationNotDone") when the time ran out first.
  virtual Result<Operation> GetOperation(const OperationRef& op) = 0;
  virtual Result<Operation> Wait(const OperationRef& op, Clock::Duration timeout) = 0;

  virtual CallCounters& counters() = 0;

  // Read-modify-write of an instance's metadata items: reads the instance, applies `mutate` to
  // its items, and calls setMetadata with the fingerprint it read. On 412 (someone else changed
  // the metadata in between) it re-reads and re-applies `mutate`, up to `max_attempts` times.
  // `mutate` returns false when the items already are as wanted: then no call is made and the
  // result holds no operation. Built on the virtual methods, so it works on fakes too.
  Result<std::optional<Operation>> UpdateInstanceMetadata(
      const std::string& project, const std::string& zone, const std::string& name,
      const std::function<bool(MetadataItems&)>& mutate, int max_attempts = 5);
};

// Body of a resourcePolicies.insert for a TPU slice's placement:
//   {"name": name, "description": description?,
//    "workloadPolicy": {"type": "HIGH_THROUGHPUT", "acceleratorTopology": topology}}
boost::json::object HighThroughputWorkloadPolicy(std::string_view name,
                                                 std::string_view accelerator_topology,
                                                 std::string_view description = {});

// The metadata items of a Metadata object ({fingerprint, items[{key,value}]}); missing → empty.
MetadataItems MetadataItemsOf(const boost::json::object& metadata);

// The first error of a ManagedInstance's lastAttempt ({errors:{errors:[{code,message}]}}), as an
// Error with reason = its code (e.g. ZONE_RESOURCE_POOL_EXHAUSTED); nullopt when there is none.
std::optional<Error> LastAttemptError(const boost::json::object& managed_instance);
// The error of an instanceGroupManagers.listErrors item ({error:{code,message},...}).
std::optional<Error> ManagedInstanceError(const boost::json::object& list_errors_item);

}  // namespace hyperslice::gce
