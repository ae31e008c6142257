// Controller: a named work queue drained by N workers that call a level-based reconciler
// (controller-runtime's controller.Controller).
//
// Per key, the reconciler's outcome decides what happens next, as in controller-runtime:
//   error                  → requeued with the queue's rate limiter (per-key exponential backoff
//                            plus the overall token bucket); reconcile_errors_total counts it
//   requeue_after > 0      → Forget (backoff reset) and requeued after that delay
//   requeue                → requeued with the rate limiter
//   otherwise              → Forget
// A reconciler that throws is treated as an error (counted in reconcile_panics_total); no
// exception leaves a worker thread. A key is never reconciled by two workers at once.
//
// Metrics (controller-runtime names): controller_runtime_reconcile_total{controller,result}
// (result = success | error | requeue | requeue_after), controller_runtime_reconcile_errors_total,
// controller_runtime_reconcile_panics_total, controller_runtime_reconcile_time_seconds,
// controller_runtime_max_concurrent_reconciles, controller_runtime_active_workers, and the
// workqueue_* series of its queue (labels name = controller = the controller's name).
//
// Thread-safety: Enqueue*() from any thread (informer handlers); Start/Stop from one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/kube/informer.h"
#include "src/kube/internal/workqueue.h"
#include "src/kube/manager.h"
#include "src/kube/metrics.h"
#include "src/kube/resource.h"

namespace hyperslice::kube {

struct ReconcileResult {
  bool requeue = false;
  Clock::Duration requeue_after = Clock::Duration::zero();
};

// Reconciles one key ("namespace/name", or "name" for cluster-scoped objects).
using ReconcileFunc = std::function<Result<ReconcileResult>(const std::string& key)>;

struct ControllerOptions {
  std::string name;  // required; unique per process (metrics label)
  int max_concurrent_reconciles = 1;
  Clock* clock = nullptr;                     // default RealClock()
  std::unique_ptr<RateLimiter> rate_limiter;  // default DefaultControllerRateLimiter
  metrics::Registry* registry = nullptr;      // default metrics::Registry::Default()
  bool need_leader_election = true;
};

class Controller final : public Runnable {
 public:
  Controller(ControllerOptions options, ReconcileFunc reconcile);
  ~Controller() override;  // Stop() and join the workers

  void Enqueue(const std::string& key) { queue_.Add(key); }
  void EnqueueAfter(const std::string& key, Clock::Duration d) { queue_.AddAfter(key, d); }
  // Enqueues KeyOf(obj).
  void EnqueueObject(const Object& obj) { queue_.Add(KeyOf(obj)); }
  WorkQueue& queue() { return queue_; }

  // Enqueues the key of every object the informer adds, updates or deletes
  // (controller-runtime's EnqueueRequestForObject).
  void Watch(SharedInformer& informer);
  // Enqueues "<namespace>/<owner name>" for every object whose controller owner reference has
  // `owner_kind` (EnqueueRequestForOwner with OnlyControllerOwner), e.g. child Secrets → their
  // TPUNodeGroup.
  void WatchOwned(SharedInformer& informer, const std::string& owner_kind);

  std::string Name() const override { return name_; }
  Status Start() override;
  // Workers stop taking keys (queued keys are dropped: the next leader lists them again); a
  // reconcile in flight may finish within `grace`. Returns when all workers exited or after
  // `grace`; the destructor always waits for them.
  void Stop(std::chrono::milliseconds grace) override;
  bool NeedLeaderElection() const override { return need_leader_election_; }
  void SetLeaderGate(std::function<bool()> gate) override { gate_ = std::move(gate); }

  int active_workers() const { return active_.load(); }

  // "namespace/name" or "name" (client-go's MetaNamespaceKeyFunc).
  static std::string KeyOf(const Object& obj);
  // Splits a key into {namespace, name}.
  static std::pair<std::string, std::string> SplitKey(const std::string& key);

 private:
  struct Metrics;
  void Worker();
  void ProcessOne(const std::string& key);

  const std::string name_;
  const int workers_;
  const bool need_leader_election_;
  Clock& clock_;
  ReconcileFunc reconcile_;
  std::unique_ptr<Metrics> metrics_;
  WorkQueue queue_;
  std::function<bool()> gate_;

  std::atomic<bool> stopping_{false};
  std::atomic<int> active_{0};
  std::mutex mu_;
  std::condition_variable exited_cv_;
  int running_workers_ = 0;
  bool started_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace hyperslice::kube
