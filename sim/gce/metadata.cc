// The per-VM metadata server (/computeMetadata/v1/...) and the OAuth2 token endpoint (/token).
//
// A VM is named by the path prefix /sim/instances/<project>/<zone>/<name> (so GCE_METADATA_HOST
// can carry it) or by the X-Sim-Instance header. Values come from the instance's current state;
// `?wait_for_change=true` long-polls until the value's ETag differs from `last_etag` (or from the
// value at the time of the call), bounded by `timeout_sec`.
#include <algorithm>
#include <cstdio>

#include "sim/gce/sim_impl.h"
#include "src/base/json.h"

namespace hyperslice::sim::gce::internal {
namespace {

using jsonfield::StringValue;

std::string Etag(const std::optional<std::string>& value) {
  // FNV-1a over the value, with absence distinct from every value.
  uint64_t h = 1469598103934665603ULL;
  std::string s = value ? "v" + *value : std::string("absent");
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ULL;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string ProjectNumber(const std::string& project) {
  return std::to_string(std::hash<std::string>{}(project) % 900000000000ULL + 100000000000ULL);
}

std::string PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() &&
               std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::map<std::string, std::string> ParseForm(std::string_view body) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i <= body.size()) {
    size_t amp = body.find('&', i);
    if (amp == std::string_view::npos) amp = body.size();
    std::string_view pair = body.substr(i, amp - i);
    size_t eq = pair.find('=');
    if (!pair.empty()) {
      out[PercentDecode(pair.substr(0, eq))] =
          eq == std::string_view::npos ? std::string() : PercentDecode(pair.substr(eq + 1));
    }
    i = amp + 1;
  }
  return out;
}

const net::Headers& MdHeaders() {
  static const net::Headers h = {{"Metadata-Flavor", "Google"}};
  return h;
}

}  // namespace

std::string SimulatorImpl::IssueToken(std::chrono::seconds ttl) {
  std::string token = "ya29.sim-";
  static const char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 40; ++i) token += kHex[rng_() % 16];
  tokens_[token] = std::chrono::steady_clock::now() + ttl;
  return token;
}

std::optional<std::string> SimulatorImpl::MetadataValue(const Instance& inst,
                                                        const std::string& item, bool recursive,
                                                        bool json_alt, std::string* type) {
  const json::object& body = inst.body;
  json::object attrs;
  if (auto* md = body.if_contains("metadata"); md && md->is_object()) {
    if (auto* items = md->as_object().if_contains("items"); items && items->is_array()) {
      for (const auto& it : items->as_array()) {
        if (!it.is_object()) continue;
        attrs[StringValue(it.as_object(), "key")] = StringValue(it.as_object(), "value");
      }
    }
  }
  std::string ip;
  if (auto* n = body.if_contains("networkInterfaces");
      n && n->is_array() && !n->as_array().empty() && n->as_array()[0].is_object()) {
    ip = StringValue(n->as_array()[0].as_object(), "networkIP");
  }
  std::string zone_path = "projects/" + ProjectNumber(inst.project) + "/zones/" + inst.zone;
  std::string email = options_.service_account_email;
  json::array tags;
  if (auto* t = body.if_contains("tags"); t && t->is_object()) {
    if (auto* items = t->as_object().if_contains("items"); items && items->is_array()) {
      tags = items->as_array();
    }
  }
  json::object sa_default{
      {"aliases", json::array{"default"}},
      {"email", email},
      {"scopes", json::array{"https://www.googleapis.com/auth/cloud-platform"}}};
  json::object instance_json{
      {"attributes", attrs},
      {"hostname", inst.name + "." + inst.zone + ".c." + inst.project + ".internal"},
      {"id", std::stoull(StringValue(body, "id"))},
      {"machineType",
       "projects/" + ProjectNumber(inst.project) + "/machineTypes/" + inst.machine_type},
      {"name", inst.name},
      {"networkInterfaces", json::array{json::object{{"ip", ip}}}},
      {"serviceAccounts", json::object{{"default", sa_default}, {email, sa_default}}},
      {"tags", tags},
      {"zone", zone_path},
  };
  json::object project_json{{"attributes", json::object{}},
                            {"numericProjectId", std::stoull(ProjectNumber(inst.project))},
                            {"projectId", inst.project}};

  std::string it = item;
  while (!it.empty() && it.back() == '/') it.pop_back();
  bool dir = !item.empty() && item.back() == '/';
  auto as_json = [&](const json::value& v) {
    *type = "application/json";
    return json::serialize(v);
  };
  auto text = [&](const std::string& v) {
    *type = "application/text";
    return v;
  };
  if (it.empty()) {
    if (recursive)
      return as_json(json::object{{"instance", instance_json}, {"project", project_json}});
    return text("instance/\nproject/\n");
  }
  if (it == "instance") {
    if (recursive) return as_json(instance_json);
    return text(
        "attributes/\nhostname\nid\nmachine-type\nname\nnetwork-interfaces/\nservice-accounts/\n"
        "tags\nzone\n");
  }
  if (it == "project") {
    if (recursive) return as_json(project_json);
    return text("attributes/\nnumeric-project-id\nproject-id\n");
  }
  if (it == "instance/attributes") {
    if (recursive || json_alt) return as_json(attrs);
    std::string out;
    for (const auto& [k, v] : attrs) out += std::string(k) + "\n";
    return text(out);
  }
  if (it.rfind("instance/attributes/", 0) == 0 && !dir) {
    std::string key = it.substr(std::string("instance/attributes/").size());
    auto* v = attrs.if_contains(key);
    if (v == nullptr) return std::nullopt;
    if (json_alt) return as_json(*v);
    return text(std::string(v->as_string()));
  }
  if (it == "instance/name") return text(inst.name);
  if (it == "instance/id") return text(StringValue(body, "id"));
  if (it == "instance/hostname")
    return text(json::value_to<std::string>(instance_json["hostname"]));
  if (it == "instance/zone") return text(zone_path);
  if (it == "instance/machine-type") {
    return text(json::value_to<std::string>(instance_json["machineType"]));
  }
  if (it == "instance/tags") return as_json(tags);
  if (it == "instance/network-interfaces") return text("0/\n");
  if (it == "instance/network-interfaces/0/ip") return text(ip);
  if (it == "instance/service-accounts") {
    if (recursive) return as_json(instance_json["serviceAccounts"]);
    return text("default/\n" + email + "/\n");
  }
  for (const std::string& alias : {std::string("default"), email}) {
    std::string pre = "instance/service-accounts/" + alias;
    if (it == pre) {
      if (recursive) return as_json(sa_default);
      return text("aliases\nemail\nidentity\nscopes\ntoken\n");
    }
    if (it == pre + "/email") return text(email);
    if (it == pre + "/aliases") return text("default\n");
    if (it == pre + "/scopes") return text("https://www.googleapis.com/auth/cloud-platform\n");
    if (it == pre + "/token") {
      std::string token = IssueToken(std::chrono::seconds(3600));
      return as_json(
          json::object{{"access_token", token}, {"expires_in", 3599}, {"token_type", "Bearer"}});
    }
  }
  if (it == "project/project-id") return text(inst.project);
  if (it == "project/numeric-project-id") return text(ProjectNumber(inst.project));
  if (it == "project/attributes") return recursive ? as_json(json::object{}) : text("");
  return std::nullopt;
}

void SimulatorImpl::MetadataChanged(const std::string& instance_key) {
  NoteInstance(instance_key);  // every instance change passes here
  auto now = std::chrono::steady_clock::now();
  for (auto w = md_waiters_.begin(); w != md_waiters_.end();) {
    if (w->instance_key != instance_key) {
      ++w;
      continue;
    }
    auto inst = st_.instances.find(instance_key);
    std::string type = "application/text";
    std::optional<std::string> value;
    if (inst != st_.instances.end()) {
      value = MetadataValue(inst->second, w->item, w->recursive, w->json_alt, &type);
    }
    std::string etag = Etag(value);
    if (etag != w->last_etag || now >= w->deadline || w->responder->ClientGone()) {
      net::Headers h = MdHeaders();
      h.emplace_back("ETag", etag);
      if (value) {
        h.emplace_back("Content-Type", type);
        w->responder->Send(200, *value, h);
      } else {
        h.emplace_back("Content-Type", "text/html; charset=UTF-8");
        w->responder->Send(404, "Not Found\n", h);
      }
      w = md_waiters_.erase(w);
    } else {
      ++w;
    }
  }
}

void SimulatorImpl::HandleMetadata(const net::ServerRequest& req,
                                   const std::shared_ptr<net::Responder>& r) {
  std::string path = req.path;
  std::string instance_id = req.Header("x-sim-instance");  // "<project>/<zone>/<name>"
  static const std::string kSim = "/sim/instances/";
  if (path.rfind(kSim, 0) == 0) {
    // /sim/instances/<project>/<zone>/<name>/computeMetadata/v1/...
    std::string rest = path.substr(kSim.size());
    size_t a = rest.find('/');
    size_t b = a == std::string::npos ? a : rest.find('/', a + 1);
    size_t e = b == std::string::npos ? b : rest.find('/', b + 1);
    if (e == std::string::npos) {
      instance_id = rest;
      path = "/";
    } else {
      instance_id = rest.substr(0, e);
      path = rest.substr(e);
    }
  }
  net::Headers h = MdHeaders();
  if (!req.Header("x-forwarded-for").empty()) {
    r->Send(403, "Request contained an X-Forwarded-For header: request rejected.\n", h);
    return;
  }
  if (req.Header("metadata-flavor") != "Google") {
    h.emplace_back("Content-Type", "text/html; charset=UTF-8");
    r->Send(403,
            "Your client does not have permission to get URL <code>" + req.path +
                "</code> from this server. Missing Metadata-Flavor:Google header.\n",
            h);
    return;
  }
  static const std::string kPrefix = "/computeMetadata/v1";
  if (path.rfind(kPrefix, 0) != 0) {
    r->Send(404, "Not Found\n", h);
    return;
  }
  std::string item = path.substr(kPrefix.size());
  if (!item.empty() && item.front() == '/') item.erase(0, 1);
  bool recursive = req.Query("recursive") == "true";
  bool json_alt = req.Query("alt") == "json";
  bool wait = req.Query("wait_for_change") == "true";
  std::string last_etag = req.Query("last_etag");
  int timeout_sec = 300;
  if (std::string t = req.Query("timeout_sec"); !t.empty()) {
    try {
      timeout_sec = std::clamp(std::stoi(t), 1, 3600);
    } catch (...) {
      r->Send(400, "Invalid timeout_sec\n", h);
      return;
    }
  }
  std::lock_guard lock(mu_);
  ++st_.counters["metadata." + std::string(wait ? "wait" : "get")];
  auto inst = st_.instances.find(instance_id);
  if (inst == st_.instances.end()) {
    h.emplace_back("Content-Type", "text/html; charset=UTF-8");
    r->Send(404, "Not Found\n", h);
    return;
  }
  std::string type = "application/text";
  std::optional<std::string> value = MetadataValue(inst->second, item, recursive, json_alt, &type);
  std::string etag = Etag(value);
  bool is_token = item.find("/token") != std::string::npos;
  if (wait && !is_token && (last_etag.empty() || last_etag == etag)) {
    md_waiters_.push_back(
        MetadataWaiter{instance_id, item, recursive, json_alt, etag, r,
                       std::chrono::steady_clock::now() + std::chrono::seconds(timeout_sec)});
    return;
  }
  h.emplace_back("ETag", etag);
  if (!value) {
    h.emplace_back("Content-Type", "text/html; charset=UTF-8");
    r->Send(404, "Not Found\n", h);
    return;
  }
  h.emplace_back("Content-Type", type);
  r->Send(200, *value, h);
}

void SimulatorImpl::HandleToken(const net::ServerRequest& req, std::shared_ptr<net::Responder> r) {
  auto fail = [&](const std::string& error, const std::string& desc) {
    r->Send(400, json::serialize(json::object{{"error", error}, {"error_description", desc}}));
  };
  if (req.method != "POST") {
    r->Send(405, json::serialize(json::object{{"error", "invalid_request"},
                                              {"error_description", "POST required"}}));
    return;
  }
  auto form = ParseForm(req.body);
  std::map<std::string, ServiceAccountKey> keys;
  {
    std::lock_guard lock(mu_);
    ++st_.counters["oauth2.token"];
    keys = sa_keys_;
  }
  if (form["grant_type"] != "urn:ietf:params:oauth:grant-type:jwt-bearer") {
    fail("unsupported_grant_type", "Invalid grant_type: " + form["grant_type"]);
    return;
  }
  if (form["assertion"].empty()) {
    fail("invalid_request", "Missing required parameter: assertion");
    return;
  }
  int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  auto who = VerifyAssertion(form["assertion"], keys,
                             {token_endpoint(), "https://oauth2.googleapis.com/token",
                              "https://www.googleapis.com/oauth2/v4/token"},
                             now);
  if (!who.ok()) {
    fail("invalid_grant", who.error().message);
    return;
  }
  std::string token;
  {
    std::lock_guard lock(mu_);
    token = IssueToken(std::chrono::seconds(3600));
  }
  r->Send(200, json::serialize(json::object{
                   {"access_token", token}, {"expires_in", 3599}, {"token_type", "Bearer"}}));
}

}  // namespace hyperslice::sim::gce::internal
