#include "src/kube/internal/workqueue.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace hyperslice::kube {
namespace {

using std::chrono::duration_cast;
using std::chrono::nanoseconds;

double Seconds(Clock::Duration d) { return std::chrono::duration<double>(d).count(); }

class ItemExponentialFailureRateLimiter final : public RateLimiter {
 public:
  ItemExponentialFailureRateLimiter(Clock::Duration base, Clock::Duration max)
      : base_(base), max_(max) {}
  Clock::Duration When(const std::string& item) override {
    std::lock_guard lock(mu_);
    int exp = failures_[item]++;
    double backoff = static_cast<double>(duration_cast<nanoseconds>(base_).count()) *
                     std::pow(2.0, static_cast<double>(exp));
    if (backoff >= static_cast<double>(std::numeric_limits<int64_t>::max())) return max_;
    auto calculated = duration_cast<Clock::Duration>(nanoseconds(static_cast<int64_t>(backoff)));
    return std::min(calculated, max_);
  }
  void Forget(const std::string& item) override {
    std::lock_guard lock(mu_);
    failures_.erase(item);
  }
  int NumRequeues(const std::string& item) override {
    std::lock_guard lock(mu_);
    auto it = failures_.find(item);
    return it == failures_.end() ? 0 : it->second;
  }

 private:
  const Clock::Duration base_, max_;
  std::mutex mu_;
  std::unordered_map<std::string, int> failures_;
};

class BucketRateLimiter final : public RateLimiter {
 public:
  BucketRateLimiter(double qps, int burst, Clock& clock)
      : qps_(qps), burst_(burst), clock_(clock), tokens_(burst), last_(clock.Now()) {}
  Clock::Duration When(const std::string&) override {
    std::lock_guard lock(mu_);
    auto now = clock_.Now();
    if (now > last_) {
      tokens_ = std::min(static_cast<double>(burst_), tokens_ + Seconds(now - last_) * qps_);
      last_ = now;
    }
    tokens_ -= 1;
    if (tokens_ >= 0) return Clock::Duration::zero();
    return duration_cast<Clock::Duration>(std::chrono::duration<double>(-tokens_ / qps_));
  }
  void Forget(const std::string&) override {}
  int NumRequeues(const std::string&) override { return 0; }

 private:
  const double qps_;
  const int burst_;
  Clock& clock_;
  std::mutex mu_;
  double tokens_;
  Clock::TimePoint last_;
};

class MaxOfRateLimiter final : public RateLimiter {
 public:
  explicit MaxOfRateLimiter(std::vector<std::unique_ptr<RateLimiter>> parts)
      : parts_(std::move(parts)) {}
  Clock::Duration When(const std::string& item) override {
    Clock::Duration d = Clock::Duration::zero();
    for (auto& p : parts_) d = std::max(d, p->When(item));
    return d;
  }
  void Forget(const std::string& item) override {
    for (auto& p : parts_) p->Forget(item);
  }
  int NumRequeues(const std::string& item) override {
    int n = 0;
    for (auto& p : parts_) n = std::max(n, p->NumRequeues(item));
    return n;
  }

 private:
  std::vector<std::unique_ptr<RateLimiter>> parts_;
};

// Queue and work durations: client-go's buckets, 10 ns … 1000 s.
std::vector<double> DurationBuckets() { return metrics::ExponentialBuckets(10e-9, 10, 12); }

}  // namespace

std::unique_ptr<RateLimiter> NewItemExponentialFailureRateLimiter(Clock::Duration base,
                                                                  Clock::Duration max) {
  return std::make_unique<ItemExponentialFailureRateLimiter>(base, max);
}

std::unique_ptr<RateLimiter> NewBucketRateLimiter(double qps, int burst, Clock& clock) {
  return std::make_unique<BucketRateLimiter>(qps, burst, clock);
}

std::unique_ptr<RateLimiter> NewMaxOfRateLimiter(std::vector<std::unique_ptr<RateLimiter>> parts) {
  return std::make_unique<MaxOfRateLimiter>(std::move(parts));
}

std::unique_ptr<RateLimiter> DefaultControllerRateLimiter(Clock& clock) {
  std::vector<std::unique_ptr<RateLimiter>> parts;
  parts.push_back(NewItemExponentialFailureRateLimiter(std::chrono::milliseconds(5),
                                                       std::chrono::seconds(1000)));
  parts.push_back(NewBucketRateLimiter(10, 100, clock));
  return NewMaxOfRateLimiter(std::move(parts));
}

struct WorkQueue::Metrics {
  metrics::Gauge* depth;
  metrics::Counter* adds;
  metrics::Counter* retries;
  metrics::Histogram* queue_duration;
  metrics::Histogram* work_duration;
  metrics::Gauge* unfinished;
  metrics::Gauge* longest;
};

WorkQueue::WorkQueue(WorkQueueOptions options)
    : clock_(options.clock ? *options.clock : RealClock()),
      rate_limiter_(options.rate_limiter ? std::move(options.rate_limiter)
                                         : DefaultControllerRateLimiter(clock_)) {
  if (!options.name.empty()) {
    auto& reg = options.registry ? *options.registry : metrics::Registry::Default();
    metrics::Labels l{
        {"name", options.name},
        {"controller", options.controller.empty() ? options.name : options.controller}};
    metrics_ = std::make_unique<Metrics>(Metrics{
        &reg.GetGauge("workqueue_depth", "Current depth of workqueue", l),
        &reg.GetCounter("workqueue_adds_total", "Total number of adds handled by workqueue", l),
        &reg.GetCounter("workqueue_retries_total", "Total number of retries handled by workqueue",
                        l),
        &reg.GetHistogram("workqueue_queue_duration_seconds",
                          "How long in seconds an item stays in workqueue before being requested",
                          l, DurationBuckets()),
        &reg.GetHistogram("workqueue_work_duration_seconds",
                          "How long in seconds processing an item from workqueue takes.", l,
                          DurationBuckets()),
        &reg.GetGauge("workqueue_unfinished_work_seconds",
                      "How many seconds of work has been done that is in progress and hasn't "
                      "been observed by work_duration. Large values indicate stuck threads. One "
                      "can deduce the number of stuck threads by observing the rate at which "
                      "this increases.",
                      l),
        &reg.GetGauge("workqueue_longest_running_processor_seconds",
                      "How many seconds has the longest running processor for workqueue been "
                      "running.",
                      l),
    });
  }
  created_ = clock_.Now();
  clock_.Register(&delay_cv_);
  delay_thread_ = std::thread([this] { DelayLoop(); });
}

WorkQueue::~WorkQueue() {
  ShutDown();
  if (delay_thread_.joinable()) delay_thread_.join();
  clock_.Unregister(&delay_cv_);
}

void WorkQueue::AddLocked(const std::string& item) {
  if (shutting_down_) return;
  if (dirty_.count(item)) return;
  if (metrics_) {
    metrics_->adds->Inc();
    add_times_.try_emplace(item, clock_.Now());
  }
  dirty_.insert(item);
  if (processing_.count(item)) return;  // queued again by Done()
  queue_.push_back(item);
  if (metrics_) metrics_->depth->Set(static_cast<double>(queue_.size()));
  cv_.notify_one();
}

void WorkQueue::Add(const std::string& item) {
  std::lock_guard lock(mu_);
  AddLocked(item);
}

void WorkQueue::AddAfter(const std::string& item, Clock::Duration delay) {
  std::lock_guard lock(mu_);
  if (shutting_down_) return;
  if (delay <= Clock::Duration::zero()) {
    AddLocked(item);
    return;
  }
  auto ready_at = clock_.Now() + delay;
  auto it = waiting_ready_.find(item);
  if (it != waiting_ready_.end() && it->second <= ready_at) return;  // an earlier add wins
  waiting_ready_[item] = ready_at;
  waiting_.push(Waiting{ready_at, seq_++, item});  // a superseded entry is skipped when popped
  delay_cv_.notify_all();
}

void WorkQueue::AddRateLimited(const std::string& item) {
  auto delay = rate_limiter_->When(item);
  if (metrics_) {
    std::lock_guard lock(mu_);
    if (!shutting_down_) metrics_->retries->Inc();
  }
  AddAfter(item, delay);
}

void WorkQueue::Forget(const std::string& item) { rate_limiter_->Forget(item); }

int WorkQueue::NumRequeues(const std::string& item) { return rate_limiter_->NumRequeues(item); }

std::optional<std::string> WorkQueue::Get() {
  std::unique_lock lock(mu_);
  ++blocked_;
  cv_.wait(lock, [&] { return !queue_.empty() || shutting_down_; });
  --blocked_;
  if (queue_.empty()) return std::nullopt;
  std::string item = std::move(queue_.front());
  queue_.pop_front();
  processing_.insert(item);
  dirty_.erase(item);
  if (metrics_) {
    auto now = clock_.Now();
    metrics_->depth->Set(static_cast<double>(queue_.size()));
    if (auto it = add_times_.find(item); it != add_times_.end()) {
      metrics_->queue_duration->Observe(Seconds(now - it->second));
      add_times_.erase(it);
    }
    start_times_[item] = now;
  }
  return item;
}

void WorkQueue::Done(const std::string& item) {
  std::lock_guard lock(mu_);
  if (metrics_) {
    if (auto it = start_times_.find(item); it != start_times_.end()) {
      metrics_->work_duration->Observe(Seconds(clock_.Now() - it->second));
      start_times_.erase(it);
    }
  }
  processing_.erase(item);
  if (dirty_.count(item)) {
    queue_.push_back(item);
    if (metrics_) metrics_->depth->Set(static_cast<double>(queue_.size()));
    cv_.notify_one();
  } else if (processing_.empty()) {
    cv_.notify_all();  // ShutDownWithDrain waits for this
  }
}

void WorkQueue::ShutDown() {
  std::lock_guard lock(mu_);
  shutting_down_ = true;
  cv_.notify_all();
  delay_cv_.notify_all();
}

void WorkQueue::ShutDownWithDrain() {
  std::unique_lock lock(mu_);
  shutting_down_ = true;
  cv_.notify_all();
  delay_cv_.notify_all();
  ++blocked_;
  cv_.wait(lock, [&] { return processing_.empty(); });
  --blocked_;
}

bool WorkQueue::ShuttingDown() const {
  std::lock_guard lock(mu_);
  return shutting_down_;
}

size_t WorkQueue::Len() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

size_t WorkQueue::NumBlocked() const {
  std::lock_guard lock(mu_);
  return blocked_;
}

Clock::TimePoint WorkQueue::DelaysCheckedAt() const {
  std::lock_guard lock(mu_);
  return delays_checked_at_;
}

size_t WorkQueue::NumProcessing() const {
  std::lock_guard lock(mu_);
  return processing_.size();
}

size_t WorkQueue::NumWaiting() const {
  std::lock_guard lock(mu_);
  return waiting_ready_.size();
}

void WorkQueue::UpdateUnfinishedLocked() {
  if (!metrics_) return;
  auto now = clock_.Now();
  double total = 0, longest = 0;
  for (const auto& [item, start] : start_times_) {
    double s = Seconds(now - start);
    total += s;
    longest = std::max(longest, s);
  }
  metrics_->unfinished->Set(total);
  metrics_->longest->Set(longest);
}

void WorkQueue::DelayLoop() {
  // client-go refreshes the unfinished-work gauges every 500 ms; so do we, between delays.
  constexpr auto kMetricsPeriod = std::chrono::milliseconds(500);
  std::unique_lock lock(mu_);
  auto next_metrics = created_ + kMetricsPeriod;
  while (!shutting_down_) {
    auto now = clock_.Now();
    delays_checked_at_ = now;
    while (!waiting_.empty() && waiting_.top().ready_at <= now) {
      Waiting w = waiting_.top();
      waiting_.pop();
      auto it = waiting_ready_.find(w.item);
      if (it == waiting_ready_.end() || it->second != w.ready_at) continue;  // superseded
      waiting_ready_.erase(it);
      AddLocked(w.item);
    }
    if (now >= next_metrics) {
      UpdateUnfinishedLocked();
      next_metrics = now + kMetricsPeriod;
    }
    auto deadline = next_metrics;
    if (!waiting_.empty()) deadline = std::min(deadline, waiting_.top().ready_at);
    clock_.WaitUntil(delay_cv_, lock, deadline);
  }
  // Delayed items are dropped at shutdown, as client-go's delaying queue does.
  waiting_ = {};
  waiting_ready_.clear();
}

}  // namespace hyperslice::kube
