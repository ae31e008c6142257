#include "src/gpu/providers/lambda/decode.h"

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/gpu/normalize.h"

namespace hyperslice::gpu::providers::lambda {

namespace json = boost::json;
using jsonfield::StringValue;

namespace {

Error Bad(std::string_view what, std::string_view why) {
  return MakeError(ErrorKind::kInternal,
                   std::string(kLambda) + " " + std::string(what) + ": " + std::string(why));
}

// An integer as the schema declares it; JSON numbers written with a fraction or exponent that are
// whole are accepted too (a proxy may re-serialise them). nullopt: absent or not a whole number.
// Not jsonfield::IntField: a double is taken only within ±9e15, where it is exact.
std::optional<int64_t> Int(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64()) {
    if (v->get_uint64() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(v->get_uint64());
  }
  if (v->is_double()) {
    double d = v->get_double();
    if (!(d >= -9e15 && d <= 9e15) || d != static_cast<double>(static_cast<int64_t>(d))) {
      return std::nullopt;
    }
    return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

// Parses a body and returns its "data" member.
Result<json::value> Data(std::string_view body, std::string_view what) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return Bad(what, "response is not JSON: " + ec.message());
  const auto* o = v.if_object();
  if (o == nullptr) return Bad(what, "response is not a JSON object");
  const auto* data = o->if_contains("data");
  if (data == nullptr) return Bad(what, "response has no \"data\"");
  return *data;
}

// "A100 (40 GB SXM4)" -> 40; "GH200 (96 GB)" -> 96; 0 when the description names no size.
double GpuMemoryGib(std::string_view description) {
  size_t gb = description.find(" GB");
  if (gb == std::string_view::npos) return 0;
  size_t start = gb;
  while (start > 0 && ((description[start - 1] >= '0' && description[start - 1] <= '9') ||
                       description[start - 1] == '.')) {
    --start;
  }
  if (start == gb) return 0;
  double value = 0, scale = 0;
  for (size_t i = start; i < gb; ++i) {
    if (description[i] == '.') {
      if (scale > 0) return 0;
      scale = 1;
      continue;
    }
    int d = description[i] - '0';
    if (scale > 0) {
      scale /= 10;
      value += d * scale;
    } else {
      value = value * 10 + d;
    }
    if (value > 1e6) return 0;
  }
  return value;
}

// NormalizeGpu on a name from the wire. The tables' canonical key uses std::regex and std::stod,
// which can throw (a 400-digit "memory size") or recurse deeply on a long string, so an
// implausible name is kept as spelt (unknown) and nothing thrown leaves the decoder.
Normalized Gpu(std::string_view name, double memory_gib) {
  if (name.size() > 128) return {std::string(name), false};
  try {
    return NormalizeGpu(kLambda, name, memory_gib);
  } catch (const std::exception&) {
    return {std::string(name), false};
  }
}

Normalized Region(std::string_view name) {
  if (name.size() > 128) return {std::string(name), false};
  try {
    return NormalizeRegion(kLambda, name);
  } catch (const std::exception&) {
    return {std::string(name), false};
  }
}

// Lambda prices are whole US cents per hour.
MicroUsd FromCents(int64_t cents) { return cents * 10'000; }

struct TypeInfo {
  std::string name, description, gpu_description;
  int64_t price_cents = 0;
  int64_t vcpus = 0, memory_gib = 0, storage_gib = 0, gpus = 0;
};

// InstanceType (OpenAPI 1.8.3): name, description, gpu_description, price_cents_per_hour and
// specs{vcpus, memory_gib, storage_gib, gpus} are all required; the descriptions are tolerated
// absent (they are only shown), the rest are not.
Result<TypeInfo> DecodeType(const json::value& v, std::string_view what) {
  const auto* o = v.if_object();
  if (o == nullptr) return Bad(what, "instance_type is not an object");
  TypeInfo t;
  t.name = StringValue(*o, "name");
  if (t.name.empty()) return Bad(what, "instance_type has no name");
  t.description = StringValue(*o, "description");
  t.gpu_description = StringValue(*o, "gpu_description");
  auto price = Int(*o, "price_cents_per_hour");
  if (!price || *price < 0) {
    return Bad(what, "instance type " + t.name + ": price_cents_per_hour is not a whole number");
  }
  t.price_cents = *price;
  const auto* specs = o->if_contains("specs");
  if (specs == nullptr || !specs->is_object()) {
    return Bad(what, "instance type " + t.name + " has no specs");
  }
  const auto& s = specs->get_object();
  auto vcpus = Int(s, "vcpus"), mem = Int(s, "memory_gib"), disk = Int(s, "storage_gib"),
       gpus = Int(s, "gpus");
  if (!vcpus || !mem || !disk || !gpus || *vcpus < 0 || *mem < 0 || *disk < 0 || *gpus < 0 ||
      *gpus > 1024 || *vcpus > 1'000'000) {
    return Bad(what, "instance type " + t.name + ": specs are not whole non-negative numbers");
  }
  t.vcpus = *vcpus;
  t.memory_gib = *mem;
  t.storage_gib = *disk;
  t.gpus = *gpus;
  return t;
}

InstanceState StateOf(std::string_view status, bool* reclaimed) {
  // InstanceStatus (OpenAPI 1.8.3): booting, active, unhealthy, terminated, terminating, preempted.
  if (status == "booting") return InstanceState::kPending;
  if (status == "active") return InstanceState::kRunning;
  if (status == "terminating") return InstanceState::kStopping;
  if (status == "terminated") return InstanceState::kTerminated;
  if (status == "preempted") {
    *reclaimed = true;
    return InstanceState::kTerminated;
  }
  // "unhealthy": it exists and is billed but is not known to work; the caller waits or replaces.
  return InstanceState::kUnknown;
}

Result<Instance> InstanceFromJson(const json::value& v, std::string_view what) {
  const auto* o = v.if_object();
  if (o == nullptr) return Bad(what, "an instance is not an object");
  Instance inst;
  inst.provider = kLambda;
  inst.id = StringValue(*o, "id");
  if (inst.id.empty()) return Bad(what, "an instance has no id");
  inst.name = StringValue(*o, "name");
  const auto* status = o->if_contains("status");
  if (status == nullptr || !status->is_string()) {
    return Bad(what, "instance " + inst.id + " has no status");
  }
  inst.provider_state = std::string(status->get_string());
  inst.state = StateOf(inst.provider_state, &inst.reclaimed);
  inst.public_ip = StringValue(*o, "ip");
  if (const auto* region = o->if_contains("region"); region && region->is_object()) {
    auto n = Region(StringValue(region->get_object(), "name"));
    inst.region = n.name;
  }
  if (const auto* type = o->if_contains("instance_type"); type && type->is_object()) {
    auto t = DecodeType(*type, what);
    if (!t.ok()) return t.error();
    inst.offer_id = t->name;
    inst.gpu_count = static_cast<int>(t->gpus);
    inst.gpu_type = Gpu(t->gpu_description, GpuMemoryGib(t->gpu_description)).name;
    inst.price = FromCents(t->price_cents);
  } else {
    return Bad(what, "instance " + inst.id + " has no instance_type");
  }
  if (const auto* tags = o->if_contains("tags"); tags != nullptr) {
    const auto* arr = tags->if_array();
    if (arr == nullptr) return Bad(what, "instance " + inst.id + ": tags is not an array");
    for (const auto& t : *arr) {
      const auto* to = t.if_object();
      if (to == nullptr) return Bad(what, "instance " + inst.id + ": a tag is not an object");
      const auto* key = to->if_contains("key");
      const auto* value = to->if_contains("value");
      if (key == nullptr || !key->is_string() || value == nullptr || !value->is_string()) {
        return Bad(what, "instance " + inst.id + ": a tag without a string key and value");
      }
      inst.tags[DecodeTagKey(key->get_string())] = std::string(value->get_string());
    }
  }
  return inst;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool Plain(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }

// The kind of a Lambda error: by its code first (OpenAPI 1.8.3's ApiError* codes), by the HTTP
// status when there is no code Lambda documents.
ErrorKind KindOfAnswer(int status, std::string_view code) {
  auto starts = [&](std::string_view prefix) { return code.substr(0, prefix.size()) == prefix; };
  if (status == 429) return ErrorKind::kRateLimited;
  if (code == "global/invalid-api-key" || code == "global/account-inactive" ||
      code == "global/invalid-address") {
    return ErrorKind::kUnauthorized;
  }
  // A quota is an account limit, not a malformed request: like Karpenter's unfulfillable
  // capacity, this offer cannot be bought now and another provider's may.
  if (code == "instance-operations/launch/insufficient-capacity" ||
      code == "global/quota-exceeded") {
    return ErrorKind::kCapacity;
  }
  if (code == "global/object-does-not-exist") return ErrorKind::kNotFound;
  if (code == "global/invalid-parameters" || code == "global/duplicate" ||
      starts("instance-operations/")) {
    return ErrorKind::kInvalid;
  }
  if (code == "global/internal-error" || code == "global/unknown" || starts("provider/")) {
    return ErrorKind::kTransient;
  }
  if (status == 401 || status == 403) return ErrorKind::kUnauthorized;
  if (status == 404) return ErrorKind::kNotFound;
  if (status == 400 || status == 409 || status == 422) return ErrorKind::kInvalid;
  if (status >= 500) return ErrorKind::kTransient;
  return ErrorKind::kInternal;
}

}  // namespace

Result<std::vector<Offer>> DecodeInstanceTypes(std::string_view body) {
  constexpr std::string_view kWhat = "instance-types";
  auto data = Data(body, kWhat);
  if (!data.ok()) return data.error();
  const auto* types = data->if_object();
  if (types == nullptr) return Bad(kWhat, "\"data\" is not an object keyed by instance type");
  std::vector<Offer> out;
  for (const auto& [key, item] : *types) {
    const auto* io = item.if_object();
    if (io == nullptr) return Bad(kWhat, "entry " + std::string(key) + " is not an object");
    const auto* type = io->if_contains("instance_type");
    if (type == nullptr) return Bad(kWhat, "entry " + std::string(key) + " has no instance_type");
    auto t = DecodeType(*type, kWhat);
    if (!t.ok()) return t.error();
    const auto* regions = io->if_contains("regions_with_capacity_available");
    if (regions == nullptr || !regions->is_array()) {
      return Bad(kWhat, "instance type " + t->name +
                            ": regions_with_capacity_available is not "
                            "an array");
    }
    if (t->gpus == 0) continue;
    double gpu_memory = GpuMemoryGib(t->gpu_description);
    auto gpu = Gpu(t->gpu_description, gpu_memory);
    for (const auto& r : regions->get_array()) {
      const auto* ro = r.if_object();
      std::string region_name = ro ? StringValue(*ro, "name") : std::string();
      if (region_name.empty()) {
        return Bad(kWhat, "instance type " + t->name + ": a region without a name");
      }
      Offer offer;
      offer.provider = kLambda;
      offer.id = t->name;
      offer.gpu_type = gpu.name;
      offer.gpu_type_known = gpu.known;
      offer.provider_gpu_name = t->gpu_description;
      offer.gpu_count = static_cast<int>(t->gpus);
      offer.gpu_memory_gib = gpu_memory;
      offer.vcpus = static_cast<int>(t->vcpus);
      offer.memory_gib = static_cast<double>(t->memory_gib);
      offer.disk_gib = static_cast<double>(t->storage_gib);
      auto region = Region(region_name);
      offer.region = region.name;
      offer.region_known = region.known;
      offer.provider_region = region_name;
      offer.on_demand_price = FromCents(t->price_cents);
      offer.available = 1;
      offer.boot = BootKind::kUserData;
      if (!t->description.empty()) offer.attributes["description"] = t->description;
      if (std::string d = StringValue(*ro, "description"); !d.empty()) {
        offer.attributes["region_description"] = d;
      }
      out.push_back(std::move(offer));
    }
  }
  return out;
}

Result<Instance> DecodeInstance(std::string_view body) {
  auto data = Data(body, "instance");
  if (!data.ok()) return data.error();
  return InstanceFromJson(*data, "instance");
}

Result<std::vector<Instance>> DecodeInstances(std::string_view body) {
  constexpr std::string_view kWhat = "instances";
  auto data = Data(body, kWhat);
  if (!data.ok()) return data.error();
  const auto* arr = data->if_array();
  if (arr == nullptr) return Bad(kWhat, "\"data\" is not an array");
  std::vector<Instance> out;
  out.reserve(arr->size());
  for (const auto& v : *arr) {
    auto inst = InstanceFromJson(v, kWhat);
    if (!inst.ok()) return inst.error();
    out.push_back(std::move(*inst));
  }
  return out;
}

Result<std::vector<std::string>> DecodeLaunch(std::string_view body) {
  constexpr std::string_view kWhat = "launch";
  auto data = Data(body, kWhat);
  if (!data.ok()) return data.error();
  const auto* o = data->if_object();
  const auto* ids = o ? o->if_contains("instance_ids") : nullptr;
  if (ids == nullptr || !ids->is_array()) return Bad(kWhat, "no instance_ids in the answer");
  std::vector<std::string> out;
  for (const auto& id : ids->get_array()) {
    if (!id.is_string() || id.get_string().empty())
      return Bad(kWhat, "an instance id is not a string");
    out.emplace_back(id.get_string());
  }
  if (out.empty()) return Bad(kWhat, "instance_ids is empty");
  return out;
}

Error DecodeError(const net::Response& response) {
  const int status = response.status;
  std::string code, message, suggestion;
  boost::system::error_code ec;
  json::value v = json::parse(response.body, ec);
  if (!ec) {
    if (const auto* o = v.if_object()) {
      if (const auto* e = o->if_contains("error"); e && e->is_object()) {
        code = StringValue(e->get_object(), "code");
        message = StringValue(e->get_object(), "message");
        suggestion = StringValue(e->get_object(), "suggestion");
      }
    }
  }
  std::string text = std::string(kLambda) + ": ";
  if (!code.empty()) {
    text += code + ": " + (message.empty() ? "(no message)" : message);
    if (!suggestion.empty()) text += " (" + suggestion + ")";
  } else {
    // Not Lambda's JSON: the edge (rate limiting answers "error code: 1015") or a proxy.
    std::string snippet = response.body.substr(0, 200);
    for (auto& c : snippet) {
      if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    }
    text += "HTTP " + std::to_string(status) + (snippet.empty() ? "" : ": " + snippet);
  }

  ErrorKind kind = KindOfAnswer(status, code);
  // A 5xx is transient whatever code it carries (the ApiCaller's ambiguity rule needs it).
  if (status >= 500 && kind != ErrorKind::kRateLimited) kind = ErrorKind::kTransient;
  return MakeError(kind, std::move(text), status);
}

Result<std::string> EncodeTagKey(std::string_view key) {
  auto bad = [&](std::string why) {
    return MakeError(ErrorKind::kInvalid, std::string(kLambda) + ": tag key \"" + std::string(key) +
                                              "\" " + std::move(why));
  };
  if (key.size() < 2) return bad("is shorter than the 2 characters Lambda requires");
  if (key[0] < 'a' || key[0] > 'z') return bad("must start with a lower-case letter on Lambda");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (char c : key) {
    if (Plain(c)) {
      out.push_back(c);
    } else {
      auto u = static_cast<unsigned char>(c);
      out.push_back(':');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xf]);
    }
  }
  if (out.size() > kMaxTagKeyBytes) {
    return bad("is longer than Lambda's " + std::to_string(kMaxTagKeyBytes) +
               " characters once escaped (" + out + ")");
  }
  return out;
}

std::string DecodeTagKey(std::string_view wire) {
  std::string out;
  for (size_t i = 0; i < wire.size(); ++i) {
    if (wire[i] != ':') {
      out.push_back(wire[i]);
      continue;
    }
    // Only an escape EncodeTagKey could have written: two hex digits naming a byte outside
    // [a-z0-9-]. Anything else is a literal ':' and the key is returned as it is.
    int hi = i + 2 < wire.size() ? HexValue(wire[i + 1]) : -1;
    int lo = hi >= 0 ? HexValue(wire[i + 2]) : -1;
    if (hi < 0 || lo < 0 || Plain(static_cast<char>(hi * 16 + lo))) return std::string(wire);
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

}  // namespace hyperslice::gpu::providers::lambda
