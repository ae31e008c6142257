#include "src/gpu/providers/paperspace/decode.h"

#include <boost/json.hpp>

#include "src/base/json.h"

namespace hyperslice::gpu::providers::paperspace {

namespace json = boost::json;

namespace {

Error Malformed(std::string_view what) {
  return MakeError(ErrorKind::kInternal, "paperspace: malformed response: " + std::string(what));
}

Result<json::object> ParseObject(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return Malformed("not JSON (" + ec.message() + ")");
  if (!v.is_object()) return Malformed("not a JSON object");
  return std::move(v.as_object());
}

// What `decode` makes of a JSON body (any JSON value: `decode` says which it takes).
template <typename T>
Result<T> ParseThen(std::string_view body, Result<T> (*decode)(const json::value&)) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return Malformed("not JSON (" + ec.message() + ")");
  return decode(v);
}

// Absent or null: "". Present with another type: nullopt (the caller reports it). Not
// jsonfield::StringValue, which reads another type as absent: Paperspace's answers are typed, so a
// number where a string belongs is a broken answer.
std::optional<std::string> Str(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return std::string();
  if (!v->is_string()) return std::nullopt;
  return std::string(v->get_string());
}

std::optional<double> Num(const json::value& v) {
  if (v.is_double()) return v.get_double();
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  return std::nullopt;
}

Result<Machine> MachineFrom(const json::value& v) {
  if (!v.is_object()) return Malformed("machine is not an object");
  const json::object& o = v.as_object();
  Machine m;
  struct Field {
    const char* key;
    std::string* out;
  };
  for (Field f : {Field{"id", &m.id}, Field{"name", &m.name}, Field{"state", &m.state},
                  Field{"machineType", &m.machine_type}, Field{"region", &m.region},
                  Field{"publicIp", &m.public_ip}, Field{"privateIp", &m.private_ip}}) {
    auto s = Str(o, f.key);
    if (!s) return Malformed(std::string("machine.") + f.key + " is not a string");
    *f.out = std::move(*s);
  }
  if (m.id.empty()) return Malformed("machine without id");
  if (const json::value* r = o.if_contains("usageRate"); r != nullptr && !r->is_null()) {
    auto n = Num(*r);
    if (!n) return Malformed("machine.usageRate is not a number");
    if (*n > 0 && *n < 1e6) m.usage_rate = *n;
  }
  return m;
}

Result<StartupScript> ScriptFrom(const json::value& v) {
  if (!v.is_object()) return Malformed("startup script is not an object");
  const json::object& o = v.as_object();
  StartupScript s;
  auto id = Str(o, "id");
  auto name = Str(o, "name");
  if (!id || !name) return Malformed("startup script id/name is not a string");
  s.id = std::move(*id);
  s.name = std::move(*name);
  if (s.id.empty()) return Malformed("startup script without id");
  if (auto r = jsonfield::BoolField(o, "isRunOnce")) s.is_run_once = *r;
  if (const json::value* a = o.if_contains("assignedMachineIds"); a != nullptr && !a->is_null()) {
    if (!a->is_array()) return Malformed("startupScript.assignedMachineIds is not an array");
    for (const auto& id : a->get_array()) {
      if (!id.is_string()) return Malformed("startupScript.assignedMachineIds[] not a string");
      s.assigned_machine_ids.emplace_back(id.get_string());
    }
  }
  return s;
}

// {"hasMore": bool, "nextPage": string|null, "items": [...]} (every v1 list route).
template <typename Page, typename Decode>
Result<Page> PageFrom(std::string_view body, Decode decode) {
  auto o = ParseObject(body);
  if (!o.ok()) return o.error();
  const json::value* items = o->if_contains("items");
  if (items == nullptr || !items->is_array()) return Malformed("list without items[]");
  Page p;
  for (const auto& it : items->get_array()) {
    auto d = decode(it);
    if (!d.ok()) return d.error();
    p.items.push_back(std::move(*d));
  }
  if (auto h = jsonfield::BoolField(*o, "hasMore")) p.has_more = *h;
  auto next = Str(*o, "nextPage");
  if (!next) return Malformed("nextPage is not a string");
  p.next_page = std::move(*next);
  if (p.has_more && p.next_page.empty()) return Malformed("hasMore without nextPage");
  return p;
}

bool PctSpecial(char c) { return c == '%' || c == ',' || c == '=' || c < 0x20; }

std::string PctEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : s) {
    if (PctSpecial(c)) {
      auto u = static_cast<unsigned char>(c);
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::string> PctDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

}  // namespace

Result<Machine> DecodeMachine(std::string_view body) { return ParseThen(body, MachineFrom); }

Result<Machine> DecodeMachineEvent(std::string_view body) {
  auto o = ParseObject(body);
  if (!o.ok()) return o.error();
  const json::value* data = o->if_contains("data");
  if (data == nullptr) return Malformed("no data (the machine)");
  return MachineFrom(*data);
}

Result<MachinePage> DecodeMachineList(std::string_view body) {
  return PageFrom<MachinePage>(body, MachineFrom);
}

Result<StartupScript> DecodeStartupScript(std::string_view body) {
  return ParseThen(body, ScriptFrom);
}

Result<StartupScriptPage> DecodeStartupScriptList(std::string_view body) {
  return PageFrom<StartupScriptPage>(body, ScriptFrom);
}

ApiError DecodeError(int http_status, std::string_view body) {
  ApiError e;
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (!ec && v.is_object()) {
    const json::object& o = v.as_object();
    if (auto c = Str(o, "code")) e.code = std::move(*c);
    if (auto m = Str(o, "message")) e.message = std::move(*m);
    if (const json::value* issues = o.if_contains("issues"); issues && issues->is_array()) {
      std::string detail;
      for (const auto& i : issues->get_array()) {
        if (!i.is_object()) continue;
        auto m = Str(i.as_object(), "message");
        if (!m || m->empty()) continue;
        std::string path;
        if (const json::value* p = i.as_object().if_contains("path"); p && p->is_array()) {
          for (const auto& seg : p->get_array()) {
            if (!path.empty()) path += '.';
            if (seg.is_string()) path += seg.get_string();
            if (seg.is_int64()) path += std::to_string(seg.get_int64());
          }
        }
        if (!detail.empty()) detail += "; ";
        detail += *m + (path.empty() ? "" : " (" + path + ")");
        if (detail.size() > 1000) break;
      }
      if (!detail.empty()) e.message += (e.message.empty() ? "" : ": ") + detail;
    }
  }
  if (e.message.empty()) e.message = "HTTP " + std::to_string(http_status);
  return e;
}

Error ClassifyError(int http_status, std::string_view body, bool create) {
  ApiError a = DecodeError(http_status, body);
  std::string msg = "paperspace: " + a.message + (a.code.empty() ? "" : " (" + a.code + ")");
  if (http_status == 401 || http_status == 403) {
    return MakeError(ErrorKind::kUnauthorized, msg, http_status);
  }
  if (http_status == 429) return MakeError(ErrorKind::kRateLimited, msg, http_status);
  if (http_status == 404) return MakeError(ErrorKind::kNotFound, msg, http_status);
  if (http_status >= 500) return MakeError(ErrorKind::kTransient, msg, http_status);
  // Paperspace answers a launch it has no machines for with a refusal whose only distinguishing
  // part is its message ("We are currently out of capacity for the selected VM type. Try again in
  // a few minutes, or select a different instance."): no code or status of its own.
  if (create && (http_status == 400 || http_status == 409) &&
      a.message.find("out of capacity") != std::string::npos) {
    return MakeError(ErrorKind::kCapacity, msg, http_status);
  }
  return MakeError(ErrorKind::kInvalid, msg, http_status);
}

InstanceState StateFromPaperspace(std::string_view s) {
  if (s == "provisioning" || s == "starting" || s == "restarting" || s == "upgrading") {
    return InstanceState::kPending;
  }
  if (s == "ready" || s == "serviceready") return InstanceState::kRunning;
  if (s == "stopping") return InstanceState::kStopping;
  // An off machine bills only its disk; it never comes back by itself.
  if (s == "off") return InstanceState::kTerminated;
  return InstanceState::kUnknown;
}

std::string EncodeTags(const std::map<std::string, std::string>& tags) {
  std::string out(kScriptNamePrefix);
  bool first = true;
  for (const auto& [k, v] : tags) {
    if (!first) out += ',';
    first = false;
    out += PctEncode(k) + "=" + PctEncode(v);
  }
  return out;
}

std::optional<std::map<std::string, std::string>> DecodeTags(std::string_view name) {
  if (name.substr(0, kScriptNamePrefix.size()) != kScriptNamePrefix) return std::nullopt;
  name.remove_prefix(kScriptNamePrefix.size());
  std::map<std::string, std::string> tags;
  while (!name.empty()) {
    size_t comma = name.find(',');
    std::string_view pair = name.substr(0, comma);
    size_t eq = pair.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    auto k = PctDecode(pair.substr(0, eq));
    auto v = PctDecode(pair.substr(eq + 1));
    if (!k || !v || k->empty()) return std::nullopt;
    tags[*k] = *v;
    if (comma == std::string_view::npos) break;
    name.remove_prefix(comma + 1);
    if (name.empty()) return std::nullopt;  // trailing comma
  }
  return tags;
}

}  // namespace hyperslice::gpu::providers::paperspace
