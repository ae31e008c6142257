#include "src/gce/compute.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "src/base/log.h"
#include "src/gce/internal/errors.h"
#include "src/gce/internal/jwt.h"

namespace hyperslice::gce {
namespace {

using Code = Error::Code;
using boost::json::object;
using Query = std::vector<std::pair<std::string, std::string>>;

std::string StringField(const object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  if (v == nullptr || !v->is_string()) return {};
  return std::string(v->as_string());
}

// The last path segment of a URL or path ("https://.../zones/us-central1-a" → "us-central1-a").
std::string LastSegment(std::string_view s) {
  auto slash = s.rfind('/');
  return std::string(slash == std::string_view::npos ? s : s.substr(slash + 1));
}

// Joins path segments, percent-encoding each.
std::string Path(std::initializer_list<std::string_view> segments) {
  std::string out;
  for (auto s : segments) {
    if (!out.empty()) out += '/';
    out += net::UrlEncode(s);
  }
  return out;
}

const char* ScopeOperations(Scope s) {
  switch (s) {
    case Scope::kZone:
      return "zoneOperations";
    case Scope::kRegion:
      return "regionOperations";
    case Scope::kGlobal:
      break;
  }
  return "globalOperations";
}

std::string OperationPath(const OperationRef& op) {
  switch (op.scope) {
    case Scope::kZone:
      return Path({"projects", op.project, "zones", op.location, "operations", op.name});
    case Scope::kRegion:
      return Path({"projects", op.project, "regions", op.location, "operations", op.name});
    case Scope::kGlobal:
      break;
  }
  return Path({"projects", op.project, "global", "operations", op.name});
}

// One REST call as the retry loop sees it.
struct Call {
  std::string method;  // counter and log name, "instances.get"
  std::string verb = "GET";
  std::string path;  // relative to the endpoint: "projects/p/zones/z/instances/i"
  Query query;
  const object* body = nullptr;
  bool mutation = false;                     // gets a requestId, the same one on every attempt
  std::chrono::milliseconds timeout{0};      // 0 = ComputeOptions::request_timeout
  std::optional<Clock::TimePoint> deadline;  // no attempt starts after it
};

class ComputeImpl final : public Compute {
 public:
  ComputeImpl(ComputeOptions o, std::shared_ptr<net::HttpClient> http)
      : opts_(std::move(o)),
        http_(std::move(http)),
        clock_(opts_.clock != nullptr ? opts_.clock : &RealClock()),
        counters_(opts_.counters != nullptr ? opts_.counters : std::make_shared<CallCounters>()),
        rng_(std::random_device{}()) {
    if (!opts_.retry.sleep) {
      opts_.retry.sleep = [](std::chrono::milliseconds d) { std::this_thread::sleep_for(d); };
    }
    if (!opts_.retry.random) {
      opts_.retry.random = [this] {
        std::lock_guard lock(rng_mu_);
        return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
      };
    }
  }

  // --- resource policies -----------------------------------------------------------------------
  Result<Operation> InsertResourcePolicy(const std::string& project, const std::string& region,
                                         const object& policy) override {
    return Mutate({.method = "resourcePolicies.insert",
                   .verb = "POST",
                   .path = Path({"projects", project, "regions", region, "resourcePolicies"}),
                   .body = &policy},
                  project, Scope::kRegion, region);
  }
  Result<object> GetResourcePolicy(const std::string& project, const std::string& region,
                                   const std::string& name) override {
    return Execute(
        {.method = "resourcePolicies.get",
         .path = Path({"projects", project, "regions", region, "resourcePolicies", name})});
  }
  Result<std::vector<object>> ListResourcePolicies(const std::string& project,
                                                   const std::string& region,
                                                   const ListOptions& options) override {
    return ListAll({.method = "resourcePolicies.list",
                    .path = Path({"projects", project, "regions", region, "resourcePolicies"})},
                   "items", options);
  }
  Result<Operation> DeleteResourcePolicy(const std::string& project, const std::string& region,
                                         const std::string& name) override {
    return Mutate(
        {.method = "resourcePolicies.delete",
         .verb = "DELETE",
         .path = Path({"projects", project, "regions", region, "resourcePolicies", name})},
        project, Scope::kRegion, region);
  }

  // --- instance templates ----------------------------------------------------------------------
  Result<Operation> InsertInstanceTemplate(const std::string& project,
                                           const object& tmpl) override {
    return Mutate({.method = "instanceTemplates.insert",
                   .verb = "POST",
                   .path = Path({"projects", project, "global", "instanceTemplates"}),
                   .body = &tmpl},
                  project, Scope::kGlobal, "");
  }
  Result<object> GetInstanceTemplate(const std::string& project, const std::string& name) override {
    return Execute({.method = "instanceTemplates.get",
                    .path = Path({"projects", project, "global", "instanceTemplates", name})});
  }
  Result<std::vector<object>> ListInstanceTemplates(const std::string& project,
                                                    const ListOptions& options) override {
    return ListAll({.method = "instanceTemplates.list",
                    .path = Path({"projects", project, "global", "instanceTemplates"})},
                   "items", options);
  }
  Result<Operation> DeleteInstanceTemplate(const std::string& project,
                                           const std::string& name) override {
    return Mutate({.method = "instanceTemplates.delete",
                   .verb = "DELETE",
                   .path = Path({"projects", project, "global", "instanceTemplates", name})},
                  project, Scope::kGlobal, "");
  }

  // --- instance group managers -----------------------------------------------------------------
  Result<Operation> InsertInstanceGroupManager(const std::string& project, const std::string& zone,
                                               const object& igm) override {
    return Mutate({.method = "instanceGroupManagers.insert",
                   .verb = "POST",
                   .path = Path({"projects", project, "zones", zone, "instanceGroupManagers"}),
                   .body = &igm},
                  project, Scope::kZone, zone);
  }
  Result<object> GetInstanceGroupManager(const std::string& project, const std::string& zone,
                                         const std::string& name) override {
    return Execute(
        {.method = "instanceGroupManagers.get",
         .path = Path({"projects", project, "zones", zone, "instanceGroupManagers", name})});
  }
  Result<std::vector<object>> ListInstanceGroupManagers(const std::string& project,
                                                        const std::string& zone,
                                                        const ListOptions& options) override {
    return ListAll({.method = "instanceGroupManagers.list",
                    .path = Path({"projects", project, "zones", zone, "instanceGroupManagers"})},
                   "items", options);
  }
  Result<Operation> DeleteInstanceGroupManager(const std::string& project, const std::string& zone,
                                               const std::string& name) override {
    return Mutate(
        {.method = "instanceGroupManagers.delete",
         .verb = "DELETE",
         .path = Path({"projects", project, "zones", zone, "instanceGroupManagers", name})},
        project, Scope::kZone, zone);
  }
  Result<Operation> ResizeInstanceGroupManager(const std::string& project, const std::string& zone,
                                               const std::string& name, int64_t size) override {
    return Mutate({.method = "instanceGroupManagers.resize",
                   .verb = "POST",
                   .path = Path({"projects", project, "zones", zone, "instanceGroupManagers", name,
                                 "resize"}),
                   .query = {{"size", std::to_string(size)}}},
                  project, Scope::kZone, zone);
  }
  Result<std::vector<object>> ListManagedInstances(const std::string& project,
                                                   const std::string& zone, const std::string& name,
                                                   const ListOptions& options) override {
    return ListAll({.method = "instanceGroupManagers.listManagedInstances",
                    .verb = "POST",
                    .path = Path({"projects", project, "zones", zone, "instanceGroupManagers", name,
                                  "listManagedInstances"})},
                   "managedInstances", options);
  }
  Result<std::vector<object>> ListInstanceGroupManagerErrors(const std::string& project,
                                                             const std::string& zone,
                                                             const std::string& name,
                                                             const ListOptions& options) override {
    return ListAll({.method = "instanceGroupManagers.listErrors",
                    .path = Path({"projects", project, "zones", zone, "instanceGroupManagers", name,
                                  "listErrors"})},
                   "items", options);
  }

  // --- instances -------------------------------------------------------------------------------
  Result<Operation> InsertInstance(const std::string& project, const std::string& zone,
                                   const object& instance) override {
    return Mutate({.method = "instances.insert",
                   .verb = "POST",
                   .path = Path({"projects", project, "zones", zone, "instances"}),
                   .body = &instance},
                  project, Scope::kZone, zone);
  }
  Result<object> GetInstance(const std::string& project, const std::string& zone,
                             const std::string& name) override {
    return Execute({.method = "instances.get",
                    .path = Path({"projects", project, "zones", zone, "instances", name})});
  }
  Result<std::vector<object>> ListInstances(const std::string& project, const std::string& zone,
                                            const ListOptions& options) override {
    return ListAll({.method = "instances.list",
                    .path = Path({"projects", project, "zones", zone, "instances"})},
                   "items", options);
  }
  Result<Operation> SetInstanceMetadata(const std::string& project, const std::string& zone,
                                        const std::string& name, const object& metadata) override {
    return Mutate(
        {.method = "instances.setMetadata",
         .verb = "POST",
         .path = Path({"projects", project, "zones", zone, "instances", name, "setMetadata"}),
         .body = &metadata},
        project, Scope::kZone, zone);
  }
  Result<Operation> DeleteInstance(const std::string& project, const std::string& zone,
                                   const std::string& name) override {
    return Mutate({.method = "instances.delete",
                   .verb = "DELETE",
                   .path = Path({"projects", project, "zones", zone, "instances", name})},
                  project, Scope::kZone, zone);
  }

  // --- subnetworks, reservations ---------------------------------------------------------------
  Result<object> GetSubnetwork(const std::string& project, const std::string& region,
                               const std::string& name) override {
    return Execute({.method = "subnetworks.get",
                    .path = Path({"projects", project, "regions", region, "subnetworks", name})});
  }
  Result<object> GetReservation(const std::string& project, const std::string& zone,
                                const std::string& name) override {
    return Execute({.method = "reservations.get",
                    .path = Path({"projects", project, "zones", zone, "reservations", name})});
  }

  // --- operations ------------------------------------------------------------------------------
  Result<Operation> GetOperation(const OperationRef& op) override {
    HS_RETURN_IF_ERROR(CheckRef(op));
    HS_ASSIGN_OR_RETURN(auto json,
                        Execute({.method = std::string(ScopeOperations(op.scope)) + ".get",
                                 .path = OperationPath(op)}));
    return ToOperation(std::move(json), op.project, op.scope, op.location);
  }

  Result<Operation> Wait(const OperationRef& op, Clock::Duration timeout) override {
    HS_RETURN_IF_ERROR(CheckRef(op));
    const auto deadline = clock_->Now() + timeout;
    const std::string method = std::string(ScopeOperations(op.scope)) + ".wait";
    const std::string path = OperationPath(op) + "/wait";
    std::string last_status = "unknown";
    while (true) {
      const auto started = clock_->Now();
      if (started >= deadline) return NotDone(op, last_status);
      // Rounded up, so a long poll cut short by our deadline ends at or after it.
      auto remaining = std::chrono::ceil<std::chrono::milliseconds>(deadline - started);
      auto json = Execute({.method = method,
                           .verb = "POST",
                           .path = path,
                           .timeout = std::min(remaining, opts_.wait_request_timeout),
                           .deadline = deadline});
      if (!json.ok()) {
        // The long poll outlived its exchange timeout: not a failure of the operation. The loop
        // head decides between another wait and "not done yet".
        if (json.error().code != Code::kTimeout) return json.error();
      } else {
        HS_ASSIGN_OR_RETURN(
            auto result, ToOperation(std::move(json).value(), op.project, op.scope, op.location));
        if (result.done()) {
          if (result.error) return *result.error;
          return result;
        }
        last_status = result.status;
      }
      // A wait that came back early and not DONE (a server that does not long-poll, or one whose
      // long poll ends early) must not turn into a tight loop.
      auto took = clock_->Now() - started;
      if (took < opts_.min_wait_interval) {
        auto pause = std::chrono::duration_cast<std::chrono::milliseconds>(
            std::min<Clock::Duration>(opts_.min_wait_interval - took, deadline - clock_->Now()));
        if (pause.count() > 0) opts_.retry.sleep(pause);
      }
    }
  }

  CallCounters& counters() override { return *counters_; }

 private:
  static Status CheckRef(const OperationRef& op) {
    if (op.project.empty() || op.name.empty() ||
        (op.scope != Scope::kGlobal && op.location.empty())) {
      return Error::Make(Code::kInvalidArgument,
                         "operation reference needs a project, a name and (unless global) a "
                         "location");
    }
    return OkStatus();
  }

  static Error NotDone(const OperationRef& op, const std::string& status) {
    return Error::Make(Code::kTimeout,
                       "operation " + op.name + " is not DONE yet (last status " + status + ")",
                       "operationNotDone");
  }

  // An Operation from a response, filling in what the body lacks from what the call knew.
  static Result<Operation> ToOperation(object json, const std::string& project, Scope scope,
                                       const std::string& location) {
    HS_ASSIGN_OR_RETURN(auto op, OperationFromJson(std::move(json)));
    if (op.ref.project.empty()) op.ref.project = project;
    if (StringField(op.json, "selfLink").empty() && op.ref.location.empty()) {
      op.ref.scope = scope;
      op.ref.location = location;
    }
    return op;
  }

  Result<Operation> Mutate(const Call& call, const std::string& project, Scope scope,
                           const std::string& location) {
    Call c = call;
    c.mutation = true;
    HS_ASSIGN_OR_RETURN(auto json, Execute(c));
    return ToOperation(std::move(json), project, scope, location);
  }

  Result<std::vector<object>> ListAll(Call call, std::string_view items_key,
                                      const ListOptions& options) {
    Query base;
    if (!options.filter.empty()) base.emplace_back("filter", options.filter);
    if (!options.order_by.empty()) base.emplace_back("orderBy", options.order_by);
    if (options.page_size > 0) base.emplace_back("maxResults", std::to_string(options.page_size));
    std::vector<object> out;
    std::string token;
    constexpr int kMaxPages = 100000;
    for (int page = 0; page < kMaxPages; ++page) {
      call.query = base;
      if (!token.empty()) call.query.emplace_back("pageToken", token);
      HS_ASSIGN_OR_RETURN(auto body, Execute(call));
      if (auto* items = body.if_contains(items_key); items != nullptr && items->is_array()) {
        for (auto& item : items->as_array()) {
          if (item.is_object()) out.push_back(std::move(item.as_object()));
        }
      }
      std::string next = StringField(body, "nextPageToken");
      if (next.empty()) return out;
      if (next == token) {
        return Error::Make(Code::kInternal,
                           call.method + ": the server returned the same nextPageToken twice");
      }
      token = std::move(next);
    }
    return Error::Make(Code::kInternal, call.method + ": more than 100000 pages");
  }

  // One logical call: attempts with full-jitter backoff on retryable failures, the same requestId
  // on each attempt, one re-authorisation on 401.
  Result<object> Execute(const Call& call) {
    const auto start = clock_->Now();
    auto give_up = start + opts_.retry.max_elapsed;
    if (call.deadline && *call.deadline < give_up) give_up = *call.deadline;

    net::Request req;
    req.method = call.verb;
    req.timeout = call.timeout.count() > 0 ? call.timeout : opts_.request_timeout;
    req.target = "/" + call.path;
    Query query = call.query;
    if (call.mutation) query.emplace_back("requestId", internal::NewRequestId());
    for (size_t i = 0; i < query.size(); ++i) {
      req.target += (i == 0 ? "?" : "&") + net::UrlEncode(query[i].first) + "=" +
                    net::UrlEncode(query[i].second);
    }
    if (call.body != nullptr) req.body = boost::json::serialize(*call.body);

    bool reauthorized = false;
    for (int attempt = 1;; ++attempt) {
      Error err;
      auto token = opts_.tokens->Token();
      if (!token.ok()) {
        err = token.error();
        err.message = "getting an access token (" + opts_.tokens->Describe() + "): " + err.message;
      } else {
        req.headers = {{"Authorization", "Bearer " + token.value()},
                       {"Accept", "application/json"}};
        if (call.body != nullptr) req.headers.emplace_back("Content-Type", "application/json");
        auto resp = http_->Do(req);
        if (!resp.ok()) {
          counters_->Increment(call.method, "error");
          err = resp.error();
        } else {
          counters_->Increment(call.method, std::to_string(resp->status));
          if (resp->status >= 200 && resp->status < 300) return ParseBody(call, resp->body);
          err = internal::ErrorFromResponse(resp->status, resp->body, resp->Header("retry-after"));
          if (resp->status == 401 && !reauthorized) {
            reauthorized = true;
            opts_.tokens->Invalidate();
            log::Info("gce: 401 from the API; fetching a new token",
                      {{"method", call.method}, {"source", opts_.tokens->Describe()}});
            continue;
          }
        }
      }
      err.message = call.method + ": " + err.message;
      if (!err.Retryable()) return err;
      if (attempt >= opts_.retry.max_attempts) {
        err.message += " (gave up after " + std::to_string(attempt) + " attempts)";
        return err;
      }
      auto delay = BackoffDelay(opts_.retry, attempt - 1, opts_.retry.random());
      if (err.retry_after && *err.retry_after > delay) delay = *err.retry_after;
      if (clock_->Now() + delay > give_up) {
        err.message += " (gave up after " + std::to_string(attempt) + " attempts: out of time)";
        return err;
      }
      log::Warn("gce: retrying", {{"method", call.method},
                                  {"attempt", attempt},
                                  {"delay_ms", static_cast<int64_t>(delay.count())},
                                  {"error", err.ToString()}});
      opts_.retry.sleep(delay);
    }
  }

  static Result<object> ParseBody(const Call& call, const std::string& body) {
    if (body.empty()) return object{};
    boost::system::error_code ec;
    auto v = boost::json::parse(body, ec);
    if (ec || !v.is_object()) {
      return Error::Make(Code::kInternal, call.method + ": response is not a JSON object");
    }
    return std::move(v.as_object());
  }

  ComputeOptions opts_;
  std::shared_ptr<net::HttpClient> http_;
  Clock* clock_;
  std::shared_ptr<CallCounters> counters_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_;
};

}  // namespace

// --- free functions ------------------------------------------------------------------------------

Result<OperationRef> ParseOperationLink(std::string_view link) {
  auto bad = [&] {
    return Error::Make(Code::kInvalidArgument,
                       "not an operation link: \"" + std::string(link) + "\"");
  };
  auto q = link.find('?');
  if (q != std::string_view::npos) link = link.substr(0, q);
  std::vector<std::string_view> parts;
  size_t pos = 0;
  while (pos <= link.size()) {
    auto next = link.find('/', pos);
    if (next == std::string_view::npos) next = link.size();
    if (next > pos) parts.push_back(link.substr(pos, next - pos));
    pos = next + 1;
  }
  // Find the last "projects/<p>" so an endpoint prefix never confuses the parse.
  for (size_t i = parts.size(); i-- > 0;) {
    if (parts[i] != "projects" || i + 1 >= parts.size()) continue;
    OperationRef ref;
    ref.project = std::string(parts[i + 1]);
    auto rest =
        std::vector<std::string_view>(parts.begin() + static_cast<long>(i) + 2, parts.end());
    if (rest.size() == 3 && rest[0] == "global" && rest[1] == "operations") {
      ref.scope = Scope::kGlobal;
      ref.name = std::string(rest[2]);
    } else if (rest.size() == 4 && (rest[0] == "zones" || rest[0] == "regions") &&
               rest[2] == "operations") {
      ref.scope = rest[0] == "zones" ? Scope::kZone : Scope::kRegion;
      ref.location = std::string(rest[1]);
      ref.name = std::string(rest[3]);
    } else {
      return bad();
    }
    return ref;
  }
  return bad();
}

Result<Operation> OperationFromJson(object json) {
  Operation op;
  op.status = StringField(json, "status");
  op.self_link = StringField(json, "selfLink");
  op.target_link = StringField(json, "targetLink");
  if (!op.self_link.empty()) {
    HS_ASSIGN_OR_RETURN(op.ref, ParseOperationLink(op.self_link));
  } else {
    op.ref.name = StringField(json, "name");
    if (auto zone = StringField(json, "zone"); !zone.empty()) {
      op.ref.scope = Scope::kZone;
      op.ref.location = LastSegment(zone);
    } else if (auto region = StringField(json, "region"); !region.empty()) {
      op.ref.scope = Scope::kRegion;
      op.ref.location = LastSegment(region);
    }
  }
  if (op.ref.name.empty()) {
    return Error::Make(Code::kInternal, "the response is not an Operation (no name or selfLink)");
  }
  if (op.status.empty()) {
    return Error::Make(Code::kInternal, "operation " + op.ref.name + " has no status");
  }
  if (op.done() && json.contains("error")) op.error = internal::ErrorFromOperation(json);
  op.json = std::move(json);
  return op;
}

void CallCounters::Increment(std::string_view method, std::string_view result) {
  std::lock_guard lock(mu_);
  auto key = std::make_pair(std::string(method), std::string(result));
  ++counts_[std::move(key)];
}

uint64_t CallCounters::Get(std::string_view method, std::string_view result) const {
  std::lock_guard lock(mu_);
  auto it = counts_.find(std::make_pair(std::string(method), std::string(result)));
  return it == counts_.end() ? 0 : it->second;
}

uint64_t CallCounters::Total(std::string_view method) const {
  std::lock_guard lock(mu_);
  uint64_t n = 0;
  for (const auto& [k, v] : counts_) {
    if (k.first == method) n += v;
  }
  return n;
}

std::vector<CallCounters::Sample> CallCounters::Snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<Sample> out;
  out.reserve(counts_.size());
  for (const auto& [k, v] : counts_) out.push_back({k.first, k.second, v});
  return out;
}

std::chrono::milliseconds BackoffDelay(const RetryPolicy& policy, int retry, double unit_random) {
  const double cap = static_cast<double>(policy.max_backoff.count());
  const double base = static_cast<double>(policy.initial_backoff.count());
  const double ceiling = std::min(cap, base * std::pow(2.0, std::clamp(retry, 0, 62)));
  const double r = std::clamp(unit_random, 0.0, 1.0);
  return std::chrono::milliseconds(static_cast<int64_t>(ceiling * r));
}

Result<std::optional<Operation>> Compute::UpdateInstanceMetadata(
    const std::string& project, const std::string& zone, const std::string& name,
    const std::function<bool(MetadataItems&)>& mutate, int max_attempts) {
  for (int attempt = 1;; ++attempt) {
    HS_ASSIGN_OR_RETURN(auto instance, GetInstance(project, zone, name));
    object metadata;
    if (const auto* m = instance.if_contains("metadata"); m != nullptr && m->is_object()) {
      metadata = m->as_object();
    }
    MetadataItems items = MetadataItemsOf(metadata);
    if (!mutate(items)) return std::optional<Operation>();
    boost::json::array list;
    for (const auto& [k, v] : items) list.push_back(object{{"key", k}, {"value", v}});
    object body;
    if (auto fp = StringField(metadata, "fingerprint"); !fp.empty()) body["fingerprint"] = fp;
    body["items"] = std::move(list);
    auto op = SetInstanceMetadata(project, zone, name, body);
    if (op.ok()) return std::optional<Operation>(std::move(op).value());
    if (op.error().code != Code::kConflict || attempt >= max_attempts) return op.error();
    log::Info("gce: instance metadata changed since it was read; re-reading",
              {{"instance", name}, {"attempt", attempt}});
  }
}

object HighThroughputWorkloadPolicy(std::string_view name, std::string_view accelerator_topology,
                                    std::string_view description) {
  object policy{{"name", name}};
  if (!description.empty()) policy["description"] = description;
  policy["workloadPolicy"] =
      object{{"type", "HIGH_THROUGHPUT"}, {"acceleratorTopology", accelerator_topology}};
  return policy;
}

MetadataItems MetadataItemsOf(const object& metadata) {
  MetadataItems items;
  const auto* list = metadata.if_contains("items");
  if (list == nullptr || !list->is_array()) return items;
  for (const auto& item : list->as_array()) {
    if (!item.is_object()) continue;
    auto key = StringField(item.as_object(), "key");
    if (!key.empty()) items[key] = StringField(item.as_object(), "value");
  }
  return items;
}

std::optional<Error> LastAttemptError(const object& managed_instance) {
  const auto* last = managed_instance.if_contains("lastAttempt");
  if (last == nullptr || !last->is_object()) return std::nullopt;
  const auto* errors = last->as_object().if_contains("errors");
  if (errors == nullptr || !errors->is_object()) return std::nullopt;
  const auto* list = errors->as_object().if_contains("errors");
  if (list == nullptr || !list->is_array() || list->as_array().empty() ||
      !list->as_array()[0].is_object()) {
    return std::nullopt;
  }
  const auto& first = list->as_array()[0].as_object();
  auto reason = StringField(first, "code");
  return Error::Make(internal::CodeFor(0, reason), StringField(first, "message"), reason);
}

std::optional<Error> ManagedInstanceError(const object& list_errors_item) {
  const auto* err = list_errors_item.if_contains("error");
  if (err == nullptr || !err->is_object()) return std::nullopt;
  auto reason = StringField(err->as_object(), "code");
  return Error::Make(internal::CodeFor(0, reason), StringField(err->as_object(), "message"),
                     reason);
}

Result<std::unique_ptr<Compute>> Compute::Create(ComputeOptions options) {
  if (!options.tokens) {
    return Error::Make(Code::kInvalidArgument, "gce: ComputeOptions.tokens is required");
  }
  if (options.retry.max_attempts < 1) options.retry.max_attempts = 1;
  net::HttpClient::Options ho;
  ho.base_url = options.endpoint;
  ho.tls = options.tls;
  ho.user_agent = options.user_agent;
  HS_ASSIGN_OR_RETURN(auto http, net::HttpClient::Create(ho));
  return std::unique_ptr<Compute>(
      std::make_unique<ComputeImpl>(std::move(options), std::move(http)));
}

}  // namespace hyperslice::gce
