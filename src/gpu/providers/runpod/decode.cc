// RunPod response decoders (decode.h). Field names and shapes: runpod-python 1.12.0
// (runpod/api/queries/{gpus,pods,user}.py, mutations/pods.py), the RunPod docs
// (sdks/graphql/manage-pods.mdx: lowestPrice fields stockStatus, maxUnreservedGpuCount,
// availableGpuCounts; pod env as ["KEY=value"]; runtime ports) and the published schema types
// (Pod.podType INTERRUPTABLE|RESERVED|BID|BACKGROUND, Pod.desiredStatus CREATED|RUNNING|RESTARTING|
// EXITED|PAUSED|DEAD|TERMINATED, PodMachineInfo.gpuTypeId/dataCenterId, DataCenter.location).
#include "src/gpu/providers/runpod/decode.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/gpu/normalize.h"
#include "src/net/http.h"

namespace hyperslice::gpu::providers::runpod {

namespace json = boost::json;
// GraphQL answers null for an unset field; these accessors read null as absent.
namespace jf = jsonfield;

namespace {

// A count from the API: finite, in int range, else nullopt.
std::optional<int> Count(std::optional<double> d) {
  if (!d || !std::isfinite(*d) || *d < 0 || *d > 1e6) return std::nullopt;
  return static_cast<int>(*d);
}
std::optional<MicroUsd> Price(const json::object& o, std::string_view k) {
  auto d = jf::NumberField(o, k);
  if (!d || !std::isfinite(*d) || *d < 0 || *d > 1e6) return std::nullopt;
  return UsdFromDouble(*d);
}

Result<json::object> ParseBody(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) {
    return MakeError(ErrorKind::kInternal, "runpod: response is not a JSON object");
  }
  return std::move(v.get_object());
}

// The "data" object of a 200 answer without errors.
Result<json::object> Data(std::string_view body) {
  auto o = ParseBody(body);
  if (!o.ok()) return o.error();
  if (const json::array* errs = jf::ArrayField(*o, "errors"); errs && !errs->empty()) {
    return ClassifyErrors(body, 200);
  }
  const json::object* data = jf::ObjectField(*o, "data");
  if (!data) return MakeError(ErrorKind::kInternal, "runpod: response has no data");
  return *data;
}

bool HexDigit(char c, int* out) {
  if (c >= '0' && c <= '9')
    *out = c - '0';
  else if (c >= 'a' && c <= 'f')
    *out = c - 'a' + 10;
  else if (c >= 'A' && c <= 'F')
    *out = c - 'A' + 10;
  else
    return false;
  return true;
}

std::optional<std::string> PercentDecode(std::string_view s) {
  std::string out;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '%') {
      int hi = 0, lo = 0;
      if (k + 2 >= s.size()) return std::nullopt;
      if (!HexDigit(s[k + 1], &hi) || !HexDigit(s[k + 2], &lo)) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      k += 2;
    } else if (s[k] == '+') {
      out += ' ';
    } else {
      out += s[k];
    }
  }
  return out;
}

InstanceState StateOf(const std::string& desired, bool has_runtime) {
  if (desired == "CREATED" || desired == "RESTARTING") return InstanceState::kPending;
  if (desired == "RUNNING") return has_runtime ? InstanceState::kRunning : InstanceState::kPending;
  if (desired == "EXITED" || desired == "PAUSED" || desired == "DEAD") {
    return InstanceState::kTerminated;
  }
  if (desired == "TERMINATED") {
    return has_runtime ? InstanceState::kStopping : InstanceState::kTerminated;
  }
  return InstanceState::kUnknown;
}

}  // namespace

std::string EncodeTags(const std::map<std::string, std::string>& tags) {
  std::string out;
  for (const auto& [k, v] : tags) {
    if (!out.empty()) out += '&';
    out += net::UrlEncode(k) + "=" + net::UrlEncode(v);
  }
  return out;
}

std::map<std::string, std::string> DecodeTags(std::string_view encoded) {
  std::map<std::string, std::string> out;
  while (!encoded.empty()) {
    size_t amp = encoded.find('&');
    std::string_view pair = encoded.substr(0, amp);
    encoded = amp == std::string_view::npos ? std::string_view() : encoded.substr(amp + 1);
    size_t eq = pair.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    auto k = PercentDecode(pair.substr(0, eq));
    auto v = PercentDecode(pair.substr(eq + 1));
    if (k && v && !k->empty()) out[*k] = *v;
  }
  return out;
}

std::string GraphQLString(std::string_view s) {
  // JSON string escaping is valid GraphQL string escaping (GraphQL spec §2.9.4 StringCharacter).
  return json::serialize(json::value(json::string(s)));
}

std::string GraphQLUsd(MicroUsd value) {
  if (value < 0) value = 0;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%lld.%06lld", static_cast<long long>(value / 1000000),
                static_cast<long long>(value % 1000000));
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s += '0';
  return s;
}

Error ClassifyErrors(std::string_view body, int http_status) {
  auto o = ParseBody(body);
  const json::array* errs = o.ok() ? jf::ArrayField(*o, "errors") : nullptr;
  const json::object* first = errs && !errs->empty() ? (*errs)[0].if_object() : nullptr;
  if (!first) {
    return MakeError(
        ErrorKind::kInternal,
        "runpod: error answer without a GraphQL error (HTTP " + std::to_string(http_status) + ")",
        http_status);
  }
  std::string message = jf::StringValue(*first, "message");
  std::string code;
  if (const json::object* ext = jf::ObjectField(*first, "extensions"))
    code = jf::StringValue(*ext, "code");
  std::string text = "runpod: " + (message.empty() ? std::string("(no message)") : message);
  if (!code.empty()) text += " [" + code + "]";
  if (code == "UNAUTHENTICATED" || code == "FORBIDDEN") {
    return MakeError(ErrorKind::kUnauthorized, text, http_status);
  }
  if (code == "GRAPHQL_PARSE_FAILED" || code == "GRAPHQL_VALIDATION_FAILED" ||
      code == "BAD_USER_INPUT" || code == "BAD_REQUEST") {
    return MakeError(ErrorKind::kInvalid, text, http_status);
  }
  if (code == "TOO_MANY_REQUESTS") return MakeError(ErrorKind::kRateLimited, text, http_status);
  // RunPod gives these two answers without a code; each is a fixed sentence, matched exactly
  // (whole message, or the fixed prefix its variants share), never by searching free text.
  // "Unauthorized": a key without the needed permission (skypilot-org/skypilot issue #8411,
  // runpod-python QueryError). The capacity sentence has three observed endings ("...requested
  // specifications. Please refresh and try again.", "...request specifications. Please try again
  // later.", "...with enough disk space.": runpodctl #189, dstack #1740, runpod-python #297).
  if (message == "Unauthorized") return MakeError(ErrorKind::kUnauthorized, text, http_status);
  constexpr std::string_view kCapacityPrefix = "There are no longer any instances available";
  if (message.rfind(kCapacityPrefix, 0) == 0) {
    return MakeError(ErrorKind::kCapacity, text, http_status);
  }
  return MakeError(ErrorKind::kInternal, text, http_status);
}

Error DecodeHttpError(int status, std::string_view body) {
  std::string snippet(body.substr(0, 200));
  if (status == 401 || status == 403) {
    return MakeError(ErrorKind::kUnauthorized,
                     "runpod: API key refused (HTTP " + std::to_string(status) + ")", status);
  }
  if (status == 429) {
    return MakeError(ErrorKind::kRateLimited, "runpod: rate limited (HTTP 429)", status);
  }
  if (status >= 500) {
    return MakeError(ErrorKind::kTransient,
                     "runpod: HTTP " + std::to_string(status) + ": " + snippet, status);
  }
  Error e = ClassifyErrors(body, status);
  if (KindOf(e) == ErrorKind::kInternal) {
    return MakeError(ErrorKind::kInvalid, "runpod: HTTP " + std::to_string(status) + ": " + snippet,
                     status);
  }
  return e;
}

std::optional<Error> ErrorsIn(std::string_view body) {
  auto o = ParseBody(body);
  if (!o.ok()) return std::nullopt;
  const json::array* errs = jf::ArrayField(*o, "errors");
  if (!errs || errs->empty()) return std::nullopt;
  return ClassifyErrors(body, 200);
}

Result<std::vector<DataCenter>> DecodeDataCenters(std::string_view body) {
  auto data = Data(body);
  if (!data.ok()) return data.error();
  const json::array* dcs = jf::ArrayField(*data, "dataCenters");
  if (!dcs) return MakeError(ErrorKind::kInternal, "runpod: dataCenters missing");
  std::vector<DataCenter> out;
  for (const auto& v : *dcs) {
    const json::object* o = v.if_object();
    if (!o) continue;
    DataCenter d{jf::StringValue(*o, "id"), jf::StringValue(*o, "location")};
    if (!d.id.empty()) out.push_back(std::move(d));
  }
  return out;
}

Result<std::vector<Offer>> DecodeOffers(std::string_view body, const std::string& data_center_id) {
  auto data = Data(body);
  if (!data.ok()) return data.error();
  const json::array* types = jf::ArrayField(*data, "gpuTypes");
  if (!types) return MakeError(ErrorKind::kInternal, "runpod: gpuTypes missing");
  std::vector<Offer> out;
  for (const auto& v : *types) {
    const json::object* g = v.if_object();
    if (!g) continue;
    std::string id = jf::StringValue(*g, "id");
    const json::object* lp = jf::ObjectField(*g, "lowestPrice");
    if (id.empty() || !lp) continue;
    auto per_gpu = Price(*lp, "uninterruptablePrice");
    auto bid_per_gpu = Price(*lp, "minimumBidPrice");
    if ((!per_gpu || *per_gpu == 0) && (!bid_per_gpu || *bid_per_gpu == 0)) continue;
    std::vector<int> counts;
    if (const json::array* ac = jf::ArrayField(*lp, "availableGpuCounts")) {
      for (const auto& c : *ac) {
        auto n = Count(c.is_number() ? std::optional(c.to_number<double>()) : std::nullopt);
        if (n && *n >= 1 && *n <= 64) counts.push_back(*n);
      }
    } else if (!jf::StringValue(*lp, "stockStatus").empty()) {
      counts.push_back(1);
    }
    double memory = jf::NumberField(*g, "memoryInGb").value_or(0);
    if (!std::isfinite(memory) || memory < 0) memory = 0;
    auto vcpu = Count(jf::NumberField(*lp, "minVcpu"));
    auto ram = Count(jf::NumberField(*lp, "minMemory"));
    bool secure = jf::BoolField(*g, "secureCloud").value_or(false);
    bool community = jf::BoolField(*g, "communityCloud").value_or(false);
    auto gpu = NormalizeGpu(kRunPod, id, memory);
    auto region = NormalizeRegion(kRunPod, data_center_id);
    for (int n : counts) {
      Offer o;
      o.provider = kRunPod;
      o.id = id;
      o.id += "|";
      o.id += data_center_id;
      o.id += "|";
      o.id += std::to_string(n);
      o.gpu_type = gpu.name;
      o.gpu_type_known = gpu.known;
      o.provider_gpu_name = id;
      o.gpu_count = n;
      o.gpu_memory_gib = memory;
      o.vcpus = vcpu ? *vcpu * n : 0;
      o.memory_gib = ram ? static_cast<double>(*ram) * n : 0;
      o.region = region.name;
      o.region_known = region.known;
      o.provider_region = data_center_id;
      if (per_gpu && *per_gpu > 0) o.on_demand_price = *per_gpu * n;
      if (bid_per_gpu && *bid_per_gpu > 0) o.spot_price = *bid_per_gpu * n;
      // RunPod says how likely a pod is (stockStatus High/Medium/Low), never how many machines.
      o.available = -1;
      o.boot = BootKind::kContainer;
      o.attributes["gpuTypeId"] = id;
      o.attributes["dataCenterId"] = data_center_id;
      o.attributes["cloud"] = secure && community ? "all" : secure ? "secure" : "community";
      if (auto s = jf::StringValue(*lp, "stockStatus"); !s.empty()) o.attributes["stockStatus"] = s;
      out.push_back(std::move(o));
    }
  }
  return out;
}

Result<Instance> PodToInstance(const json::object& pod) {
  Instance i;
  i.provider = kRunPod;
  i.id = jf::StringValue(pod, "id");
  if (i.id.empty()) return MakeError(ErrorKind::kInternal, "runpod: pod without an id");
  i.name = jf::StringValue(pod, "name");
  i.provider_state = jf::StringValue(pod, "desiredStatus");
  const json::object* runtime = jf::ObjectField(pod, "runtime");
  i.state = StateOf(i.provider_state, runtime != nullptr);
  std::string type = jf::StringValue(pod, "podType");
  i.spot = type == "INTERRUPTABLE" || type == "BID";
  // An interruptible pod we never stop is EXITED only when RunPod took its GPU back.
  i.reclaimed = i.spot && i.provider_state == "EXITED";
  if (const json::array* env = jf::ArrayField(pod, "env")) {
    std::string prefix = std::string(kTagsEnv) + "=";
    for (const auto& e : *env) {
      if (!e.is_string()) continue;
      std::string_view s = e.get_string();
      if (s.substr(0, prefix.size()) == prefix) i.tags = DecodeTags(s.substr(prefix.size()));
    }
  }
  i.gpu_count = Count(jf::NumberField(pod, "gpuCount")).value_or(0);
  if (auto p = Price(pod, "costPerHr")) i.price = *p;
  if (const json::object* m = jf::ObjectField(pod, "machine")) {
    std::string gpu = jf::StringValue(*m, "gpuTypeId");
    std::string dc = jf::StringValue(*m, "dataCenterId");
    if (!gpu.empty()) i.gpu_type = NormalizeGpu(kRunPod, gpu, 0).name;
    if (!dc.empty()) i.region = NormalizeRegion(kRunPod, dc).name;
    if (!gpu.empty() && !dc.empty()) {
      i.offer_id = gpu + "|" + dc + "|" + std::to_string(i.gpu_count);
    }
  }
  if (runtime) {
    if (const json::array* ports = jf::ArrayField(*runtime, "ports")) {
      for (const auto& p : *ports) {
        const json::object* po = p.if_object();
        if (po && jf::BoolField(*po, "isIpPublic").value_or(false)) {
          i.public_ip = jf::StringValue(*po, "ip");
          if (!i.public_ip.empty()) break;
        }
      }
    }
  }
  return i;
}

Result<Instance> DecodePod(std::string_view body, std::string_view field) {
  auto data = Data(body);
  if (!data.ok()) return data.error();
  const json::value* pod = data->if_contains(field);
  if (!pod || pod->is_null()) return MakeError(ErrorKind::kNotFound, "runpod: no such pod");
  const json::object* o = pod->if_object();
  if (!o) return MakeError(ErrorKind::kInternal, "runpod: pod is not an object");
  return PodToInstance(*o);
}

Result<std::vector<Instance>> DecodePods(std::string_view body) {
  auto data = Data(body);
  if (!data.ok()) return data.error();
  const json::object* me = jf::ObjectField(*data, "myself");
  if (!me) return MakeError(ErrorKind::kInternal, "runpod: myself missing");
  std::vector<Instance> out;
  const json::array* pods = jf::ArrayField(*me, "pods");
  if (!pods) return out;
  for (const auto& p : *pods) {
    const json::object* o = p.if_object();
    if (!o) continue;
    auto i = PodToInstance(*o);
    if (i.ok()) out.push_back(std::move(*i));
  }
  return out;
}

Status DecodeMyself(std::string_view body) {
  auto data = Data(body);
  if (!data.ok()) return data.error();
  const json::object* me = jf::ObjectField(*data, "myself");
  if (!me || jf::StringValue(*me, "id").empty()) {
    return MakeError(ErrorKind::kUnauthorized, "runpod: the API key has no account (myself null)");
  }
  return {};
}

}  // namespace hyperslice::gpu::providers::runpod
