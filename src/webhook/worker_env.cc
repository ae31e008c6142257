// The vocabulary the Pod and StatefulSet mutations share: which containers are opted in, and how a
// worker's hostname is spelled (seed 001: "<name>-<ordinal>.<service>").
#include <charconv>
#include <string>

#include "src/base/json.h"
#include "src/webhook/internal.h"

namespace hyperslice::webhook::internal {
namespace json = boost::json;
using jsonfield::ObjectField;
using jsonfield::StringField;

std::optional<int64_t> ParseNonNegative(std::string_view s) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

namespace {

bool QuantityNonZero(const json::value& q) {
  if (q.is_string()) {
    std::string_view s = q.get_string();
    return !s.empty() && s.find_first_not_of("0.") != std::string_view::npos;
  }
  if (q.is_int64()) return q.get_int64() != 0;
  if (q.is_uint64()) return q.get_uint64() != 0;
  if (q.is_double()) return q.get_double() != 0;
  return false;
}

}  // namespace

bool RequestsTpu(const json::object& container) {
  const json::object* resources = ObjectField(&container, "resources");
  for (std::string_view part : {"limits", "requests"}) {
    const json::object* m = ObjectField(resources, part);
    if (m == nullptr) continue;
    if (const json::value* q = m->if_contains(kTpuResource); q != nullptr && QuantityNonZero(*q)) {
      return true;
    }
  }
  return false;
}

Targets TargetsOf(const json::object* labels) {
  std::string_view mode = StringField(labels, kInjectLabel);
  if (mode == "disabled") return Targets::kNone;
  if (mode == "all" || StringField(labels, kCompatInjectLabel) == "enabled") return Targets::kAll;
  return Targets::kTpu;
}

std::string HostnameStyle::Parse(const json::object* annotations) {
  fqdn = StringField(annotations, kFqdnAnnotation) == "true";
  port.clear();
  if (std::string_view p = StringField(annotations, kPortAnnotation); !p.empty()) {
    std::optional<int64_t> n = ParseNonNegative(p);
    if (!n || *n < 1 || *n > 65535) {
      return "annotation " + std::string(kPortAnnotation) +
             " must be a port number from 1 to 65535; got \"" + std::string(p) + "\"";
    }
    port = std::to_string(*n);
  }
  return "";
}

void AppendHostname(std::string& out, std::string_view base, int64_t i, std::string_view domain,
                    const HostnameStyle& style) {
  out += base;
  out += '-';
  char digits[24];
  auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), i);
  out.append(digits, end);
  if (!domain.empty()) {
    out += '.';
    out += domain;
    if (style.fqdn) {
      out += '.';
      out += style.ns;
      out += ".svc.";
      out += style.cluster_domain;
    }
  }
  if (!style.port.empty()) {
    out += ':';
    out += style.port;
  }
}

void AppendEnvVar(std::string& patch, std::string_view name, std::string_view value) {
  patch += R"({"name":)";
  AppendJsonString(patch, name);
  patch += R"(,"value":)";
  AppendJsonString(patch, value);
  patch += '}';
}

void OpenPatchOp(std::string& patch, std::string_view op, std::string_view path) {
  patch += patch.empty() ? '[' : ',';
  patch += R"({"op":")";
  patch += op;
  patch += R"(","path":)";
  AppendJsonString(patch, path);
  patch += R"(,"value":)";
}

}  // namespace hyperslice::webhook::internal
