// How an informer keeps an object in memory.
//
// A Boost.JSON tree built by the parser makes one heap allocation per string longer than 14 bytes,
// per array and per object table, each with malloc's per-chunk overhead; a kubelet-like Node makes
// a few hundred of them. PackObject copies the tree into ONE exactly-sized arena (measured by a
// first copy into scratch memory), so a cached object costs its payload plus a few dozen bytes.
// The arena is sealed after the copy: later allocations through its resource (a consumer's plain
// copy of the object shares the resource) go to the heap and are freed normally, so nothing grows
// the arena after construction. Prefer DeepCopy (store.h) to copy a cached object.
#pragma once

#include <cstddef>

#include "src/kube/store.h"

namespace hyperslice::kube {

// Removes metadata.managedFields (server-side apply bookkeeping; often a third of a Node).
void DropManagedFields(Object& obj);

// An immutable copy of `obj` in one packed allocation.
ObjectPtr PackObject(const Object& obj);
// An immutable object sharing nothing with `obj` (moved, default allocator): the unpacked form.
ObjectPtr ShareObject(Object&& obj);

// Bytes of the arena PackObject would allocate for `obj` (for tests and benchmarks).
size_t PackedSize(const Object& obj);

}  // namespace hyperslice::kube
