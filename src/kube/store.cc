#include "src/kube/store.h"

#include <algorithm>
#include <mutex>

#include "src/base/strings.h"

namespace hyperslice::kube {
namespace {

const boost::json::object* Metadata(const Object& obj) {
  auto it = obj.find("metadata");
  if (it == obj.end() || !it->value().is_object()) return nullptr;
  return &it->value().get_object();
}

std::vector<std::string> NamespaceValues(const Object& obj) {
  auto ns = MetaString(obj, "namespace");
  if (ns.empty()) return {};
  return {std::string(ns)};
}

std::vector<std::string> OwnerUidValues(const Object& obj) {
  std::vector<std::string> out;
  const auto* md = Metadata(obj);
  if (md == nullptr) return out;
  auto it = md->find("ownerReferences");
  if (it == md->end() || !it->value().is_array()) return out;
  for (const auto& ref : it->value().get_array()) {
    if (!ref.is_object()) continue;
    const auto* uid = ref.get_object().if_contains("uid");
    if (uid != nullptr && uid->is_string() && !uid->get_string().empty()) {
      out.emplace_back(uid->get_string());
    }
  }
  return out;
}

}  // namespace

std::string_view MetaString(const Object& obj, std::string_view field) {
  const auto* md = Metadata(obj);
  if (md == nullptr) return {};
  const auto* v = md->if_contains(field);
  if (v == nullptr || !v->is_string()) return {};
  return v->get_string();
}

std::string ObjectKey(std::string_view ns, std::string_view name) {
  if (ns.empty()) return std::string(name);
  std::string key;
  key.reserve(ns.size() + 1 + name.size());
  key.append(ns).append("/").append(name);
  return key;
}

std::string ObjectKey(const Object& obj) {
  auto name = MetaString(obj, "name");
  if (name.empty()) return {};
  return ObjectKey(MetaString(obj, "namespace"), name);
}

IndexFunc FieldIndexFunc(const std::string& path) {
  std::vector<std::string> parts = Split(path, '.');
  return [parts = std::move(parts)](const Object& obj) -> std::vector<std::string> {
    const boost::json::value* cur = nullptr;
    const Object* o = &obj;
    for (size_t i = 0; i < parts.size(); ++i) {
      cur = o->if_contains(parts[i]);
      if (cur == nullptr) return {};
      if (i + 1 < parts.size()) {
        if (!cur->is_object()) return {};
        o = &cur->get_object();
      }
    }
    if (cur == nullptr || !cur->is_string() || cur->get_string().empty()) return {};
    return {std::string(cur->get_string())};
  };
}

Object DeepCopy(const Object& obj) { return Object(obj, boost::json::storage_ptr()); }

Store::Store() {
  indexes_.emplace(std::string(kNamespaceIndex), Index{NamespaceValues, {}});
  indexes_.emplace(std::string(kOwnerUidIndex), Index{OwnerUidValues, {}});
}

Status Store::AddIndex(const std::string& name, IndexFunc fn) {
  if (!fn) return Error::Make(Error::Code::kInvalidArgument, "index " + name + ": no function");
  std::unique_lock lock(mu_);
  if (indexes_.contains(name)) {
    return Error::Make(Error::Code::kAlreadyExists, "index " + name + " already exists");
  }
  Index index{std::move(fn), {}};
  for (const auto& [key, obj] : items_) {
    for (auto& v : index.fn(*obj)) index.keys_by_value[std::move(v)].insert(key);
  }
  indexes_.emplace(name, std::move(index));
  return OkStatus();
}

bool Store::HasIndex(const std::string& name) const {
  std::shared_lock lock(mu_);
  return indexes_.contains(name);
}

ObjectPtr Store::Get(const std::string& key) const {
  std::shared_lock lock(mu_);
  auto it = items_.find(key);
  return it == items_.end() ? nullptr : it->second;
}

std::vector<ObjectPtr> Store::List() const {
  std::shared_lock lock(mu_);
  std::vector<ObjectPtr> out;
  out.reserve(items_.size());
  for (const auto& [key, obj] : items_) out.push_back(obj);
  return out;
}

bool Store::AnyOf(const std::function<bool(const Object&)>& pred) const {
  std::shared_lock lock(mu_);
  for (const auto& [key, obj] : items_) {
    if (pred(*obj)) return true;
  }
  return false;
}

std::vector<std::string> Store::ListKeys() const {
  std::shared_lock lock(mu_);
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& [key, obj] : items_) out.push_back(key);
  return out;
}

size_t Store::Size() const {
  std::shared_lock lock(mu_);
  return items_.size();
}

Result<std::vector<std::string>> Store::IndexKeys(const std::string& index,
                                                  const std::string& value) const {
  std::shared_lock lock(mu_);
  auto it = indexes_.find(index);
  if (it == indexes_.end()) {
    return Error::Make(Error::Code::kNotFound, "no index named " + index);
  }
  std::vector<std::string> out;
  auto vit = it->second.keys_by_value.find(value);
  if (vit != it->second.keys_by_value.end()) out.assign(vit->second.begin(), vit->second.end());
  return out;
}

Result<std::vector<ObjectPtr>> Store::ByIndex(const std::string& index,
                                              const std::string& value) const {
  std::shared_lock lock(mu_);
  auto it = indexes_.find(index);
  if (it == indexes_.end()) {
    return Error::Make(Error::Code::kNotFound, "no index named " + index);
  }
  std::vector<ObjectPtr> out;
  auto vit = it->second.keys_by_value.find(value);
  if (vit == it->second.keys_by_value.end()) return out;
  out.reserve(vit->second.size());
  for (const auto& key : vit->second) {
    auto oit = items_.find(key);
    if (oit != items_.end()) out.push_back(oit->second);
  }
  return out;
}

Result<std::vector<std::string>> Store::IndexValues(const std::string& index) const {
  std::shared_lock lock(mu_);
  auto it = indexes_.find(index);
  if (it == indexes_.end()) {
    return Error::Make(Error::Code::kNotFound, "no index named " + index);
  }
  std::vector<std::string> out;
  out.reserve(it->second.keys_by_value.size());
  for (const auto& [value, keys] : it->second.keys_by_value) out.push_back(value);
  return out;
}

void Store::RemoveFromIndex(Index& index, const std::string& key, const Object& obj) {
  for (const auto& v : index.fn(obj)) {
    auto vit = index.keys_by_value.find(v);
    if (vit == index.keys_by_value.end()) continue;
    vit->second.erase(key);
    if (vit->second.empty()) index.keys_by_value.erase(vit);
  }
}

void Store::IndexLocked(const std::string& key, const ObjectPtr& old, const ObjectPtr& cur) {
  if (old == cur) return;
  for (auto& [name, index] : indexes_) {
    if (old) RemoveFromIndex(index, key, *old);
    if (cur) {
      for (auto& v : index.fn(*cur)) index.keys_by_value[std::move(v)].insert(key);
    }
  }
}

ObjectPtr Store::Upsert(ObjectPtr obj) {
  if (!obj) return nullptr;
  std::string key = ObjectKey(*obj);
  if (key.empty()) return nullptr;
  std::unique_lock lock(mu_);
  auto [it, inserted] = items_.try_emplace(key, obj);
  ObjectPtr old;
  if (!inserted) {
    old = std::move(it->second);
    it->second = obj;
  }
  IndexLocked(key, old, obj);
  return old;
}

ObjectPtr Store::Remove(const std::string& key) {
  std::unique_lock lock(mu_);
  auto it = items_.find(key);
  if (it == items_.end()) return nullptr;
  ObjectPtr old = std::move(it->second);
  items_.erase(it);
  IndexLocked(key, old, nullptr);
  return old;
}

std::vector<Store::Change> Store::Replace(std::vector<ObjectPtr> items) {
  std::vector<Change> changes;
  changes.reserve(items.size());
  std::unique_lock lock(mu_);
  std::unordered_set<std::string> seen;
  seen.reserve(items.size());
  for (auto& obj : items) {
    if (!obj) continue;
    std::string key = ObjectKey(*obj);
    if (key.empty()) continue;
    auto [it, inserted] = items_.try_emplace(key, obj);
    if (inserted) {
      IndexLocked(key, nullptr, obj);
      changes.push_back({nullptr, obj});
    } else {
      ObjectPtr old = it->second;
      if (ResourceVersionOf(*old) != ResourceVersionOf(*obj) || ResourceVersionOf(*obj).empty()) {
        it->second = obj;
        IndexLocked(key, old, obj);
      }
      changes.push_back({old, it->second});
    }
    seen.insert(std::move(key));
  }
  std::vector<std::string> gone;
  for (const auto& [key, obj] : items_) {
    if (!seen.contains(key)) gone.push_back(key);
  }
  std::sort(gone.begin(), gone.end());
  for (const auto& key : gone) {
    auto it = items_.find(key);
    ObjectPtr old = std::move(it->second);
    items_.erase(it);
    IndexLocked(key, old, nullptr);
    changes.push_back({old, nullptr});
  }
  return changes;
}

}  // namespace hyperslice::kube
