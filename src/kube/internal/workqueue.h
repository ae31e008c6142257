// WorkQueue: client-go's rate-limiting work queue for controllers.
//
// Contract (client-go/util/workqueue semantics):
// - De-duplication: an item added while it waits in the queue is queued once.
// - Exclusive processing: an item handed out by Get() is not handed out again until Done(); an
//   item added while in flight is queued once more when Done() is called.
// - Delays: AddAfter() queues after a delay (the earliest pending delay wins); AddRateLimited()
//   queues after the rate limiter's delay; Forget() clears an item's failure history.
// - Shutdown: ShutDown() makes Add* no-ops and wakes Get(); Get() still hands out what is already
//   queued and returns std::nullopt once the queue is empty. Delayed items are dropped.
//   ShutDownWithDrain() additionally waits until every in-flight item is Done().
//
// Time comes from a Clock so tests drive delays with FakeClock. Metrics (when options.name is
// set) use client-go's names with controller-runtime's labels {controller, name}:
// workqueue_depth, workqueue_adds_total, workqueue_retries_total,
// workqueue_queue_duration_seconds, workqueue_work_duration_seconds,
// workqueue_unfinished_work_seconds, workqueue_longest_running_processor_seconds.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "src/base/clock.h"
#include "src/kube/metrics.h"

namespace hyperslice::kube {

// Decides how long an item waits before it is retried. Thread-safe.
class RateLimiter {
 public:
  virtual ~RateLimiter() = default;
  // The delay for this attempt; records the attempt.
  virtual Clock::Duration When(const std::string& item) = 0;
  // Clears the item's history (after a success).
  virtual void Forget(const std::string& item) = 0;
  virtual int NumRequeues(const std::string& item) = 0;
};

// base * 2^failures per item, capped at `max` (client-go ItemExponentialFailureRateLimiter).
std::unique_ptr<RateLimiter> NewItemExponentialFailureRateLimiter(Clock::Duration base,
                                                                  Clock::Duration max);
// A token bucket shared by all items (client-go BucketRateLimiter over rate.Limiter): each call
// reserves a token; the delay is the time until that token exists.
std::unique_ptr<RateLimiter> NewBucketRateLimiter(double qps, int burst, Clock& clock);
// The largest delay of its parts (client-go MaxOfRateLimiter).
std::unique_ptr<RateLimiter> NewMaxOfRateLimiter(std::vector<std::unique_ptr<RateLimiter>> parts);
// client-go DefaultControllerRateLimiter: max(per-item 5 ms·2^n capped at 1000 s, 10 qps burst
// 100).
std::unique_ptr<RateLimiter> DefaultControllerRateLimiter(Clock& clock);

struct WorkQueueOptions {
  std::string name;        // "name" label of the workqueue_* metrics; empty: no metrics
  std::string controller;  // "controller" label; defaults to name
  Clock* clock = nullptr;  // default RealClock()
  std::unique_ptr<RateLimiter> rate_limiter;  // default DefaultControllerRateLimiter(*clock)
  metrics::Registry* registry = nullptr;      // default metrics::Registry::Default()
};

class WorkQueue {
 public:
  explicit WorkQueue(WorkQueueOptions options = {});
  ~WorkQueue();  // ShutDown(), then joins the delay thread
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Add(const std::string& item);
  void AddAfter(const std::string& item, Clock::Duration delay);
  void AddRateLimited(const std::string& item);
  void Forget(const std::string& item);
  int NumRequeues(const std::string& item);

  // Blocks until an item is ready; std::nullopt once shut down and empty.
  std::optional<std::string> Get();
  void Done(const std::string& item);

  void ShutDown();
  void ShutDownWithDrain();
  bool ShuttingDown() const;

  size_t Len() const;            // queued, ready to be handed out (the depth)
  size_t NumProcessing() const;  // handed out, not yet Done
  size_t NumWaiting() const;     // delayed, not yet due
  // For tests that check that something does NOT happen (a delayed item not yet due, a Get or a
  // drain that must wait), the signals that the queue has had its chance: threads blocked in
  // Get() or ShutDownWithDrain(), and the clock time the delay thread last moved due items at.
  size_t NumBlocked() const;
  Clock::TimePoint DelaysCheckedAt() const;

 private:
  struct Waiting {
    Clock::TimePoint ready_at;
    uint64_t seq;
    std::string item;
    bool operator>(const Waiting& o) const {
      return ready_at != o.ready_at ? ready_at > o.ready_at : seq > o.seq;
    }
  };
  struct Metrics;

  void AddLocked(const std::string& item);
  void DelayLoop();
  void UpdateUnfinishedLocked();

  Clock& clock_;
  std::unique_ptr<RateLimiter> rate_limiter_;
  std::unique_ptr<Metrics> metrics_;

  mutable std::mutex mu_;
  std::condition_variable cv_;        // Get() waiters and drain waiters
  std::condition_variable delay_cv_;  // the delay thread
  std::deque<std::string> queue_;
  std::unordered_set<std::string> dirty_;
  std::unordered_set<std::string> processing_;
  bool shutting_down_ = false;
  size_t blocked_ = 0;                  // threads in Get() or ShutDownWithDrain()
  Clock::TimePoint delays_checked_at_;  // set by the delay thread

  std::priority_queue<Waiting, std::vector<Waiting>, std::greater<>> waiting_;
  std::unordered_map<std::string, Clock::TimePoint> waiting_ready_;  // item -> current ready_at
  uint64_t seq_ = 0;

  std::unordered_map<std::string, Clock::TimePoint> add_times_;    // queued since
  std::unordered_map<std::string, Clock::TimePoint> start_times_;  // processing since

  Clock::TimePoint created_{};
  std::thread delay_thread_;
};

}  // namespace hyperslice::kube
