// A scripted kube::Client for unit tests of the reflector and informer state machines: List and
// Watch answers are queued by the test; calls are recorded. (Integration tests use the real
// apiserver; this exists to drive 410s, cut streams and backoff deterministically.)
#pragma once

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <variant>
#include <vector>

#include "src/base/clock.h"
#include "src/base/fake_clock.h"
#include "src/kube/client.h"

namespace hyperslice::kube::testing {

// One step of a scripted watch stream.
struct EndOfStream {};  // the server closed the stream cleanly
struct BlockUntilCancelled {};
using WatchStep = std::variant<WatchEvent, Error, EndOfStream, BlockUntilCancelled>;

class ScriptedWatch final : public WatchStream {
 public:
  explicit ScriptedWatch(std::vector<WatchStep> steps) : steps_(steps.begin(), steps.end()) {}
  Result<std::optional<WatchEvent>> Next() override {
    std::unique_lock lock(mu_);
    if (cancelled_) return Error::Make(Error::Code::kCancelled, "cancelled");
    if (steps_.empty()) steps_.emplace_back(BlockUntilCancelled{});
    WatchStep step = std::move(steps_.front());
    steps_.pop_front();
    if (auto* e = std::get_if<WatchEvent>(&step)) return std::optional<WatchEvent>(std::move(*e));
    if (auto* err = std::get_if<Error>(&step)) return *err;
    if (std::holds_alternative<EndOfStream>(step)) return std::optional<WatchEvent>();
    cv_.wait(lock, [this] { return cancelled_; });
    return Error::Make(Error::Code::kCancelled, "cancelled");
  }
  void Cancel() override {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<WatchStep> steps_;
  bool cancelled_ = false;
};

class ScriptedClient final : public Client {
 public:
  // Queue answers. A List/Watch with nothing queued fails with kUnavailable.
  void PushList(Result<ObjectList> r) {
    std::lock_guard lock(mu_);
    lists_.push_back(std::move(r));
  }
  void PushWatch(std::vector<WatchStep> steps) {
    std::lock_guard lock(mu_);
    watches_.emplace_back(std::move(steps));
  }
  void PushWatchError(Error e) {
    std::lock_guard lock(mu_);
    watches_.emplace_back(std::move(e));
  }
  void set_clock(Clock* clock) { clock_ = clock; }

  // Recorded calls.
  std::vector<ListOptions> list_calls() const {
    std::lock_guard lock(mu_);
    return list_calls_;
  }
  std::vector<ListOptions> watch_calls() const {
    std::lock_guard lock(mu_);
    return watch_calls_;
  }
  std::vector<Clock::TimePoint> list_times() const {
    std::lock_guard lock(mu_);
    return list_times_;
  }
  // Waits (real time, bounded) until at least n List / Watch calls happened.
  bool WaitForLists(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return list_calls_.size() >= n; });
  }
  bool WaitForWatches(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return watch_calls_.size() >= n; });
  }

  Result<ObjectList> List(const Resource&, const std::string&, const ListOptions& opts) override {
    std::lock_guard lock(mu_);
    list_calls_.push_back(opts);
    if (clock_ != nullptr) list_times_.push_back(clock_->Now());
    cv_.notify_all();
    if (lists_.empty()) return Error::Make(Error::Code::kUnavailable, "no scripted list");
    auto r = std::move(lists_.front());
    lists_.pop_front();
    return r;
  }
  Result<ObjectList> ListAll(const Resource& r, const std::string& ns, ListOptions opts) override {
    return List(r, ns, opts);
  }
  Result<std::unique_ptr<WatchStream>> Watch(const Resource&, const std::string&,
                                             const ListOptions& opts) override {
    std::lock_guard lock(mu_);
    watch_calls_.push_back(opts);
    cv_.notify_all();
    if (watches_.empty()) return Error::Make(Error::Code::kUnavailable, "no scripted watch");
    auto w = std::move(watches_.front());
    watches_.pop_front();
    if (auto* e = std::get_if<Error>(&w)) return *e;
    return std::unique_ptr<WatchStream>(
        std::make_unique<ScriptedWatch>(std::get<std::vector<WatchStep>>(std::move(w))));
  }

  Result<Object> Get(const Resource&, const std::string&, const std::string&,
                     const std::string&) override {
    return Unsupported();
  }
  Result<Object> Create(const Resource&, const std::string&, const Object&) override {
    return Unsupported();
  }
  Result<Object> Update(const Resource&, const std::string&, const Object&,
                        const std::string&) override {
    return Unsupported();
  }
  Result<Object> Patch(const Resource&, const std::string&, const std::string&, PatchType,
                       const std::string&, const PatchOptions&) override {
    return Unsupported();
  }
  Status Delete(const Resource&, const std::string&, const std::string&,
                const DeleteOptions&) override {
    return Unsupported();
  }
  Result<net::Response> Raw(const std::string&, const std::string&, const std::string&,
                            const std::string&) override {
    return Unsupported();
  }
  const Config& config() const override { return config_; }

 private:
  static Error Unsupported() {
    return Error::Make(Error::Code::kInternal, "not scripted in this test");
  }
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Result<ObjectList>> lists_;
  std::deque<std::variant<std::vector<WatchStep>, Error>> watches_;
  std::vector<ListOptions> list_calls_, watch_calls_;
  std::vector<Clock::TimePoint> list_times_;
  Clock* clock_ = nullptr;
  Config config_;
};

// A FakeClock that counts the waits that have begun (Register is called once a deadline is set),
// so a test advances time only once the code under test is waiting.
class CountingFakeClock final : public Clock {
 public:
  TimePoint Now() const override { return inner_.Now(); }
  bool WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 TimePoint deadline) override {
    const TimePoint now = inner_.Now();
    if (now < deadline) {
      std::lock_guard g(mu_);
      waiting_at_ = std::max(waiting_at_, now);
      cv_.notify_all();
    }
    return inner_.WaitUntil(cv, lock, deadline);
  }
  void Register(std::condition_variable* cv) override {
    inner_.Register(cv);
    std::lock_guard lock(mu_);
    ++waits_;
    cv_.notify_all();
  }
  void Unregister(std::condition_variable* cv) override { inner_.Unregister(cv); }
  void Advance(Duration d) { inner_.Advance(d); }
  bool WaitForWaits(int n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return waits_ >= n; });
  }
  // Blocks until a waiter has read the clock at `t` or later and still waits (its deadline not
  // reached): the deterministic sign that it saw `t` and decided not to act. A waiter that acts
  // at `t` (a retry) does so before it waits again, so its action is visible by then.
  bool WaitForAWaitAt(TimePoint t, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return waiting_at_ >= t; });
  }

 private:
  FakeClock inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  int waits_ = 0;
  TimePoint waiting_at_{};
};

inline Object MakeObject(const std::string& ns, const std::string& name, const std::string& rv,
                         const std::string& data = "") {
  Object o;
  auto& md = o["metadata"].emplace_object();
  if (!ns.empty()) md["namespace"] = ns;
  md["name"] = name;
  md["resourceVersion"] = rv;
  if (!data.empty()) o["data"] = boost::json::object{{"v", data}};
  return o;
}

inline WatchEvent Event(WatchEvent::Type type, Object obj) {
  WatchEvent e;
  e.type = type;
  e.object = std::move(obj);
  return e;
}

inline WatchEvent Bookmark(const std::string& rv) {
  Object o;
  o["metadata"].emplace_object()["resourceVersion"] = rv;
  return Event(WatchEvent::Type::kBookmark, std::move(o));
}

inline WatchEvent GoneEvent() {
  Object status{{"kind", "Status"},    {"apiVersion", "v1"},
                {"status", "Failure"}, {"reason", "Expired"},
                {"code", 410},         {"message", "too old resource version: 5 (9)"}};
  return Event(WatchEvent::Type::kError, std::move(status));
}

inline ObjectList MakeList(std::vector<Object> items, const std::string& rv) {
  ObjectList l;
  l.items = std::move(items);
  l.resource_version = rv;
  return l;
}

}  // namespace hyperslice::kube::testing
