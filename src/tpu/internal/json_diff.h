// What of a desired JSON document is not found in an actual one: the drift check of the GCE
// children and the parent's "is this child already applied" test.
#pragma once

#include <string>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

namespace hyperslice::tpu::internal {

// Paths (dotted, e.g. "properties.machineType") where `desired` is not found in `actual`:
// every field of `desired` must be present in `actual` with an equal value; arrays match
// element-wise with the same length; a string and a number are equal when they print the same
// (GCE's int64-as-string); URL strings match when one is a suffix of the other at a '/'
// ("projects/p/..." versus "https://.../projects/p/..."). Fields only in `actual` are ignored,
// and an empty desired value matches an absent one.
void JsonDifferences(const boost::json::value& desired, const boost::json::value& actual,
                     const std::string& path, std::vector<std::string>& out);

// JsonDifferences of desired[field] in actual[field] (an absent actual field reads as null), under
// the path `field`; nothing when `desired` has no such field: a kind's drift over the top-level
// fields it sets.
void FieldDifferences(const boost::json::object& desired, const boost::json::object& actual,
                      const std::string& field, std::vector<std::string>& out);

}  // namespace hyperslice::tpu::internal
