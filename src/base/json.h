// Field access on Boost.JSON objects that never throws: a missing field or one of another type
// reads as absent. The one home for these helpers (controllers, clients and simulators read
// untrusted JSON; boost::json's at()/as_*() throw, which must not cross a module boundary).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

namespace hyperslice::jsonfield {

// The string at `key`, or "" when absent or not a string.
std::string_view StringField(const boost::json::object& o, std::string_view key);
// The same as a std::string, or `fallback` when absent or not a string.
std::string StringValue(const boost::json::object& o, std::string_view key,
                        std::string fallback = {});
// The object/array at `key`, or nullptr.
const boost::json::object* ObjectField(const boost::json::object& o, std::string_view key);
const boost::json::array* ArrayField(const boost::json::object& o, std::string_view key);
// The string elements of the array at `key`, in order (other elements skipped); empty when absent.
std::vector<std::string> StringsField(const boost::json::object& o, std::string_view key);
// An integer (int64, uint64 within range, or a double with no fraction), else nullopt.
std::optional<int64_t> IntField(const boost::json::object& o, std::string_view key);
std::optional<double> NumberField(const boost::json::object& o, std::string_view key);
std::optional<bool> BoolField(const boost::json::object& o, std::string_view key);
// The same on an object that may be absent (nullptr reads as absent), so that lookups chain:
// StringField(ObjectField(&review, "request"), "uid").
std::string_view StringField(const boost::json::object* o, std::string_view key);
const boost::json::object* ObjectField(const boost::json::object* o, std::string_view key);
const boost::json::array* ArrayField(const boost::json::object* o, std::string_view key);
std::optional<int64_t> IntField(const boost::json::object* o, std::string_view key);
// The object at a dotted path of object fields ("metadata", "spec.template"), or nullptr.
const boost::json::object* ObjectAt(const boost::json::object& o, std::string_view dotted_path);

}  // namespace hyperslice::jsonfield
