// POST /graphql over the market: the RunPod GraphQL API as runpod-python 1.12.0
// (runpod/api/graphql.py) and hyperslice's client call it.
//
// Wire behaviour and where it comes from:
// - Auth: `Authorization: Bearer <key>` (runpod-python since PR #394) or `?api_key=<key>` (the
//   RunPod docs' curl examples, runpodctl api/query.go). A missing or unknown key is HTTP 401
//   (runpod-python checks exactly that status; runpodctl issue #231 shows it) with a GraphQL-shaped
//   body (the body's exact text is not published; ours is {"errors":[{"message":"Unauthorized"}]}).
// - GraphQL errors are answered as Apollo Server does: parse and validation failures are HTTP 400
//   with extensions.code GRAPHQL_PARSE_FAILED / GRAPHQL_VALIDATION_FAILED; errors raised while
//   executing (no capacity, bad bid, unknown pod) are HTTP 200 with "errors" and "data": null.
// - No capacity: RunPod's own message, "There are no longer any instances available with the
//   requested specifications. Please refresh and try again." (runpodctl issue #189,
//   mlabonne/llm-autoeval issue #3 quoting runpod-python's QueryError).
// - Rate limit (per account, Options::rate_limit_rps): HTTP 429 with Retry-After in seconds and a
//   GraphQL-shaped body. RunPod publishes no number or body for /graphql (its REST API v2 page
//   "rate-limits" describes 429 with per-user minute/hour/day windows), so the shape is ours.
// - Pods: desiredStatus CREATED (accepted) → RUNNING (runtime null while the container starts,
//   then runtime with ports) → TERMINATED while being torn down, then gone (`pod` answers null, as
//   RunPod does for a terminated pod). A reclaimed interruptible pod is EXITED and stays listed
//   until terminated. podType is INTERRUPTABLE for spot and RESERVED for on-demand.
// - Market faults by root field name ("podFindAndDeployOnDemand", "myself", ...):
//   server_error 500, unavailable 503, rate_limited 429, unauthorized 401, capacity (creates: the
//   message above), swallow (do it, then drop the connection), drop (drop without doing it).
#include <algorithm>
#include <cmath>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "sim/runpod/internal.h"
#include "src/base/time.h"

namespace hyperslice::sim::runpod {

namespace json = boost::json;
using graphql::Selection;
using graphql::Value;
using market::Fault;
using market::Listing;
using market::State;

namespace {

constexpr char kNoCapacity[] =
    "There are no longer any instances available with the requested specifications. Please "
    "refresh and try again.";

// Data centers the simulator knows by name (RunPod's ids; location as its DataCenter.location).
struct DataCenterInfo {
  const char* id;
  const char* name;
  const char* location;
};
constexpr DataCenterInfo kDataCenters[] = {
    {"US-CA-2", "US-CA-2", "United States"}, {"US-TX-3", "US-TX-3", "United States"},
    {"US-KS-2", "US-KS-2", "United States"}, {"US-GA-1", "US-GA-1", "United States"},
    {"CA-MTL-1", "CA-MTL-1", "Canada"},      {"EU-RO-1", "EU-RO-1", "Romania"},
    {"EU-SE-1", "EU-SE-1", "Sweden"},        {"EUR-IS-1", "EUR-IS-1", "Iceland"},
    {"EU-NL-1", "EU-NL-1", "Netherlands"},   {"AP-JP-1", "AP-JP-1", "Japan"},
};

std::string Location(const std::string& dc) {
  for (const auto& d : kDataCenters) {
    if (dc == d.id) return d.location;
  }
  return "";
}

std::string Attr(const Listing& l, const std::string& k, const std::string& def = "") {
  auto it = l.attributes.find(k);
  return it == l.attributes.end() ? def : it->second;
}

bool Secure(const Listing& l) { return Attr(l, "secureCloud", "true") == "true"; }

double Usd(market::MicroUsd v) { return static_cast<double>(v) / 1e6; }
// Prices per GPU as RunPod shows them: dollars rounded to a tenth of a cent.
double PerGpu(market::MicroUsd whole, int gpus) {
  return std::round(Usd(whole) / std::max(1, gpus) * 1000.0) / 1000.0;
}

// The market clock's time since its epoch, written as if it were wall time (whole seconds).
std::string Iso(Clock::TimePoint t) {
  return FormatRfc3339(std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch())));
}

std::string StockStatus(int available_machines) {
  if (available_machines <= 0) return "";
  if (available_machines <= 2) return "Low";
  if (available_machines <= 5) return "Medium";
  return "High";
}

// FNV-1a: stable machine ids per listing.
uint64_t Hash(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}
std::string Base36(uint64_t v, size_t len) {
  static const char kAlpha[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string s;
  for (size_t k = 0; k < len; ++k) {
    s += kAlpha[v % 36];
    v /= 36;
  }
  return s;
}

// A pod's `ports` ("8888/http,22/tcp", runpod-python's format): each "<port>/<http|tcp>". A TCP
// port is published on the pod's public IP with a port RunPod maps (runtime.ports publicPort; the
// container's RUNPOD_TCP_PORT_<port>); an HTTP port is served through RunPod's proxy.
struct PortSpec {
  int port = 0;
  std::string type;  // "tcp" or "http"
};
std::optional<std::vector<PortSpec>> ParsePorts(std::string_view s) {
  std::vector<PortSpec> out;
  while (!s.empty()) {
    size_t comma = s.find(',');
    std::string_view item = s.substr(0, comma);
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
    size_t slash = item.find('/');
    if (slash == std::string_view::npos || slash == 0 || slash > 5) return std::nullopt;
    PortSpec p;
    for (char c : item.substr(0, slash)) {
      if (c < '0' || c > '9') return std::nullopt;
      p.port = p.port * 10 + (c - '0');
    }
    p.type = std::string(item.substr(slash + 1));
    if (p.port < 1 || p.port > 65535 || (p.type != "tcp" && p.type != "http")) return std::nullopt;
    out.push_back(p);
  }
  return out;
}

// Projects `full` onto the selection set (only the selected fields, under their response keys,
// __typename answered from the schema). `special` computes fields that take arguments.
using Special = std::function<std::optional<json::value>(const Selection&)>;
json::value Project(const json::value& full, const std::vector<Selection>& sels,
                    const std::string& type, const Special& special = nullptr) {
  if (full.is_null()) return nullptr;
  if (full.is_array()) {
    json::array out;
    for (const auto& e : full.get_array()) out.push_back(Project(e, sels, type, special));
    return out;
  }
  if (!full.is_object()) return full;
  const auto& o = full.get_object();
  json::object out;
  for (const auto& sel : sels) {
    if (sel.name == "__typename") {
      out[sel.ResponseKey()] = type;
      continue;
    }
    if (special) {
      if (auto v = special(sel)) {
        out[sel.ResponseKey()] = std::move(*v);
        continue;
      }
    }
    auto it = o.find(sel.name);
    json::value v = it == o.end() ? json::value(nullptr) : it->value();
    const FieldDef* f = RunPodSchema().Field(type, sel.name);
    if (sel.has_selection_set && f) v = Project(v, sel.selections, f->type.name);
    out[sel.ResponseKey()] = std::move(v);
  }
  return out;
}

std::string Str(const Value* v) {
  return v && (v->kind == Value::Kind::kString || v->kind == Value::Kind::kEnum) ? v->s : "";
}
std::optional<int64_t> Int(const Value* v) {
  if (v && v->kind == Value::Kind::kInt) return v->i;
  return std::nullopt;
}
std::optional<double> Num(const Value* v) {
  if (v && v->kind == Value::Kind::kInt) return static_cast<double>(v->i);
  if (v && v->kind == Value::Kind::kFloat) return v->f;
  return std::nullopt;
}
std::optional<bool> Bool(const Value* v) {
  if (v && v->kind == Value::Kind::kBool) return v->b;
  return std::nullopt;
}

struct ExecError {
  std::string message;
  std::string code = "INTERNAL_SERVER_ERROR";
};

class Api final : public market::ProviderApi {
 public:
  explicit Api(market::Market& m) : m_(m), rng_(m.options().seed) {}

  void Handle(const net::ServerRequest& r, std::shared_ptr<net::Responder> out) override {
    if (r.path != "/graphql") {
      out->Send(404, "Cannot " + r.method + " " + r.path, {{"content-type", "text/plain"}});
      return;
    }
    if (r.method != "POST") {
      SendErrors(out, 405, {{"GraphQL requests must be POST requests.", "BAD_REQUEST"}});
      return;
    }
    std::string key = r.Query("api_key");
    std::string auth = r.Header("authorization");
    if (key.empty() && auth.rfind("Bearer ", 0) == 0) key = auth.substr(7);
    auto account = m_.Authenticate(key);
    if (!account) {
      Unauthorized(out);
      return;
    }
    if (auto wait = m_.Throttle(*account)) {
      RateLimited(out, *wait);
      return;
    }
    boost::system::error_code ec;
    json::value body = json::parse(r.body, ec);
    const json::object* req = ec ? nullptr : body.if_object();
    const json::value* q = req ? req->if_contains("query") : nullptr;
    if (!q || !q->is_string()) {
      SendErrors(out, 400,
                 {{"POST body missing, invalid Content-Type, or JSON object has no keys.",
                   "BAD_REQUEST"}});
      return;
    }
    json::object vars;
    if (const auto* v = req->if_contains("variables"); v && v->is_object()) vars = v->get_object();
    auto parsed = graphql::Parse(q->get_string(), vars);
    if (!parsed.document) {
      GqlError e{parsed.error.message, "GRAPHQL_PARSE_FAILED", {parsed.error.location}, {}};
      SendJson(out, 400, json::object{{"errors", json::array{e.ToJson()}}});
      return;
    }
    auto invalid = Validate(*parsed.document, RunPodSchema());
    if (!invalid.empty()) {
      json::array errs;
      for (const auto& e : invalid) errs.push_back(e.ToJson());
      SendJson(out, 400, json::object{{"errors", std::move(errs)}});
      return;
    }
    const auto& doc = *parsed.document;
    bool swallow = false, capacity = false;
    for (const auto& sel : doc.selections) {
      if (sel.name == "__typename") continue;
      auto fault = m_.Enter(sel.name);
      if (!fault) continue;
      switch (*fault) {
        case Fault::Kind::kDrop:
          out->Abort();
          return;
        case Fault::Kind::kSwallow:
          swallow = true;
          break;
        case Fault::Kind::kCapacity:
          capacity = true;
          break;
        case Fault::Kind::kUnauthorized:
          Unauthorized(out);
          return;
        case Fault::Kind::kRateLimited:
          RateLimited(out, std::chrono::milliseconds(1000));
          return;
        case Fault::Kind::kUnavailable:
          out->Send(503, "upstream connect error or disconnect/reset before headers",
                    {{"content-type", "text/plain"}});
          return;
        case Fault::Kind::kServerError:
          SendErrors(out, 500, {{"Internal server error", "INTERNAL_SERVER_ERROR"}});
          return;
      }
    }
    json::object data;
    std::vector<GqlError> errors;
    bool mutation = doc.operation == graphql::Document::Operation::kMutation;
    for (const auto& sel : doc.selections) {
      if (sel.name == "__typename") {
        data[sel.ResponseKey()] = mutation ? "Mutation" : "Query";
        continue;
      }
      std::optional<ExecError> err;
      json::value v = mutation ? Mutate(sel, *account, capacity, &err) : Query(sel, *account);
      if (err) {
        errors.push_back({err->message, err->code, {sel.location}, {sel.ResponseKey()}});
        v = nullptr;
      }
      data[sel.ResponseKey()] = std::move(v);
    }
    if (swallow) {
      out->Abort();
      return;
    }
    if (!errors.empty()) {
      json::array errs;
      for (const auto& e : errors) errs.push_back(e.ToJson());
      SendJson(out, 200, json::object{{"errors", std::move(errs)}, {"data", nullptr}});
      return;
    }
    SendJson(out, 200, json::object{{"data", std::move(data)}});
  }

 private:
  static void SendJson(const std::shared_ptr<net::Responder>& out, int status, const json::value& v,
                       net::Headers h = {}) {
    out->Send(status, json::serialize(v), std::move(h));
  }
  static void SendErrors(const std::shared_ptr<net::Responder>& out, int status,
                         const std::vector<std::pair<std::string, std::string>>& errs) {
    json::array a;
    for (const auto& [m, c] : errs) a.push_back(GqlError{m, c, {}, {}}.ToJson());
    SendJson(out, status, json::object{{"errors", std::move(a)}});
  }
  static void Unauthorized(const std::shared_ptr<net::Responder>& out) {
    SendJson(out, 401,
             json::object{{"errors", json::array{json::object{{"message", "Unauthorized"}}}}});
  }
  static void RateLimited(const std::shared_ptr<net::Responder>& out,
                          std::chrono::milliseconds wait) {
    auto secs = std::max<int64_t>(1, (wait.count() + 999) / 1000);
    json::object e{{"message", "Too many requests, please try again later."},
                   {"extensions", json::object{{"code", "TOO_MANY_REQUESTS"}}}};
    SendJson(out, 429, json::object{{"errors", json::array{std::move(e)}}},
             {{"retry-after", std::to_string(secs)}});
  }

  // ---- queries ----
  json::value Query(const Selection& sel, const std::string& account) {
    if (sel.name == "gpuTypes") return GpuTypes(sel);
    if (sel.name == "dataCenters") return DataCenters(sel);
    if (sel.name == "myself") return Myself(sel, account);
    if (sel.name == "pod") {
      const Value* in = sel.Arg("input");
      auto pod = FindPod(Str(in ? in->Field("podId") : nullptr), account);
      if (!pod) return nullptr;
      return Project(PodJson(*pod), sel.selections, "Pod");
    }
    return nullptr;
  }

  json::value GpuTypes(const Selection& sel) {
    const Value* in = sel.Arg("input");
    std::set<std::string> want;
    if (in) {
      if (auto id = Str(in->Field("id")); !id.empty()) want.insert(id);
      if (const Value* ids = in->Field("ids"); ids && ids->kind == Value::Kind::kList) {
        for (const auto& e : ids->list) want.insert(e.s);
      }
    }
    auto listings = m_.Listings();
    std::map<std::string, std::vector<Listing>> by_type;
    for (auto& l : listings) by_type[l.gpu_name].push_back(l);
    json::array out;
    for (const auto& [id, ls] : by_type) {
      if (!want.empty() && !want.count(id)) continue;
      const Listing& first = ls.front();
      json::object g{{"id", id},
                     {"displayName", Attr(first, "displayName", id)},
                     {"manufacturer", Attr(first, "manufacturer", "Nvidia")},
                     {"memoryInGb", static_cast<int64_t>(first.gpu_memory_gb)},
                     {"cudaCores", std::stoll(Attr(first, "cudaCores", "0"))},
                     {"minPodGpuCount", 1},
                     {"oneWeekPrice", nullptr},
                     {"oneMonthPrice", nullptr},
                     {"threeMonthPrice", nullptr},
                     {"sixMonthPrice", nullptr},
                     {"clusterPrice", nullptr}};
      int max_all = 0, max_secure = 0, max_community = 0;
      std::optional<double> secure, community, secure_spot, community_spot;
      auto lower = [](std::optional<double>& slot, double v) {
        if (!slot || v < *slot) slot = v;
      };
      for (const auto& l : ls) {
        bool s = Secure(l);
        max_all = std::max(max_all, l.gpu_count);
        (s ? max_secure : max_community) = std::max(s ? max_secure : max_community, l.gpu_count);
        if (l.price > 0) lower(s ? secure : community, PerGpu(l.price, l.gpu_count));
        if (l.spot_price)
          lower(s ? secure_spot : community_spot, PerGpu(*l.spot_price, l.gpu_count));
      }
      auto opt = [](const std::optional<double>& v) { return v ? json::value(*v) : json::value(); };
      g["secureCloud"] = max_secure > 0;
      g["communityCloud"] = max_community > 0;
      g["maxGpuCount"] = max_all;
      g["maxGpuCountSecureCloud"] = max_secure;
      g["maxGpuCountCommunityCloud"] = max_community;
      g["securePrice"] = opt(secure);
      g["communityPrice"] = opt(community);
      g["secureSpotPrice"] = opt(secure_spot);
      g["communitySpotPrice"] = opt(community_spot);
      std::string type_id = id;
      auto special = [this, type_id](const Selection& s) -> std::optional<json::value> {
        if (s.name != "lowestPrice") return std::nullopt;
        return LowestPrice(type_id, s);
      };
      out.push_back(Project(g, sel.selections, "GpuType", special));
    }
    return out;
  }

  // lowestPrice(input: GpuLowestPriceInput): the cheapest matching listing's per-GPU prices and
  // stock for `gpuCount` GPUs (default 1), in one data center when dataCenterId is given.
  json::value LowestPrice(const std::string& type_id, const Selection& sel) {
    const Value* in = sel.Arg("input");
    auto f = [&](const char* k) { return in ? in->Field(k) : nullptr; };
    int count = static_cast<int>(Int(f("gpuCount")).value_or(1));
    std::string dc = Str(f("dataCenterId"));
    auto secure = Bool(f("secureCloud"));
    int64_t min_vcpu = Int(f("minVcpuCount")).value_or(0);
    int64_t min_mem = Int(f("minMemoryInGb")).value_or(0);
    const Listing* best = nullptr;
    int available = 0, total = 0, max_unreserved = 0;
    std::set<int64_t> counts;
    auto listings = m_.Listings();
    for (const auto& l : listings) {
      if (l.gpu_name != type_id || (!dc.empty() && l.region != dc)) continue;
      if (secure && Secure(l) != *secure) continue;
      if (l.vcpus < min_vcpu || l.memory_gb < static_cast<double>(min_mem)) continue;
      int avail = m_.Available(l.id);
      if (avail > 0) {
        counts.insert(l.gpu_count);
        max_unreserved = std::max(max_unreserved, l.gpu_count);
      }
      if (l.gpu_count != count) continue;
      available += avail;
      total += l.capacity;
      if (l.price > 0 && (!best || l.price < best->price)) best = &l;
    }
    if (!best) return nullptr;
    json::array avail_counts;
    for (auto c : counts) avail_counts.push_back(c);
    std::string stock = StockStatus(available);
    json::object lp{
        {"gpuName", Attr(*best, "displayName", type_id)},
        {"gpuTypeId", type_id},
        {"uninterruptablePrice", PerGpu(best->price, count)},
        {"minimumBidPrice",
         best->spot_price ? json::value(PerGpu(*best->spot_price, count)) : json::value()},
        {"minVcpu", best->vcpus / std::max(1, count)},
        {"minMemory", static_cast<int64_t>(best->memory_gb) / std::max(1, count)},
        {"minDisk", static_cast<int64_t>(best->disk_gb)},
        {"minDownload", 500},
        {"minUpload", 500},
        {"rentedCount", (total - available) * count},
        {"totalCount", total * count},
        {"rentalPercentage", total ? static_cast<double>(total - available) / total : 0.0},
        {"stockStatus", stock.empty() ? json::value() : json::value(stock)},
        {"countryCode", nullptr},
        {"supportPublicIp", true},
        {"compliance", json::array{}},
        // The most GPUs one pod can get here now (one machine's free GPUs).
        {"maxUnreservedGpuCount", max_unreserved},
        {"availableGpuCounts", std::move(avail_counts)}};
    return Project(lp, sel.selections, "LowestPrice");
  }

  json::value DataCenters(const Selection& sel) {
    auto listings = m_.Listings();
    std::map<std::string, std::vector<Listing>> by_dc;
    for (auto& l : listings) by_dc[l.region].push_back(l);
    json::array out;
    for (const auto& [dc, ls] : by_dc) {
      std::map<std::string, int> avail;
      std::map<std::string, std::string> names;
      for (const auto& l : ls) {
        avail[l.gpu_name] += m_.Available(l.id);
        names[l.gpu_name] = Attr(l, "displayName", l.gpu_name);
      }
      json::array ga;
      for (const auto& [type, n] : avail) {
        std::string stock = StockStatus(n);
        ga.push_back(
            json::object{{"id", type},
                         {"gpuTypeId", type},
                         {"displayName", names[type]},
                         {"gpuTypeDisplayName", names[type]},
                         {"available", n > 0},
                         {"stockStatus", stock.empty() ? json::value() : json::value(stock)}});
      }
      json::object d{{"id", dc},
                     {"name", dc},
                     {"location", Location(dc)},
                     {"listed", true},
                     {"storageSupport", true},
                     {"compliance", json::array{}},
                     {"gpuAvailability", std::move(ga)}};
      out.push_back(Project(d, sel.selections, "DataCenter"));
    }
    return out;
  }

  json::value Myself(const Selection& sel, const std::string& account) {
    json::array pods;
    double spend = 0;
    for (const auto& i : m_.List(account)) {
      if (!Visible(i)) continue;
      if (i.state != State::kTerminated) spend += Usd(i.price);
      pods.push_back(PodJson(i));
    }
    json::object u{{"id", "user_" + Base36(Hash(account), 22)},
                   {"email", account + "@example.com"},
                   {"pubKey", ""},
                   {"clientBalance", 100.0},
                   {"currentSpendPerHr", spend},
                   {"pods", std::move(pods)},
                   {"networkVolumes", json::array{}}};
    return Project(u, sel.selections, "User");
  }

  // ---- pods ----
  bool Visible(const market::Instance& i) {
    std::lock_guard lock(mu_);
    if (deleted_.count(i.id)) return false;
    return i.state != State::kTerminated || i.reclaimed;
  }

  std::optional<market::Instance> FindPod(const std::string& id, const std::string& account) {
    auto i = m_.Get(id);
    if (!i || i->owner != account || !Visible(*i)) return std::nullopt;
    return i;
  }

  json::object PodJson(const market::Instance& i) {
    const Listing& l = i.listing;
    std::string status;
    bool runtime = false;
    switch (i.state) {
      case State::kPending:
        status = "CREATED";
        break;
      case State::kBooting:
        status = "RUNNING";
        break;
      case State::kRunning:
        status = "RUNNING";
        runtime = true;
        break;
      case State::kStopping:
        status = i.reclaimed ? "EXITED" : "TERMINATED";
        runtime = !i.reclaimed;
        break;
      case State::kTerminated:
        status = "EXITED";
        break;
    }
    auto now = m_.clock().Now();
    int64_t uptime =
        i.state == State::kRunning
            ? std::chrono::duration_cast<std::chrono::seconds>(now - i.running_since).count()
            : 0;
    json::array env;
    if (const auto* e = i.payload.if_contains("env"); e && e->is_object()) {
      for (const auto& kv : e->get_object()) {
        std::string v = kv.value().is_string() ? std::string(kv.value().get_string()) : "";
        env.push_back(json::value(std::string(kv.key()) + "=" + v));
      }
    }
    auto pstr = [&](const char* k) -> json::value {
      const auto* v = i.payload.if_contains(k);
      return v ? *v : json::value(nullptr);
    };
    std::string machine_id = Base36(Hash(l.id), 12);
    json::value rt = nullptr;
    if (runtime) {
      json::array gpus;
      for (int g = 0; g < l.gpu_count; ++g) {
        gpus.push_back(json::object{{"id", "GPU-" + Base36(Hash(i.id + std::to_string(g)), 12)},
                                    {"gpuUtilPercent", 0},
                                    {"memoryUtilPercent", 0}});
      }
      // One entry per port the create asked for: TCP ones on the public IP with the port the
      // market mapped, HTTP ones behind RunPod's proxy (a private address, not public).
      json::array ports;
      const auto* asked = i.payload.if_contains("ports");
      auto specs = asked && asked->is_string() ? ParsePorts(asked->get_string()) : std::nullopt;
      for (const auto& p : specs.value_or(std::vector<PortSpec>{})) {
        auto mapped = i.tcp_ports.find(p.port);
        bool tcp = p.type == "tcp" && mapped != i.tcp_ports.end();
        ports.push_back(json::object{
            {"ip", tcp ? i.public_ip : "100.65." + std::to_string(Hash(i.id) % 250) + ".2"},
            {"isIpPublic", tcp},
            {"privatePort", p.port},
            {"publicPort", tcp ? mapped->second : 60000 + static_cast<int>(Hash(i.id) % 5000)},
            {"type", p.type}});
      }
      rt = json::object{{"uptimeInSeconds", uptime},
                        {"ports", std::move(ports)},
                        {"gpus", std::move(gpus)},
                        {"container", json::object{{"cpuPercent", 0}, {"memoryPercent", 0}}}};
    }
    return json::object{
        {"id", i.id},
        {"name", i.name},
        {"desiredStatus", status},
        {"podType", i.spot ? "INTERRUPTABLE" : "RESERVED"},
        {"costPerHr", Usd(i.price)},
        {"adjustedCostPerHr", Usd(i.price)},
        {"gpuCount", l.gpu_count},
        {"vcpuCount", l.vcpus},
        {"memoryInGb", static_cast<int64_t>(l.memory_gb)},
        {"containerDiskInGb", pstr("containerDiskInGb")},
        {"volumeInGb", pstr("volumeInGb")},
        {"volumeMountPath", pstr("volumeMountPath")},
        {"imageName", pstr("image")},
        {"dockerArgs", pstr("args")},
        {"dockerId", nullptr},
        {"env", std::move(env)},
        {"port", nullptr},
        {"ports", pstr("ports")},
        {"lastStatusChange", status + " at " + Iso(now)},
        {"machineId", machine_id},
        {"uptimeSeconds", uptime},
        {"createdAt", Iso(i.created)},
        {"lastStartedAt",
         i.state == State::kRunning ? json::value(Iso(i.running_since)) : json::value()},
        {"templateId", pstr("templateId")},
        {"networkVolumeId", nullptr},
        {"locked", false},
        {"runtime", std::move(rt)},
        {"machine", json::object{{"id", machine_id},
                                 {"podHostId", i.id + "-" + std::to_string(Hash(i.id) % 100000000)},
                                 {"gpuDisplayName", Attr(l, "displayName", l.gpu_name)},
                                 {"gpuTypeId", l.gpu_name},
                                 {"dataCenterId", l.region},
                                 {"location", Location(l.region)},
                                 {"secureCloud", Secure(l)},
                                 {"supportPublicIp", true},
                                 {"costPerHr", Usd(i.price)},
                                 {"currentPricePerGpu", PerGpu(i.price, l.gpu_count)},
                                 {"maxDownloadSpeedMbps", 1000},
                                 {"maxUploadSpeedMbps", 1000},
                                 {"cpuCount", l.vcpus}}}};
  }

  // ---- mutations ----
  json::value Mutate(const Selection& sel, const std::string& account, bool capacity_fault,
                     std::optional<ExecError>* err) {
    const Value* in = sel.Arg("input");
    if (sel.name == "podTerminate") {
      std::string id = Str(in ? in->Field("podId") : nullptr);
      auto pod = FindPod(id, account);
      if (!pod) {
        *err = ExecError{"pod not found"};
        return nullptr;
      }
      if (pod->reclaimed || pod->state == State::kTerminated) {
        std::lock_guard lock(mu_);
        deleted_.insert(id);
      }
      m_.Terminate(id, account);
      return nullptr;
    }
    bool spot = sel.name == "podRentInterruptable";
    auto f = [&](const char* k) { return in ? in->Field(k) : nullptr; };
    std::string type_id = Str(f("gpuTypeId"));
    std::string image = Str(f("imageName"));
    if (image.empty() && Str(f("templateId")).empty()) {
      *err = ExecError{"imageName or templateId is required", "BAD_USER_INPUT"};
      return nullptr;
    }
    if (type_id.empty()) {
      *err = ExecError{"gpuTypeId is required", "BAD_USER_INPUT"};
      return nullptr;
    }
    int count = static_cast<int>(Int(f("gpuCount")).value_or(1));
    std::string dc = Str(f("dataCenterId"));
    std::string cloud = Str(f("cloudType"));
    int64_t min_vcpu = Int(f("minVcpuCount")).value_or(0);
    int64_t min_mem = Int(f("minMemoryInGb")).value_or(0);
    std::optional<market::MicroUsd> bid;
    if (spot) {
      double per_gpu = Num(f("bidPerGpu")).value_or(0);
      if (per_gpu <= 0) {
        *err = ExecError{"bidPerGpu must be greater than 0", "BAD_USER_INPUT"};
        return nullptr;
      }
      bid = static_cast<market::MicroUsd>(std::llround(per_gpu * 1e6)) * count;
    }
    // The exact message RunPod gives a malformed `ports` is not published; this one is ours.
    auto ports = ParsePorts(Str(f("ports")));
    if (!ports) {
      *err = ExecError{"ports must be a comma-separated list of <port>/http or <port>/tcp",
                       "BAD_USER_INPUT"};
      return nullptr;
    }
    if (capacity_fault) {
      *err = ExecError{kNoCapacity};
      return nullptr;
    }
    // podFindAndDeployOnDemand "finds" a machine: the cheapest matching listing with stock.
    std::optional<Listing> best;
    bool bid_too_low = false;
    for (const auto& l : m_.Listings()) {
      if (l.gpu_name != type_id || l.gpu_count != count || (!dc.empty() && l.region != dc))
        continue;
      if ((cloud == "SECURE" && !Secure(l)) || (cloud == "COMMUNITY" && Secure(l))) continue;
      if (l.vcpus < min_vcpu || l.memory_gb < static_cast<double>(min_mem)) continue;
      if (m_.Available(l.id) <= 0) continue;
      market::MicroUsd price = l.price;
      if (spot) {
        if (!l.spot_price) continue;
        if (*bid < *l.spot_price) {
          bid_too_low = true;
          continue;
        }
        price = *l.spot_price;
      } else if (l.price <= 0) {
        continue;
      }
      market::MicroUsd best_price = best ? (spot ? *best->spot_price : best->price) : 0;
      if (!best || price < best_price) best = l;
    }
    if (!best) {
      if (bid_too_low) {
        *err = ExecError{"Your bid price is below the minimum bid price for this GPU type.",
                         "BAD_USER_INPUT"};
      } else {
        *err = ExecError{kNoCapacity};
      }
      return nullptr;
    }
    market::Market::CreateSpec spec;
    spec.listing_id = best->id;
    spec.name = Str(f("name"));
    spec.owner = account;
    spec.spot = spot;
    spec.bid = bid;
    // The boot payload as the machine receives it (sim/gpumachine boots from "image" and "env").
    json::object payload{{"image", image}};
    json::object env;
    if (const Value* e = f("env"); e && e->kind == Value::Kind::kList) {
      for (const auto& item : e->list) env[Str(item.Field("key"))] = Str(item.Field("value"));
    }
    payload["env"] = std::move(env);
    payload["args"] = Str(f("dockerArgs"));
    if (auto v = Str(f("ports")); !v.empty()) payload["ports"] = v;
    if (auto v = Str(f("templateId")); !v.empty()) payload["templateId"] = v;
    if (auto v = Str(f("volumeMountPath")); !v.empty()) payload["volumeMountPath"] = v;
    if (auto v = Int(f("containerDiskInGb"))) payload["containerDiskInGb"] = *v;
    if (auto v = Int(f("volumeInGb"))) payload["volumeInGb"] = *v;
    if (auto v = Bool(f("startSsh"))) payload["startSsh"] = *v;
    payload["cloudType"] = cloud.empty() ? "ALL" : cloud;
    spec.payload = std::move(payload);
    for (const auto& p : *ports) {
      if (p.type == "tcp") spec.tcp_ports.push_back(p.port);
    }
    auto res = m_.Create(spec, [this] { return NewPodId(); });
    if (res.error != market::Market::CreateError::kNone) {
      *err = ExecError{kNoCapacity};
      return nullptr;
    }
    return Project(PodJson(res.instance), sel.selections, "Pod");
  }

  // RunPod pod ids: 14 lowercase letters and digits ("50qynxzilsxoey").
  std::string NewPodId() {
    std::lock_guard lock(mu_);
    static const char kAlpha[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    std::string id;
    std::uniform_int_distribution<int> d(0, 35);
    for (int k = 0; k < 14; ++k) id += kAlpha[d(rng_)];
    return id;
  }

  market::Market& m_;
  std::mutex mu_;
  std::mt19937_64 rng_;
  std::set<std::string> deleted_;  // reclaimed pods the user terminated (gone from the API)
};

}  // namespace

std::unique_ptr<market::ProviderApi> NewApi(market::Market& market) {
  return std::make_unique<Api>(market);
}

}  // namespace hyperslice::sim::runpod
