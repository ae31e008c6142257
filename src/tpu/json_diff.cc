// The JSON difference of the drift check (internal/json_diff.h).
#include "src/tpu/internal/json_diff.h"

#include <string_view>
#include <utility>

#include <boost/json.hpp>

namespace hyperslice::tpu::internal {

namespace json = boost::json;

namespace {

std::string Scalar(const json::value& v) {
  if (v.is_string()) return std::string(v.as_string());
  return json::serialize(v);
}

bool UrlEqual(std::string_view a, std::string_view b) {
  if (a == b) return true;
  if (a.size() > b.size()) std::swap(a, b);
  // a is the shorter: a suffix of b starting after a '/'.
  return !a.empty() && b.size() > a.size() && b.substr(b.size() - a.size()) == a &&
         (b[b.size() - a.size() - 1] == '/' || a.front() == '/');
}

}  // namespace

void JsonDifferences(const json::value& desired, const json::value& actual, const std::string& path,
                     std::vector<std::string>& out) {
  if (desired.is_object()) {
    if (!actual.is_object()) {
      out.push_back(path);
      return;
    }
    for (const auto& [k, v] : desired.as_object()) {
      std::string sub = path.empty() ? std::string(k) : path + "." + std::string(k);
      const auto* a = actual.as_object().if_contains(k);
      if (a == nullptr) {
        // An empty desired value and an absent one are the same to GCE.
        bool empty = v.is_null() || (v.is_object() && v.as_object().empty()) ||
                     (v.is_array() && v.as_array().empty()) ||
                     (v.is_string() && v.as_string().empty());
        if (!empty) out.push_back(sub);
        continue;
      }
      JsonDifferences(v, *a, sub, out);
    }
    return;
  }
  if (desired.is_array()) {
    if (!actual.is_array() || actual.as_array().size() != desired.as_array().size()) {
      out.push_back(path);
      return;
    }
    std::vector<std::string> inner;
    for (size_t i = 0; i < desired.as_array().size(); ++i) {
      JsonDifferences(desired.as_array()[i], actual.as_array()[i], path, inner);
    }
    if (!inner.empty()) out.push_back(path);
    return;
  }
  if (desired.is_null()) return;
  if (actual.is_object() || actual.is_array() || actual.is_null()) {
    out.push_back(path);
    return;
  }
  std::string d = Scalar(desired), a = Scalar(actual);
  if (d == a) return;
  if (desired.is_string() && actual.is_string() && UrlEqual(d, a)) return;
  out.push_back(path);
}

void FieldDifferences(const json::object& desired, const json::object& actual,
                      const std::string& field, std::vector<std::string>& out) {
  const json::value* want = desired.if_contains(field);
  if (want == nullptr) return;
  const json::value* got = actual.if_contains(field);
  JsonDifferences(*want, got != nullptr ? *got : json::value(nullptr), field, out);
}

}  // namespace hyperslice::tpu::internal
