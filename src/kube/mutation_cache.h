// MutationCache: an informer's store seen through the objects our own writes returned, so a
// reconciler can read the cache (no GET per reconcile) without acting on a copy older than its
// own last write (client-go's MutationCache, cache/mutation_cache.go).
//
// Why: a controller that writes status and is woken again (a requeue, another watch event)
// before the informer has delivered that write would otherwise decide on stale state — redo a
// step, or lose a recorded operation. Reading live from the apiserver instead costs a request
// per reconcile, which dominated the operator's CPU at scale.
//
// Which copy wins: the written one while its resourceVersion is newer than the store's, compared
// as integers, as client-go's MutationCache does (resourceVersions are etcd revisions on every
// apiserver we target; a value that does not parse as an integer makes the store's copy win).
// Once the store has caught up, the written copy is dropped. An object absent from the store is
// absent: a deletion the informer saw is not undone by an older write of ours.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>

#include "src/kube/store.h"

namespace hyperslice::kube {

class MutationCache {
 public:
  explicit MutationCache(const Store* store) : store_(store) {}
  MutationCache(const MutationCache&) = delete;
  MutationCache& operator=(const MutationCache&) = delete;

  // The freshest copy we know of the object under `key`, or nullptr if the store has none.
  ObjectPtr Get(const std::string& key);
  // Records an object a write of ours returned (create, update, patch).
  void Mutated(Object obj);
  // Drops what we recorded for `key` (after we deleted the object, say).
  void Forget(const std::string& key);
  size_t PendingForTest() const;

 private:
  const Store* store_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, ObjectPtr> written_;
};

}  // namespace hyperslice::kube
