#include "src/kube/mutation_cache.h"

#include <charconv>
#include <optional>
#include <utility>

namespace hyperslice::kube {
namespace {

std::optional<uint64_t> Revision(const Object& obj) {
  std::string_view rv = ResourceVersionOf(obj);
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(rv.data(), rv.data() + rv.size(), n);
  if (ec != std::errc() || end != rv.data() + rv.size() || rv.empty()) return std::nullopt;
  return n;
}

}  // namespace

ObjectPtr MutationCache::Get(const std::string& key) {
  ObjectPtr cached = store_->Get(key);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = written_.find(key);
  if (it == written_.end()) return cached;
  if (!cached) {
    written_.erase(it);
    return nullptr;
  }
  auto mine = Revision(*it->second);
  auto theirs = Revision(*cached);
  if (mine && theirs && *mine > *theirs) return it->second;
  written_.erase(it);  // the informer has caught up (or the versions do not compare)
  return cached;
}

void MutationCache::Mutated(Object obj) {
  std::string key = ObjectKey(obj);
  if (key.empty() || !Revision(obj)) return;
  auto ptr = std::make_shared<const Object>(std::move(obj));
  std::lock_guard<std::mutex> lock(mu_);
  written_[key] = std::move(ptr);
}

void MutationCache::Forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  written_.erase(key);
}

size_t MutationCache::PendingForTest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_.size();
}

}  // namespace hyperslice::kube
