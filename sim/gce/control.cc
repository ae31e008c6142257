// The control endpoint: fault injection, capacity, reservations, instance kill/restore, keys and
// tokens, counters and a state dump. Never part of GCE's API; see simulator.h for the routes.
#include "sim/gce/sim_impl.h"
#include "src/base/json.h"

namespace hyperslice::sim::gce::internal {
namespace {

using jsonfield::StringValue;

int64_t Int(const json::object& o, std::string_view k, int64_t def) {
  auto* v = o.if_contains(k);
  if (v == nullptr) return def;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64()) return static_cast<int64_t>(v->as_uint64());
  if (v->is_double()) return static_cast<int64_t>(v->as_double());
  if (v->is_string()) {
    try {
      return std::stoll(std::string(v->as_string()));
    } catch (...) {
      return def;
    }
  }
  return def;
}

double Num(const json::object& o, std::string_view k, double def) {
  auto* v = o.if_contains(k);
  if (v == nullptr) return def;
  if (v->is_number()) return v->to_number<double>();
  return def;
}

bool Bool(const json::object& o, std::string_view k, bool def) {
  auto* v = o.if_contains(k);
  return v && v->is_bool() ? v->as_bool() : def;
}

std::string Bad(const std::string& message) {
  return json::serialize(json::object{{"error", message}});
}

}  // namespace

json::object SimulatorImpl::StateDump() const {
  json::object out;
  json::array templates, policies, instances, migs, ops, reservations;
  for (const auto& [k, t] : st_.templates) templates.push_back(t);
  for (const auto& [k, p] : st_.policies) policies.push_back(p);
  for (const auto& [k, i] : st_.instances) {
    json::object o = i.body;
    o["simMetadataHost"] = metadata_host(i.project, i.zone, i.name);
    o["simMig"] = i.mig_key;
    if (!i.reservation_key.empty()) o["simReservation"] = i.reservation_key;
    instances.push_back(std::move(o));
  }
  for (const auto& [k, m] : st_.migs) {
    json::object o = m.body;
    json::array members;
    for (const auto& mem : m.members) members.push_back(ManagedInstanceJson(m, mem));
    o["simMembers"] = std::move(members);
    o["simErrors"] = static_cast<int64_t>(m.errors.size());
    migs.push_back(std::move(o));
  }
  for (const auto& [k, op] : st_.operations) ops.push_back(op.body);
  for (const auto& [k, r] : st_.reservations) {
    int64_t used = 0;
    for (const auto& [ik, inst] : st_.instances) used += inst.reservation_key == k;
    reservations.push_back(json::object{
        {"key", k}, {"machineType", r.machine_type}, {"count", r.count}, {"inUseCount", used}});
  }
  json::object capacity;
  for (const auto& [k, n] : st_.capacity) capacity[k] = n;
  json::array stockouts;
  for (const auto& s : st_.stockouts) stockouts.push_back(json::string(s));
  json::object counters;
  for (const auto& [k, n] : st_.counters) counters[k] = n;
  out["instanceTemplates"] = std::move(templates);
  out["resourcePolicies"] = std::move(policies);
  out["instances"] = std::move(instances);
  out["instanceGroupManagers"] = std::move(migs);
  out["operations"] = std::move(ops);
  out["reservations"] = std::move(reservations);
  out["capacity"] = std::move(capacity);
  out["stockouts"] = std::move(stockouts);
  out["counters"] = std::move(counters);
  out["operationLatencyMs"] = static_cast<int64_t>(st_.operation_latency.count());
  out["instanceBootLatencyMs"] = static_cast<int64_t>(st_.instance_boot_latency.count());
  return out;
}

void SimulatorImpl::HandleControl(const net::ServerRequest& req,
                                  std::shared_ptr<net::Responder> r) {
  const std::string& p = req.path;
  json::object body;
  if (req.method == "POST" && !req.body.empty()) {
    boost::system::error_code ec;
    json::value v = json::parse(req.body, ec);
    if (ec || !v.is_object()) {
      r->Send(400, Bad("body must be a JSON object"));
      return;
    }
    body = std::move(v.as_object());
  }
  auto ok = [&](const json::value& v = json::object{}) { r->Send(200, json::serialize(v)); };

  if (p == "/control/service-account-keys" && req.method == "POST") {
    std::string email = StringValue(body, "email", options_.service_account_email);
    auto key = NewServiceAccountKey(email);
    if (!key.ok()) {
      r->Send(500, Bad(key.error().message));
      return;
    }
    std::lock_guard lock(mu_);
    sa_keys_[key->key_id] = *key;
    std::string project = options_.projects.front();
    ok(json::object{{"type", "service_account"},
                    {"project_id", project},
                    {"private_key_id", key->key_id},
                    {"private_key", key->private_key_pem},
                    {"client_email", email},
                    {"client_id", "100000000000000000001"},
                    {"auth_uri", token_endpoint()},
                    {"token_uri", token_endpoint()},
                    {"universe_domain", "googleapis.com"}});
    return;
  }

  std::lock_guard lock(mu_);
  if (p == "/control/counters" && req.method == "GET") {
    json::object c;
    for (const auto& [k, n] : st_.counters) c[k] = n;
    ok(c);
  } else if (p == "/control/state" && req.method == "GET") {
    ok(StateDump());
  } else if (p == "/control/reset" && req.method == "POST") {
    Reset();
    ok();
  } else if (p == "/control/seed" && req.method == "POST") {
    rng_.seed(static_cast<uint64_t>(Int(body, "seed", 1)));
    ok();
  } else if (p == "/control/capacity" && req.method == "POST") {
    std::string zone = StringValue(body, "zone"), mt = StringValue(body, "machineType");
    if (zone.empty() || mt.empty() || !body.contains("instances")) {
      r->Send(400, Bad("zone, machineType and instances are required"));
      return;
    }
    int64_t n = Int(body, "instances", 0);
    if (n < 0) {
      st_.capacity.erase(zone + "/" + mt);  // negative: no limit
    } else {
      st_.capacity[zone + "/" + mt] = n;
    }
    for (auto& [k, m] : st_.migs) m.next_attempt = std::chrono::steady_clock::now();
    tick_cv_.notify_all();
    ok();
  } else if (p == "/control/reservations" && req.method == "POST") {
    std::string project = StringValue(body, "project", options_.projects.front());
    std::string zone = StringValue(body, "zone"), name = StringValue(body, "name"),
                mt = StringValue(body, "machineType");
    if (zone.empty() || name.empty() || mt.empty() || !ValidName(name)) {
      r->Send(400, Bad("zone, a valid name and machineType are required"));
      return;
    }
    ReservationState rs;
    rs.machine_type = mt;
    rs.count = Int(body, "count", 0);
    rs.body =
        json::object{{"kind", "compute#reservation"},
                     {"id", std::to_string(NewId())},
                     {"creationTimestamp", Now3339()},
                     {"name", name},
                     {"zone", ZoneUrl(project, zone)},
                     {"specificReservationRequired", true},
                     {"status", "READY"},
                     {"specificReservation",
                      json::object{{"count", std::to_string(rs.count)},
                                   {"inUseCount", "0"},
                                   {"instanceProperties", json::object{{"machineType", mt}}}}}};
    st_.reservations[project + "/" + zone + "/" + name] = std::move(rs);
    for (auto& [k, m] : st_.migs) m.next_attempt = std::chrono::steady_clock::now();
    tick_cv_.notify_all();
    ok();
  } else if (p == "/control/stockout" && req.method == "POST") {
    std::string zone = StringValue(body, "zone");
    if (zone.empty()) {
      r->Send(400, Bad("zone is required"));
      return;
    }
    std::string key = zone + "/" + StringValue(body, "machineType", "*");
    if (Bool(body, "enabled", true)) {
      st_.stockouts.insert(key);
    } else {
      st_.stockouts.erase(key);
      for (auto& [k, m] : st_.migs) m.next_attempt = std::chrono::steady_clock::now();
    }
    ok();
  } else if (p == "/control/faults" && req.method == "POST") {
    std::string method = StringValue(body, "method");
    if (method.empty()) {
      r->Send(400, Bad("method is required (\"*\" for every method)"));
      return;
    }
    Fault f;
    f.rate = Num(body, "rate", 1.0);
    f.code = static_cast<int>(Int(body, "code", 503));
    f.reason = StringValue(body, "reason");
    f.message = StringValue(body, "message");
    f.remaining = Int(body, "count", -1);
    st_.faults[method] = f;
    ok();
  } else if (p == "/control/faults" && req.method == "DELETE") {
    st_.faults.clear();
    ok();
  } else if (p == "/control/latency" && req.method == "POST") {
    if (body.contains("operationMs"))
      st_.operation_latency = milliseconds(Int(body, "operationMs", 0));
    if (body.contains("instanceBootMs")) {
      st_.instance_boot_latency = milliseconds(Int(body, "instanceBootMs", 0));
    }
    if (body.contains("apiMs")) {
      std::string method = StringValue(body, "method");
      int64_t ms = Int(body, "apiMs", 0);
      if (method.empty()) {
        r->Send(400, Bad("apiMs needs a method"));
        return;
      }
      if (ms <= 0) {
        st_.method_latency.erase(method);
      } else {
        st_.method_latency[method] = milliseconds(ms);
      }
    }
    ok();
  } else if (p == "/control/operation-failures" && req.method == "POST") {
    std::string method = StringValue(body, "method");
    if (method.empty()) {
      r->Send(400, Bad("method is required"));
      return;
    }
    OpFailure f;
    f.code = StringValue(body, "code", "INTERNAL_ERROR");
    f.message = StringValue(body, "message", "Injected operation failure (" + f.code + ").");
    f.remaining = Int(body, "count", 1);
    st_.op_failures[method] = f;
    ok();
  } else if ((p == "/control/instances/kill" || p == "/control/instances/restore") &&
             req.method == "POST") {
    std::string key = StringValue(body, "project", options_.projects.front()) + "/" +
                      StringValue(body, "zone") + "/" + StringValue(body, "name");
    auto it = st_.instances.find(key);
    if (it == st_.instances.end()) {
      r->Send(404, Bad("no instance " + key));
      return;
    }
    if (p == "/control/instances/kill") {
      std::string mode = StringValue(body, "mode", "stop");
      if (mode == "vanish") {
        std::string mig_key = it->second.mig_key;
        DeleteInstance(key);
        if (auto m = st_.migs.find(mig_key); m != st_.migs.end()) {
          m->second.next_attempt = std::chrono::steady_clock::now();
        }
      } else if (mode == "stop") {
        it->second.body["status"] = "TERMINATED";
        it->second.booting = false;
        MetadataChanged(key);
      } else {
        r->Send(400, Bad("mode is stop or vanish"));
        return;
      }
    } else {
      auto now = std::chrono::steady_clock::now();
      it->second.body["status"] = "STAGING";
      it->second.booting = true;
      it->second.running_at = now + st_.instance_boot_latency;
      NoteInstance(key);
    }
    ok();
  } else if (p == "/control/tokens" && req.method == "POST") {
    int64_t ttl = Int(body, "ttlSeconds", 3600);
    std::string t = IssueToken(std::chrono::seconds(ttl));
    ok(json::object{{"access_token", t}, {"expires_in", ttl}, {"token_type", "Bearer"}});
  } else {
    r->Send(404, Bad("no control route " + req.method + " " + p));
  }
}

}  // namespace hyperslice::sim::gce::internal
