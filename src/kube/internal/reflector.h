// Reflector: keeps a sink in step with the apiserver by list + watch, to client-go's semantics.
//
//  1. List every object, `page_size` per page (limit/continue; one consistent snapshot), converting
//     each page's objects through the sink as it arrives so only one parsed page is alive at a
//     time, then hand the sink the full set (Replace) with the list's resourceVersion.
//  2. Watch from that resourceVersion with allowWatchBookmarks and a random timeoutSeconds in
//     [min_watch_timeout, 2 * min_watch_timeout) (client-go: 5–10 min). Every
//     ADDED/MODIFIED/DELETED event goes to the sink; every event, bookmarks included, advances the
//     resourceVersion.
//  3. When the stream ends (timeout) or breaks (cut connection, apiserver restart), watch again
//     from the last resourceVersion seen: nothing is missed and nothing is listed again.
//  4. When the apiserver answers 410 Gone (an ERROR event with code 410, reason Expired/Gone, or a
//     kGone error), the resourceVersion has been compacted away: list again (step 1). The sink's
//     Replace then computes what changed, including deletes that happened while disconnected.
//  Failures back off exponentially with jitter (client-go: 800 ms doubling to 30 s, jitter 1.0),
//  timed by the injected Clock; the backoff resets after a success.
//
// Thread-safety: Run() blocks in one thread; Stop() and the accessors may be called from any other
// thread. Stop() cancels a pending watch at once; a List in flight finishes first (the client has
// no cancellation), after which Run() returns.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/kube/client.h"
#include "src/kube/store.h"

namespace hyperslice::kube {

// Receives what the reflector learns. Called only from the reflector's thread, in order.
class ReflectorSink {
 public:
  virtual ~ReflectorSink() = default;
  // Turns one listed object into its cached form (called as each page arrives).
  virtual ObjectPtr Convert(Object object) = 0;
  // The complete set of objects (Convert's results) as of `resource_version` (after a list).
  virtual void Replace(std::vector<ObjectPtr> items, const std::string& resource_version) = 0;
  // One watch event: kAdded, kModified or kDeleted (kDeleted carries the object's final state).
  virtual void Apply(WatchEvent::Type type, Object object) = 0;
};

struct BackoffOptions {
  std::chrono::milliseconds initial{800};
  std::chrono::milliseconds max{30'000};
  double factor = 2.0;
  double jitter = 1.0;  // each wait is d + rand[0, jitter * d)
};

struct ReflectorOptions {
  std::string name;  // for logs; defaults to the resource name
  std::string ns;    // "" = all namespaces
  std::string label_selector;
  std::string field_selector;
  int64_t page_size = 500;
  std::chrono::seconds min_watch_timeout{300};
  BackoffOptions backoff;
  Clock* clock = nullptr;  // nullptr: RealClock()
};

struct ReflectorStats {
  int64_t lists = 0;         // successful lists
  int64_t list_errors = 0;   // failed lists
  int64_t watches = 0;       // watch requests opened
  int64_t watch_errors = 0;  // failed watch requests or streams broken by an error
  int64_t gone = 0;          // 410 Gone answers (each forces a relist)
  int64_t events = 0;        // ADDED/MODIFIED/DELETED events applied
  int64_t bookmarks = 0;
  Error last_error;  // the most recent failure (code kUnknown and empty if none)
};

class Reflector {
 public:
  Reflector(std::shared_ptr<Client> client, Resource resource, ReflectorOptions options,
            ReflectorSink* sink);
  ~Reflector();
  Reflector(const Reflector&) = delete;
  Reflector& operator=(const Reflector&) = delete;

  // Lists and watches until Stop(). Returns at once if Stop() was already called.
  void Run();
  void Stop();

  // The resourceVersion of the last list or event applied ("" before the first list).
  std::string LastSyncResourceVersion() const;
  ReflectorStats Stats() const;

 private:
  enum class WatchOutcome { kResume, kRelist, kBackoffResume, kBackoffRelist, kStopped };

  bool ListOnce();
  WatchOutcome WatchOnce();
  // Waits the next backoff step unless stopped; returns false when stopped.
  bool Backoff();
  void ResetBackoff();
  void RecordError(const Error& e, bool list);
  bool Stopped() const { return stopped_.load(); }
  std::chrono::seconds RandomWatchTimeout();

  std::shared_ptr<Client> client_;
  Resource resource_;
  ReflectorOptions options_;
  ReflectorSink* sink_;
  Clock* clock_;

  std::atomic<bool> stopped_{false};
  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  WatchStream* stream_ = nullptr;  // the open watch, so Stop() can cancel it
  std::string last_rv_;
  ReflectorStats stats_;
  std::chrono::milliseconds backoff_next_{0};
  std::mt19937_64 rng_;
};

}  // namespace hyperslice::kube
