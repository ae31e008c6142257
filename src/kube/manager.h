// Manager: runs a process's controllers and the things they need (controller-runtime's Manager).
//
// - Runnables are started by Run(). Those that need leader election (controllers, by default)
//   start only once this process holds the Lease, and stop as soon as it stops holding it; the
//   others (informers, caches) start at once, like controller-runtime.
// - Leader election uses a coordination.k8s.io/v1 Lease (internal/leader_election.h). When
// leadership is
//   lost, Run() stops every runnable and returns an error: the process should exit, as a
//   controller-runtime manager does, and a fresh process campaigns again.
// - Health: /healthz (liveness), /readyz (ready once every non-leader runnable reports Ready(),
//   i.e. caches synced, whether or not this process leads) and /metrics (Prometheus text) on
//   one loopback HTTP server (internal/health_server.h).
// - Graceful shutdown: Stop(), SIGTERM or SIGINT (when handle_signals is set) stop handing out
//   work; in-flight reconciles may finish for graceful_shutdown_timeout; the Lease is released
//   (ReleaseOnCancel) so a successor need not wait for it to expire.
//
// Thread-safety: Add*() before Run(); Stop(), IsLeader(), health_port() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/kube/client.h"
#include "src/kube/metrics.h"

namespace hyperslice::kube {

class HealthServer;
class InformerFactory;
class LeaderElector;

// Something the Manager starts and stops (controller-runtime's manager.Runnable).
class Runnable {
 public:
  virtual ~Runnable() = default;
  virtual std::string Name() const = 0;
  // Starts background work and returns promptly.
  virtual Status Start() = 0;
  // Stops handing out new work and waits up to `grace` for work in flight. Idempotent.
  virtual void Stop(std::chrono::milliseconds grace) = 0;
  // Whether the runnable may only run on the elected leader (controllers: yes; caches: no).
  virtual bool NeedLeaderElection() const { return true; }
  // Readiness contribution (e.g. informer caches synced). Checked only for runnables that do not
  // need leader election, so a standby replica is ready too.
  virtual bool Ready() const { return true; }
  // Called by the Manager before Start() with a predicate that is false as soon as this process
  // may no longer be the leader; a runnable checks it before each unit of work.
  virtual void SetLeaderGate(std::function<bool()> /*gate*/) {}  // NOLINT: overrides keep it
};

struct ManagerOptions {
  std::shared_ptr<Client> client;  // required with leader election

  bool leader_election = false;
  std::string leader_election_namespace = "kube-system";
  std::string leader_election_id;  // the Lease's name
  std::string identity;            // default: <hostname>_<random hex>
  Clock::Duration lease_duration = std::chrono::seconds(15);
  Clock::Duration renew_deadline = std::chrono::seconds(10);
  Clock::Duration retry_period = std::chrono::seconds(2);
  bool leader_election_release_on_cancel = true;

  // Health/ready/metrics server: -1 disables it, 0 picks a free port.
  std::string health_probe_address = "127.0.0.1";
  int health_probe_port = -1;

  std::chrono::milliseconds graceful_shutdown_timeout{30000};
  bool handle_signals = false;  // SIGTERM/SIGINT make Run() return after a graceful shutdown

  metrics::Registry* registry = nullptr;  // default metrics::Registry::Default()
  Clock* clock = nullptr;                 // default RealClock()
};

class Manager {
 public:
  // Validates the options and starts the health server (so health_port() is known before Run()).
  static Result<std::unique_ptr<Manager>> Create(ManagerOptions options);
  ~Manager();  // Stop() and wait for Run() to return

  void Add(std::shared_ptr<Runnable> runnable);
  // Named checks; a failing check makes the endpoint answer 500 and name it.
  void AddHealthzCheck(const std::string& name, std::function<Status()> check);
  void AddReadyzCheck(const std::string& name, std::function<Status()> check);

  // Blocks until Stop(), a signal, or loss of leadership. OK after a requested stop; an error
  // (reason "LeaderElectionLost") when leadership was lost.
  Status Run();
  void Stop();  // any thread, any number of times

  // The process's shared informers (one list+watch and cache per resource and selector), created
  // with the client. Run() starts them before any controller (again when leadership is won, for
  // informers asked for since) and /readyz waits for their caches. Null without a client.
  InformerFactory* informers() const { return informers_.get(); }

  bool IsLeader() const;
  const std::string& identity() const { return options_.identity; }
  uint16_t health_port() const;  // 0 when disabled
  metrics::Registry& registry() const { return *options_.registry; }

 private:
  explicit Manager(ManagerOptions options);
  Status Readyz();

  ManagerOptions options_;
  std::shared_ptr<InformerFactory> informers_;
  std::unique_ptr<HealthServer> health_;
  std::unique_ptr<LeaderElector> elector_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Runnable>> runnables_;
  std::vector<std::pair<std::string, std::function<Status()>>> healthz_checks_, readyz_checks_;
  bool stop_requested_ = false;
  bool leadership_lost_ = false;
  bool running_ = false;
  bool started_ = false;  // Run() has started the non-leader runnables
  bool leader_runnables_started_ = false;
  std::atomic<bool> leading_{false};
};

}  // namespace hyperslice::kube
