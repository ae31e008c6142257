// What the runners' machine provisioners (gce_runner.h, market_runner.h) share: their part of a
// Runner's status (status.instance, status.machine), where they keep it and find the Runner's join
// token, and the doubling backoff after a failed create recorded as {failures, time} in it.
//
// The runner controller writes a Runner's status with a merge patch once per reconcile; what must
// survive a restart before that (an operation or a create under way, a failure's count) is written
// through the store at once. A merge patch cannot drop a field, so every record names the fields
// the provisioner no longer has as null.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/runners/controlnode/join_tokens.h"

namespace hyperslice::kube {
class Client;
}  // namespace hyperslice::kube

namespace hyperslice::runners::controlnode {

struct ProvisionStore {
  // Merge-patches status.<field> of the Runner (null drops a field).
  std::function<Status(const std::string& runner, const boost::json::object& patch)> record;
  // The Runner's unused join token, nullopt when there is none (SecretJoinTokens::Token).
  std::function<Result<std::optional<std::string>>(const std::string& runner)> join_token;
};
// The Runners' status subresource (status.<field>) and their token Secrets.
ProvisionStore ApiProvisionStore(const std::shared_ptr<kube::Client>& client,
                                 const std::shared_ptr<SecretJoinTokens>& tokens,
                                 std::string field);

// What a provisioner's reconcile found; the runner controller turns it into the Runner's
// InstanceReady (spec.gce) or MachineReady (spec.marketplace) condition.
struct ProvisionOutcome {
  bool ready = false;    // the instance or machine exists, is ours and runs
  std::string reason;    // InstanceRunning, MachinePending, ZONE_RESOURCE_POOL_EXHAUSTED...
  std::string message;   // never holds the token
  bool warning = false;  // a new failure worth a Warning Event (emitted once per failure)
  std::optional<std::chrono::milliseconds> requeue_after;
};

class ProvisionRecord;

// One provisioner's way of keeping status.<field>: its store, the fields it owns there and its
// backoff after failed creates.
class ProvisionRecorder {
 public:
  // `owned`: the fields of status.<field> a record drops when the provisioner no longer has them.
  // `clock`: the time lastError is stamped and read with (nullptr: RealClock()).
  ProvisionRecorder(ProvisionStore store, std::string field, std::vector<std::string> owned,
                    std::chrono::milliseconds retry_initial, std::chrono::milliseconds retry_max,
                    const Clock* clock = nullptr);

  // The Runner's status.<field> as `status` (the Runner's status being built) holds it.
  ProvisionRecord Open(std::string runner, boost::json::object& status) const;
  // Writes `holder` as status.<field> through the store at once.
  Status Record(const std::string& runner, const boost::json::object& holder) const;
  // retry_initial doubled per failure after the first, at most retry_max.
  std::chrono::milliseconds Backoff(int64_t failures) const;
  // Sets holder.lastError to {reason, message, failures (one more than before), time: now}: the
  // outcome that reports it (a Warning) comes back after the backoff. Not written through.
  ProvisionOutcome NoteFailure(boost::json::object& holder, const std::string& reason,
                               const std::string& message) const;
  // While the backoff of holder.lastError lasts: the outcome that says so, whatever woke the
  // reconcile. nullopt when there is none or it is over.
  std::optional<ProvisionOutcome> BackingOff(const boost::json::object& holder) const;
  // Wall time on the recorder's clock (what lastError.time is stamped with).
  std::chrono::system_clock::time_point Now() const { return wall_.Now(); }
  // The Runner's unused join token, nullopt when there is none (see NoJoinToken).
  Result<std::optional<std::string>> JoinToken(const std::string& runner) const;
  // The outcome of a create that has no token to give.
  ProvisionOutcome NoJoinToken() const;

 private:
  ProvisionStore store_;
  std::string field_;
  std::vector<std::string> owned_;
  std::chrono::milliseconds retry_initial_;
  std::chrono::milliseconds retry_max_;
  WallClock wall_;
};

// One reconcile's copy of a Runner's status.<field>: read at Open, changed in holder(), put back
// into the status being built at Keep or Finish.
class ProvisionRecord {
 public:
  boost::json::object& holder() { return holder_; }
  // Puts holder() back into the status being built (the runner controller writes it).
  void Keep();
  // Keep, after writing through any field dropped since Open (the runner controller's merge
  // patch cannot drop it): the reconcile's result.
  Result<ProvisionOutcome> Finish(ProvisionOutcome outcome);

 private:
  friend class ProvisionRecorder;
  ProvisionRecord(const ProvisionRecorder& recorder, std::string runner, std::string field,
                  boost::json::object& status);

  const ProvisionRecorder& recorder_;
  std::string runner_;
  std::string field_;
  boost::json::object& status_;
  boost::json::object before_;
  boost::json::object holder_;
};

}  // namespace hyperslice::runners::controlnode
