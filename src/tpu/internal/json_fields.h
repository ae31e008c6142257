// The TPU controllers' short names for src/base/json.h's field access (never throwing; a missing
// field or one of another type reads as absent).
#pragma once

#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "src/base/json.h"

namespace hyperslice::tpu::internal {

// String field of an object, "" when absent or not a string.
inline std::string StringAt(const boost::json::object& o, std::string_view key) {
  return std::string(jsonfield::StringField(o, key));
}
// Object field, nullptr when absent or not an object.
inline const boost::json::object* ObjectAt(const boost::json::object& o, std::string_view key) {
  return jsonfield::ObjectField(o, key);
}

}  // namespace hyperslice::tpu::internal
