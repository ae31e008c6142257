// SharedInformer and InformerFactory: one list+watch and one indexed cache per (resource,
// namespace, selectors), shared by every controller of a process (client-go's SharedIndexInformer).
//
// Delivery contract (as client-go's):
//  - Handlers run on the informer's single dispatch thread, one notification at a time, in the
//    order the cache changed; so every object's notifications arrive in order. The cache is updated
//    before the notification is delivered; a handler may read the cache (it may be newer still).
//  - OnAdd for an object new to the cache; OnUpdate(old, cur) for a change, and for every object
//    present in a relist (then old may equal cur: same resourceVersion, nothing changed);
//    OnDelete(last, final_state_unknown) for a removal. When a relist (after 410 Gone) finds an
//    object gone, the delete was not observed: `last` is the last state the cache knew and
//    final_state_unknown is true (client-go's DeletedFinalStateUnknown). Versions between two
//    observed ones may be skipped by a relist; a notification never goes back to an older version.
//  - A handler added after Start() first receives OnAdd for every cached object, then the live
//    stream, never anything older.
//  - Handlers must not throw (an exception is caught, logged and dropped) and must not call Stop().
//
// Objects are shared, immutable (store.h). By default metadata.managedFields is dropped and each
// object is packed in one allocation (internal/informer_object.h).
//
// Thread-safety: every method may be called from any thread. AddIndex only before Start().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/kube/client.h"
#include "src/kube/internal/reflector.h"
#include "src/kube/store.h"

namespace hyperslice::kube {

struct EventHandler {
  std::function<void(const ObjectPtr& obj)> on_add;
  std::function<void(const ObjectPtr& old, const ObjectPtr& cur)> on_update;
  std::function<void(const ObjectPtr& last, bool final_state_unknown)> on_delete;
};
// The handler of a watcher that only needs "this object changed": `fn` gets the added object, the
// new one of an update and the last one of a delete.
EventHandler OnEachObject(const std::function<void(const ObjectPtr&)>& fn);

struct InformerOptions {
  std::string ns;  // "" = all namespaces
  std::string label_selector;
  std::string field_selector;
  bool drop_managed_fields = true;  // like controller-runtime's cache DefaultTransform
  bool pack_objects = true;         // one allocation per cached object (internal/informer_object.h)
  // Applied to every object before it is cached (after managedFields are dropped).
  std::function<void(Object&)> transform;
  // Reflector tuning (page size, watch timeout, backoff, clock). ns/selectors above win.
  ReflectorOptions reflector;
};

class SharedInformer {
 public:
  using HandlerId = uint64_t;

  SharedInformer(std::shared_ptr<Client> client, Resource resource, InformerOptions options = {});
  ~SharedInformer();  // Stop()
  SharedInformer(const SharedInformer&) = delete;
  SharedInformer& operator=(const SharedInformer&) = delete;

  HandlerId AddEventHandler(EventHandler handler);
  void RemoveEventHandler(HandlerId id);
  // Before Start() only (kFailedPrecondition-like kInvalidArgument after).
  Status AddIndex(const std::string& name, IndexFunc fn);

  void Start();  // starts the reflector and dispatch threads; idempotent
  void Stop();   // cancels the watch, joins both threads; pending notifications are dropped

  // True once the first list is in the cache and its notifications have been delivered.
  bool HasSynced() const;
  bool WaitForCacheSync(std::chrono::milliseconds timeout) const;

  const Store& store() const { return store_; }
  const Resource& resource() const { return resource_; }
  std::string LastSyncResourceVersion() const;
  ReflectorStats reflector_stats() const;

 private:
  class Sink;
  struct Notification {
    enum class Kind { kAdd, kUpdate, kDelete, kSynced };
    Kind kind = Kind::kAdd;
    ObjectPtr old, cur;
    bool final_state_unknown = false;
    HandlerId target = 0;  // 0: every handler registered before this notification
    uint64_t seq = 0;
  };
  struct Registered {
    std::shared_ptr<EventHandler> handler;
    uint64_t after_seq = 0;  // receives broadcast notifications with seq > after_seq
  };

  ObjectPtr Prepare(Object&& obj) const;
  // With apply_mu_ held.
  void Enqueue(std::vector<Notification> batch);
  void OnReplace(std::vector<ObjectPtr> items);
  void OnEvent(WatchEvent::Type type, Object obj);
  void DispatchLoop();

  std::shared_ptr<Client> client_;
  Resource resource_;
  InformerOptions options_;
  Store store_;
  std::unique_ptr<Sink> sink_;
  std::unique_ptr<Reflector> reflector_;

  // Serialises cache writes with the enqueueing of their notifications (and with the snapshot a
  // late handler receives), so the queue order is the cache order.
  std::mutex apply_mu_;

  mutable std::mutex mu_;  // queue, handlers, sync state
  std::condition_variable queue_cv_;
  mutable std::condition_variable sync_cv_;
  std::deque<Notification> queue_;
  std::map<HandlerId, Registered> handlers_;
  HandlerId next_handler_ = 1;
  uint64_t next_seq_ = 1;
  bool started_ = false;
  bool stopping_ = false;
  bool synced_ = false;
  std::thread reflector_thread_;
  std::thread dispatch_thread_;
};

// Hands out one SharedInformer per (resource, namespace, label selector, field selector).
// Thread-safe.
class InformerFactory {
 public:
  explicit InformerFactory(std::shared_ptr<Client> client, InformerOptions defaults = {});
  ~InformerFactory();  // Shutdown()

  // The informer for `resource` with `options`' namespace and selectors; created on first use
  // (with `options`' other settings, or the factory defaults when `options` is null).
  std::shared_ptr<SharedInformer> For(const Resource& resource,
                                      const InformerOptions* options = nullptr);
  void Start();  // starts every informer not started yet
  // True when every informer has synced within `timeout`.
  bool WaitForCacheSync(std::chrono::milliseconds timeout);
  void Shutdown();  // stops every informer

 private:
  std::shared_ptr<Client> client_;
  InformerOptions defaults_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<SharedInformer>> informers_;
  bool started_ = false;
};

}  // namespace hyperslice::kube
