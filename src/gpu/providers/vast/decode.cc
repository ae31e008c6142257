#include "src/gpu/providers/vast/decode.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include "src/base/json.h"
#include "src/gpu/normalize.h"

namespace hyperslice::gpu::providers::vast {

namespace json = boost::json;
using jsonfield::StringValue;

namespace {

// A finite number, else nullopt.
std::optional<double> Number(const json::object& o, std::string_view key) {
  std::optional<double> d = jsonfield::NumberField(o, key);
  return d && std::isfinite(*d) ? d : std::nullopt;
}

// Vast ids are integers; some answers carry them as doubles. Anything else is absent.
std::optional<std::string> Id(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (!v) return std::nullopt;
  if (v->is_int64()) return std::to_string(v->get_int64());
  if (v->is_uint64()) return std::to_string(v->get_uint64());
  if (v->is_double()) {
    double d = v->get_double();
    if (!std::isfinite(d) || d < 0 || d > 9.0e15 || d != std::floor(d)) return std::nullopt;
    return std::to_string(static_cast<int64_t>(d));
  }
  if (v->is_string() && !v->get_string().empty()) return std::string(v->get_string());
  return std::nullopt;
}

bool Bool(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (!v) return false;
  if (v->is_bool()) return v->get_bool();
  if (v->is_int64()) return v->get_int64() != 0;  // some Vast booleans are 0/1
  return false;
}

Result<json::value> Parse(std::string_view body, const char* what) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) {
    return MakeError(ErrorKind::kInternal,
                     std::string("vastai ") + what + ": answer is not JSON: " + ec.message());
  }
  return v;
}

Error Malformed(const char* what, const char* why) {
  return MakeError(ErrorKind::kInternal, std::string("vastai ") + what + ": " + why);
}

std::string FormatDouble(double d) {
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, d);
  return ec == std::errc() ? std::string(buf, p) : std::string();
}

bool Plain(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '~' || c == '/' || c == ':' || c == '@' || c == '+' || c == '-';
}

void Encode(std::string_view s, std::string* out) {
  static const char kHex[] = "0123456789ABCDEF";
  for (char c : s) {
    if (Plain(c)) {
      out->push_back(c);
    } else {
      auto u = static_cast<unsigned char>(c);
      out->push_back('%');
      out->push_back(kHex[u >> 4]);
      out->push_back(kHex[u & 15]);
    }
  }
}

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// False when `s` is not a percent-encoding EncodeLabel could have written.
bool Decode(std::string_view s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      if (!Plain(s[i])) return false;
      out->push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return false;
    int hi = Hex(s[i + 1]), lo = Hex(s[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

// "API requests too frequent: endpoint threshold=4.5" -> 4.5 s (docs: rate-limits-and-errors,
// "an acceptable threshold number in seconds"; openapi.yaml 429 examples).
std::optional<std::chrono::milliseconds> Threshold(std::string_view text) {
  constexpr std::string_view kKey = "threshold=";
  size_t at = text.find(kKey);
  if (at == std::string_view::npos) return std::nullopt;
  text.remove_prefix(at + kKey.size());
  double seconds = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (ec != std::errc() || p == text.data() || !std::isfinite(seconds) || seconds < 0 ||
      seconds > 86400) {
    return std::nullopt;
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
}

std::optional<std::chrono::milliseconds> RetryAfterHeader(const net::Response& r) {
  std::string v = r.Header("retry-after");
  double seconds = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), seconds);
  if (v.empty() || ec != std::errc() || p == v.data() || !std::isfinite(seconds) || seconds < 0 ||
      seconds > 86400 * 2) {
    return std::nullopt;
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
}

const char* CallName(Call call) {
  switch (call) {
    case Call::kOffers:
      return "search offers";
    case Call::kCreate:
      return "create instance";
    case Call::kGet:
      return "show instance";
    case Call::kList:
      return "show instances";
    case Call::kDelete:
      return "destroy instance";
    case Call::kUser:
      return "show user";
  }
  return "call";
}

}  // namespace

// Offer fields as vast-cli 1.9.1 vastai/data/offer.py lists them (answer of POST /api/v0/bundles/):
// gpu_ram and cpu_ram in MB, disk_space in GB, dph_total and min_bid in $/h for the whole offer,
// geolocation "California, US".
std::optional<Offer> OfferFromJson(const json::object& o) {
  auto id = Id(o, "id");
  if (!id) return std::nullopt;
  Offer out;
  out.provider = kVast;
  out.id = std::move(*id);
  // vms_enabled (vast-cli offers help: "is the machine a VM instance"): the ask is rented as a
  // VM (create with `vm: true`), which runs systemd and so a kubelet, booted with `onstart` as
  // its startup script; every other ask runs a docker container.
  out.boot = Bool(o, "vms_enabled") ? BootKind::kStartupScript : BootKind::kContainer;
  out.provider_gpu_name = StringValue(o, "gpu_name");
  out.gpu_count = static_cast<int>(std::clamp(Number(o, "num_gpus").value_or(0), 0.0, 1024.0));
  out.gpu_memory_gib = std::max(0.0, Number(o, "gpu_ram").value_or(0) / 1024.0);
  out.vcpus =
      static_cast<int>(std::clamp(Number(o, "cpu_cores_effective").value_or(0), 0.0, 1.0e6));
  out.memory_gib = std::max(0.0, Number(o, "cpu_ram").value_or(0) / 1024.0);
  out.disk_gib = std::max(0.0, Number(o, "disk_space").value_or(0));
  auto gpu = NormalizeGpu(kVast, out.provider_gpu_name, out.gpu_memory_gib);
  out.gpu_type = std::move(gpu.name);
  out.gpu_type_known = gpu.known;
  out.provider_region = StringValue(o, "geolocation");
  auto region = NormalizeRegion(kVast, out.provider_region);
  out.region = std::move(region.name);
  out.region_known = region.known;
  if (auto dph = Number(o, "dph_total"); dph && *dph > 0) out.on_demand_price = UsdFromDouble(*dph);
  if (auto bid = Number(o, "min_bid"); bid && *bid > 0) out.spot_price = UsdFromDouble(*bid);
  // An ask is one machine's GPUs: it can be rented once (vast-cli: "Each offer ID can only be
  // used to create one instance").
  if (o.if_contains("rentable")) out.available = Bool(o, "rentable") && !Bool(o, "rented") ? 1 : 0;
  for (const char* key : {"machine_id", "host_id", "ask_contract_id"}) {
    if (auto v = Id(o, key)) out.attributes[key] = *v;
  }
  auto reliability = Number(o, "reliability2");
  if (!reliability) reliability = Number(o, "reliability");
  if (reliability) out.attributes["reliability"] = FormatDouble(*reliability);
  if (auto v = StringValue(o, "verification"); !v.empty()) out.attributes["verification"] = v;
  if (o.if_contains("vms_enabled"))
    out.attributes["vm"] = Bool(o, "vms_enabled") ? "true" : "false";
  return out;
}

Result<std::vector<Offer>> DecodeOffers(std::string_view body) {
  // A 10,000-offer answer is ~24 MB of JSON with ~70 fields an offer: one arena for the parse
  // tree (freed at once) instead of a heap allocation per value.
  json::monotonic_resource arena;
  boost::system::error_code ec;
  json::value v = json::parse(body, ec, &arena);
  if (ec) {
    return MakeError(ErrorKind::kInternal,
                     "vastai search offers: answer is not JSON: " + ec.message());
  }
  const json::object* top = v.if_object();
  if (!top) return Malformed("search offers", "answer is not an object");
  const json::value* offers = top->if_contains("offers");
  if (!offers || !offers->is_array()) return Malformed("search offers", "no \"offers\" array");
  std::vector<Offer> out;
  out.reserve(offers->get_array().size());
  for (const auto& e : offers->get_array()) {
    const json::object* o = e.if_object();
    if (!o) continue;
    if (auto offer = OfferFromJson(*o)) out.push_back(std::move(*offer));
  }
  return out;
}

InstanceState StateFrom(std::string_view actual, std::string_view intended,
                        std::string_view cur_state, bool is_bid, bool* reclaimed) {
  *reclaimed = false;
  if (intended == "stopped") {
    return actual == "running" ? InstanceState::kStopping : InstanceState::kTerminated;
  }
  if (actual == "running") return InstanceState::kRunning;
  // Not started yet: a new instance is "created" (or has no status) with cur_state "stopped".
  if (actual.empty() || actual == "created" || actual == "loading" || actual == "scheduling") {
    return InstanceState::kPending;
  }
  if (is_bid && cur_state == "stopped") {
    // Meant to run, stopped by the host after it ran: an interruptible instance that was outbid.
    *reclaimed = true;
    return InstanceState::kTerminated;
  }
  // openapi.yaml: "if actual_status becomes exited, unknown, or offline it will never reach
  // running"; exited is final, the other two may be a host that went away for a while.
  if (actual == "exited") return InstanceState::kTerminated;
  return InstanceState::kUnknown;
}

// Instance fields as openapi.yaml's Instance schema and vast-cli 1.9.1 vastai/data/instance.py.
Instance InstanceFromJson(const json::object& o) {
  Instance out;
  out.provider = kVast;
  out.id = Id(o, "id").value_or("");
  DecodeLabel(StringValue(o, "label"), &out.name, &out.tags);
  std::string actual = StringValue(o, "actual_status");
  bool bid = Bool(o, "is_bid");
  out.state = StateFrom(actual, StringValue(o, "intended_status"), StringValue(o, "cur_state"), bid,
                        &out.reclaimed);
  out.provider_state = actual.empty() ? StringValue(o, "cur_state") : actual;
  out.spot = bid;
  double gpu_ram = Number(o, "gpu_ram").value_or(0) / 1024.0;
  auto gpu = NormalizeGpu(kVast, StringValue(o, "gpu_name"), gpu_ram);
  out.gpu_type = std::move(gpu.name);
  out.gpu_count = static_cast<int>(std::clamp(Number(o, "num_gpus").value_or(0), 0.0, 1024.0));
  out.region = NormalizeRegion(kVast, StringValue(o, "geolocation")).name;
  if (auto dph = Number(o, "dph_total"); dph && *dph > 0) out.price = UsdFromDouble(*dph);
  out.public_ip = StringValue(o, "public_ipaddr");
  return out;
}

Result<std::optional<Instance>> DecodeInstance(std::string_view body) {
  auto v = Parse(body, "show instance");
  if (!v.ok()) return v.error();
  const json::object* top = v->if_object();
  if (!top) return Malformed("show instance", "answer is not an object");
  const json::value* inst = top->if_contains("instances");
  if (!inst) return Malformed("show instance", "no \"instances\" field");
  if (inst->is_null()) return std::optional<Instance>();
  const json::object* o = inst->if_object();
  if (!o) return Malformed("show instance", "\"instances\" is not an object");
  Instance i = InstanceFromJson(*o);
  if (i.id.empty()) return Malformed("show instance", "instance without an id");
  return std::optional<Instance>(std::move(i));
}

Result<InstancePage> DecodeInstancePage(std::string_view body) {
  auto v = Parse(body, "show instances");
  if (!v.ok()) return v.error();
  const json::object* top = v->if_object();
  if (!top) return Malformed("show instances", "answer is not an object");
  const json::value* list = top->if_contains("instances");
  InstancePage page;
  if (list && list->is_array()) {
    for (const auto& e : list->get_array()) {
      const json::object* o = e.if_object();
      if (!o) continue;
      Instance i = InstanceFromJson(*o);
      if (!i.id.empty()) page.instances.push_back(std::move(i));
    }
  } else if (!list || !list->is_null()) {
    return Malformed("show instances", "no \"instances\" array");
  }
  page.next_token = StringValue(*top, "next_token");
  return page;
}

Result<std::string> DecodeCreate(std::string_view body) {
  auto v = Parse(body, "create instance");
  if (!v.ok()) return v.error();
  const json::object* top = v->if_object();
  if (!top) return Malformed("create instance", "answer is not an object");
  if (top->if_contains("success") && !Bool(*top, "success")) {
    return MakeError(ErrorKind::kInvalid, "vastai create instance: " + StringValue(*top, "error") +
                                              ": " + StringValue(*top, "msg"));
  }
  auto id = Id(*top, "new_contract");
  if (!id) return Malformed("create instance", "no \"new_contract\" in the answer");
  return *id;
}

// Error bodies: openapi.yaml components/schemas/Error and the per-call examples
// ({"success":false,"error":"invalid_args","msg":"..."}; 401 {"error":"auth_error","msg":"Invalid
// user key"}; 429 {"detail":"API requests too frequent endpoint threshold=2.0"} or plain text;
// create 404/410 "no_such_ask"); rate-limits-and-errors: "Some omit error and return only msg or
// message".
Error DecodeError(Call call, const net::Response& r) {
  std::string code, msg;
  boost::system::error_code ec;
  json::value v = json::parse(r.body, ec);
  if (!ec && v.is_object()) {
    const json::object& o = v.get_object();
    code = StringValue(o, "error");
    for (const char* key : {"msg", "message", "detail"}) {
      msg = StringValue(o, key);
      if (!msg.empty()) break;
    }
  } else {
    msg = r.body.substr(0, 512);
  }
  std::string text = std::string("vastai ") + CallName(call) + ": HTTP " + std::to_string(r.status);
  if (!code.empty()) text += " " + code;
  if (!msg.empty()) text += ": " + msg;
  const int s = r.status;
  if (s == 429) {
    std::optional<std::chrono::milliseconds> wait = RetryAfterHeader(r);
    if (!wait) wait = Threshold(msg);
    if (code == "search_quota_exceeded") {
      // A daily quota (vast-cli api/client.py): resets at X-RateLimit-Reset (epoch seconds).
      std::string reset = r.Header("x-ratelimit-reset");
      int64_t at = 0;
      auto [p, e] = std::from_chars(reset.data(), reset.data() + reset.size(), at);
      auto now = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
      wait = std::chrono::hours(1);
      if (e == std::errc() && p != reset.data() && at > now && at - now < int64_t{86400} * 2) {
        wait = std::chrono::seconds(at - now);
      }
    }
    return MakeError(ErrorKind::kRateLimited, text, s, wait);
  }
  // auth_error comes with 401, 403 (no key) and, on search and some other calls, 404.
  if (s == 401 || code == "auth_error") return MakeError(ErrorKind::kUnauthorized, text, s);
  if (s == 403) {
    // create: 403 invalid_args "Offer ... is not your own" is a refused request, not bad auth.
    return MakeError(code == "invalid_args" ? ErrorKind::kInvalid : ErrorKind::kUnauthorized, text,
                     s);
  }
  if (s >= 500) return MakeError(ErrorKind::kTransient, text, s);
  if (call == Call::kCreate) {
    // 404 no_such_ask "is not available", 410 no_such_ask "is no longer available", and a bid
    // under the offer's current minimum (invalid_price): this offer cannot be bought now.
    if (s == 404 || s == 410 || code == "no_such_ask" || code == "invalid_price") {
      return MakeError(ErrorKind::kCapacity, text, s);
    }
  }
  if (s == 404) {
    return MakeError(
        call == Call::kGet || call == Call::kDelete ? ErrorKind::kNotFound : ErrorKind::kInternal,
        text, s);
  }
  if (s >= 400) return MakeError(ErrorKind::kInvalid, text, s);
  return MakeError(ErrorKind::kInternal, text, s);
}

std::string EncodeLabel(std::string_view name, const std::map<std::string, std::string>& tags) {
  std::string out;
  Encode(name, &out);
  for (const auto& [k, v] : tags) {
    out.push_back(' ');
    Encode(k, &out);
    out.push_back('=');
    Encode(v, &out);
  }
  return out;
}

void DecodeLabel(std::string_view label, std::string* name,
                 std::map<std::string, std::string>* tags) {
  name->clear();
  tags->clear();
  if (label.empty()) return;
  std::map<std::string, std::string> parsed;
  std::string first, k, v;
  size_t start = 0;
  bool ours = true;
  for (size_t part = 0; ours && start <= label.size(); ++part) {
    size_t end = label.find(' ', start);
    if (end == std::string_view::npos) end = label.size();
    std::string_view token = label.substr(start, end - start);
    if (part == 0) {
      ours = Decode(token, &first);
    } else {
      size_t eq = token.find('=');
      ours = eq != std::string_view::npos && eq > 0 && Decode(token.substr(0, eq), &k) &&
             Decode(token.substr(eq + 1), &v);
      if (ours) parsed[k] = v;
    }
    start = end + 1;
  }
  if (!ours) {
    *name = std::string(label);  // someone else's label: all of it is the name
    return;
  }
  *name = std::move(first);
  *tags = std::move(parsed);
}

}  // namespace hyperslice::gpu::providers::vast
