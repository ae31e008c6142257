#include "src/kube/object_helpers.h"

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/time.h"

namespace hyperslice::kube {
namespace {

namespace json = boost::json;
using jsonfield::ArrayField;
using jsonfield::ObjectField;
using jsonfield::StringValue;

// The object at o[key], created (or replaced when not an object) on demand.
json::object& SubMut(json::object& o, const char* key) {
  auto& v = o[key];
  if (!v.is_object()) v = json::object();
  return v.get_object();
}

json::array& ArrayMut(json::object& o, const char* key) {
  auto& v = o[key];
  if (!v.is_array()) v = json::array();
  return v.get_array();
}

std::string Group(const std::string& api_version) {
  auto slash = api_version.find('/');
  return slash == std::string::npos ? "" : api_version.substr(0, slash);
}

bool SameOwner(const json::object& ref, const json::object& want) {
  return Group(StringValue(ref, "apiVersion")) == Group(StringValue(want, "apiVersion")) &&
         StringValue(ref, "kind") == StringValue(want, "kind") &&
         StringValue(ref, "name") == StringValue(want, "name");
}

Result<json::object> OwnerRef(const Object& owner, const Object& object) {
  const json::object* om = ObjectField(owner, "metadata");
  json::object ref{{"apiVersion", StringValue(owner, "apiVersion")},
                   {"kind", StringValue(owner, "kind")},
                   {"name", om ? StringValue(*om, "name") : ""},
                   {"uid", om ? StringValue(*om, "uid") : ""}};
  for (const char* k : {"apiVersion", "kind", "name", "uid"}) {
    if (ref[k].get_string().empty()) {
      return Error::Make(Error::Code::kInvalidArgument,
                         std::string("owner reference: the owner has no ") + k);
    }
  }
  std::string owner_ns = om ? StringValue(*om, "namespace") : "";
  const json::object* m = ObjectField(object, "metadata");
  std::string object_ns = m ? StringValue(*m, "namespace") : "";
  if (!owner_ns.empty()) {
    if (object_ns.empty()) {
      return Error::Make(
          Error::Code::kInvalidArgument,
          "owner reference: cluster-scoped object cannot have the namespaced owner " + owner_ns +
              "/" + StringValue(ref, "name"));
    }
    if (object_ns != owner_ns) {
      return Error::Make(
          Error::Code::kInvalidArgument,
          "owner reference: cross-namespace owner references are disallowed (owner " + owner_ns +
              "/" + StringValue(ref, "name") + ", object namespace " + object_ns + ")");
    }
  }
  return ref;
}

// Inserts or replaces `ref` in metadata.ownerReferences; true when something changed.
bool Upsert(Object& object, const json::object& ref) {
  auto& refs = ArrayMut(SubMut(object, "metadata"), "ownerReferences");
  for (auto& v : refs) {
    if (!v.is_object() || !SameOwner(v.get_object(), ref)) continue;
    if (v.get_object() == ref) return false;
    v = ref;
    return true;
  }
  refs.push_back(ref);
  return true;
}

}  // namespace

std::string FormatTime(std::chrono::system_clock::time_point t) { return FormatRfc3339(t); }

std::string FormatMicroTime(std::chrono::system_clock::time_point t) { return FormatRfc3339(t, 6); }

std::optional<std::chrono::system_clock::time_point> ParseTime(std::string_view rfc3339) {
  return ParseRfc3339(rfc3339);
}

Result<bool> SetControllerReference(const Object& owner, Object& object) {
  HS_ASSIGN_OR_RETURN(json::object ref, OwnerRef(owner, object));
  ref["controller"] = true;
  ref["blockOwnerDeletion"] = true;
  if (const auto* m = ObjectField(object, "metadata")) {
    if (const auto* refs = ArrayField(*m, "ownerReferences")) {
      for (const auto& v : *refs) {
        if (!v.is_object()) continue;
        const auto& existing = v.get_object();
        const auto* c = existing.if_contains("controller");
        if (c && c->is_bool() && c->get_bool() && !SameOwner(existing, ref)) {
          return Error::Make(Error::Code::kAlreadyExists,
                             "object " + StringValue(*m, "name") + " is already owned by another " +
                                 StringValue(existing, "kind") + " controller " +
                                 StringValue(existing, "name"),
                             "AlreadyOwned");
        }
      }
    }
  }
  return Upsert(object, ref);
}

Result<bool> SetOwnerReference(const Object& owner, Object& object) {
  HS_ASSIGN_OR_RETURN(json::object ref, OwnerRef(owner, object));
  // Keep controller/blockOwnerDeletion of an existing reference to the same owner.
  if (const auto* m = ObjectField(object, "metadata")) {
    if (const auto* refs = ArrayField(*m, "ownerReferences")) {
      for (const auto& v : *refs) {
        if (!v.is_object() || !SameOwner(v.get_object(), ref)) continue;
        for (const char* k : {"controller", "blockOwnerDeletion"}) {
          if (const auto* f = v.get_object().if_contains(k)) ref[k] = *f;
        }
      }
    }
  }
  return Upsert(object, ref);
}

bool HasOwnerUid(const Object& object, const std::string& uid) {
  const auto* m = ObjectField(object, "metadata");
  const auto* refs = m ? ArrayField(*m, "ownerReferences") : nullptr;
  if (!refs || uid.empty()) return false;
  for (const auto& v : *refs) {
    if (v.is_object() && StringValue(v.get_object(), "uid") == uid) return true;
  }
  return false;
}

bool HasOwner(const Object& object, const Object& owner) {
  const auto* om = ObjectField(owner, "metadata");
  std::string uid = om ? StringValue(*om, "uid") : "";
  if (!uid.empty()) return HasOwnerUid(object, uid);
  const auto* m = ObjectField(object, "metadata");
  const auto* refs = m ? ArrayField(*m, "ownerReferences") : nullptr;
  if (!refs || !om) return false;
  json::object want{{"apiVersion", StringValue(owner, "apiVersion")},
                    {"kind", StringValue(owner, "kind")},
                    {"name", StringValue(*om, "name")}};
  for (const auto& v : *refs) {
    if (v.is_object() && SameOwner(v.get_object(), want)) return true;
  }
  return false;
}

std::optional<std::string> ControllerUid(const Object& object) {
  const auto* m = ObjectField(object, "metadata");
  const auto* refs = m ? ArrayField(*m, "ownerReferences") : nullptr;
  if (!refs) return std::nullopt;
  for (const auto& v : *refs) {
    if (!v.is_object()) continue;
    const auto* c = v.get_object().if_contains("controller");
    if (c && c->is_bool() && c->get_bool()) return StringValue(v.get_object(), "uid");
  }
  return std::nullopt;
}

bool IsDeleting(const Object& object) {
  const auto* meta = object.if_contains("metadata");
  return meta != nullptr && meta->is_object() && meta->get_object().contains("deletionTimestamp");
}

bool HasFinalizer(const Object& object, const std::string& finalizer) {
  const auto* m = ObjectField(object, "metadata");
  const auto* f = m ? ArrayField(*m, "finalizers") : nullptr;
  if (!f) return false;
  for (const auto& v : *f) {
    if (v.is_string() && v.get_string() == finalizer) return true;
  }
  return false;
}

bool AddFinalizer(Object& object, const std::string& finalizer) {
  if (HasFinalizer(object, finalizer)) return false;
  ArrayMut(SubMut(object, "metadata"), "finalizers").emplace_back(finalizer);
  return true;
}

bool RemoveFinalizer(Object& object, const std::string& finalizer) {
  auto* m = object.if_contains("metadata");
  if (!m || !m->is_object()) return false;
  auto* f = m->get_object().if_contains("finalizers");
  if (!f || !f->is_array()) return false;
  auto& arr = f->get_array();
  bool removed = false;
  for (auto it = arr.begin(); it != arr.end();) {
    if (it->is_string() && it->get_string() == finalizer) {
      it = arr.erase(it);
      removed = true;
    } else {
      ++it;
    }
  }
  return removed;
}

std::string RemoveFinalizerPatch(const Object& object, const std::string& finalizer) {
  const auto* m = ObjectField(object, "metadata");
  const auto* f = m ? m->if_contains("finalizers") : nullptr;
  if (f == nullptr || !f->is_array()) return "";
  boost::json::array rest;
  bool found = false;
  for (const auto& v : f->get_array()) {
    if (v.is_string() && v.get_string() == finalizer) {
      found = true;
    } else {
      rest.push_back(v);
    }
  }
  if (!found) return "";
  boost::json::array patch{
      boost::json::object{{"op", "test"}, {"path", "/metadata/finalizers"}, {"value", *f}},
      boost::json::object{{"op", "replace"}, {"path", "/metadata/finalizers"}, {"value", rest}}};
  return boost::json::serialize(patch);
}

int64_t Generation(const Object& object) {
  return jsonfield::IntField(ObjectField(object, "metadata"), "generation").value_or(0);
}

namespace {

Condition FromJson(const json::object& o) {
  Condition c;
  c.type = StringValue(o, "type");
  c.status = StringValue(o, "status");
  c.reason = StringValue(o, "reason");
  c.message = StringValue(o, "message");
  c.last_transition_time = StringValue(o, "lastTransitionTime");
  if (const auto* g = o.if_contains("observedGeneration"); g && g->is_int64()) {
    c.observed_generation = g->get_int64();
  }
  return c;
}

json::object ToJson(const Condition& c) {
  json::object o{{"type", c.type},
                 {"status", c.status},
                 {"lastTransitionTime", c.last_transition_time},
                 {"reason", c.reason},
                 {"message", c.message}};
  if (c.observed_generation != 0) o["observedGeneration"] = c.observed_generation;
  return o;
}

}  // namespace

bool SetCondition(Object& object, const Condition& c, std::chrono::system_clock::time_point now) {
  auto& conditions = ArrayMut(SubMut(object, "status"), "conditions");
  for (auto& v : conditions) {
    if (!v.is_object() || StringValue(v.get_object(), "type") != c.type) continue;
    Condition old = FromJson(v.get_object());
    Condition next = c;
    if (old.status != c.status) {
      if (next.last_transition_time.empty()) next.last_transition_time = FormatTime(now);
    } else {
      next.last_transition_time = old.last_transition_time;
    }
    if (old.status == next.status && old.reason == next.reason && old.message == next.message &&
        old.observed_generation == next.observed_generation &&
        old.last_transition_time == next.last_transition_time) {
      return false;
    }
    v = ToJson(next);
    return true;
  }
  Condition next = c;
  if (next.last_transition_time.empty()) next.last_transition_time = FormatTime(now);
  conditions.push_back(ToJson(next));
  return true;
}

std::optional<Condition> FindCondition(const Object& object, const std::string& type) {
  const auto* s = ObjectField(object, "status");
  const auto* conditions = s ? ArrayField(*s, "conditions") : nullptr;
  if (!conditions) return std::nullopt;
  for (const auto& v : *conditions) {
    if (v.is_object() && StringValue(v.get_object(), "type") == type)
      return FromJson(v.get_object());
  }
  return std::nullopt;
}

bool RemoveCondition(Object& object, const std::string& type) {
  auto* s = object.if_contains("status");
  if (!s || !s->is_object()) return false;
  auto* conditions = s->get_object().if_contains("conditions");
  if (!conditions || !conditions->is_array()) return false;
  auto& arr = conditions->get_array();
  for (auto it = arr.begin(); it != arr.end(); ++it) {
    if (it->is_object() && StringValue(it->get_object(), "type") == type) {
      arr.erase(it);
      return true;
    }
  }
  return false;
}

bool IsConditionTrue(const Object& object, const std::string& type) {
  auto c = FindCondition(object, type);
  return c && c->status == "True";
}

}  // namespace hyperslice::kube
