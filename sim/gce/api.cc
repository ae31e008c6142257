// The Compute v1 REST surface of the simulator: routing, auth, fault injection, request
// validation, and the resource handlers (instance templates, resource policies, MIGs, instances,
// operations, and the read-only zones/regions/networks/subnetworks/reservations gcloud asks for).
#include <algorithm>
#include <cctype>
#include <optional>
#include <regex>

#include "sim/gce/sim_impl.h"
#include "src/base/json.h"
#include "src/base/log.h"
#include "src/base/strings.h"

namespace hyperslice::sim::gce::internal {
namespace {

using jsonfield::StringValue;

bool IsUuid(const std::string& s) {
  if (s.size() != 36) return false;
  bool nonzero = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (s[i] != '-') return false;
    } else if (!std::isxdigit(static_cast<unsigned char>(s[i]))) {
      return false;
    } else if (s[i] != '0') {
      nonzero = true;
    }
  }
  return nonzero;
}

// "projects/p/global/instanceTemplates/t", a full URL or a bare name -> {project, name}.
// Returns false when the reference names another collection.
bool ParseRef(const std::string& ref, const std::string& collection,
              const std::string& default_project, std::string* project, std::string* scope,
              std::string* name) {
  std::string r = ref;
  if (auto p = r.find("/projects/"); p != std::string::npos) r = r.substr(p + 1);
  auto seg = SplitNonEmpty(r, '/');
  *project = default_project;
  scope->clear();
  if (seg.size() == 1) {
    *name = seg[0];
    return true;
  }
  if (seg.size() >= 2 && seg[seg.size() - 2] == collection) {
    *name = seg.back();
    for (size_t i = 0; i + 1 < seg.size(); ++i) {
      if (seg[i] == "projects") *project = seg[i + 1];
      if (seg[i] == "regions" || seg[i] == "zones") *scope = seg[i + 1];
    }
    return true;
  }
  return false;
}

// The machine-type families GCE offers (general purpose, compute/memory optimized, GPU and TPU
// VMs), named <family>-<class>-<size>, plus the shared-core e2 and f1/g1 shapes. A name outside
// them does not exist in any simulated zone, as an unknown name does not in GCE.
bool KnownMachineType(const std::string& mt) {
  static const std::regex kShape(
      "(e2|n1|n2|n2d|n4|c2|c2d|c3|c3d|c4|c4a|c4d|t2a|t2d|m1|m2|m3|m4|h3|z3|a2|a3|a4|g2|g4|ct4p|"
      "ct5l|ct5lp|ct5p|ct6e|tpu7x)-[a-z]+-[0-9]+[a-z]*|e2-(micro|small|medium)|f1-micro|g1-small");
  return std::regex_match(mt, kShape);
}

// Accelerator types attachable as guestAccelerators (GPUs; TPU VMs get theirs from the machine
// type, so tpu names are accepted as GCE lists them in acceleratorTypes too).
bool KnownAcceleratorType(const std::string& at) {
  static const std::regex kType("nvidia-[a-z0-9-]+|(tpu|ct)[a-z0-9-]*");
  return std::regex_match(at, kType);
}

// List filters as GCE's list methods take them: clauses `field op value` joined by spaces, AND
// or parentheses; op is = or != (value may use * wildcards) or eq/ne (value is a regular
// expression, full match). Fields are dotted paths (labels.env, status).
struct FilterClause {
  std::vector<std::string> path;
  bool negate = false;
  std::regex pattern;
};

std::optional<std::vector<FilterClause>> ParseFilter(const std::string& f) {
  std::vector<std::string> tokens;
  for (size_t i = 0; i < f.size();) {
    char ch = f[i];
    if (std::isspace(static_cast<unsigned char>(ch)) || ch == '(' || ch == ')') {
      ++i;
    } else if (ch == '"' || ch == '\'') {
      size_t j = f.find(ch, i + 1);
      if (j == std::string::npos) return std::nullopt;
      tokens.push_back(std::string(1, '\x01') + f.substr(i + 1, j - i - 1));  // quoted
      i = j + 1;
    } else if (ch == '=' || ch == '!') {
      if (ch == '!' && (i + 1 >= f.size() || f[i + 1] != '=')) return std::nullopt;
      tokens.push_back(ch == '=' ? "=" : "!=");
      i += ch == '=' ? 1 : 2;
    } else {
      size_t j = i;
      while (j < f.size() && !std::isspace(static_cast<unsigned char>(f[j])) && f[j] != '(' &&
             f[j] != ')' && f[j] != '=' && f[j] != '!') {
        ++j;
      }
      tokens.push_back(f.substr(i, j - i));
      i = j;
    }
  }
  std::vector<FilterClause> out;
  for (size_t i = 0; i < tokens.size();) {
    if (tokens[i] == "AND") {
      ++i;
      continue;
    }
    if (i + 2 >= tokens.size()) return std::nullopt;
    std::string field = tokens[i], op = tokens[i + 1], value = tokens[i + 2];
    i += 3;
    if (!value.empty() && value[0] == '\x01') value.erase(0, 1);
    FilterClause c;
    for (size_t a = 0; a <= field.size();) {
      size_t b = field.find('.', a);
      if (b == std::string::npos) b = field.size();
      c.path.push_back(field.substr(a, b - a));
      a = b + 1;
    }
    std::string re;
    if (op == "=" || op == "!=") {
      for (char ch : value) {
        if (ch == '*') {
          re += ".*";
        } else if (std::isalnum(static_cast<unsigned char>(ch))) {
          re += ch;
        } else {
          re += '\\';
          re += ch;
        }
      }
      c.negate = op == "!=";
    } else if (op == "eq" || op == "ne") {
      re = value;
      c.negate = op == "ne";
    } else {
      return std::nullopt;
    }
    try {
      c.pattern = std::regex(re);
    } catch (const std::regex_error&) {
      return std::nullopt;
    }
    out.push_back(std::move(c));
  }
  if (out.empty()) return std::nullopt;
  return out;
}

bool MatchesFilter(const json::object& item, const std::vector<FilterClause>& clauses) {
  for (const auto& c : clauses) {
    const json::value* v = nullptr;
    const json::object* o = &item;
    for (size_t i = 0; i < c.path.size(); ++i) {
      v = o ? o->if_contains(c.path[i]) : nullptr;
      if (v == nullptr) break;
      o = v->is_object() ? &v->as_object() : nullptr;
    }
    std::string s;
    if (v != nullptr) {
      if (v->is_string()) {
        s = std::string(v->as_string());
      } else if (!v->is_object() && !v->is_array()) {
        s = json::serialize(*v);
      }
    }
    bool match = v != nullptr && std::regex_match(s, c.pattern);
    if (match == c.negate) return false;
  }
  return true;
}

Reply Json(int status, const json::value& v) { return Reply{status, json::serialize(v)}; }
Reply Err(const ApiError& e) { return Reply{e.code, ErrorBody(e)}; }

ApiError InUse(const std::string& what, const std::string& resource, const std::string& user) {
  return ApiError{
      400, "resourceInUseByAnotherResource",
      "The " + what + " resource '" + resource + "' is already being used by '" + user + "'"};
}

}  // namespace

const std::vector<SimulatorImpl::Route>& SimulatorImpl::Routes() const {
  using S = SimulatorImpl;
  static const std::vector<Route> routes = {
      {"GET", {}, "compute.projects.get", &S::GetProject},
      {"GET", {"zones"}, "compute.zones.list", &S::ListZones},
      {"GET", {"zones", "*"}, "compute.zones.get", &S::GetZone},
      {"GET", {"regions"}, "compute.regions.list", &S::ListRegions},
      {"GET", {"regions", "*"}, "compute.regions.get", &S::GetRegion},
      {"GET", {"zones", "*", "machineTypes", "*"}, "compute.machineTypes.get", &S::GetMachineType},
      {"GET", {"global", "networks", "*"}, "compute.networks.get", &S::GetNetwork},
      {"GET", {"regions", "*", "subnetworks"}, "compute.subnetworks.list", &S::ListSubnetworks},
      {"GET", {"regions", "*", "subnetworks", "*"}, "compute.subnetworks.get", &S::GetSubnetwork},
      {"GET", {"zones", "*", "reservations"}, "compute.reservations.list", &S::ListReservations},
      {"GET", {"zones", "*", "reservations", "*"}, "compute.reservations.get", &S::GetReservation},

      {"POST",
       {"global", "instanceTemplates"},
       "compute.instanceTemplates.insert",
       &S::InsertTemplate,
       true},
      {"GET", {"global", "instanceTemplates"}, "compute.instanceTemplates.list", &S::ListTemplates},
      {"GET",
       {"global", "instanceTemplates", "*"},
       "compute.instanceTemplates.get",
       &S::GetTemplate},
      {"DELETE",
       {"global", "instanceTemplates", "*"},
       "compute.instanceTemplates.delete",
       &S::DeleteTemplate,
       true},
      {"GET",
       {"aggregated", "instanceTemplates"},
       "compute.instanceTemplates.aggregatedList",
       &S::AggregatedTemplates},

      {"POST",
       {"regions", "*", "resourcePolicies"},
       "compute.resourcePolicies.insert",
       &S::InsertPolicy,
       true},
      {"GET",
       {"regions", "*", "resourcePolicies"},
       "compute.resourcePolicies.list",
       &S::ListPolicies},
      {"GET",
       {"regions", "*", "resourcePolicies", "*"},
       "compute.resourcePolicies.get",
       &S::GetPolicy},
      {"DELETE",
       {"regions", "*", "resourcePolicies", "*"},
       "compute.resourcePolicies.delete",
       &S::DeletePolicy,
       true},
      {"GET",
       {"aggregated", "resourcePolicies"},
       "compute.resourcePolicies.aggregatedList",
       &S::AggregatedPolicies},

      {"POST",
       {"zones", "*", "instanceGroupManagers"},
       "compute.instanceGroupManagers.insert",
       &S::InsertMig,
       true},
      {"GET",
       {"zones", "*", "instanceGroupManagers"},
       "compute.instanceGroupManagers.list",
       &S::ListMigs},
      {"GET",
       {"zones", "*", "instanceGroupManagers", "*"},
       "compute.instanceGroupManagers.get",
       &S::GetMig},
      {"DELETE",
       {"zones", "*", "instanceGroupManagers", "*"},
       "compute.instanceGroupManagers.delete",
       &S::DeleteMig,
       true},
      {"POST",
       {"zones", "*", "instanceGroupManagers", "*", "resize"},
       "compute.instanceGroupManagers.resize",
       &S::ResizeMig,
       true},
      {"POST",
       {"zones", "*", "instanceGroupManagers", "*", "listManagedInstances"},
       "compute.instanceGroupManagers.listManagedInstances",
       &S::ListManagedInstances},
      {"GET",
       {"zones", "*", "instanceGroupManagers", "*", "listErrors"},
       "compute.instanceGroupManagers.listErrors",
       &S::ListMigErrors},
      {"GET",
       {"aggregated", "instanceGroupManagers"},
       "compute.instanceGroupManagers.aggregatedList",
       &S::AggregatedMigs},
      {"GET",
       {"regions", "*", "instanceGroupManagers"},
       "compute.regionInstanceGroupManagers.list",
       &S::EmptyRegionalList},
      // The instance groups behind MIGs, and (never any) autoscalers: gcloud reads both when it
      // lists or describes managed groups.
      {"GET", {"zones", "*", "instanceGroups"}, "compute.instanceGroups.list", &S::ListGroups},
      {"GET", {"zones", "*", "instanceGroups", "*"}, "compute.instanceGroups.get", &S::GetGroup},
      {"GET",
       {"aggregated", "instanceGroups"},
       "compute.instanceGroups.aggregatedList",
       &S::AggregatedGroups},
      {"GET",
       {"regions", "*", "instanceGroups"},
       "compute.regionInstanceGroups.list",
       &S::EmptyRegionalList},
      {"GET", {"zones", "*", "autoscalers"}, "compute.autoscalers.list", &S::EmptyZonalList},
      {"GET",
       {"aggregated", "autoscalers"},
       "compute.autoscalers.aggregatedList",
       &S::AggregatedAutoscalers},
      {"GET",
       {"regions", "*", "autoscalers"},
       "compute.regionAutoscalers.list",
       &S::EmptyRegionalList},

      {"POST", {"zones", "*", "instances"}, "compute.instances.insert", &S::InsertInstance, true},
      {"GET", {"zones", "*", "instances"}, "compute.instances.list", &S::ListInstances},
      {"GET", {"zones", "*", "instances", "*"}, "compute.instances.get", &S::GetInstance},
      {"DELETE",
       {"zones", "*", "instances", "*"},
       "compute.instances.delete",
       &S::DeleteInstanceApi,
       true},
      {"POST",
       {"zones", "*", "instances", "*", "setMetadata"},
       "compute.instances.setMetadata",
       &S::SetMetadata,
       true},
      {"GET",
       {"aggregated", "instances"},
       "compute.instances.aggregatedList",
       &S::AggregatedInstances},

      {"GET", {"global", "operations"}, "compute.globalOperations.list", &S::ListGlobalOps},
      {"GET", {"global", "operations", "*"}, "compute.globalOperations.get", &S::GetGlobalOp},
      {"DELETE",
       {"global", "operations", "*"},
       "compute.globalOperations.delete",
       &S::DeleteGlobalOp},
      {"POST",
       {"global", "operations", "*", "wait"},
       "compute.globalOperations.wait",
       &S::WaitGlobalOp},
      {"GET",
       {"aggregated", "operations"},
       "compute.globalOperations.aggregatedList",
       &S::AggregatedOps},
      {"GET", {"zones", "*", "operations"}, "compute.zoneOperations.list", &S::ListZoneOps},
      {"GET", {"zones", "*", "operations", "*"}, "compute.zoneOperations.get", &S::GetZoneOp},
      {"DELETE",
       {"zones", "*", "operations", "*"},
       "compute.zoneOperations.delete",
       &S::DeleteZoneOp},
      {"POST",
       {"zones", "*", "operations", "*", "wait"},
       "compute.zoneOperations.wait",
       &S::WaitZoneOp},
      {"GET", {"regions", "*", "operations"}, "compute.regionOperations.list", &S::ListRegionOps},
      {"GET", {"regions", "*", "operations", "*"}, "compute.regionOperations.get", &S::GetRegionOp},
      {"DELETE",
       {"regions", "*", "operations", "*"},
       "compute.regionOperations.delete",
       &S::DeleteRegionOp},
      {"POST",
       {"regions", "*", "operations", "*", "wait"},
       "compute.regionOperations.wait",
       &S::WaitRegionOp},
  };
  return routes;
}

bool SimulatorImpl::Authorized(const net::ServerRequest& req) {
  if (!options_.require_auth) return true;
  std::string auth = req.Header("authorization");
  if (auth.size() < 8 || strncasecmp(auth.c_str(), "Bearer ", 7) != 0) return false;
  std::string token = auth.substr(7);
  for (const auto& t : options_.static_tokens) {
    if (!t.empty() && t == token) return true;
  }
  return tokens_.count(token) > 0;
}

std::optional<ApiError> SimulatorImpl::InjectedFault(const std::string& method_id) {
  auto it = st_.faults.find(method_id);
  if (it == st_.faults.end()) it = st_.faults.find("*");
  if (it == st_.faults.end()) return std::nullopt;
  Fault& f = it->second;
  if (f.remaining == 0) return std::nullopt;
  double draw = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  if (draw >= f.rate) return std::nullopt;
  if (f.remaining > 0) --f.remaining;
  ApiError e;
  e.code = f.code;
  e.reason = f.reason;
  e.message = f.message;
  if (e.reason.empty()) {
    e.reason = f.code == 429   ? "rateLimitExceeded"
               : f.code == 503 ? "backendError"
               : f.code == 500 ? "backendError"
               : f.code == 404 ? "notFound"
               : f.code == 403 ? "forbidden"
                               : "invalid";
  }
  if (e.message.empty()) {
    e.message = f.code == 429 ? "Rate Limit Exceeded"
                : f.code >= 500
                    ? "Internal error. Please try again or contact Google Support. (Code: "
                      "'injected')"
                    : "Injected failure";
  }
  if (f.code == 429) {
    e.details.push_back(json::object{
        {"@type", "type.googleapis.com/google.rpc.ErrorInfo"},
        {"reason", "RATE_LIMIT_EXCEEDED"},
        {"domain", "googleapis.com"},
        {"metadata", json::object{{"service", "compute.googleapis.com"}, {"method", method_id}}}});
  }
  return e;
}

void SimulatorImpl::HandleApi(const net::ServerRequest& req, std::shared_ptr<net::Responder> r) {
  if (req.path == "/token") {
    HandleToken(req, std::move(r));
    return;
  }
  static const std::string kPrefix = "/compute/v1/projects/";
  auto seg = SplitNonEmpty(req.path.size() > kPrefix.size() && req.path.rfind(kPrefix, 0) == 0
                               ? std::string_view(req.path).substr(kPrefix.size())
                               : std::string_view(),
                           '/');
  const Route* route = nullptr;
  Ctx c;
  c.req = &req;
  c.responder = r;
  if (!seg.empty()) {
    c.project = seg[0];
    for (const Route& rt : Routes()) {
      if (rt.http_method != req.method || rt.pattern.size() + 1 != seg.size()) continue;
      bool match = true;
      std::vector<std::string> args;
      for (size_t i = 0; i < rt.pattern.size() && match; ++i) {
        if (rt.pattern[i] == "*") {
          args.push_back(seg[i + 1]);
        } else if (rt.pattern[i] != seg[i + 1]) {
          match = false;
        }
      }
      if (match) {
        route = &rt;
        c.args = std::move(args);
        break;
      }
    }
  }
  c.method_id = route ? route->method_id : "unmatched";
  {
    std::lock_guard lock(mu_);
    ++st_.counters[c.method_id];
    if (!Authorized(req)) {
      r->Send(401, ErrorBody(Unauthenticated()),
              {{"WWW-Authenticate", "Bearer realm=\"https://accounts.google.com/\""}});
      return;
    }
    if (route == nullptr) {
      ApiError e{404, "notFound",
                 "The requested URL " + req.path + " was not found on this server."};
      r->Send(404, ErrorBody(e));
      return;
    }
    if (auto fault = InjectedFault(c.method_id)) {
      r->Send(fault->code, ErrorBody(*fault));
      return;
    }
  }
  // Body checks run outside the lock: parsing against the schema is the expensive part.
  const ApiSchema::Rpc* rpc = schema_ ? schema_->Find(c.method_id) : nullptr;
  bool has_body_field = rpc ? !rpc->body_field.empty() : route->mutation && req.method == "POST";
  if (has_body_field) {
    bool blank = std::all_of(req.body.begin(), req.body.end(),
                             [](char ch) { return std::isspace(static_cast<unsigned char>(ch)); });
    if (blank) {
      r->Send(400, ErrorBody(Required("resource")));
      return;
    }
    if (schema_) {
      if (auto err = schema_->ValidateBody(c.method_id, req.body)) {
        r->Send(err->code, ErrorBody(*err));
        return;
      }
    }
    boost::system::error_code ec;
    c.body = json::parse(req.body, ec);
    if (ec || !c.body.is_object()) {
      r->Send(400, ErrorBody(Invalid("Invalid JSON payload received. " +
                                     (ec ? ec.message() : std::string("Expected an object.")))));
      return;
    }
  }
  std::string request_id = req.Query("requestId");
  if (route->mutation && !request_id.empty() && !IsUuid(request_id)) {
    r->Send(400, ErrorBody(Invalid("Invalid value for field 'requestId': '" + request_id +
                                       "'. The provided value is not a valid UUID.",
                                   "requestId")));
    return;
  }
  Reply reply;
  milliseconds delay{0};
  {
    std::lock_guard lock(mu_);
    if (!KnownProject(c.project)) {
      reply = Err(NotFound("projects/" + c.project));
    } else if (route->mutation && !request_id.empty() &&
               st_.request_ids.count(c.project + "/" + request_id) &&
               st_.operations.count(st_.request_ids[c.project + "/" + request_id])) {
      // The same mutation again: the original operation, nothing new.
      reply = Json(200, st_.operations[st_.request_ids[c.project + "/" + request_id]].body);
    } else {
      reply = (this->*(route->handler))(c);
    }
    if (auto it = st_.method_latency.find(c.method_id); it != st_.method_latency.end()) {
      delay = it->second;
    }
    if (!reply.deferred && delay.count() > 0) {
      delayed_.push_back(DelayedReply{std::chrono::steady_clock::now() + delay, r, reply});
      return;
    }
  }
  if (!reply.deferred) r->Send(reply.status, std::move(reply.body), reply.headers);
}

// ---- helpers for lists ----

Reply SimulatorImpl::ListReply(const Ctx& c, const std::string& kind, const std::string& id_path,
                               std::vector<json::object> items, const std::string& items_field) {
  // Paging: maxResults (default 500) and an opaque pageToken (the next index).
  size_t max = 500;
  if (std::string m = c.req->Query("maxResults"); !m.empty()) {
    try {
      max = std::clamp<size_t>(std::stoul(m), 1, 500);
    } catch (...) {
      return Err(Invalid("Invalid value for field 'maxResults': '" + m + "'.", "maxResults"));
    }
  }
  if (std::string f = c.req->Query("filter"); !f.empty()) {
    auto clauses = ParseFilter(f);
    if (!clauses) {
      return Err(
          Invalid("Invalid value for field 'filter': '" + f + "'. Invalid list filter expression.",
                  "filter"));
    }
    std::vector<json::object> kept;
    for (auto& item : items) {
      if (MatchesFilter(item, *clauses)) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  size_t start = 0;
  if (std::string t = c.req->Query("pageToken"); !t.empty()) {
    try {
      start = std::stoul(t);
    } catch (...) {
      return Err(Invalid("Invalid value for field 'pageToken': '" + t + "'.", "pageToken"));
    }
  }
  json::object out{{"kind", kind}, {"id", id_path}, {"selfLink", Url(id_path)}};
  json::array page;
  for (size_t i = start; i < items.size() && page.size() < max; ++i) page.push_back(items[i]);
  if (start + page.size() < items.size())
    out["nextPageToken"] = std::to_string(start + page.size());
  if (!page.empty()) out[items_field] = std::move(page);
  return Json(200, out);
}

Reply SimulatorImpl::AggregatedReply(const Ctx& c, const std::string& kind,
                                     const std::string& field,
                                     std::map<std::string, json::array> scoped) {
  json::object items;
  for (auto& entry : scoped) {
    const std::string& scope = entry.first;
    if (entry.second.empty()) {
      items[scope] = json::object{
          {"warning",
           json::object{{"code", "NO_RESULTS_ON_PAGE"},
                        {"message", "There are no results for scope '" + scope + "' on this page."},
                        {"data", json::array{json::object{{"key", "scope"}, {"value", scope}}}}}}};
    } else {
      json::object listed;
      listed[field] = std::move(entry.second);  // an initializer list would copy the array
      items[scope] = std::move(listed);
    }
  }
  std::string id = "projects/" + c.project + "/aggregated/" + field;
  return Json(200,
              json::object{{"kind", kind}, {"id", id}, {"items", items}, {"selfLink", Url(id)}});
}

// ---- project, zones, regions, networks, reservations ----

Reply SimulatorImpl::GetProject(Ctx& c) {
  return Json(
      200, json::object{
               {"kind", "compute#project"},
               {"id", std::to_string(std::hash<std::string>{}(c.project) % 900000000000ULL +
                                     100000000000ULL)},
               {"name", c.project},
               {"creationTimestamp", "2024-01-01T00:00:00.000-00:00"},
               {"commonInstanceMetadata",
                // Fingerprints are bytes in GCE's discovery document: gcloud base64-decodes them.
                json::object{{"kind", "compute#metadata"}, {"fingerprint", "c2ltLXByb2o="}}},
               {"defaultServiceAccount", options_.service_account_email},
               {"xpnProjectStatus", "UNSPECIFIED_XPN_PROJECT_STATUS"},
               {"selfLink", Url("projects/" + c.project)},
           });
}

namespace {
json::object ZoneJson(const std::string& base, const std::string& project, const std::string& zone,
                      const std::string& region, size_t idx) {
  return json::object{
      {"kind", "compute#zone"},
      {"id", std::to_string(2000 + idx)},
      {"creationTimestamp", "1969-12-31T16:00:00.000-08:00"},
      {"name", zone},
      {"description", zone},
      {"status", "UP"},
      {"region", base + "projects/" + project + "/regions/" + region},
      {"selfLink", base + "projects/" + project + "/zones/" + zone},
      {"availableCpuPlatforms", json::array{"Intel Sapphire Rapids", "AMD Genoa"}},
      {"supportsPzs", false},
  };
}
}  // namespace

Reply SimulatorImpl::ListZones(Ctx& c) {
  std::vector<json::object> items;
  auto zones = Zones();
  for (size_t i = 0; i < zones.size(); ++i) {
    items.push_back(ZoneJson(api_base_, c.project, zones[i], RegionOf(zones[i]), i));
  }
  return ListReply(c, "compute#zoneList", "projects/" + c.project + "/zones", std::move(items));
}

Reply SimulatorImpl::GetZone(Ctx& c) {
  auto zones = Zones();
  auto it = std::find(zones.begin(), zones.end(), c.args[0]);
  if (it == zones.end()) return Err(NotFound("projects/" + c.project + "/zones/" + c.args[0]));
  return Json(200, ZoneJson(api_base_, c.project, *it, RegionOf(*it), it - zones.begin()));
}

Reply SimulatorImpl::ListRegions(Ctx& c) {
  std::vector<json::object> items;
  for (size_t i = 0; i < options_.regions.size(); ++i) {
    Ctx sub = c;
    sub.args = {options_.regions[i]};
    Reply one = GetRegion(sub);
    items.push_back(json::parse(one.body).as_object());
  }
  return ListReply(c, "compute#regionList", "projects/" + c.project + "/regions", std::move(items));
}

Reply SimulatorImpl::GetRegion(Ctx& c) {
  const std::string& region = c.args[0];
  auto it = std::find(options_.regions.begin(), options_.regions.end(), region);
  if (it == options_.regions.end()) {
    return Err(NotFound("projects/" + c.project + "/regions/" + region));
  }
  json::array zones;
  for (const auto& z : Zones()) {
    if (RegionOf(z) == region) zones.push_back(json::string(ZoneUrl(c.project, z)));
  }
  return Json(200, json::object{
                       {"kind", "compute#region"},
                       {"id", std::to_string(1000 + (it - options_.regions.begin()))},
                       {"creationTimestamp", "1969-12-31T16:00:00.000-08:00"},
                       {"name", region},
                       {"description", region},
                       {"status", "UP"},
                       {"zones", zones},
                       {"quotas", json::array{}},
                       {"selfLink", RegionUrl(c.project, region)},
                       {"supportsPzs", false},
                   });
}

Reply SimulatorImpl::GetMachineType(Ctx& c) {
  if (!KnownZone(c.args[0])) return Err(NotFound("projects/" + c.project + "/zones/" + c.args[0]));
  const std::string& mt = c.args[1];
  if (!KnownMachineType(mt)) {
    return Err(NotFound("projects/" + c.project + "/zones/" + c.args[0] + "/machineTypes/" + mt));
  }
  int cpus = 4;
  if (auto dash = mt.rfind('-'); dash != std::string::npos) {
    try {
      cpus = std::max(1, std::stoi(mt.substr(dash + 1)));
    } catch (...) {
      cpus = mt.find("tpu") != std::string::npos || mt.find("ct") == 0 ? 224 : 4;
    }
  }
  return Json(200,
              json::object{{"kind", "compute#machineType"},
                           {"id", std::to_string(std::hash<std::string>{}(mt) % 1000000)},
                           {"name", mt},
                           {"description", mt},
                           {"guestCpus", cpus},
                           {"memoryMb", cpus * 4096},
                           {"zone", c.args[0]},
                           {"isSharedCpu", false},
                           {"selfLink", ZoneUrl(c.project, c.args[0]) + "/machineTypes/" + mt}});
}

Reply SimulatorImpl::GetNetwork(Ctx& c) {
  if (c.args[0] != "default") {
    return Err(NotFound("projects/" + c.project + "/global/networks/" + c.args[0]));
  }
  json::array subnets;
  for (const auto& r : options_.regions) {
    subnets.push_back(json::string(RegionUrl(c.project, r) + "/subnetworks/default"));
  }
  return Json(
      200, json::object{{"kind", "compute#network"},
                        {"id", "5000"},
                        {"name", "default"},
                        {"autoCreateSubnetworks", true},
                        {"subnetworks", subnets},
                        {"routingConfig", json::object{{"routingMode", "REGIONAL"}}},
                        {"selfLink", Url("projects/" + c.project + "/global/networks/default")}});
}

namespace {
json::object SubnetJson(const std::string& base, const std::string& project,
                        const std::string& region, size_t idx) {
  std::string cidr = "10." + std::to_string(128 + idx) + ".0.0/20";
  return json::object{
      {"kind", "compute#subnetwork"},
      {"id", std::to_string(6000 + idx)},
      {"creationTimestamp", "2024-01-01T00:00:00.000-00:00"},
      {"name", "default"},
      {"network", base + "projects/" + project + "/global/networks/default"},
      {"ipCidrRange", cidr},
      {"gatewayAddress", "10." + std::to_string(128 + idx) + ".0.1"},
      {"region", base + "projects/" + project + "/regions/" + region},
      {"selfLink", base + "projects/" + project + "/regions/" + region + "/subnetworks/default"},
      {"privateIpGoogleAccess", false},
      {"fingerprint", "c2ltLXN1Ym5ldA=="},
      {"purpose", "PRIVATE"},
      {"stackType", "IPV4_ONLY"},
  };
}
}  // namespace

Reply SimulatorImpl::ListSubnetworks(Ctx& c) {
  auto it = std::find(options_.regions.begin(), options_.regions.end(), c.args[0]);
  if (it == options_.regions.end()) {
    return Err(NotFound("projects/" + c.project + "/regions/" + c.args[0]));
  }
  std::vector<json::object> items{
      SubnetJson(api_base_, c.project, c.args[0], it - options_.regions.begin())};
  return ListReply(c, "compute#subnetworkList",
                   "projects/" + c.project + "/regions/" + c.args[0] + "/subnetworks",
                   std::move(items));
}

Reply SimulatorImpl::GetSubnetwork(Ctx& c) {
  auto it = std::find(options_.regions.begin(), options_.regions.end(), c.args[0]);
  if (it == options_.regions.end() || c.args[1] != "default") {
    return Err(
        NotFound("projects/" + c.project + "/regions/" + c.args[0] + "/subnetworks/" + c.args[1]));
  }
  return Json(200, SubnetJson(api_base_, c.project, c.args[0], it - options_.regions.begin()));
}

namespace {
json::object ReservationView(const ReservationState& rs, int64_t in_use, const std::string& self) {
  json::object body = rs.body;
  body["selfLink"] = self;
  body["specificReservation"].as_object()["inUseCount"] = std::to_string(in_use);
  body["specificReservation"].as_object()["count"] = std::to_string(rs.count);
  return body;
}
}  // namespace

Reply SimulatorImpl::ListReservations(Ctx& c) {
  std::vector<json::object> items;
  std::string prefix = c.project + "/" + c.args[0] + "/";
  for (const auto& [k, rs] : st_.reservations) {
    if (k.rfind(prefix, 0) != 0) continue;
    int64_t used = 0;
    for (const auto& [ik, inst] : st_.instances) used += inst.reservation_key == k;
    items.push_back(ReservationView(
        rs, used, ZoneUrl(c.project, c.args[0]) + "/reservations/" + k.substr(prefix.size())));
  }
  return ListReply(c, "compute#reservationList",
                   "projects/" + c.project + "/zones/" + c.args[0] + "/reservations",
                   std::move(items));
}

Reply SimulatorImpl::GetReservation(Ctx& c) {
  std::string key = c.project + "/" + c.args[0] + "/" + c.args[1];
  auto it = st_.reservations.find(key);
  if (it == st_.reservations.end()) {
    return Err(
        NotFound("projects/" + c.project + "/zones/" + c.args[0] + "/reservations/" + c.args[1]));
  }
  int64_t used = 0;
  for (const auto& [ik, inst] : st_.instances) used += inst.reservation_key == key;
  return Json(200, ReservationView(it->second, used,
                                   ZoneUrl(c.project, c.args[0]) + "/reservations/" + c.args[1]));
}

// ---- instance templates ----

Reply SimulatorImpl::InsertTemplate(Ctx& c) {
  json::object body = c.body.as_object();
  std::string name = StringValue(body, "name");
  if (auto problem = NameProblem(body)) return Err(*problem);
  auto* props = body.if_contains("properties");
  if (props == nullptr || !props->is_object()) return Err(Required("resource.properties"));
  if (StringValue(props->as_object(), "machineType").empty()) {
    return Err(Required("resource.properties.machineType"));
  }
  std::string key = c.project + "/" + name;
  std::string path = "projects/" + c.project + "/global/instanceTemplates/" + name;
  if (st_.templates.count(key)) return Err(AlreadyExists(path));
  uint64_t id = NewId();
  body["kind"] = "compute#instanceTemplate";
  body["id"] = std::to_string(id);
  body["creationTimestamp"] = Now3339();
  body["selfLink"] = Url(path);
  st_.templates[key] = body;
  Operation& op = NewOperation(c, "global", "", "insert", Url(path), std::to_string(id), nullptr);
  if (op.forced_error) st_.templates.erase(key);
  return Json(200, op.body);
}

Reply SimulatorImpl::GetTemplate(Ctx& c) {
  auto it = st_.templates.find(c.project + "/" + c.args[0]);
  if (it == st_.templates.end()) {
    return Err(NotFound("projects/" + c.project + "/global/instanceTemplates/" + c.args[0]));
  }
  return Json(200, it->second);
}

Reply SimulatorImpl::ListTemplates(Ctx& c) {
  std::vector<json::object> items;
  for (const auto& [k, t] : st_.templates) {
    if (k.rfind(c.project + "/", 0) == 0) items.push_back(t);
  }
  return ListReply(c, "compute#instanceTemplateList",
                   "projects/" + c.project + "/global/instanceTemplates", std::move(items));
}

Reply SimulatorImpl::AggregatedTemplates(Ctx& c) {
  std::map<std::string, json::array> scoped;
  scoped["global"];
  for (const auto& r : options_.regions) scoped["regions/" + r];
  for (const auto& [k, t] : st_.templates) {
    if (k.rfind(c.project + "/", 0) == 0) scoped["global"].push_back(t);
  }
  return AggregatedReply(c, "compute#instanceTemplateAggregatedList", "instanceTemplates",
                         std::move(scoped));
}

Reply SimulatorImpl::DeleteTemplate(Ctx& c) {
  std::string key = c.project + "/" + c.args[0];
  std::string path = "projects/" + c.project + "/global/instanceTemplates/" + c.args[0];
  auto it = st_.templates.find(key);
  if (it == st_.templates.end()) return Err(NotFound(path));
  for (const auto& [mk, mig] : st_.migs) {
    if (mig.template_key == key) {
      return Err(InUse(
          "instance_template", path,
          "projects/" + mig.project + "/zones/" + mig.zone + "/instanceGroupManagers/" + mig.name));
    }
  }
  std::string id = StringValue(it->second, "id");
  Operation& op = NewOperation(c, "global", "", "delete", Url(path), id, [this, key] {
    st_.templates.erase(key);
    return std::optional<OpError>();
  });
  return Json(200, op.body);
}

// ---- resource policies ----

Reply SimulatorImpl::InsertPolicy(Ctx& c) {
  const std::string& region = c.args[0];
  if (!KnownRegion(region)) return Err(NotFound("projects/" + c.project + "/regions/" + region));
  json::object body = c.body.as_object();
  std::string name = StringValue(body, "name");
  if (auto problem = NameProblem(body)) return Err(*problem);
  std::string key = c.project + "/" + region + "/" + name;
  std::string path = "projects/" + c.project + "/regions/" + region + "/resourcePolicies/" + name;
  if (st_.policies.count(key)) return Err(AlreadyExists(path));
  uint64_t id = NewId();
  body["kind"] = "compute#resourcePolicy";
  body["id"] = std::to_string(id);
  body["creationTimestamp"] = Now3339();
  body["region"] = RegionUrl(c.project, region);
  body["selfLink"] = Url(path);
  body["status"] = "READY";
  st_.policies[key] = body;
  Operation& op =
      NewOperation(c, "regions", region, "insert", Url(path), std::to_string(id), nullptr);
  if (op.forced_error) st_.policies.erase(key);
  return Json(200, op.body);
}

Reply SimulatorImpl::GetPolicy(Ctx& c) {
  auto it = st_.policies.find(c.project + "/" + c.args[0] + "/" + c.args[1]);
  if (it == st_.policies.end()) {
    return Err(NotFound("projects/" + c.project + "/regions/" + c.args[0] + "/resourcePolicies/" +
                        c.args[1]));
  }
  return Json(200, it->second);
}

Reply SimulatorImpl::ListPolicies(Ctx& c) {
  std::vector<json::object> items;
  std::string prefix = c.project + "/" + c.args[0] + "/";
  for (const auto& [k, p] : st_.policies) {
    if (k.rfind(prefix, 0) == 0) items.push_back(p);
  }
  return ListReply(c, "compute#resourcePolicyList",
                   "projects/" + c.project + "/regions/" + c.args[0] + "/resourcePolicies",
                   std::move(items));
}

Reply SimulatorImpl::AggregatedPolicies(Ctx& c) {
  std::map<std::string, json::array> scoped;
  for (const auto& r : options_.regions) scoped["regions/" + r];
  for (const auto& [k, p] : st_.policies) {
    auto parts = SplitNonEmpty(k, '/');
    if (parts.size() == 3 && parts[0] == c.project) scoped["regions/" + parts[1]].push_back(p);
  }
  return AggregatedReply(c, "compute#resourcePolicyAggregatedList", "resourcePolicies",
                         std::move(scoped));
}

Reply SimulatorImpl::DeletePolicy(Ctx& c) {
  std::string key = c.project + "/" + c.args[0] + "/" + c.args[1];
  std::string path =
      "projects/" + c.project + "/regions/" + c.args[0] + "/resourcePolicies/" + c.args[1];
  auto it = st_.policies.find(key);
  if (it == st_.policies.end()) return Err(NotFound(path));
  for (const auto& [mk, mig] : st_.migs) {
    auto* rp = mig.body.if_contains("resourcePolicies");
    if (rp == nullptr || !rp->is_object()) continue;
    std::string wp = StringValue(rp->as_object(), "workloadPolicy");
    std::string p, scope, n;
    if (!wp.empty() && ParseRef(wp, "resourcePolicies", mig.project, &p, &scope, &n) &&
        p == c.project && n == c.args[1] && (scope.empty() || scope == c.args[0])) {
      return Err(InUse(
          "resource_policy", path,
          "projects/" + mig.project + "/zones/" + mig.zone + "/instanceGroupManagers/" + mig.name));
    }
  }
  std::string id = StringValue(it->second, "id");
  Operation& op = NewOperation(c, "regions", c.args[0], "delete", Url(path), id, [this, key] {
    st_.policies.erase(key);
    return std::optional<OpError>();
  });
  return Json(200, op.body);
}

// ---- managed instance groups ----

Reply SimulatorImpl::InsertMig(Ctx& c) {
  const std::string& zone = c.args[0];
  if (!KnownZone(zone)) return Err(NotFound("projects/" + c.project + "/zones/" + zone));
  json::object body = c.body.as_object();
  std::string name = StringValue(body, "name");
  if (auto problem = NameProblem(body)) return Err(*problem);
  std::string tmpl_ref = StringValue(body, "instanceTemplate");
  if (tmpl_ref.empty()) {
    if (auto* v = body.if_contains("versions");
        v && v->is_array() && !v->as_array().empty() && v->as_array()[0].is_object()) {
      tmpl_ref = StringValue(v->as_array()[0].as_object(), "instanceTemplate");
    }
  }
  if (tmpl_ref.empty()) return Err(Required("resource.instanceTemplate"));
  std::string tp, tscope, tname;
  if (!ParseRef(tmpl_ref, "instanceTemplates", c.project, &tp, &tscope, &tname)) {
    return Err(Invalid("Invalid value for field 'resource.instanceTemplate': '" + tmpl_ref +
                           "'. The URL is malformed.",
                       "resource.instanceTemplate"));
  }
  std::string tkey = tp + "/" + tname;
  std::string tpath = "projects/" + tp + "/global/instanceTemplates/" + tname;
  if (!st_.templates.count(tkey)) return Err(NotFound(tpath));
  if (auto* rp = body.if_contains("resourcePolicies"); rp && rp->is_object()) {
    std::string wp = StringValue(rp->as_object(), "workloadPolicy");
    if (!wp.empty()) {
      std::string pp, pscope, pname;
      if (!ParseRef(wp, "resourcePolicies", c.project, &pp, &pscope, &pname)) {
        return Err(Invalid("Invalid value for field 'resource.resourcePolicies.workloadPolicy': '" +
                               wp + "'. The URL is malformed.",
                           "resource.resourcePolicies.workloadPolicy"));
      }
      if (pscope.empty()) pscope = RegionOf(zone);
      std::string ppath = "projects/" + pp + "/regions/" + pscope + "/resourcePolicies/" + pname;
      if (!st_.policies.count(pp + "/" + pscope + "/" + pname)) return Err(NotFound(ppath));
      if (pscope != RegionOf(zone)) {
        return Err(Invalid("Invalid value for field 'resource.resourcePolicies.workloadPolicy': '" +
                               wp + "'. The workload policy must be in the region of the group.",
                           "resource.resourcePolicies.workloadPolicy"));
      }
      rp->as_object()["workloadPolicy"] = Url(ppath);
    }
  }
  int64_t target = 0;
  if (auto* ts = body.if_contains("targetSize")) {
    if (ts->is_int64())
      target = ts->as_int64();
    else if (ts->is_uint64())
      target = static_cast<int64_t>(ts->as_uint64());
    else if (ts->is_string()) {
      try {
        target = std::stoll(std::string(ts->as_string()));
      } catch (...) {
        target = -1;
      }
    }
  }
  if (target < 0 || target > 10000) {
    return Err(Invalid("Invalid value for field 'resource.targetSize': '" + std::to_string(target) +
                           "'. Must be greater than or equal to 0.",
                       "resource.targetSize"));
  }
  std::string base = StringValue(body, "baseInstanceName");
  if (base.empty()) base = name;
  if (!ValidName(base) || base.size() > 58) return Err(BadName("resource.baseInstanceName", base));
  std::string key = c.project + "/" + zone + "/" + name;
  std::string path = "projects/" + c.project + "/zones/" + zone + "/instanceGroupManagers/" + name;
  if (st_.migs.count(key)) return Err(AlreadyExists(path));
  uint64_t id = NewId();
  body["kind"] = "compute#instanceGroupManager";
  body["id"] = std::to_string(id);
  body["creationTimestamp"] = Now3339();
  body["zone"] = ZoneUrl(c.project, zone);
  body["selfLink"] = Url(path);
  body["instanceGroup"] =
      Url("projects/" + c.project + "/zones/" + zone + "/instanceGroups/" + name);
  body["baseInstanceName"] = base;
  body["instanceTemplate"] = Url(tpath);
  body["versions"] = json::array{json::object{{"instanceTemplate", Url(tpath)}}};
  body["targetSize"] = target;
  body["fingerprint"] = NewFingerprint();
  body["listManagedInstancesResults"] = "PAGELESS";
  if (!body.contains("updatePolicy")) {
    body["updatePolicy"] =
        json::object{{"type", "OPPORTUNISTIC"},
                     {"instanceRedistributionType", "NONE"},
                     {"minimalAction", "REPLACE"},
                     {"maxSurge", json::object{{"fixed", 0}, {"calculated", 0}}},
                     {"maxUnavailable", json::object{{"fixed", 1}, {"calculated", 1}}},
                     {"replacementMethod", "SUBSTITUTE"}};
  }
  Mig mig;
  mig.project = c.project;
  mig.zone = zone;
  mig.name = name;
  mig.template_key = tkey;
  mig.body = std::move(body);
  std::set<std::string> used;
  for (int64_t i = 0; i < target; ++i) {
    std::string n;
    const std::string prefix = c.project + "/" + zone + "/";
    do {
      n = base + "-" + RandomSuffix(4);
    } while (used.count(n) || st_.instances.count(prefix + n));
    used.insert(n);
    mig.members.push_back(MigMember{n, {}});
  }
  mig.next_attempt = std::chrono::steady_clock::now();
  RefreshMigStatus(mig);
  st_.migs[key] = std::move(mig);
  Operation& op = NewOperation(c, "zones", zone, "insert", Url(path), std::to_string(id), nullptr);
  if (op.forced_error) st_.migs.erase(key);
  tick_cv_.notify_all();
  return Json(200, op.body);
}

Reply SimulatorImpl::GetMig(Ctx& c) {
  auto it = st_.migs.find(c.project + "/" + c.args[0] + "/" + c.args[1]);
  if (it == st_.migs.end()) {
    return Err(NotFound("projects/" + c.project + "/zones/" + c.args[0] +
                        "/instanceGroupManagers/" + c.args[1]));
  }
  RefreshMigStatus(it->second);
  return Json(200, it->second.body);
}

Reply SimulatorImpl::ListMigs(Ctx& c) {
  std::vector<json::object> items;
  std::string prefix = c.project + "/" + c.args[0] + "/";
  for (auto& [k, m] : st_.migs) {
    if (k.rfind(prefix, 0) != 0) continue;
    RefreshMigStatus(m);
    items.push_back(m.body);
  }
  return ListReply(c, "compute#instanceGroupManagerList",
                   "projects/" + c.project + "/zones/" + c.args[0] + "/instanceGroupManagers",
                   std::move(items));
}

Reply SimulatorImpl::AggregatedMigs(Ctx& c) {
  std::map<std::string, json::array> scoped;
  for (const auto& z : Zones()) scoped["zones/" + z];
  for (auto& [k, m] : st_.migs) {
    if (m.project != c.project) continue;
    RefreshMigStatus(m);
    scoped["zones/" + m.zone].push_back(m.body);
  }
  return AggregatedReply(c, "compute#instanceGroupManagerAggregatedList", "instanceGroupManagers",
                         std::move(scoped));
}

Reply SimulatorImpl::DeleteMig(Ctx& c) {
  std::string key = c.project + "/" + c.args[0] + "/" + c.args[1];
  std::string path =
      "projects/" + c.project + "/zones/" + c.args[0] + "/instanceGroupManagers/" + c.args[1];
  auto it = st_.migs.find(key);
  if (it == st_.migs.end()) return Err(NotFound(path));
  std::string id = StringValue(it->second.body, "id");
  Operation& op = NewOperation(c, "zones", c.args[0], "delete", Url(path), id, [this, key] {
    auto m = st_.migs.find(key);
    if (m == st_.migs.end()) return std::optional<OpError>();
    for (const auto& member : m->second.members) {
      DeleteInstance(m->second.project + "/" + m->second.zone + "/" + member.name);
    }
    st_.migs.erase(m);
    return std::optional<OpError>();
  });
  if (!op.done && !op.forced_error) {
    auto m = st_.migs.find(key);
    if (m != st_.migs.end()) m->second.deleting = true;
  }
  return Json(200, op.body);
}

Reply SimulatorImpl::ResizeMig(Ctx& c) {
  std::string key = c.project + "/" + c.args[0] + "/" + c.args[1];
  std::string path =
      "projects/" + c.project + "/zones/" + c.args[0] + "/instanceGroupManagers/" + c.args[1];
  std::string size_s = c.req->Query("size");
  if (size_s.empty()) return Err(Required("size"));
  int64_t size = -1;
  try {
    size_t pos = 0;
    size = std::stoll(size_s, &pos);
    if (pos != size_s.size()) size = -1;
  } catch (...) {
    size = -1;
  }
  if (size < 0 || size > 10000) {
    return Err(Invalid(
        "Invalid value for field 'size': '" + size_s + "'. Must be greater than or equal to 0.",
        "size"));
  }
  auto it = st_.migs.find(key);
  if (it == st_.migs.end() || it->second.deleting) return Err(NotFound(path));
  Mig& mig = it->second;
  Operation& op = NewOperation(c, "zones", c.args[0], "compute.instanceGroupManagers.resize",
                               Url(path), StringValue(mig.body, "id"), nullptr);
  if (op.forced_error) return Json(200, op.body);
  std::string base = StringValue(mig.body, "baseInstanceName");
  while (static_cast<int64_t>(mig.members.size()) > size) {
    DeleteInstance(mig.project + "/" + mig.zone + "/" + mig.members.back().name);
    mig.members.pop_back();
  }
  std::set<std::string> used;
  for (const auto& m : mig.members) used.insert(m.name);
  while (static_cast<int64_t>(mig.members.size()) < size) {
    std::string n;
    do {
      n = base + "-" + RandomSuffix(4);
    } while (used.count(n) || st_.instances.count(mig.project + "/" + mig.zone + "/" + n));
    used.insert(n);
    mig.members.push_back(MigMember{n, {}});
  }
  mig.body["targetSize"] = size;
  mig.body["fingerprint"] = NewFingerprint();
  mig.next_attempt = std::chrono::steady_clock::now();
  RefreshMigStatus(mig);
  tick_cv_.notify_all();
  return Json(200, op.body);
}

Reply SimulatorImpl::ListManagedInstances(Ctx& c) {
  auto it = st_.migs.find(c.project + "/" + c.args[0] + "/" + c.args[1]);
  if (it == st_.migs.end()) {
    return Err(NotFound("projects/" + c.project + "/zones/" + c.args[0] +
                        "/instanceGroupManagers/" + c.args[1]));
  }
  json::array items;
  for (const auto& m : it->second.members) items.push_back(ManagedInstanceJson(it->second, m));
  json::object out;
  if (!items.empty()) out["managedInstances"] = std::move(items);
  return Json(200, out);
}

Reply SimulatorImpl::ListMigErrors(Ctx& c) {
  auto it = st_.migs.find(c.project + "/" + c.args[0] + "/" + c.args[1]);
  if (it == st_.migs.end()) {
    return Err(NotFound("projects/" + c.project + "/zones/" + c.args[0] +
                        "/instanceGroupManagers/" + c.args[1]));
  }
  std::vector<json::object> items(it->second.errors.begin(), it->second.errors.end());
  json::object out;
  json::array arr;
  for (auto& i : items) arr.push_back(std::move(i));
  if (!arr.empty()) out["items"] = std::move(arr);
  return Json(200, out);
}

// ---- instance groups (one per MIG) and autoscalers (none) ----

json::object SimulatorImpl::GroupJson(const Mig& mig) const {
  int64_t size = 0;
  for (const auto& m : mig.members) {
    size += st_.instances.count(mig.project + "/" + mig.zone + "/" + m.name) > 0;
  }
  return json::object{
      {"kind", "compute#instanceGroup"},
      {"id", StringValue(mig.body, "id")},
      {"creationTimestamp", StringValue(mig.body, "creationTimestamp")},
      {"name", mig.name},
      {"description",
       "This instance group is controlled by Instance Group Manager '" + mig.name +
           "'. To modify instances in this group, use the Instance Group Manager API: "
           "https://cloud.google.com/compute/docs/reference/latest/instanceGroupManagers"},
      {"zone", ZoneUrl(mig.project, mig.zone)},
      {"network", Url("projects/" + mig.project + "/global/networks/default")},
      {"fingerprint", "42WmSpB8rSM="},
      {"size", size},
      {"selfLink", StringValue(mig.body, "instanceGroup")},
  };
}

Reply SimulatorImpl::ListGroups(Ctx& c) {
  if (!KnownZone(c.args[0])) return Err(NotFound("projects/" + c.project + "/zones/" + c.args[0]));
  std::vector<json::object> items;
  for (const auto& [k, m] : st_.migs) {
    if (m.project == c.project && m.zone == c.args[0]) items.push_back(GroupJson(m));
  }
  return ListReply(c, "compute#instanceGroupList",
                   "projects/" + c.project + "/zones/" + c.args[0] + "/instanceGroups",
                   std::move(items));
}

Reply SimulatorImpl::GetGroup(Ctx& c) {
  auto it = st_.migs.find(c.project + "/" + c.args[0] + "/" + c.args[1]);
  if (it == st_.migs.end()) {
    return Err(
        NotFound("projects/" + c.project + "/zones/" + c.args[0] + "/instanceGroups/" + c.args[1]));
  }
  return Json(200, GroupJson(it->second));
}

Reply SimulatorImpl::AggregatedGroups(Ctx& c) {
  std::map<std::string, json::array> scoped;
  for (const auto& z : Zones()) scoped["zones/" + z];
  for (const auto& r : options_.regions) scoped["regions/" + r];
  for (const auto& [k, m] : st_.migs) {
    if (m.project == c.project) scoped["zones/" + m.zone].push_back(GroupJson(m));
  }
  return AggregatedReply(c, "compute#instanceGroupAggregatedList", "instanceGroups",
                         std::move(scoped));
}

Reply SimulatorImpl::AggregatedAutoscalers(Ctx& c) {
  std::map<std::string, json::array> scoped;
  for (const auto& z : Zones()) scoped["zones/" + z];
  for (const auto& r : options_.regions) scoped["regions/" + r];
  return AggregatedReply(c, "compute#autoscalerAggregatedList", "autoscalers", std::move(scoped));
}

Reply SimulatorImpl::EmptyZonalList(Ctx& c) {
  if (!KnownZone(c.args[0])) return Err(NotFound("projects/" + c.project + "/zones/" + c.args[0]));
  std::string what = SplitNonEmpty(c.req->path, '/').back();
  return ListReply(c, "compute#" + what.substr(0, what.size() - 1) + "List",
                   "projects/" + c.project + "/zones/" + c.args[0] + "/" + what, {});
}

Reply SimulatorImpl::EmptyRegionalList(Ctx& c) {
  if (!KnownRegion(c.args[0])) {
    return Err(NotFound("projects/" + c.project + "/regions/" + c.args[0]));
  }
  std::string what = SplitNonEmpty(c.req->path, '/').back();
  std::string kind = what == "instanceGroupManagers" ? "compute#regionInstanceGroupManagerList"
                     : what == "instanceGroups"      ? "compute#regionInstanceGroupList"
                                                     : "compute#regionAutoscalerList";
  return ListReply(c, kind, "projects/" + c.project + "/regions/" + c.args[0] + "/" + what, {});
}

// ---- instances ----

// instances.insert. What GCE checks before it answers: the zone, the name, the machine type (a
// name that does not exist is 400 invalid), accelerators, a boot disk, an existing name (409).
// Capacity is the operation's business: a stockout ends it DONE with
// ZONE_RESOURCE_POOL_EXHAUSTED and leaves no instance, as GCE does.
Reply SimulatorImpl::InsertInstance(Ctx& c) {
  const std::string& zone = c.args[0];
  if (!KnownZone(zone)) return Err(NotFound("projects/" + c.project + "/zones/" + zone));
  json::object body = c.body.as_object();
  std::string name = StringValue(body, "name");
  if (auto problem = NameProblem(body)) return Err(*problem);
  std::string mt_ref = StringValue(body, "machineType");
  if (mt_ref.empty()) return Err(Required("resource.machineType"));
  std::string mp, mzone, mt;
  if (!ParseRef(mt_ref, "machineTypes", c.project, &mp, &mzone, &mt)) {
    return Err(Invalid(
        "Invalid value for field 'resource.machineType': '" + mt_ref + "'. The URL is malformed.",
        "resource.machineType"));
  }
  if ((!mzone.empty() && mzone != zone) || !KnownMachineType(mt)) {
    return Err(Invalid("Invalid value for field 'resource.machineType': '" + mt_ref +
                           "'. Machine type with name '" + mt + "' does not exist in zone '" +
                           zone + "'.",
                       "resource.machineType"));
  }
  if (auto* ga = body.if_contains("guestAccelerators"); ga && ga->is_array()) {
    for (size_t i = 0; i < ga->as_array().size(); ++i) {
      const auto& acc = ga->as_array()[i];
      std::string field = "resource.guestAccelerators[" + std::to_string(i) + "].acceleratorType";
      std::string ref = acc.is_object() ? StringValue(acc.as_object(), "acceleratorType") : "";
      std::string ap, azone, at;
      if (ref.empty()) return Err(Required(field));
      if (!ParseRef(ref, "acceleratorTypes", c.project, &ap, &azone, &at) ||
          (!azone.empty() && azone != zone) || !KnownAcceleratorType(at)) {
        std::string message = "Invalid value for field '" + field + "': '";
        message += ref;
        message += "'. Accelerator type '";
        message += at;
        message += "' does not exist in zone '";
        message += zone;
        message += "'.";
        return Err(Invalid(message, field));
      }
    }
  }
  auto* disks = body.if_contains("disks");
  if (disks == nullptr || !disks->is_array() || disks->as_array().empty()) {
    return Err(Invalid("Invalid value for field 'resource.disks': ''. No disks are specified.",
                       "resource.disks"));
  }
  std::string key = c.project + "/" + zone + "/" + name;
  std::string path = "projects/" + c.project + "/zones/" + zone + "/instances/" + name;
  if (st_.instances.count(key)) return Err(AlreadyExists(path));
  std::string reservation_key = SpecificReservationKey(body, c.project, zone);
  std::string why;
  auto now = std::chrono::steady_clock::now();
  std::string id;
  std::function<std::optional<OpError>()> on_done;
  if (Fits(c.project, zone, mt, reservation_key, 1, &why)) {
    id = StringValue(CreateInstance(c.project, zone, "", name, body, mt, reservation_key, now).body,
                     "id");
  } else {
    std::string message =
        why == "RESERVATION_NOT_FOUND"
            ? "The resource 'projects/" + c.project + "/zones/" + zone + "/reservations/" +
                  reservation_key.substr(reservation_key.rfind('/') + 1) + "' was not found"
            : "The zone '" + path.substr(0, path.find("/instances/")) +
                  "' does not have enough resources available to fulfill the request.  Try a "
                  "different zone, or try again later.";
    id = std::to_string(NewId());
    on_done = [why, message] { return std::optional<OpError>(OpError{why, message, 400}); };
  }
  Operation& op = NewOperation(c, "zones", zone, "insert", Url(path), id, std::move(on_done));
  if (op.forced_error) DeleteInstance(key);
  tick_cv_.notify_all();
  return Json(200, op.body);
}

Reply SimulatorImpl::GetInstance(Ctx& c) {
  auto it = st_.instances.find(c.project + "/" + c.args[0] + "/" + c.args[1]);
  if (it == st_.instances.end()) {
    return Err(
        NotFound("projects/" + c.project + "/zones/" + c.args[0] + "/instances/" + c.args[1]));
  }
  return Json(200, it->second.body);
}

Reply SimulatorImpl::ListInstances(Ctx& c) {
  if (!KnownZone(c.args[0])) return Err(NotFound("projects/" + c.project + "/zones/" + c.args[0]));
  std::vector<json::object> items;
  std::string prefix = c.project + "/" + c.args[0] + "/";
  for (const auto& [k, i] : st_.instances) {
    if (k.rfind(prefix, 0) == 0) items.push_back(i.body);
  }
  return ListReply(c, "compute#instanceList",
                   "projects/" + c.project + "/zones/" + c.args[0] + "/instances",
                   std::move(items));
}

Reply SimulatorImpl::AggregatedInstances(Ctx& c) {
  std::map<std::string, json::array> scoped;
  for (const auto& z : Zones()) scoped["zones/" + z];
  for (const auto& [k, i] : st_.instances) {
    if (i.project == c.project) scoped["zones/" + i.zone].push_back(i.body);
  }
  return AggregatedReply(c, "compute#instanceAggregatedList", "instances", std::move(scoped));
}

Reply SimulatorImpl::DeleteInstanceApi(Ctx& c) {
  std::string key = c.project + "/" + c.args[0] + "/" + c.args[1];
  std::string path = "projects/" + c.project + "/zones/" + c.args[0] + "/instances/" + c.args[1];
  auto it = st_.instances.find(key);
  if (it == st_.instances.end()) return Err(NotFound(path));
  it->second.body["status"] = "STOPPING";
  NoteInstance(key);
  Operation& op = NewOperation(c, "zones", c.args[0], "delete", Url(path),
                               StringValue(it->second.body, "id"), [this, key] {
                                 auto inst = st_.instances.find(key);
                                 if (inst == st_.instances.end()) return std::optional<OpError>();
                                 std::string mig_key = inst->second.mig_key;
                                 DeleteInstance(key);
                                 // A managed instance deleted behind its group's back is
                                 // re-created by the group, as GCE does.
                                 if (auto m = st_.migs.find(mig_key); m != st_.migs.end()) {
                                   m->second.next_attempt = std::chrono::steady_clock::now();
                                 }
                                 return std::optional<OpError>();
                               });
  return Json(200, op.body);
}

Reply SimulatorImpl::SetMetadata(Ctx& c) {
  std::string key = c.project + "/" + c.args[0] + "/" + c.args[1];
  std::string path = "projects/" + c.project + "/zones/" + c.args[0] + "/instances/" + c.args[1];
  auto it = st_.instances.find(key);
  if (it == st_.instances.end()) return Err(NotFound(path));
  const json::object& req = c.body.as_object();
  json::object& md = it->second.body["metadata"].as_object();
  std::string current = StringValue(md, "fingerprint");
  std::string given = StringValue(req, "fingerprint");
  if (!SameFingerprint(given, current)) {
    ApiError e{412, "conditionNotMet",
               "Supplied fingerprint does not match current metadata fingerprint."};
    e.location = "If-Match";
    e.location_type = "header";
    return Err(e);
  }
  json::array items;
  std::set<std::string> keys;
  if (auto* v = req.if_contains("items"); v && v->is_array()) {
    size_t total = 0;
    for (size_t i = 0; i < v->as_array().size(); ++i) {
      const auto& item = v->as_array()[i];
      std::string field = "resource.items[" + std::to_string(i) + "]";
      if (!item.is_object()) return Err(Invalid("Invalid value for field '" + field + "'.", field));
      std::string k = StringValue(item.as_object(), "key");
      if (k.empty()) return Err(Required(field + ".key"));
      bool ok = k.size() <= 128;
      for (char ch : k)
        ok = ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_');
      if (!ok) {
        std::string message = "Invalid value for field '" + field + ".key': '";
        message += k;
        message += "'. Must be a match of regex '[a-zA-Z0-9-_]{1,128}'";
        return Err(Invalid(message, field + ".key"));
      }
      if (!keys.insert(k).second) {
        return Err(Invalid("Invalid value for field 'resource.items': Duplicate keys: " + k + ".",
                           "resource.items"));
      }
      total += k.size() + StringValue(item.as_object(), "value").size();
      items.push_back(item);
    }
    if (total > size_t{512} * 1024) {
      return Err(
          Invalid("Metadata has a total size that exceeds the limit of 512 KB.", "resource.items"));
    }
  }
  Operation& op = NewOperation(c, "zones", c.args[0], "setMetadata", Url(path),
                               StringValue(it->second.body, "id"), nullptr);
  if (op.forced_error) return Json(200, op.body);
  json::object fresh{{"kind", "compute#metadata"}, {"fingerprint", NewFingerprint()}};
  if (!items.empty()) fresh["items"] = std::move(items);
  md = std::move(fresh);
  ++it->second.metadata_generation;
  MetadataChanged(key);
  return Json(200, op.body);
}

// ---- operations ----

std::string SimulatorImpl::Scope3(const Ctx& c, const std::string& kind, const std::string& scope,
                                  const std::string& name) const {
  return c.project + "/" + (kind == "global" ? std::string("global") : kind + "/" + scope) + "/" +
         name;
}

Reply SimulatorImpl::GetOp(Ctx&, const std::string& key) {
  auto it = st_.operations.find(key);
  if (it == st_.operations.end()) {
    auto parts = SplitNonEmpty(key, '/');
    std::string path = "projects";
    for (size_t i = 0; i < parts.size(); ++i) {
      path += "/" + parts[i];
      if (i + 2 == parts.size()) path += "/operations";
    }
    return Err(NotFound(path));
  }
  return Json(200, it->second.body);
}

Reply SimulatorImpl::WaitOp(Ctx& c, const std::string& key) {
  auto it = st_.operations.find(key);
  if (it == st_.operations.end() || it->second.done) return GetOp(c, key);
  op_waiters_.push_back(
      OpWaiter{key, c.responder, std::chrono::steady_clock::now() + options_.operation_wait_max});
  Reply r;
  r.deferred = true;
  return r;
}

Reply SimulatorImpl::ListOps(Ctx& c, const std::string& prefix, const std::string& id_path) {
  std::vector<json::object> items;
  for (const auto& [k, op] : st_.operations) {
    if (k.rfind(prefix, 0) == 0 && k.find('/', prefix.size()) == std::string::npos) {
      items.push_back(op.body);
    }
  }
  return ListReply(c, "compute#operationList", id_path, std::move(items));
}

Reply SimulatorImpl::DeleteOp(Ctx& c, const std::string& key) {
  auto it = st_.operations.find(key);
  if (it == st_.operations.end()) return GetOp(c, key);
  if (!it->second.done) {
    // Nothing happens to the work itself; only the record goes, once it finished.
    return Err(
        ApiError{400, "resourceNotReady",
                 "The resource '" + StringValue(it->second.body, "selfLink") + "' is not ready"});
  }
  st_.operations.erase(it);
  return Reply{200, "{}"};
}

Reply SimulatorImpl::GetGlobalOp(Ctx& c) { return GetOp(c, Scope3(c, "global", "", c.args[0])); }
Reply SimulatorImpl::GetZoneOp(Ctx& c) {
  return GetOp(c, Scope3(c, "zones", c.args[0], c.args[1]));
}
Reply SimulatorImpl::GetRegionOp(Ctx& c) {
  return GetOp(c, Scope3(c, "regions", c.args[0], c.args[1]));
}
Reply SimulatorImpl::WaitGlobalOp(Ctx& c) { return WaitOp(c, Scope3(c, "global", "", c.args[0])); }
Reply SimulatorImpl::WaitZoneOp(Ctx& c) {
  return WaitOp(c, Scope3(c, "zones", c.args[0], c.args[1]));
}
Reply SimulatorImpl::WaitRegionOp(Ctx& c) {
  return WaitOp(c, Scope3(c, "regions", c.args[0], c.args[1]));
}
Reply SimulatorImpl::DeleteGlobalOp(Ctx& c) {
  return DeleteOp(c, Scope3(c, "global", "", c.args[0]));
}
Reply SimulatorImpl::DeleteZoneOp(Ctx& c) {
  return DeleteOp(c, Scope3(c, "zones", c.args[0], c.args[1]));
}
Reply SimulatorImpl::DeleteRegionOp(Ctx& c) {
  return DeleteOp(c, Scope3(c, "regions", c.args[0], c.args[1]));
}
Reply SimulatorImpl::ListGlobalOps(Ctx& c) {
  return ListOps(c, c.project + "/global/", "projects/" + c.project + "/global/operations");
}
Reply SimulatorImpl::ListZoneOps(Ctx& c) {
  return ListOps(c, c.project + "/zones/" + c.args[0] + "/",
                 "projects/" + c.project + "/zones/" + c.args[0] + "/operations");
}
Reply SimulatorImpl::ListRegionOps(Ctx& c) {
  return ListOps(c, c.project + "/regions/" + c.args[0] + "/",
                 "projects/" + c.project + "/regions/" + c.args[0] + "/operations");
}

Reply SimulatorImpl::AggregatedOps(Ctx& c) {
  std::map<std::string, json::array> scoped;
  scoped["global"];
  for (const auto& r : options_.regions) scoped["regions/" + r];
  for (const auto& z : Zones()) scoped["zones/" + z];
  for (const auto& [k, op] : st_.operations) {
    auto parts = SplitNonEmpty(k, '/');
    if (parts.empty() || parts[0] != c.project) continue;
    std::string scope = parts[1] == "global" ? "global" : parts[1] + "/" + parts[2];
    scoped[scope].push_back(op.body);
  }
  return AggregatedReply(c, "compute#operationAggregatedList", "operations", std::move(scoped));
}

}  // namespace hyperslice::sim::gce::internal
