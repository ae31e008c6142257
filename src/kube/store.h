// Store: the indexed object cache behind an informer (client-go's cache.Indexer).
//
// Objects are kept once, as immutable shared_ptr<const Object>, keyed by "namespace/name" (or
// "name" for cluster-scoped objects). Readers receive the same pointers the cache holds: never
// cast the constness away; copy (DeepCopy) to modify. Indexes map an index value to the keys of the
// objects that produce it; two are always present (kNamespaceIndex, kOwnerUidIndex) and more can be
// registered by name (e.g. Nodes by spec.providerID).
//
// Thread-safety: every method may be called from any thread; reads take a shared lock, writes an
// exclusive one. Replace() is atomic: readers see the old or the new content, never a mix.
#pragma once

#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "src/base/result.h"
#include "src/kube/resource.h"

namespace hyperslice::kube {

using ObjectPtr = std::shared_ptr<const Object>;

// Values an object is indexed under (may be empty: the object is not in the index).
using IndexFunc = std::function<std::vector<std::string>(const Object&)>;

inline constexpr std::string_view kNamespaceIndex = "namespace";  // metadata.namespace
inline constexpr std::string_view kOwnerUidIndex = "ownerUID";    // metadata.ownerReferences[].uid

// "ns/name", or "name" when the object has no namespace; "" when it has no name.
std::string ObjectKey(const Object& obj);
std::string ObjectKey(std::string_view ns, std::string_view name);
// metadata.<field> as a string; "" when absent or not a string.
std::string_view MetaString(const Object& obj, std::string_view field);
inline std::string_view ResourceVersionOf(const Object& obj) {
  return MetaString(obj, "resourceVersion");
}

// An IndexFunc returning the string at a dotted path ("spec.providerID"), none when absent/empty.
IndexFunc FieldIndexFunc(const std::string& path);

// A copy that owns its memory through the default allocator (a cached object may live in a
// packed arena; a plain copy would keep sharing that arena's resource).
Object DeepCopy(const Object& obj);

class Store {
 public:
  // An object's transition caused by a write: old == nullptr for an add, cur == nullptr for a
  // delete.
  struct Change {
    ObjectPtr old;
    ObjectPtr cur;
  };

  Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Registers (or fails if `name` exists) an index and builds it over the current content.
  Status AddIndex(const std::string& name, IndexFunc fn);
  bool HasIndex(const std::string& name) const;

  ObjectPtr Get(const std::string& key) const;  // nullptr when absent
  std::vector<ObjectPtr> List() const;
  // True when `pred` holds for some cached object; stops at the first. `pred` runs under the
  // store's read lock: keep it short and never call back into this store.
  bool AnyOf(const std::function<bool(const Object&)>& pred) const;
  std::vector<std::string> ListKeys() const;
  size_t Size() const;
  // Objects whose index `index` contains `value`; kNotFound when the index does not exist.
  Result<std::vector<ObjectPtr>> ByIndex(const std::string& index, const std::string& value) const;
  // Keys instead of objects (cheaper when the caller only enqueues keys).
  Result<std::vector<std::string>> IndexKeys(const std::string& index,
                                             const std::string& value) const;
  // Every value the index holds.
  Result<std::vector<std::string>> IndexValues(const std::string& index) const;

  // Adds or replaces the object under its key; returns the previous one (nullptr on an add).
  // Objects without a name are ignored (returns nullptr).
  ObjectPtr Upsert(ObjectPtr obj);
  // Removes the key; returns what was cached (nullptr when absent).
  ObjectPtr Remove(const std::string& key);
  // Makes the content exactly `items` and returns every change, in this order: adds and updates in
  // the order of `items`, then deletes of the keys `items` no longer has (sorted by key). An item
  // whose resourceVersion equals the cached one keeps the cached pointer (the change then has
  // old == cur), so a relist of an unchanged cache allocates nothing.
  std::vector<Change> Replace(std::vector<ObjectPtr> items);

 private:
  struct Index {
    IndexFunc fn;
    std::unordered_map<std::string, std::unordered_set<std::string>> keys_by_value;
  };
  // Both take mu_ exclusively held.
  void IndexLocked(const std::string& key, const ObjectPtr& old, const ObjectPtr& cur);
  void RemoveFromIndex(Index& index, const std::string& key, const Object& obj);

  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, ObjectPtr> items_;
  std::unordered_map<std::string, Index> indexes_;
};

}  // namespace hyperslice::kube
