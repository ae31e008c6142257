#include "src/base/json.h"

#include <cmath>
#include <limits>

namespace hyperslice::jsonfield {

std::string_view StringField(const boost::json::object& o, std::string_view key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_string()) return {};
  return {v->get_string().data(), v->get_string().size()};
}

std::string StringValue(const boost::json::object& o, std::string_view key, std::string fallback) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_string()) return fallback;
  return std::string(v->get_string());
}

const boost::json::object* ObjectField(const boost::json::object& o, std::string_view key) {
  const boost::json::value* v = o.if_contains(key);
  return v != nullptr ? v->if_object() : nullptr;
}

const boost::json::array* ArrayField(const boost::json::object& o, std::string_view key) {
  const boost::json::value* v = o.if_contains(key);
  return v != nullptr ? v->if_array() : nullptr;
}

std::vector<std::string> StringsField(const boost::json::object& o, std::string_view key) {
  std::vector<std::string> out;
  if (const boost::json::array* a = ArrayField(o, key)) {
    for (const boost::json::value& v : *a) {
      if (v.is_string()) out.emplace_back(v.get_string());
    }
  }
  return out;
}

std::optional<int64_t> IntField(const boost::json::object& o, std::string_view key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64()) {
    if (v->get_uint64() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::nullopt;
    }
    return static_cast<int64_t>(v->get_uint64());
  }
  if (v->is_double()) {
    double d = v->get_double();
    // 2^63 is exactly representable; anything at or past it does not fit.
    if (!std::isfinite(d) || std::trunc(d) != d || std::fabs(d) >= 9223372036854775808.0) {
      return std::nullopt;
    }
    return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

std::optional<double> NumberField(const boost::json::object& o, std::string_view key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_double()) return v->get_double();
  if (v->is_int64()) return static_cast<double>(v->get_int64());
  if (v->is_uint64()) return static_cast<double>(v->get_uint64());
  return std::nullopt;
}

std::optional<bool> BoolField(const boost::json::object& o, std::string_view key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_bool()) return std::nullopt;
  return v->get_bool();
}

std::string_view StringField(const boost::json::object* o, std::string_view key) {
  return o != nullptr ? StringField(*o, key) : std::string_view();
}

const boost::json::object* ObjectField(const boost::json::object* o, std::string_view key) {
  return o != nullptr ? ObjectField(*o, key) : nullptr;
}

const boost::json::array* ArrayField(const boost::json::object* o, std::string_view key) {
  return o != nullptr ? ArrayField(*o, key) : nullptr;
}

std::optional<int64_t> IntField(const boost::json::object* o, std::string_view key) {
  return o != nullptr ? IntField(*o, key) : std::nullopt;
}

const boost::json::object* ObjectAt(const boost::json::object& o, std::string_view dotted_path) {
  const boost::json::object* cur = &o;
  while (cur != nullptr && !dotted_path.empty()) {
    size_t dot = dotted_path.find('.');
    cur = ObjectField(*cur, dotted_path.substr(0, dot));
    dotted_path = dot == std::string_view::npos ? std::string_view{} : dotted_path.substr(dot + 1);
  }
  return cur;
}

}  // namespace hyperslice::jsonfield
