// Request validation of the Paperspace simulator, shaped like the zod issues Paperspace's v1 API
// returns (see internal.h).
#include <map>

#include <boost/json.hpp>

#include "sim/paperspace/internal.h"

namespace hyperslice::sim::paperspace::internal {

namespace json = boost::json;

namespace {

const std::vector<std::string> kRegions = {
    "ny2", "ca1", "ams1", "East Coast (NY2)", "West Coast (CA1)", "Europe (AMS1)"};

// zod's name for a JSON value's type ("received").
std::string Received(const json::value& v) {
  switch (v.kind()) {
    case json::kind::string:
      return "string";
    case json::kind::int64:
    case json::kind::uint64:
    case json::kind::double_:
      return "number";
    case json::kind::bool_:
      return "boolean";
    case json::kind::array:
      return "array";
    case json::kind::object:
      return "object";
    case json::kind::null:
      return "null";
  }
  return "unknown";
}

json::object TypeIssue(const std::string& expected, const std::string& received, json::array path) {
  std::string message =
      received == "undefined" ? "Required" : "Expected " + expected + ", received " + received;
  return json::object{{"code", "invalid_type"},
                      {"expected", expected},
                      {"received", received},
                      {"path", std::move(path)},
                      {"message", message}};
}

std::string Expected(Type t) {
  switch (t) {
    case Type::kNumber:
      return "number";
    case Type::kBoolean:
      return "boolean";
    case Type::kStringArray:
      return "array";
    default:
      return "string";
  }
}

}  // namespace

const std::vector<Field>& CreateMachineSchema() {
  // DigitalOcean's Paperspace API reference, "Create a machine" (POST /v1/machines).
  static const std::vector<Field> s = {
      {"name", Type::kNonEmptyString, true},
      {"machineType", Type::kString, true},
      {"templateId", Type::kString, true},
      {"networkId", Type::kString},
      {"diskSize", Type::kNumber, true},
      {"region", Type::kEnum, true, kRegions},
      {"publicIpType", Type::kEnum, false, {"static", "dynamic", "none"}},
      {"autoSnapshotEnabled", Type::kBoolean},
      {"autoSnapshotFrequency", Type::kEnum, false, {"hourly", "daily", "weekly", "monthly"}},
      {"autoSnapshotSaveCount", Type::kNumber},
      {"autoShutdownEnabled", Type::kBoolean},
      {"autoShutdownTimeout", Type::kNumber},
      {"autoShutdownForce", Type::kBoolean},
      {"takeInitialSnapshot", Type::kBoolean},
      {"restorePointEnabled", Type::kBoolean},
      {"restorePointFrequency", Type::kEnum, false, {"shutdown"}},
      {"startupScriptId", Type::kString},
      {"emailPassword", Type::kBoolean},
      {"startOnCreate", Type::kBoolean},
      {"enableNvlink", Type::kBoolean},
      {"accessorIds", Type::kStringArray},
  };
  return s;
}

const std::vector<Field>& CreateStartupScriptSchema() {
  // "Create startup script" (POST /v1/startup-scripts).
  static const std::vector<Field> s = {
      {"name", Type::kString, true},
      {"script", Type::kString, true},
      {"isRunOnce", Type::kBoolean},
  };
  return s;
}

json::array Validate(const json::value& body, const std::vector<Field>& schema) {
  json::array issues;
  if (!body.is_object()) {
    issues.push_back(TypeIssue("object", Received(body), json::array{}));
    return issues;
  }
  const json::object& o = body.as_object();
  for (const Field& f : schema) {
    const json::value* v = o.if_contains(f.name);
    json::array path{json::value(f.name)};
    if (v == nullptr) {
      if (f.required) issues.push_back(TypeIssue(Expected(f.type), "undefined", path));
      continue;
    }
    switch (f.type) {
      case Type::kString:
      case Type::kNonEmptyString:
        if (!v->is_string()) {
          issues.push_back(TypeIssue("string", Received(*v), path));
        } else if (f.type == Type::kNonEmptyString && v->get_string().empty()) {
          issues.push_back(json::object{{"code", "too_small"},
                                        {"minimum", 1},
                                        {"type", "string"},
                                        {"inclusive", true},
                                        {"exact", false},
                                        {"message", "String must contain at least 1 character(s)"},
                                        {"path", path}});
        }
        break;
      case Type::kNumber:
        if (!v->is_number()) issues.push_back(TypeIssue("number", Received(*v), path));
        break;
      case Type::kBoolean:
        if (!v->is_bool()) issues.push_back(TypeIssue("boolean", Received(*v), path));
        break;
      case Type::kStringArray:
        if (!v->is_array()) {
          issues.push_back(TypeIssue("array", Received(*v), path));
        } else {
          int64_t i = 0;
          for (const auto& item : v->get_array()) {
            if (!item.is_string()) {
              issues.push_back(TypeIssue("string", Received(item),
                                         json::array{json::value(f.name), json::value(i)}));
            }
            ++i;
          }
        }
        break;
      case Type::kEnum: {
        bool ok = v->is_string();
        if (ok) {
          ok = false;
          for (const auto& opt : f.options) ok = ok || v->get_string() == opt;
        }
        if (!ok) {
          std::string expected;
          json::array options;
          for (const auto& opt : f.options) {
            expected += (expected.empty() ? "'" : " | '") + opt + "'";
            options.emplace_back(opt);
          }
          std::string got =
              v->is_string() ? "'" + std::string(v->get_string()) + "'" : Received(*v);
          std::string message = "Invalid enum value. Expected ";
          message += expected;
          message += ", received ";
          message += got;
          issues.push_back(json::object{{"code", "invalid_enum_value"},
                                        {"options", std::move(options)},
                                        {"path", path},
                                        {"received", v->is_string() ? json::value(v->get_string())
                                                                    : json::value(Received(*v))},
                                        {"message", message}});
        }
        break;
      }
    }
  }
  json::array unknown;
  for (const auto& kv : o) {
    bool known = false;
    for (const Field& f : schema) known = known || kv.key() == f.name;
    if (!known) unknown.emplace_back(kv.key());
  }
  if (!unknown.empty()) {
    std::string list;
    for (const auto& k : unknown) {
      list += (list.empty() ? "'" : ", '") + std::string(k.get_string()) + "'";
    }
    issues.push_back(json::object{{"code", "unrecognized_keys"},
                                  {"keys", std::move(unknown)},
                                  {"path", json::array{}},
                                  {"message", "Unrecognized key(s) in object: " + list}});
  }
  return issues;
}

std::string RegionCode(const std::string& region) {
  static const std::map<std::string, std::string> m = {{"ny2", "ny2"},
                                                       {"ca1", "ca1"},
                                                       {"ams1", "ams1"},
                                                       {"East Coast (NY2)", "ny2"},
                                                       {"West Coast (CA1)", "ca1"},
                                                       {"Europe (AMS1)", "ams1"}};
  auto it = m.find(region);
  return it == m.end() ? region : it->second;
}

}  // namespace hyperslice::sim::paperspace::internal
