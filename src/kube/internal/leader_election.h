// LeaderElector: leader election on a coordination.k8s.io/v1 Lease, with client-go's protocol
// (leaderelection.LeaderElector + resourcelock.LeaseLock).
//
// The Lease's spec carries holderIdentity, leaseDurationSeconds, acquireTime and renewTime
// (MicroTime, "2006-01-02T15:04:05.000000Z") and leaseTransitions. Every write is an update with
// the resourceVersion last read (optimistic concurrency), so two candidates can never both win.
//
// A candidate treats another holder's lease as live until leaseDuration has passed on ITS OWN
// clock since it last saw the record change (clocks are never compared across processes), and
// re-checks exactly when that time is up rather than on the next retry tick.
//
// The leader renews every retryPeriod. It stops leading once renewDeadline has passed since the
// start of its last successful renewal, even when a request hangs (a watchdog fires on time).
// Since another candidate waits at least leaseDuration after that renewal became visible,
// renewDeadline < leaseDuration leaves (leaseDuration − renewDeadline) for in-flight work to stop
// before anyone else can lead. Leadership lost is final for this elector: make a new one.
//
// Thread-safety: Start/Stop from one thread; IsLeader/leader from any thread. Callbacks run on the
// elector's threads and must return promptly.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/kube/client.h"
#include "src/kube/metrics.h"

namespace hyperslice::kube {

struct LeaderElectionConfig {
  std::string lease_namespace;
  std::string lease_name;
  std::string identity;  // unique per candidate
  Clock::Duration lease_duration = std::chrono::seconds(15);
  Clock::Duration renew_deadline = std::chrono::seconds(10);
  Clock::Duration retry_period = std::chrono::seconds(2);
  // On Stop(), a leader writes an empty holderIdentity so a successor need not wait.
  bool release_on_cancel = true;

  std::function<void()> on_started_leading;
  // Called once when this candidate stops leading (lost or Stop()), before Stop() returns.
  std::function<void()> on_stopped_leading;
  std::function<void(const std::string& identity)> on_new_leader;

  Clock* clock = nullptr;                 // default RealClock()
  metrics::Registry* registry = nullptr;  // leader_election_master_status{name}
};

class LeaderElector {
 public:
  // Validates like client-go: leaseDuration > renewDeadline > 1.2 × retryPeriod > 0, identity and
  // lease name set.
  static Result<std::unique_ptr<LeaderElector>> Create(std::shared_ptr<Client> client,
                                                       LeaderElectionConfig config);
  ~LeaderElector();  // Stop()

  void Start();  // campaigns in the background
  // Stops campaigning; a leader releases the Lease (release_on_cancel) and calls
  // on_stopped_leading. Waits for the elector's threads.
  void Stop();

  // True while this candidate leads and its last renewal is younger than renewDeadline.
  bool IsLeader() const;
  std::string leader() const;  // last observed holderIdentity

 private:
  LeaderElector(std::shared_ptr<Client> client, LeaderElectionConfig config);
  // One attempt (client-go tryAcquireOrRenew). Returns true when this candidate holds the lease.
  bool TryAcquireOrRenew();
  void Loop();
  void Watchdog();
  void LoseLeadership(const char* why);  // with mu_ not held
  void InvokeStopped();
  void Release();

  std::shared_ptr<Client> client_;
  LeaderElectionConfig config_;
  Clock& clock_;
  metrics::Gauge* master_status_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool leading_ = false;
  bool lost_ = false;                   // leadership ended; final
  Clock::TimePoint leader_deadline_{};  // last successful renewal start + renewDeadline
  // What we last read or wrote, and when (our clock) we saw it change.
  std::string observed_spec_;  // serialized spec for change detection
  std::string observed_holder_;
  int64_t observed_transitions_ = 0;
  std::string observed_acquire_time_;
  Clock::TimePoint observed_time_{};
  Clock::Duration observed_lease_duration_{};
  std::string reported_leader_;

  // Serializes the callbacks so on_stopped_leading never runs before on_started_leading.
  std::mutex cb_mu_;
  bool started_callback_ = false;
  bool stopped_callback_ = false;

  std::thread loop_thread_, watchdog_thread_;
};

}  // namespace hyperslice::kube
