// Request validation of the Lambda simulator, written from the request schemas of Lambda's
// OpenAPI document 1.8.3 (components.schemas InstanceLaunchRequest, RequestedTagEntry,
// RequestedFilesystemMountEntry, ImageSpecificationID/Family, FirewallRulesetEntry,
// InstanceTerminateRequest, AddSSHKeyRequest, PublicRegionCode). The document is small enough
// that the schemas are written out here rather than loaded.
//
// Lambda refuses a bad body with 400 {"error":{"code":"global/invalid-parameters",...}}; the
// message names the field, as Lambda's do ("Region us-invalid-1 does not exist").
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <vector>

#include <boost/json.hpp>

#include "sim/lambda/internal.h"

namespace hyperslice::sim::lambda::internal {

namespace json = boost::json;

namespace {

struct RegionInfo {
  const char* code;
  const char* description;
};

// PublicRegionCode's enum, with the descriptions Lambda gives in Region.description.
constexpr RegionInfo kRegions[] = {
    {"europe-central-1", "Germany"},      {"asia-south-1", "India"},
    {"australia-east-1", "Australia"},    {"me-west-1", "Israel"},
    {"asia-northeast-1", "Tokyo, Japan"}, {"asia-northeast-2", "Osaka, Japan"},
    {"us-east-1", "Virginia, USA"},       {"us-west-2", "Arizona, USA"},
    {"us-west-1", "California, USA"},     {"us-south-1", "Texas, USA"},
    {"us-west-3", "Utah, USA"},           {"us-midwest-1", "Illinois, USA"},
    {"us-east-2", "Washington DC, USA"},  {"us-south-2", "North Texas, USA"},
    {"us-south-3", "Central Texas, USA"}, {"us-east-3", "Washington DC, USA"},
    {"us-midwest-2", "Ohio, USA"},
};

using Check = std::function<std::optional<std::string>(const json::value&)>;

struct Prop {
  Check check;
  bool required = false;
};

std::string Field(std::string_view path) {
  return "Invalid value for field \"" + std::string(path) + "\": ";
}

std::optional<std::string> Object(const json::value& v, std::string_view path,
                                  const std::map<std::string, Prop>& props) {
  const auto* o = v.if_object();
  if (o == nullptr) {
    return path.empty() ? std::string("Invalid request data: the body must be a JSON object")
                        : Field(path) + "expected an object";
  }
  auto name = [&](std::string_view k) {
    return path.empty() ? std::string(k) : std::string(path) + "." + std::string(k);
  };
  for (const auto& [k, val] : *o) {
    auto it = props.find(std::string(k));
    if (it == props.end()) return "Unknown field \"" + name(k) + "\"";
    if (auto err = it->second.check(val)) return err;
  }
  for (const auto& [k, p] : props) {
    if (p.required && !o->contains(k)) return "Missing required field \"" + name(k) + "\"";
  }
  return std::nullopt;
}

Check String(const std::string& path, size_t min = 0, size_t max = SIZE_MAX,
             const char* pattern = nullptr) {
  std::shared_ptr<std::regex> re;
  if (pattern != nullptr) re = std::make_shared<std::regex>(pattern);
  return [=](const json::value& v) -> std::optional<std::string> {
    if (!v.is_string()) return Field(path) + "expected a string";
    const auto& s = v.get_string();
    if (s.size() < min)
      return Field(path) + "must be at least " + std::to_string(min) + " characters";
    if (s.size() > max)
      return Field(path) + "must be at most " + std::to_string(max) + " characters";
    if (re && !std::regex_match(s.begin(), s.end(), *re)) {
      return Field(path) + "does not match " + pattern;
    }
    return std::nullopt;
  };
}

Check Array(const std::string& path, const std::function<Check(const std::string&)>& item) {
  return [=](const json::value& v) -> std::optional<std::string> {
    const auto* a = v.if_array();
    if (a == nullptr) return Field(path) + "expected an array";
    for (size_t i = 0; i < a->size(); ++i) {
      if (auto err = item(path + "[" + std::to_string(i) + "]")((*a)[i])) return err;
    }
    return std::nullopt;
  };
}

Check StringArray(const std::string& path) {
  return Array(path, [](const std::string& p) { return String(p); });
}

Check Nested(const std::string& path, const std::map<std::string, Prop>& props) {
  return [=](const json::value& v) { return Object(v, path, props); };
}

}  // namespace

bool KnownRegion(std::string_view code) {
  for (const auto& r : kRegions) {
    if (code == r.code) return true;
  }
  return false;
}

std::string RegionDescription(std::string_view code) {
  for (const auto& r : kRegions) {
    if (code == r.code) return r.description;
  }
  return std::string(code);
}

std::optional<std::string> ValidateLaunch(const json::value& body) {
  static const std::map<std::string, Prop> props = [] {
    std::map<std::string, Prop> p;
    p["region_name"] = {[](const json::value& v) -> std::optional<std::string> {
                          if (!v.is_string()) return Field("region_name") + "expected a string";
                          if (!KnownRegion(v.get_string())) {
                            return "Region " + std::string(v.get_string()) + " does not exist";
                          }
                          return std::nullopt;
                        },
                        true};
    p["instance_type_name"] = {String("instance_type_name", 1), true};
    p["ssh_key_names"] = {[](const json::value& v) -> std::optional<std::string> {
                            if (auto err = StringArray("ssh_key_names")(v)) return err;
                            if (v.get_array().size() != 1) {
                              return Field("ssh_key_names") +
                                     "currently, exactly one SSH key must be specified";
                            }
                            return std::nullopt;
                          },
                          true};
    p["file_system_names"] = {StringArray("file_system_names")};
    p["file_system_mounts"] = {Array("file_system_mounts", [](const std::string& path) {
      return Nested(
          path,
          {{"mount_point",
            {String(path + ".mount_point", 0, 256, "^(/home|/lambda/nfs|/data)[//a-zA-Z0-9-]*$"),
             true}},
           {"file_system_id", {String(path + ".file_system_id"), true}}});
    })};
    p["hostname"] = {String("hostname", 1, 63, "^[a-z0-9][0-9a-z-]{0,62}$")};
    p["name"] = {String("name", 0, 64)};
    p["image"] = {[](const json::value& v) -> std::optional<std::string> {
      // anyOf ImageSpecificationID {id} | ImageSpecificationFamily {family}.
      const auto* o = v.if_object();
      if (o == nullptr || o->size() != 1 || (!o->contains("id") && !o->contains("family"))) {
        return Field("image") + "expected {\"id\": string} or {\"family\": string}";
      }
      const auto& inner = o->begin()->value();
      if (!inner.is_string() || inner.get_string().empty()) {
        return Field("image." + std::string(o->begin()->key())) + "expected a string";
      }
      return std::nullopt;
    }};
    p["user_data"] = {[](const json::value& v) -> std::optional<std::string> {
      if (!v.is_string()) return Field("user_data") + "expected a string";
      if (v.get_string().size() > kMaxUserDataBytes) {
        return Field("user_data") + "the user data string cannot exceed 1MB in size";
      }
      return std::nullopt;
    }};
    p["tags"] = {Array("tags", [](const std::string& path) {
      return Nested(path, {{"key", {String(path + ".key", 1, 55, "^[a-z][a-z0-9-:]+$"), true}},
                           {"value", {String(path + ".value", 0, 128), true}}});
    })};
    p["firewall_rulesets"] = {Array("firewall_rulesets", [](const std::string& path) {
      return Nested(path, {{"id", {String(path + ".id", 1), true}}});
    })};
    // Not in 1.8.3; earlier versions of the document had it (default 1) and old clients send it.
    p["quantity"] = {[](const json::value& v) -> std::optional<std::string> {
      if (!v.is_int64() && !v.is_uint64()) return Field("quantity") + "expected an integer";
      if (!(v.is_int64() ? v.get_int64() == 1 : v.get_uint64() == 1)) {
        return Field("quantity") + "only 1 is supported";
      }
      return std::nullopt;
    }};
    return p;
  }();
  return Object(body, "", props);
}

std::optional<std::string> ValidateTerminate(const json::value& body) {
  static const std::map<std::string, Prop> props = {
      {"instance_ids", {StringArray("instance_ids"), true}}};
  return Object(body, "", props);
}

std::optional<std::string> ValidateAddSshKey(const json::value& body) {
  static const std::map<std::string, Prop> props = {
      {"name", {String("name", 1, 64), true}},
      {"public_key", {String("public_key", 1, 4096)}},
  };
  return Object(body, "", props);
}

}  // namespace hyperslice::sim::lambda::internal
