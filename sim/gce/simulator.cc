// Lifecycle, time-driven state (operations, VM boot, MIG creation attempts) and the capacity
// model of the GCE simulator.
#include <algorithm>
#include <cstdio>

#include "sim/gce/sim_impl.h"
#include "src/base/json.h"
#include "src/base/log.h"
#include "src/base/time.h"

namespace hyperslice::sim::gce {

Result<std::unique_ptr<Simulator>> Simulator::Start(Options options) {
  auto sim = std::make_unique<internal::SimulatorImpl>(std::move(options));
  HS_RETURN_IF_ERROR(sim->Init());
  return std::unique_ptr<Simulator>(std::move(sim));
}

namespace internal {

using jsonfield::StringValue;

SimulatorImpl::SimulatorImpl(Options options) : options_(std::move(options)), rng_(options_.seed) {}

SimulatorImpl::~SimulatorImpl() { Stop(); }

Status SimulatorImpl::Init() {
  if (options_.projects.empty() || options_.regions.empty()) {
    return Error::Make(Error::Code::kInvalidArgument, "gce sim: at least one project and region");
  }
  if (options_.validate_requests) {
    std::string dir = options_.proto_dir.empty() ? DefaultProtoDir() : options_.proto_dir;
    auto schema = SharedApiSchema(dir);
    if (!schema.ok()) return schema.error();
    schema_ = std::move(schema).value();
    // Every route the simulator serves must be the API's own: same method, same path.
    for (const Route& r : Routes()) {
      const ApiSchema::Rpc* rpc = schema_->Find(r.method_id);
      if (rpc == nullptr) {
        return Error::Make(Error::Code::kInternal,
                           "gce sim: route " + r.method_id + " is not in compute.proto");
      }
      std::string path = "/compute/v1/projects/{project}";
      for (const auto& seg : r.pattern) path += "/" + seg;
      if (rpc->http_method != r.http_method) {
        return Error::Make(Error::Code::kInternal, "gce sim: route " + r.method_id + " is " +
                                                       r.http_method + ", compute.proto says " +
                                                       rpc->http_method);
      }
      // Compare shapes: literal segments must agree, variables line up with "*".
      std::vector<std::string> a, b;
      auto split = [](const std::string& s, std::vector<std::string>& out) {
        size_t i = 0;
        while (i <= s.size()) {
          size_t j = s.find('/', i);
          if (j == std::string::npos) j = s.size();
          std::string seg = s.substr(i, j - i);
          if (!seg.empty()) out.push_back(seg.front() == '{' || seg == "*" ? "*" : seg);
          i = j + 1;
        }
      };
      split(path, a);
      split(rpc->path_template, b);
      if (a != b) {
        return Error::Make(Error::Code::kInternal, "gce sim: route " + r.method_id + " path " +
                                                       path + " differs from compute.proto's " +
                                                       rpc->path_template);
      }
    }
  }
  net::HttpServer::Options api_opts;
  api_opts.address = options_.address;
  api_opts.port = options_.api_port;
  api_opts.threads = std::max(1, options_.api_threads);
  auto api = net::HttpServer::Start(
      api_opts, [this](const net::ServerRequest& q, std::shared_ptr<net::Responder> r) {
        HandleApi(q, std::move(r));
      });
  if (!api.ok()) return api.error();
  api_ = std::move(api).value();
  api_base_ = "http://" + options_.address + ":" + std::to_string(api_->port()) + "/compute/v1/";
  {
    // After api_base_ is known: start-up reservations carry URLs.
    std::lock_guard lock(mu_);
    Reset();
  }

  net::HttpServer::Options md_opts;
  md_opts.address = options_.address;
  md_opts.port = options_.metadata_port;
  md_opts.threads = 1;
  md_opts.idle_timeout = std::chrono::minutes(10);
  auto md = net::HttpServer::Start(
      md_opts, [this](const net::ServerRequest& q, std::shared_ptr<net::Responder> r) {
        HandleMetadata(q, std::move(r));
      });
  if (!md.ok()) return md.error();
  metadata_ = std::move(md).value();

  net::HttpServer::Options ctl_opts;
  ctl_opts.address = options_.address;
  ctl_opts.port = options_.control_port;
  ctl_opts.threads = 1;
  auto ctl = net::HttpServer::Start(
      ctl_opts, [this](const net::ServerRequest& q, std::shared_ptr<net::Responder> r) {
        HandleControl(q, std::move(r));
      });
  if (!ctl.ok()) return ctl.error();
  control_ = std::move(ctl).value();

  ticker_ = std::thread([this] { TickerLoop(); });
  log::Info("gce simulator started", {{"api", api_endpoint()},
                                      {"metadata", metadata_endpoint()},
                                      {"control", control_endpoint()},
                                      {"validating", options_.validate_requests}});
  return OkStatus();
}

void SimulatorImpl::Stop() {
  if (stopped_.exchange(true)) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    // Long polls answer with what they have so their clients are not left hanging.
    for (auto& w : op_waiters_) {
      auto it = st_.operations.find(w.op_key);
      if (it != st_.operations.end()) w.responder->Send(200, json::serialize(it->second.body));
    }
    op_waiters_.clear();
    for (auto& w : md_waiters_) w.responder->Send(503, "simulator stopping\n");
    md_waiters_.clear();
    for (auto& d : delayed_) d.responder->Send(d.reply.status, d.reply.body, d.reply.headers);
    delayed_.clear();
  }
  tick_cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  if (api_) api_->Stop(std::chrono::milliseconds(1000));
  if (metadata_) metadata_->Stop(std::chrono::milliseconds(1000));
  if (control_) control_->Stop(std::chrono::milliseconds(1000));
}

std::string SimulatorImpl::api_endpoint() const { return api_base_; }
std::string SimulatorImpl::token_endpoint() const {
  return "http://" + options_.address + ":" + std::to_string(api_->port()) + "/token";
}
std::string SimulatorImpl::metadata_endpoint() const {
  return "http://" + options_.address + ":" + std::to_string(metadata_->port());
}
std::string SimulatorImpl::control_endpoint() const {
  return "http://" + options_.address + ":" + std::to_string(control_->port());
}
size_t SimulatorImpl::metadata_waiters() const {
  std::lock_guard lock(mu_);
  return md_waiters_.size();
}
std::string SimulatorImpl::metadata_host(const std::string& project, const std::string& zone,
                                         const std::string& instance) const {
  return options_.address + ":" + std::to_string(metadata_->port()) + "/sim/instances/" + project +
         "/" + zone + "/" + instance;
}

void SimulatorImpl::Reset() {
  // Long polls of the old state end now.
  for (auto& w : op_waiters_) w.responder->Send(404, ErrorBody(NotFound(w.op_key)));
  op_waiters_.clear();
  for (auto& w : md_waiters_)
    w.responder->Send(404, "not found\n", {{"Metadata-Flavor", "Google"}});
  md_waiters_.clear();
  st_ = State{};
  st_.operation_latency = options_.operation_latency;
  st_.instance_boot_latency = options_.instance_boot_latency;
  for (const auto& c : options_.capacity) st_.capacity[c.zone + "/" + c.machine_type] = c.instances;
  for (const auto& r : options_.reservations) {
    std::string project = r.project.empty() ? options_.projects.front() : r.project;
    ReservationState rs;
    rs.machine_type = r.machine_type;
    rs.count = r.count;
    rs.body = json::object{
        {"kind", "compute#reservation"},
        {"id", std::to_string(NewId())},
        {"creationTimestamp", Now3339()},
        {"name", r.name},
        {"zone", ZoneUrl(project, r.zone)},
        {"selfLink", "projects/" + project + "/zones/" + r.zone + "/reservations/" + r.name},
        {"specificReservationRequired", true},
        {"status", "READY"},
        {"specificReservation",
         json::object{{"count", std::to_string(r.count)},
                      {"inUseCount", "0"},
                      {"instanceProperties", json::object{{"machineType", r.machine_type}}}}}};
    st_.reservations[project + "/" + r.zone + "/" + r.name] = std::move(rs);
  }
  rng_.seed(options_.seed);
  NoteAllInstances();
}

void SimulatorImpl::TickerLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    tick_cv_.wait_for(lock, std::chrono::milliseconds(10));
    if (stopping_) break;
    Tick(std::chrono::steady_clock::now());
    bool pending = false;
    for (const auto& [id, sub] : subscribers_) pending = pending || !sub.pending.empty();
    if (pending) {
      lock.unlock();
      DeliverInstanceEvents();
      lock.lock();
    }
  }
}

uint64_t SimulatorImpl::SubscribeInstances(InstanceObserver observer) {
  std::lock_guard lock(mu_);
  NoteAllInstances();  // existing subscribers first hear what changed before this one joins
  uint64_t id = next_subscription_++;
  Subscriber sub{std::move(observer), {}};
  for (const auto& [key, inst] : st_.instances) {
    sub.pending.push_back(InstanceEvent{inst.project, inst.zone, inst.name,
                                        StringValue(inst.body, "id"), inst.machine_type,
                                        StringValue(inst.body, "status")});
  }
  subscribers_.emplace(id, std::move(sub));
  return id;
}

void SimulatorImpl::UnsubscribeInstances(uint64_t subscription) {
  std::lock_guard deliver(deliver_mu_);
  std::lock_guard lock(mu_);
  subscribers_.erase(subscription);
}

void SimulatorImpl::NoteInstance(const std::string& instance_key) {
  if (subscribers_.empty()) return;
  auto it = st_.instances.find(instance_key);
  std::pair<std::string, std::string> now;
  InstanceEvent ev;
  if (it != st_.instances.end()) {
    const Instance& inst = it->second;
    now = {StringValue(inst.body, "id"), StringValue(inst.body, "status")};
    ev =
        InstanceEvent{inst.project, inst.zone, inst.name, now.first, inst.machine_type, now.second};
  } else {
    auto seen = observed_.find(instance_key);
    if (seen == observed_.end()) return;
    // "<project>/<zone>/<name>"
    size_t a = instance_key.find('/'), b = instance_key.find('/', a + 1);
    ev.project = instance_key.substr(0, a);
    ev.zone = instance_key.substr(a + 1, b - a - 1);
    ev.name = instance_key.substr(b + 1);
    ev.id = seen->second.first;
    observed_.erase(seen);
    for (auto& [id, sub] : subscribers_) sub.pending.push_back(ev);
    return;
  }
  auto seen = observed_.find(instance_key);
  if (seen != observed_.end() && seen->second == now) return;
  if (seen != observed_.end() && seen->second.first != now.first) {
    // Re-created under the same name: the old VM is gone first.
    InstanceEvent gone = ev;
    gone.id = seen->second.first;
    gone.status.clear();
    for (auto& [id, sub] : subscribers_) sub.pending.push_back(gone);
  }
  observed_[instance_key] = now;
  for (auto& [id, sub] : subscribers_) sub.pending.push_back(ev);
}

void SimulatorImpl::NoteAllInstances() {
  std::vector<std::string> keys;
  for (const auto& [key, seen] : observed_) keys.push_back(key);
  for (const auto& [key, inst] : st_.instances) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  if (subscribers_.empty()) {
    observed_.clear();
    for (const auto& [key, inst] : st_.instances)
      observed_[key] = {StringValue(inst.body, "id"), StringValue(inst.body, "status")};
    return;
  }
  for (const auto& k : keys) NoteInstance(k);
}

void SimulatorImpl::DeliverInstanceEvents() {
  std::lock_guard deliver(deliver_mu_);
  std::vector<std::pair<InstanceObserver, std::deque<InstanceEvent>>> batch;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, sub] : subscribers_) {
      if (sub.pending.empty()) continue;
      batch.emplace_back(sub.observer, std::move(sub.pending));
      sub.pending.clear();
    }
  }
  for (auto& [observer, events] : batch) {
    for (const auto& e : events) {
      try {
        observer(e);
      } catch (const std::exception& ex) {
        log::Error("gce simulator: instance observer threw", {{"error", ex.what()}});
      }
    }
  }
}

void SimulatorImpl::Tick(SteadyTime now) {
  for (auto& [key, op] : st_.operations) {
    if (!op.done) AdvanceOperation(op, now);
  }
  // VM boot: PROVISIONING -> STAGING -> RUNNING.
  for (auto& [key, inst] : st_.instances) {
    if (!inst.booting) continue;
    std::string status = json::value_to<std::string>(inst.body["status"]);
    if (status == "PROVISIONING" && now >= inst.staging_at) {
      inst.body["status"] = "STAGING";
      status = "STAGING";
      NoteInstance(key);
    }
    if (status == "STAGING" && now >= inst.running_at) {
      inst.body["status"] = "RUNNING";
      inst.body["lastStartTimestamp"] = Now3339();
      inst.booting = false;
      MetadataChanged(key);
    }
  }
  for (auto& [key, mig] : st_.migs) ReconcileMig(mig, now);
  // Long-poll deadlines.
  for (auto it = op_waiters_.begin(); it != op_waiters_.end();) {
    if (now >= it->deadline || it->responder->ClientGone()) {
      auto op = st_.operations.find(it->op_key);
      if (op != st_.operations.end()) {
        it->responder->Send(200, json::serialize(op->second.body));
      } else {
        it->responder->Send(404, ErrorBody(NotFound(it->op_key)));
      }
      it = op_waiters_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<std::string> md_due;
  for (auto& w : md_waiters_) {
    if (now >= w.deadline || w.responder->ClientGone()) md_due.push_back(w.instance_key);
  }
  if (!md_due.empty()) {
    // MetadataChanged answers waiters whose value changed or whose deadline passed.
    std::sort(md_due.begin(), md_due.end());
    md_due.erase(std::unique(md_due.begin(), md_due.end()), md_due.end());
    for (const auto& k : md_due) MetadataChanged(k);
  }
  for (auto it = delayed_.begin(); it != delayed_.end();) {
    if (now >= it->at) {
      it->responder->Send(it->reply.status, std::move(it->reply.body), it->reply.headers);
      it = delayed_.erase(it);
    } else {
      ++it;
    }
  }
  // Expired access tokens.
  for (auto it = tokens_.begin(); it != tokens_.end();) {
    it = now >= it->second ? tokens_.erase(it) : std::next(it);
  }
}

std::string SimulatorImpl::Now3339() const {
  // Compute writes milliseconds and the offset "-00:00" (RFC 3339's "UTC, local offset unknown").
  std::string s = FormatRfc3339(std::chrono::system_clock::now(), 3);
  s.pop_back();  // the "Z"
  return s + "-00:00";
}

uint64_t SimulatorImpl::NewId() {
  // GCE ids are 19-digit-ish unsigned numbers.
  return 1000000000000000000ULL + rng_() % 8000000000000000000ULL;
}

std::string SimulatorImpl::RandomSuffix(size_t n) {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += kChars[rng_() % 36];
  return s;
}

std::string SimulatorImpl::NewFingerprint() {
  std::string raw(8, '\0');
  for (auto& c : raw) c = static_cast<char>(rng_() & 0xff);
  // Standard base64 with padding, as GCE's fingerprints look ("r5xEvyUKdqw=").
  static const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < raw.size(); i += 3) {
    uint32_t v = (uint8_t(raw[i]) << 16) | (uint8_t(raw[i + 1]) << 8) | uint8_t(raw[i + 2]);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += kB64[v & 63];
  }
  uint32_t v = (uint8_t(raw[i]) << 16) | (uint8_t(raw[i + 1]) << 8);
  out += kB64[(v >> 18) & 63];
  out += kB64[(v >> 12) & 63];
  out += kB64[(v >> 6) & 63];
  out += '=';
  return out;
}

bool SameFingerprint(std::string_view a, std::string_view b) {
  // A fingerprint is a bytes field: GCE takes it in either base64 alphabet, with or without
  // padding (gcloud's apitools sends the URL-safe one back), so the bytes are compared.
  auto canonical = [](std::string_view s) {
    std::string out;
    for (char c : s) {
      if (c == '=') continue;
      out += c == '-' ? '+' : c == '_' ? '/' : c;
    }
    return out;
  };
  return canonical(a) == canonical(b);
}

std::string SimulatorImpl::Url(const std::string& path) const { return api_base_ + path; }
std::string SimulatorImpl::ZoneUrl(const std::string& project, const std::string& zone) const {
  return Url("projects/" + project + "/zones/" + zone);
}
std::string SimulatorImpl::RegionUrl(const std::string& project, const std::string& region) const {
  return Url("projects/" + project + "/regions/" + region);
}

bool SimulatorImpl::KnownProject(const std::string& p) const {
  return std::find(options_.projects.begin(), options_.projects.end(), p) !=
         options_.projects.end();
}
std::vector<std::string> SimulatorImpl::Zones() const {
  std::vector<std::string> zones;
  for (const auto& r : options_.regions) {
    for (const char* s : {"-a", "-b", "-c", "-f"}) zones.push_back(r + s);
  }
  return zones;
}
bool SimulatorImpl::KnownZone(const std::string& z) const {
  auto zones = Zones();
  return std::find(zones.begin(), zones.end(), z) != zones.end();
}
bool SimulatorImpl::KnownRegion(const std::string& r) const {
  return std::find(options_.regions.begin(), options_.regions.end(), r) != options_.regions.end();
}
std::string SimulatorImpl::RegionOf(const std::string& zone) const {
  auto dash = zone.rfind('-');
  return dash == std::string::npos ? zone : zone.substr(0, dash);
}

// ---- operations ----

Operation& SimulatorImpl::NewOperation(Ctx& c, const std::string& scope_kind,
                                       const std::string& scope, const std::string& op_type,
                                       const std::string& target_link, const std::string& target_id,
                                       std::function<std::optional<OpError>()> on_done) {
  auto now = std::chrono::steady_clock::now();
  uint64_t id = NewId();
  char hex[64];
  std::snprintf(hex, sizeof hex, "%013llx-%08llx-%08llx",
                static_cast<unsigned long long>(rng_() & 0xfffffffffffffULL),
                static_cast<unsigned long long>(rng_() & 0xffffffffULL),
                static_cast<unsigned long long>(rng_() & 0xffffffffULL));
  std::string name = "operation-" +
                     std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count()) +
                     "-" + hex;
  std::string scope_path = scope_kind == "global" ? "global" : scope_kind + "/" + scope;
  std::string key = c.project + "/" + scope_path + "/" + name;
  Operation op;
  op.key = key;
  op.method = c.method_id;
  op.body = json::object{
      {"kind", "compute#operation"},
      {"id", std::to_string(id)},
      {"name", name},
      {"operationType", op_type},
      {"targetLink", target_link},
      {"targetId", target_id},
      {"status", "PENDING"},
      {"user", options_.service_account_email},
      {"progress", 0},
      {"insertTime", Now3339()},
      {"selfLink", Url("projects/" + c.project + "/" + scope_path + "/operations/" + name)},
  };
  if (scope_kind == "zones") op.body["zone"] = ZoneUrl(c.project, scope);
  if (scope_kind == "regions") op.body["region"] = RegionUrl(c.project, scope);
  op.running_at = now + st_.operation_latency / 2;
  op.done_at = now + st_.operation_latency;
  op.on_done = std::move(on_done);
  auto f = st_.op_failures.find(c.method_id);
  if (f != st_.op_failures.end() && f->second.remaining != 0) {
    op.forced_error = OpError{f->second.code, f->second.message, 400};
    if (f->second.remaining > 0 && --f->second.remaining == 0) st_.op_failures.erase(f);
  }
  std::string rid = c.req ? c.req->Query("requestId") : "";
  if (!rid.empty()) st_.request_ids[c.project + "/" + rid] = key;
  auto [it, inserted] = st_.operations.emplace(key, std::move(op));
  (void)inserted;
  // A zero latency completes at once, so the insert's own answer already says DONE.
  AdvanceOperation(it->second, now);
  return it->second;
}

void SimulatorImpl::AdvanceOperation(Operation& op, SteadyTime now) {
  if (op.done) return;
  std::string status = json::value_to<std::string>(op.body["status"]);
  if (status == "PENDING" && now >= op.running_at) {
    op.body["status"] = "RUNNING";
    op.body["startTime"] = Now3339();
    op.body["progress"] = 0;
    status = "RUNNING";
  }
  if (status == "RUNNING" && now >= op.done_at) {
    std::optional<OpError> err = op.forced_error;
    if (!err && op.on_done) err = op.on_done();
    op.on_done = nullptr;
    op.done = true;
    op.body["status"] = "DONE";
    op.body["progress"] = 100;
    op.body["endTime"] = Now3339();
    if (err) {
      op.body["error"] = json::object{
          {"errors", json::array{json::object{{"code", err->code}, {"message", err->message}}}}};
      op.body["httpErrorStatusCode"] = err->http_status;
      op.body["httpErrorMessage"] = err->http_status == 404 ? "NOT FOUND" : "BAD REQUEST";
    }
    CompleteWaiters(op.key);
  }
}

void SimulatorImpl::CompleteWaiters(const std::string& op_key) {
  auto op = st_.operations.find(op_key);
  for (auto it = op_waiters_.begin(); it != op_waiters_.end();) {
    if (it->op_key == op_key) {
      if (op != st_.operations.end()) it->responder->Send(200, json::serialize(op->second.body));
      it = op_waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

// ---- capacity, MIGs, instances ----

bool SimulatorImpl::Fits(const std::string& project, const std::string& zone, const std::string& mt,
                         const std::string& reservation_key, int64_t n, std::string* why) const {
  if (st_.stockouts.count(zone + "/*") || st_.stockouts.count(zone + "/" + mt)) {
    *why = "ZONE_RESOURCE_POOL_EXHAUSTED";
    return false;
  }
  if (!reservation_key.empty()) {
    auto r = st_.reservations.find(reservation_key);
    if (r == st_.reservations.end()) {
      *why = "RESERVATION_NOT_FOUND";
      return false;
    }
    int64_t used = 0;
    for (const auto& [k, inst] : st_.instances) {
      if (inst.reservation_key == reservation_key) ++used;
    }
    if (used + n > r->second.count) {
      *why = "ZONE_RESOURCE_POOL_EXHAUSTED";
      return false;
    }
    return true;
  }
  (void)project;
  auto cap = st_.capacity.find(zone + "/" + mt);
  if (cap == st_.capacity.end()) return true;
  int64_t used = 0;
  for (const auto& [k, inst] : st_.instances) {
    if (inst.zone == zone && inst.machine_type == mt && inst.reservation_key.empty()) ++used;
  }
  if (used + n > cap->second) {
    *why = "ZONE_RESOURCE_POOL_EXHAUSTED";
    return false;
  }
  return true;
}

namespace {

std::string LastSegment(const std::string& s) {
  auto slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

}  // namespace

void SimulatorImpl::ReconcileMig(Mig& mig, SteadyTime now) {
  if (mig.deleting || now < mig.next_attempt) return;
  std::vector<MigMember*> pending;
  for (auto& m : mig.members) {
    if (!st_.instances.count(mig.project + "/" + mig.zone + "/" + m.name)) pending.push_back(&m);
  }
  if (pending.empty()) {
    if (mig.bulk_in_progress) {
      mig.bulk_in_progress = false;
      mig.bulk_last_check = json::object{{"timestamp", Now3339()}};
    }
    RefreshMigStatus(mig);
    return;
  }
  auto tmpl = st_.templates.find(mig.template_key);
  if (tmpl == st_.templates.end()) {
    mig.next_attempt = now + options_.mig_retry_interval;
    return;
  }
  json::object props;
  if (auto* p = tmpl->second.if_contains("properties"); p && p->is_object()) props = p->as_object();
  std::string mt = LastSegment(StringValue(props, "machineType"));
  std::string reservation_key = SpecificReservationKey(props, mig.project, mig.zone);
  bool bulk = false;
  if (auto* tsp = mig.body.if_contains("targetSizePolicy"); tsp && tsp->is_object()) {
    bulk = StringValue(tsp->as_object(), "mode") == "BULK";
  }
  std::string why;
  auto error_for = [&](const std::string& code) {
    std::string message;
    if (code == "RESERVATION_NOT_FOUND") {
      message = "The resource 'projects/" + mig.project + "/zones/" + mig.zone + "/reservations/" +
                LastSegment(reservation_key) + "' was not found";
    } else {
      message = "The zone 'projects/" + mig.project + "/zones/" + mig.zone +
                "' does not have enough resources available to fulfill the request.  Try a "
                "different zone, or try again later.";
    }
    return json::object{{"code", code}, {"message", message}};
  };
  auto record_failure = [&](MigMember& m, const json::object& err) {
    m.last_errors = json::array{err};
    json::object entry{
        {"error", err},
        {"instanceActionDetails",
         json::object{{"action", "CREATING"},
                      {"instance", Url("projects/" + mig.project + "/zones/" + mig.zone +
                                       "/instances/" + m.name)},
                      {"version", json::object{{"instanceTemplate",
                                                StringValue(mig.body, "instanceTemplate")}}}}},
        {"timestamp", Now3339()}};
    mig.errors.push_front(std::move(entry));
    while (mig.errors.size() > 500) mig.errors.pop_back();
  };
  if (bulk) {
    if (Fits(mig.project, mig.zone, mt, reservation_key, static_cast<int64_t>(pending.size()),
             &why)) {
      for (auto* m : pending) {
        m->last_errors.clear();
        CreateInstance(mig.project, mig.zone, MigKey(mig), m->name, props, mt, reservation_key,
                       now);
      }
      mig.bulk_in_progress = false;
      mig.bulk_last_check = json::object{{"timestamp", Now3339()}};
    } else {
      json::object err = error_for(why);
      for (auto* m : pending) record_failure(*m, err);
      mig.bulk_in_progress = true;
      mig.bulk_last_check = json::object{{"timestamp", Now3339()},
                                         {"error", json::object{{"errors", json::array{err}}}}};
      mig.next_attempt = now + options_.mig_retry_interval;
    }
  } else {
    bool failed = false;
    for (auto* m : pending) {
      if (Fits(mig.project, mig.zone, mt, reservation_key, 1, &why)) {
        m->last_errors.clear();
        CreateInstance(mig.project, mig.zone, MigKey(mig), m->name, props, mt, reservation_key,
                       now);
      } else {
        record_failure(*m, error_for(why));
        failed = true;
      }
    }
    if (failed) mig.next_attempt = now + options_.mig_retry_interval;
  }
  RefreshMigStatus(mig);
}

std::string SimulatorImpl::SpecificReservationKey(const json::object& props,
                                                  const std::string& project,
                                                  const std::string& zone) const {
  auto* ra = props.if_contains("reservationAffinity");
  if (ra == nullptr || !ra->is_object()) return {};
  const auto& rao = ra->as_object();
  if (StringValue(rao, "consumeReservationType") != "SPECIFIC_RESERVATION") return {};
  auto* vals = rao.if_contains("values");
  if (vals == nullptr || !vals->is_array() || vals->as_array().empty() ||
      !vals->as_array()[0].is_string()) {
    return {};
  }
  std::string v(vals->as_array()[0].as_string());
  std::string owner = project;
  if (v.rfind("projects/", 0) == 0) owner = v.substr(9, v.find('/', 9) - 9);
  return owner + "/" + zone + "/" + LastSegment(v);
}

Instance& SimulatorImpl::CreateInstance(const std::string& project, const std::string& zone,
                                        const std::string& mig_key, const std::string& name,
                                        const json::object& properties, const std::string& mt,
                                        const std::string& reservation_key, SteadyTime now) {
  std::string key = project + "/" + zone + "/" + name;
  Instance inst;
  inst.project = project;
  inst.zone = zone;
  inst.name = name;
  inst.mig_key = mig_key;
  inst.machine_type = mt;
  inst.reservation_key = reservation_key;
  inst.booting = true;
  inst.staging_at = now + st_.instance_boot_latency / 2;
  inst.running_at = now + st_.instance_boot_latency;
  json::object md{{"kind", "compute#metadata"}, {"fingerprint", NewFingerprint()}};
  if (auto* m = properties.if_contains("metadata"); m && m->is_object()) {
    if (auto* items = m->as_object().if_contains("items"); items && items->is_array()) {
      md["items"] = *items;
    }
  }
  std::string self = Url("projects/" + project + "/zones/" + zone + "/instances/" + name);
  json::object body{
      {"kind", "compute#instance"},
      {"id", std::to_string(NewId())},
      {"creationTimestamp", Now3339()},
      {"name", name},
      {"machineType", ZoneUrl(project, zone) + "/machineTypes/" + mt},
      {"status", "PROVISIONING"},
      {"zone", ZoneUrl(project, zone)},
      {"metadata", md},
      {"selfLink", self},
      {"cpuPlatform", "Unknown CPU Platform"},
      {"fingerprint", NewFingerprint()},
      {"labelFingerprint", NewFingerprint()},
      {"startRestricted", false},
      {"deletionProtection", false},
      {"canIpForward", false},
  };
  for (const char* k : {"description", "tags", "disks", "serviceAccounts", "scheduling", "labels",
                        "reservationAffinity", "guestAccelerators", "shieldedInstanceConfig",
                        "networkPerformanceConfig"}) {
    if (auto* v = properties.if_contains(k)) body[k] = *v;
  }
  // Network interfaces get addresses, as GCE assigns them.
  json::array nics;
  if (auto* n = properties.if_contains("networkInterfaces"); n && n->is_array())
    nics = n->as_array();
  if (nics.empty()) nics.push_back(json::object{});
  int idx = 0;
  // Never reused while the simulator runs (a deleted VM's address is not handed out again at
  // once, as GCE's allocator does not either), so every instance has an address of its own.
  uint32_t host = st_.next_network_host++;
  for (auto& nic : nics) {
    if (!nic.is_object()) nic = json::object{};
    auto& o = nic.as_object();
    o["kind"] = "compute#networkInterface";
    o["name"] = "nic" + std::to_string(idx++);
    o["networkIP"] =
        "10.128." + std::to_string((host >> 8) & 0xff) + "." + std::to_string(host & 0xff);
    if (!o.contains("network"))
      o["network"] = Url("projects/" + project + "/global/networks/default");
  }
  body["networkInterfaces"] = std::move(nics);
  inst.body = std::move(body);
  auto [it, inserted] = st_.instances.insert_or_assign(key, std::move(inst));
  (void)inserted;
  MetadataChanged(key);
  return it->second;
}

void SimulatorImpl::DeleteInstance(const std::string& key) {
  st_.instances.erase(key);
  MetadataChanged(key);
}

json::object SimulatorImpl::ManagedInstanceJson(const Mig& mig, const MigMember& m) const {
  std::string key = mig.project + "/" + mig.zone + "/" + m.name;
  json::object mi{
      {"instance", Url("projects/" + mig.project + "/zones/" + mig.zone + "/instances/" + m.name)},
      {"name", m.name},
      {"version", json::object{{"instanceTemplate", StringValue(mig.body, "instanceTemplate")}}},
      {"targetStatus", "RUNNING"},
  };
  auto it = st_.instances.find(key);
  if (it == st_.instances.end()) {
    mi["currentAction"] = "CREATING";
  } else {
    const auto& body = it->second.body;
    mi["id"] = body.at("id");
    std::string status = StringValue(body, "status");
    mi["instanceStatus"] = status;
    mi["currentAction"] = status == "RUNNING" || status == "TERMINATED" ? "NONE" : "VERIFYING";
  }
  if (!m.last_errors.empty()) {
    mi["lastAttempt"] = json::object{{"errors", json::object{{"errors", m.last_errors}}}};
  }
  return mi;
}

void SimulatorImpl::RefreshMigStatus(Mig& mig) {
  int64_t creating = 0, none = 0, verifying = 0;
  for (const auto& m : mig.members) {
    auto it = st_.instances.find(mig.project + "/" + mig.zone + "/" + m.name);
    if (it == st_.instances.end()) {
      ++creating;
    } else {
      std::string s = StringValue(it->second.body, "status");
      if (s == "RUNNING" || s == "TERMINATED") {
        ++none;
      } else {
        ++verifying;
      }
    }
  }
  mig.body["currentActions"] =
      json::object{{"abandoning", 0},       {"creating", creating}, {"creatingWithoutRetries", 0},
                   {"deleting", 0},         {"none", none},         {"recreating", 0},
                   {"refreshing", 0},       {"restarting", 0},      {"resuming", 0},
                   {"starting", 0},         {"stopping", 0},        {"suspending", 0},
                   {"verifying", verifying}};
  json::object status{
      {"isStable", creating == 0 && verifying == 0},
      {"versionTarget", json::object{{"isReached", creating == 0 && verifying == 0}}},
      {"stateful", json::object{{"hasStatefulConfig", false},
                                {"perInstanceConfigs", json::object{{"allEffective", true}}}}}};
  bool bulk = false;
  if (auto* tsp = mig.body.if_contains("targetSizePolicy"); tsp && tsp->is_object()) {
    bulk = StringValue(tsp->as_object(), "mode") == "BULK";
  }
  if (bulk) {
    json::object op{{"inProgress", mig.bulk_in_progress || creating > 0}};
    if (!mig.bulk_last_check.empty()) op["lastProgressCheck"] = mig.bulk_last_check;
    status["bulkInstanceOperation"] = op;
  }
  mig.body["status"] = status;
}

}  // namespace internal
}  // namespace hyperslice::sim::gce
