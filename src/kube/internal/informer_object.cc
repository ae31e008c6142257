#include "src/kube/internal/informer_object.h"

#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include <boost/json/memory_resource.hpp>
#include <boost/json/storage_ptr.hpp>

namespace hyperslice::kube {
namespace {

size_t AlignUp(size_t n, size_t align) { return (n + align - 1) & ~(align - 1); }

bool Inside(const void* p, const std::byte* base, size_t size) {
  auto a = reinterpret_cast<std::uintptr_t>(p);
  auto b = reinterpret_cast<std::uintptr_t>(base);
  return a >= b && a < b + size;
}

// Bump allocation in a thread-local scratch buffer, counting the bytes the same way ArenaResource
// lays them out. Deallocation is a no-op; the buffer is reused by the next measurement.
class MeasuringResource final : public boost::json::memory_resource {
 public:
  MeasuringResource() {
    if (!Scratch()) {
      Scratch() = std::make_unique_for_overwrite<std::byte[]>(kInitialScratch);
      ScratchSize() = kInitialScratch;
    }
  }
  ~MeasuringResource() override {
    for (auto [p, align] : overflow_) ::operator delete(p, std::align_val_t(align));
    // Grow the scratch for the next object of this size (bounded).
    if (used_ > ScratchSize() && used_ <= kMaxScratch) {
      ScratchSize() = AlignUp(used_ * 2, 4096);
      Scratch() = std::make_unique_for_overwrite<std::byte[]>(ScratchSize());
    }
  }
  MeasuringResource(const MeasuringResource&) = delete;
  MeasuringResource& operator=(const MeasuringResource&) = delete;
  size_t used() const { return used_; }

 private:
  static constexpr size_t kInitialScratch = size_t{64} * 1024;
  static constexpr size_t kMaxScratch = size_t{8} * 1024 * 1024;
  static std::unique_ptr<std::byte[]>& Scratch() {
    thread_local std::unique_ptr<std::byte[]> scratch;
    return scratch;
  }
  static size_t& ScratchSize() {
    thread_local size_t size = 0;
    return size;
  }

  void* do_allocate(size_t n, size_t align) override {
    size_t off = AlignUp(used_, align);
    used_ = off + n;
    if (used_ <= ScratchSize() && align <= alignof(std::max_align_t)) {
      return Scratch().get() + off;
    }
    void* p = ::operator new(n, std::align_val_t(align));
    overflow_.emplace_back(p, align);
    return p;
  }
  void do_deallocate(void*, size_t, size_t) override {}
  bool do_is_equal(const memory_resource& other) const noexcept override { return this == &other; }

  size_t used_ = 0;
  std::vector<std::pair<void*, size_t>> overflow_;
};

// One buffer filled by bump allocation while the object is copied in, then sealed.
class ArenaResource final : public boost::json::memory_resource {
 public:
  // `self` receives the resource's address: make_shared_resource wraps it, so the storage_ptr
  // does not point at it.
  ArenaResource(size_t size, ArenaResource** self)
      : buf_(size > 0 ? std::make_unique_for_overwrite<std::byte[]>(size) : nullptr), size_(size) {
    *self = this;
  }
  void Seal() { sealed_ = true; }

 private:
  void* do_allocate(size_t n, size_t align) override {
    if (!sealed_ && align <= alignof(std::max_align_t)) {
      size_t off = AlignUp(used_, align);
      if (off + n <= size_) {
        used_ = off + n;
        return buf_.get() + off;
      }
    }
    return ::operator new(n, std::align_val_t(align));
  }
  void do_deallocate(void* p, size_t /*n*/, size_t align) override {
    if (Inside(p, buf_.get(), size_)) return;
    ::operator delete(p, std::align_val_t(align));
  }
  bool do_is_equal(const memory_resource& other) const noexcept override { return this == &other; }

  std::unique_ptr<std::byte[]> buf_;
  size_t size_;
  size_t used_ = 0;
  bool sealed_ = false;
};

}  // namespace

void DropManagedFields(Object& obj) {
  auto it = obj.find("metadata");
  if (it == obj.end() || !it->value().is_object()) return;
  it->value().get_object().erase("managedFields");
}

size_t PackedSize(const Object& obj) {
  MeasuringResource measure;
  { Object copy(obj, boost::json::storage_ptr(&measure)); }
  return measure.used();
}

ObjectPtr PackObject(const Object& obj) {
  size_t size = PackedSize(obj);
  ArenaResource* arena = nullptr;
  boost::json::storage_ptr sp = boost::json::make_shared_resource<ArenaResource>(size, &arena);
  auto packed = std::make_shared<const Object>(obj, sp);
  arena->Seal();
  return packed;
}

// Into default storage: a decoded object may live in its event's monotonic arena, which would keep
// whatever was erased from it (managedFields) for as long as the object is cached.
ObjectPtr ShareObject(Object&& obj) {
  return std::make_shared<const Object>(std::move(obj), boost::json::storage_ptr());
}

}  // namespace hyperslice::kube
