// EventRecorder: core/v1 Events about objects, as client-go's record.EventRecorder emits them.
//
// - Asynchronous: Event() only enqueues (bounded queue; when full the event is dropped and
//   counted) and never blocks a reconcile on the apiserver. One background thread writes.
// - Aggregation: a repeat of the same event (same involved object, type, reason, message and
//   source) PATCHes the existing Event's count and lastTimestamp instead of creating a new one
//   (client-go's EventCorrelator dedup). If that Event is gone (expired), a new one is created.
// - Rate limiting: a token bucket per source and involved object (client-go's spam filter:
//   burst 25, refilled one token per 5 minutes by default); events over the limit are dropped and
//   counted.
// Events carry involvedObject, reason, message, type (Normal/Warning), source{component,host},
// reportingComponent/reportingInstance, firstTimestamp, lastTimestamp and count.
//
// Thread-safety: Event() and stats() from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "src/base/clock.h"
#include "src/kube/client.h"

namespace hyperslice::kube {

enum class EventType { kNormal, kWarning };

struct EventRecorderOptions {
  std::string component;           // source.component and reportingComponent, e.g. "hyperslice"
  std::string host;                // source.host
  std::string reporting_instance;  // default: host
  size_t max_queued = 1000;
  double qps_per_object = 1.0 / 300;  // refill rate of each object's bucket
  int burst_per_object = 25;
  size_t cache_size = 4096;  // aggregation and rate-limit entries remembered (LRU)
  Clock* clock = nullptr;    // for the token buckets; default RealClock()
};

class EventRecorder {
 public:
  EventRecorder(std::shared_ptr<Client> client, EventRecorderOptions options);
  ~EventRecorder();  // Flush() for up to 2 s, then stops; unsent events are dropped

  // Records an event about `involved` (a full object or at least apiVersion, kind and metadata
  // name/namespace/uid). Never blocks on the network.
  void Event(const Object& involved, EventType type, const std::string& reason,
             const std::string& message);

  // Waits until every accepted event has been written (or failed). False on timeout.
  bool Flush(std::chrono::milliseconds timeout);

  struct Stats {
    uint64_t created = 0;
    uint64_t patched = 0;  // aggregated repeats
    uint64_t dropped_queue_full = 0;
    uint64_t dropped_rate_limited = 0;
    uint64_t failed = 0;  // the apiserver refused or was unreachable
  };
  Stats stats() const;

 private:
  struct Pending {
    Object involved_ref;
    std::string type, reason, message;
    std::chrono::system_clock::time_point when;
  };
  struct Aggregate {
    std::string event_namespace, event_name;
    int64_t count = 0;
    std::string first_timestamp;
  };
  struct Bucket {
    double tokens;
    Clock::TimePoint last;
  };

  bool AllowLocked(const std::string& object_key);
  void Loop();
  void Write(const Pending& p);

  std::shared_ptr<Client> client_;
  EventRecorderOptions options_;
  Clock& clock_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool in_flight_ = false;
  bool stop_ = false;
  Stats stats_;
  std::unordered_map<std::string, Bucket> buckets_;
  std::list<std::string> bucket_order_;  // LRU of buckets_ keys, most recent first
  std::unordered_map<std::string, std::list<std::string>::iterator> bucket_pos_;

  // Used by the writer thread only.
  std::unordered_map<std::string, Aggregate> aggregates_;
  std::list<std::string> aggregate_order_;
  std::unordered_map<std::string, std::list<std::string>::iterator> aggregate_pos_;

  std::thread thread_;
};

}  // namespace hyperslice::kube
