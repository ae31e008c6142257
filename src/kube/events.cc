#include "src/kube/events.h"

#include <algorithm>
#include <cstdio>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/kube/object_helpers.h"

namespace hyperslice::kube {
namespace {

namespace json = boost::json;
using jsonfield::StringValue;

// client-go truncates event messages to this many bytes.
constexpr size_t kMaxMessage = 1024;

// Moves `key` to the front of an LRU list, inserting it; returns the evicted key or "".
std::string Touch(std::list<std::string>& order,
                  std::unordered_map<std::string, std::list<std::string>::iterator>& pos,
                  const std::string& key, size_t capacity) {
  if (auto it = pos.find(key); it != pos.end()) {
    order.splice(order.begin(), order, it->second);
    return "";
  }
  order.push_front(key);
  pos[key] = order.begin();
  if (order.size() <= capacity) return "";
  std::string evicted = order.back();
  pos.erase(evicted);
  order.pop_back();
  return evicted;
}

}  // namespace

EventRecorder::EventRecorder(std::shared_ptr<Client> client, EventRecorderOptions options)
    : client_(std::move(client)),
      options_(std::move(options)),
      clock_(options_.clock ? *options_.clock : RealClock()) {
  if (options_.reporting_instance.empty()) options_.reporting_instance = options_.host;
  options_.cache_size = std::max<size_t>(1, options_.cache_size);
  thread_ = std::thread([this] { Loop(); });
}

EventRecorder::~EventRecorder() {
  Flush(std::chrono::milliseconds(2000));
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

bool EventRecorder::AllowLocked(const std::string& object_key) {
  auto now = clock_.Now();
  auto [it, inserted] =
      buckets_.try_emplace(object_key, Bucket{static_cast<double>(options_.burst_per_object), now});
  std::string evicted = Touch(bucket_order_, bucket_pos_, object_key, options_.cache_size);
  if (!evicted.empty()) buckets_.erase(evicted);
  Bucket& b = buckets_.at(object_key);
  if (!inserted && now > b.last) {
    double refill = std::chrono::duration<double>(now - b.last).count() * options_.qps_per_object;
    b.tokens = std::min(static_cast<double>(options_.burst_per_object), b.tokens + refill);
    b.last = now;
  }
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

void EventRecorder::Event(const Object& involved, EventType type, const std::string& reason,
                          const std::string& message) {
  Pending p;
  json::object ref{{"apiVersion", StringValue(involved, "apiVersion")},
                   {"kind", StringValue(involved, "kind")}};
  if (const auto* m = involved.if_contains("metadata"); m && m->is_object()) {
    const auto& md = m->get_object();
    for (const char* k : {"namespace", "name", "uid", "resourceVersion"}) {
      std::string v = StringValue(md, k);
      if (!v.empty()) ref[k] = v;
    }
  }
  p.involved_ref = std::move(ref);
  p.type = type == EventType::kWarning ? "Warning" : "Normal";
  p.reason = reason;
  p.message = message.size() > kMaxMessage ? message.substr(0, kMaxMessage) : message;
  p.when = std::chrono::system_clock::now();

  const auto& r = p.involved_ref;
  std::string object_key = options_.component + '\x1f' + options_.host + '\x1f' +
                           StringValue(r, "kind") + '\x1f' + StringValue(r, "namespace") + '\x1f' +
                           StringValue(r, "name") + '\x1f' + StringValue(r, "uid");
  std::lock_guard lock(mu_);
  if (stop_) return;
  if (!AllowLocked(object_key)) {
    ++stats_.dropped_rate_limited;
    return;
  }
  if (queue_.size() >= options_.max_queued) {
    ++stats_.dropped_queue_full;
    return;
  }
  queue_.push_back(std::move(p));
  cv_.notify_all();
}

bool EventRecorder::Flush(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return queue_.empty() && !in_flight_; });
}

EventRecorder::Stats EventRecorder::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void EventRecorder::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    in_flight_ = true;
    lock.unlock();
    Write(p);
    lock.lock();
    in_flight_ = false;
    cv_.notify_all();
  }
}

void EventRecorder::Write(const Pending& p) {
  const auto& ref = p.involved_ref;
  std::string ns = StringValue(ref, "namespace");
  if (ns.empty()) ns = "default";  // events about cluster-scoped objects
  const std::string now = FormatTime(p.when);
  const std::string key = ns + '\x1f' + StringValue(ref, "apiVersion") + '\x1f' +
                          StringValue(ref, "kind") + '\x1f' + StringValue(ref, "name") + '\x1f' +
                          StringValue(ref, "uid") + '\x1f' + p.type + '\x1f' + p.reason + '\x1f' +
                          p.message;

  auto count_stat = [&](uint64_t Stats::*field) {
    std::lock_guard lock(mu_);
    ++(stats_.*field);
  };

  if (auto it = aggregates_.find(key); it != aggregates_.end()) {
    Aggregate& a = it->second;
    Touch(aggregate_order_, aggregate_pos_, key, options_.cache_size);
    json::object patch{{"count", a.count + 1}, {"lastTimestamp", now}};
    auto patched = client_->Patch(resources::Events(), a.event_namespace, a.event_name,
                                  PatchType::kMerge, json::serialize(patch));
    if (patched.ok()) {
      ++a.count;
      count_stat(&Stats::patched);
      return;
    }
    if (patched.error().code != Error::Code::kNotFound) {
      log::Warn("event: cannot update",
                {{"event", a.event_name}, {"error", patched.error().ToString()}});
      count_stat(&Stats::failed);
      return;
    }
    aggregates_.erase(it);  // expired: start a new Event below
    aggregate_pos_.erase(key);
    aggregate_order_.remove(key);
  }

  char suffix[32];
  std::snprintf(
      suffix, sizeof suffix, ".%llx",
      static_cast<unsigned long long>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(p.when.time_since_epoch()).count()));
  std::string name = StringValue(ref, "name") + suffix;
  Object event{{"apiVersion", "v1"},
               {"kind", "Event"},
               {"metadata", json::object{{"name", name}, {"namespace", ns}}},
               {"involvedObject", ref},
               {"reason", p.reason},
               {"message", p.message},
               {"type", p.type},
               {"source", json::object{{"component", options_.component}, {"host", options_.host}}},
               {"firstTimestamp", now},
               {"lastTimestamp", now},
               {"count", 1},
               {"reportingComponent", options_.component},
               {"reportingInstance", options_.reporting_instance}};
  auto created = client_->Create(resources::Events(), ns, event);
  if (!created.ok()) {
    log::Warn("event: cannot create",
              {{"reason", p.reason},
               {"object", StringValue(ref, "kind") + "/" + StringValue(ref, "name")},
               {"error", created.error().ToString()}});
    count_stat(&Stats::failed);
    return;
  }
  count_stat(&Stats::created);
  Aggregate a{ns, name, 1, now};
  std::string evicted = Touch(aggregate_order_, aggregate_pos_, key, options_.cache_size);
  if (!evicted.empty()) aggregates_.erase(evicted);
  aggregates_[key] = std::move(a);
}

}  // namespace hyperslice::kube
