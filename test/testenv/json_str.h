// A string field of a JSON object as a std::string, for tests that compare, concatenate and
// collect them (src/base/json.h's StringField gives a view). Header-only.
#pragma once

#include <string>
#include <string_view>

#include <boost/json.hpp>

#include "src/base/json.h"

namespace hyperslice::testenv {

// "" when `key` is absent or not a string.
inline std::string Str(const boost::json::object& o, std::string_view key) {
  return std::string(jsonfield::StringField(o, key));
}

}  // namespace hyperslice::testenv
