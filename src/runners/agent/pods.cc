#include "src/runners/agent/pods.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "src/base/log.h"
#include "src/kube/quantity.h"

namespace hyperslice::runners::agent {
namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

struct PodManager::Pod {
  v1::RunPodRequest spec;
  v1::PodStatus status;  // guarded by PodManager::mu_
  std::string dir;
  std::map<std::string, std::vector<DeviceNode>> devices;
  // Worker-thread state.
  std::map<std::string, Image> images;
  std::map<std::string, bool> spawned;  // shim started for the container's current attempt
  std::map<std::string, SteadyClock::time_point> not_before;
  bool sandbox_ready = false;
  std::atomic<bool> stop{false};
  std::thread worker;
  std::mutex wake_mu;
  std::condition_variable wake;
};

namespace {

int64_t NowUnix() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status WriteFile(const std::string& path, const std::string& data, mode_t mode = 0600) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << data;
    if (!out) return Error::Make(Error::Code::kInternal, "cannot write " + tmp);
  }
  ::chmod(tmp.c_str(), mode);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Error::Make(Error::Code::kInternal, "cannot rename " + tmp);
  }
  return OkStatus();
}

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Error Policy(const std::string& msg) {
  return Error::Make(Error::Code::kForbidden, msg, kReasonPolicy);
}
Error Invalid(const std::string& msg) { return Error::Make(Error::Code::kInvalidArgument, msg); }

v1::ContainerStatus* FindStatus(v1::PodStatus& st, const std::string& name) {
  for (auto& c : *st.mutable_init_container_statuses()) {
    if (c.name() == name) return &c;
  }
  for (auto& c : *st.mutable_container_statuses()) {
    if (c.name() == name) return &c;
  }
  return nullptr;
}

bool ExitedOk(const v1::ContainerStatus& c) {
  return c.has_terminated() && c.terminated().exit_code() == 0;
}

}  // namespace

PodManager::PodManager(PodManagerOptions options) : o_(std::move(options)) {
  std::error_code ec;
  fs::create_directories(o_.state_dir + "/pods", ec);
}

PodManager::~PodManager() { Shutdown(); }

void PodManager::Shutdown() {
  std::vector<std::shared_ptr<Pod>> pods;
  {
    std::lock_guard lock(mu_);
    shutdown_ = true;
    for (auto& [uid, p] : pods_) pods.push_back(p);
    for (auto& w : watches_) {
      if (auto s = w.lock()) {
        std::lock_guard wl(s->mu_);
        s->closed_ = true;
        s->cv_.notify_all();
      }
    }
  }
  for (auto& p : pods) {
    p->stop = true;
    p->wake.notify_all();
    if (p->worker.joinable()) p->worker.join();
  }
}

PodRef PodManager::RefOf(const Pod& pod) { return PodRef{&pod.spec, pod.dir, &pod.devices}; }

// ---- admission -------------------------------------------------------------------------------

namespace {
// What the workload policy looks at in a RunPodRequest (env as the control node resolved it,
// envFrom included, so each name is checked).
policy::Workload WorkloadOf(const v1::RunPodRequest& r) {
  policy::Workload w;
  for (const auto* list : {&r.init_containers(), &r.containers()}) {
    for (const auto& c : *list) {
      policy::WorkloadContainer wc;
      wc.name = c.name();
      wc.image = c.image();
      wc.command_override = !c.command().empty() || !c.args().empty();
      for (const auto& e : c.env()) wc.env_names.push_back(e.name());
      w.containers.push_back(std::move(wc));
    }
  }
  for (const auto& v : r.volumes()) {
    w.volume_types.emplace_back(v.has_empty_dir() ? "emptyDir" : policy::kResolvedFilesVolume);
  }
  return w;
}
}  // namespace

Status PodManager::Admit(const v1::RunPodRequest& r) {
  static const std::regex dns_label("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$");
  static const std::regex uid_re("^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$");
  if (!std::regex_match(r.pod().uid(), uid_re)) {
    return Invalid("pod uid \"" + r.pod().uid() + "\" is missing or not a plain identifier");
  }
  if (r.containers().empty()) return Invalid("pod has no containers");
  if (r.host_network() && !o_.allow_host_network) {
    return Policy("host networking is forbidden on this runner");
  }
  const std::string& rp = r.restart_policy();
  if (!rp.empty() && rp != "Always" && rp != "OnFailure" && rp != "Never") {
    return Invalid("restartPolicy " + rp + " is not Always, OnFailure or Never");
  }
  std::set<std::string> volumes;
  for (const auto& v : r.volumes()) {
    if (!std::regex_match(v.name(), dns_label)) return Invalid("bad volume name " + v.name());
    if (v.source_case() == v1::Volume::SOURCE_NOT_SET) {
      return Invalid("volume " + v.name() +
                     " has a type this runner does not support (emptyDir or files only)");
    }
    for (const auto& f : v.files().files()) {
      auto p = fs::path(f.path()).lexically_normal();
      if (f.path().empty() || p.is_absolute() || p.string().rfind("..", 0) == 0) {
        return Invalid("volume " + v.name() + ": file path " + f.path() + " leaves the volume");
      }
    }
    if (!volumes.insert(v.name()).second) return Invalid("volume " + v.name() + " is repeated");
  }
  std::set<std::string> names;
  auto check = [&](const v1::Container& c) -> Status {
    if (!std::regex_match(c.name(), dns_label)) return Invalid("bad container name " + c.name());
    if (!names.insert(c.name()).second) return Invalid("container " + c.name() + " is repeated");
    HS_ASSIGN_OR_RETURN(auto ref, ParseImageRef(c.image()));
    if (o_.require_digest && ref.digest.empty()) {
      return Policy("image " + c.image() +
                    " is referenced by tag; this runner requires images by digest "
                    "(name@sha256:<digest>)");
    }
    for (const auto& m : c.mounts()) {
      if (!volumes.count(m.volume())) {
        return Invalid("container " + c.name() + " mounts unknown volume " + m.volume());
      }
    }
    for (const auto& [res, qty] : c.limits()) {
      if (!kube::Quantity::Parse(qty).ok()) {
        std::string msg = "container " + c.name();
        msg += ": limit " + res;
        msg += "=" + qty;
        msg += " is not a quantity";
        return Invalid(msg);
      }
    }
    return OkStatus();
  };
  for (const auto& c : r.init_containers()) HS_RETURN_IF_ERROR(check(c));
  for (const auto& c : r.containers()) HS_RETURN_IF_ERROR(check(c));
  if (o_.workload_policy != nullptr) {
    // The last of the three checks (admission, control node, here): whoever sent this RunPod,
    // a sealed runner starts only what its own policy admits.
    return policy::Check(*o_.workload_policy, WorkloadOf(r), *o_.signatures);
  }
  return OkStatus();
}

// Devices by the containers' limits (requests equal limits for extended resources); mu_ held.
Result<std::map<std::string, std::vector<DeviceNode>>> PodManager::Allocate(
    const v1::RunPodRequest& r) {
  std::map<std::string, std::vector<DeviceNode>> out;
  std::set<std::string> taken = used_devices_;
  for (const auto* list : {&r.init_containers(), &r.containers()}) {
    for (const auto& c : *list) {
      for (const auto& [res, qty] : c.limits()) {
        if (res == "cpu" || res == "memory" || res == "ephemeral-storage") continue;
        auto q = kube::Quantity::Parse(qty);
        int64_t n = q.ok() ? q->Value() : 0;
        if (n <= 0) continue;
        auto it = o_.devices.find(res);
        std::vector<DeviceNode> got;
        if (it != o_.devices.end()) {
          for (const auto& d : it->second) {
            if (static_cast<int64_t>(got.size()) == n) break;
            if (!taken.count(d.host_path)) got.push_back(d);
          }
        }
        if (static_cast<int64_t>(got.size()) < n) {
          return Policy("container " + c.name() + " needs " + std::to_string(n) + " " + res +
                        ", this runner has " + std::to_string(got.size()) + " free");
        }
        for (const auto& d : got) taken.insert(d.host_path);
        out[c.name()] = got;
      }
    }
  }
  return out;
}

Result<v1::PodStatus> PodManager::Run(const v1::RunPodRequest& request) {
  HS_RETURN_IF_ERROR(Admit(request));
  std::shared_ptr<Pod> pod;
  {
    std::lock_guard lock(mu_);
    if (shutdown_) return Error::Make(Error::Code::kUnavailable, "agent is shutting down");
    if (auto it = pods_.find(request.pod().uid()); it != pods_.end()) return it->second->status;
    HS_ASSIGN_OR_RETURN(auto devices, Allocate(request));
    pod = std::make_shared<Pod>();
    pod->spec = request;
    pod->devices = std::move(devices);
    pod->dir = o_.state_dir + "/pods/" + request.pod().uid();
    std::error_code ec;
    fs::create_directories(pod->dir + "/containers", ec);
    ::chmod(pod->dir.c_str(), 0700);
    std::string spec_bytes;
    request.SerializeToString(&spec_bytes);
    HS_RETURN_IF_ERROR(WriteFile(pod->dir + "/spec.pb", spec_bytes));
    std::string dev_lines;
    for (const auto& [name, list] : pod->devices) {
      for (const auto& d : list) {
        dev_lines += name + " " + d.host_path + " " + d.container_path + "\n";
        used_devices_.insert(d.host_path);
      }
    }
    HS_RETURN_IF_ERROR(WriteFile(pod->dir + "/devices", dev_lines));
    auto& st = pod->status;
    *st.mutable_pod() = request.pod();
    st.set_phase("Pending");
    st.set_start_time_unix(NowUnix());
    if (request.host_network()) st.set_pod_ip(o_.host_ip);
    for (const auto& c : request.init_containers()) {
      auto* cs = st.add_init_container_statuses();
      cs->set_name(c.name());
      cs->set_image(c.image());
      cs->mutable_waiting()->set_reason("PodInitializing");
    }
    for (const auto& c : request.containers()) {
      auto* cs = st.add_container_statuses();
      cs->set_name(c.name());
      cs->set_image(c.image());
      cs->mutable_waiting()->set_reason("ContainerCreating");
    }
    pods_[request.pod().uid()] = pod;
    Publish(*pod);
    log::Info("pod admitted", {{"pod", request.pod().namespace_() + "/" + request.pod().name()},
                               {"uid", request.pod().uid()}});
  }
  StartWorker(pod);
  std::lock_guard lock(mu_);
  return pod->status;
}

void PodManager::StartWorker(const std::shared_ptr<Pod>& pod) {
  pod->worker = std::thread([this, pod] { Work(pod); });
}

Status PodManager::Recover() {
  std::error_code ec;
  std::vector<std::shared_ptr<Pod>> recovered;
  for (const auto& entry : fs::directory_iterator(o_.state_dir + "/pods", ec)) {
    auto spec = ReadFile(entry.path().string() + "/spec.pb");
    if (!spec) continue;
    auto pod = std::make_shared<Pod>();
    if (!pod->spec.ParseFromString(*spec)) continue;
    pod->dir = entry.path().string();
    auto st = ReadFile(pod->dir + "/status.pb");
    if (!st || !pod->status.ParseFromString(*st)) continue;
    if (auto devs = ReadFile(pod->dir + "/devices")) {
      std::istringstream in(*devs);
      std::string name, host, ctr;
      while (in >> name >> host >> ctr) pod->devices[name].push_back({host, ctr});
    }
    // A container whose current attempt the runtime knows was started (and is not started
    // again: no duplicate after a restart).
    for (const auto* list :
         {&pod->status.init_container_statuses(), &pod->status.container_statuses()}) {
      for (const auto& cs : *list) {
        pod->spawned[cs.name()] =
            o_.runtime->Observe(RefOf(*pod), cs.name(), cs.restart_count()).known;
      }
    }
    recovered.push_back(pod);
  }
  {
    std::lock_guard lock(mu_);
    for (auto& pod : recovered) {
      for (const auto& [name, list] : pod->devices) {
        for (const auto& d : list) used_devices_.insert(d.host_path);
      }
      pods_[pod->spec.pod().uid()] = pod;
    }
  }
  for (auto& pod : recovered) {
    log::Info("pod recovered", {{"uid", pod->spec.pod().uid()}, {"phase", pod->status.phase()}});
    StartWorker(pod);
  }
  return OkStatus();
}

void PodManager::Publish(Pod& pod) {
  std::string bytes;
  pod.status.SerializeToString(&bytes);
  (void)WriteFile(pod.dir + "/status.pb", bytes);
  for (auto it = watches_.begin(); it != watches_.end();) {
    auto w = it->lock();
    if (!w) {
      it = watches_.erase(it);
      continue;
    }
    {
      std::lock_guard wl(w->mu_);
      w->queue_.push_back(pod.status);
    }
    w->cv_.notify_all();
    ++it;
  }
}

std::shared_ptr<PodManager::Watch> PodManager::Subscribe() {
  auto w = std::make_shared<Watch>();
  std::lock_guard lock(mu_);
  for (auto& [uid, p] : pods_) w->queue_.push_back(p->status);
  if (shutdown_) w->closed_ = true;
  watches_.push_back(w);
  return w;
}

std::optional<v1::PodStatus> PodManager::Watch::Next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return !queue_.empty() || closed_; });
  if (queue_.empty()) return std::nullopt;
  v1::PodStatus s = std::move(queue_.front());
  queue_.pop_front();
  return s;
}

std::vector<v1::PodStatus> PodManager::List() {
  std::lock_guard lock(mu_);
  std::vector<v1::PodStatus> out;
  for (auto& [uid, p] : pods_) out.push_back(p->status);
  return out;
}

// ---- the pod's worker ------------------------------------------------------------------------

void PodManager::Work(const std::shared_ptr<Pod>& pod) {
  bool done = false;
  while (!pod->stop && !done) {
    Status st = Step(*pod, done);
    if (!st.ok()) {
      log::Warn("pod step failed", {{"uid", pod->spec.pod().uid()}, {"error", st.error().message}});
      std::lock_guard lock(mu_);
      pod->status.set_message(st.error().message);
      Publish(*pod);
    }
    std::unique_lock lock(pod->wake_mu);
    pod->wake.wait_for(lock, std::chrono::milliseconds(st.ok() ? 50 : 1000),
                       [&] { return pod->stop.load(); });
  }
}

Status PodManager::EnsureSandbox(Pod& pod) {
  if (pod.sandbox_ready) return OkStatus();
  // The volumes first: a runtime may bind them as soon as its sandbox exists.
  for (const auto& v : pod.spec.volumes()) {
    std::string dir = pod.dir + "/volumes/" + v.name();
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return Error::Make(Error::Code::kInternal, "cannot create volume dir " + dir);
    for (const auto& f : v.files().files()) {
      fs::path p = fs::path(dir) / fs::path(f.path()).lexically_normal();
      fs::create_directories(p.parent_path(), ec);
      HS_RETURN_IF_ERROR(WriteFile(p.string(), f.content(), f.mode() ? f.mode() & 07777 : 0644));
    }
  }
  HS_ASSIGN_OR_RETURN(std::string ip, o_.runtime->EnsureSandbox(RefOf(pod)));
  if (!ip.empty()) {
    std::lock_guard lock(mu_);
    if (pod.status.pod_ip() != ip) {
      pod.status.set_pod_ip(ip);
      Publish(pod);
    }
  }
  pod.sandbox_ready = true;
  return OkStatus();
}

Status PodManager::StartContainer(Pod& pod, const v1::Container& c, bool /*init*/, int attempt) {
  const Image& image = pod.images.at(c.name());
  std::map<std::string, std::string> agent_binds;
  if (o_.before_start) {
    HS_ASSIGN_OR_RETURN(agent_binds, o_.before_start(pod.spec, c, image));
  }
  HS_RETURN_IF_ERROR(o_.runtime->Start(RefOf(pod), c, image, attempt, agent_binds));
  pod.spawned[c.name()] = true;
  return OkStatus();
}

void PodManager::Observe(Pod& pod) {
  std::lock_guard lock(mu_);
  bool changed = false;
  for (auto* list :
       {pod.status.mutable_init_container_statuses(), pod.status.mutable_container_statuses()}) {
    for (auto& cs : *list) {
      if (!pod.spawned[cs.name()] || cs.has_terminated()) continue;
      auto state = o_.runtime->Observe(RefOf(pod), cs.name(), cs.restart_count());
      const auto& started = state.started;
      if (const auto& ex = state.exit) {
        auto* t = cs.mutable_terminated();
        t->set_exit_code(ex->code);
        t->set_signal(ex->signal);
        t->set_reason(ex->reason);
        t->set_message(ex->message);
        t->set_finished_at_unix(ex->finished_unix);
        if (started) t->set_started_at_unix(started->started_unix);
        cs.set_ready(false);
        changed = true;
      } else if (started && !cs.has_running()) {
        cs.mutable_running()->set_started_at_unix(started->started_unix);
        cs.set_ready(true);
        changed = true;
        log::Info("container running", {{"uid", pod.spec.pod().uid()},
                                        {"container", cs.name()},
                                        {"runtime_ms", started->runtime_ms}});
      }
    }
  }
  if (changed) Publish(pod);
}

Status PodManager::Step(Pod& pod, bool& done) {
  // 1. Images (ErrImagePull with the reason until they come; retried).
  for (const auto* list : {&pod.spec.init_containers(), &pod.spec.containers()}) {
    for (const auto& c : *list) {
      if (pod.images.count(c.name())) continue;
      auto nb = pod.not_before.find("pull:" + c.name());
      if (nb != pod.not_before.end() && SteadyClock::now() < nb->second) return OkStatus();
      auto img = o_.runtime->Pull(c.image());
      std::lock_guard lock(mu_);
      auto* cs = FindStatus(pod.status, c.name());
      if (!img.ok()) {
        cs->mutable_waiting()->set_reason("ErrImagePull");
        cs->mutable_waiting()->set_message(img.error().message);
        pod.status.set_reason("ErrImagePull");
        pod.status.set_message(c.name() + ": " + img.error().message);
        pod.not_before["pull:" + c.name()] = SteadyClock::now() + std::chrono::seconds(5);
        Publish(pod);
        return OkStatus();
      }
      pod.images[c.name()] = *img;
      cs->set_image_id(img->manifest_digest);
      if (cs->waiting().reason() == "ErrImagePull") {
        cs->mutable_waiting()->set_reason("ContainerCreating");
        cs->mutable_waiting()->clear_message();
        pod.status.clear_reason();
        pod.status.clear_message();
      }
      Publish(pod);
    }
  }
  // 2. Sandbox.
  HS_RETURN_IF_ERROR(EnsureSandbox(pod));
  // 3. What the shims recorded.
  Observe(pod);
  const std::string policy =
      pod.spec.restart_policy().empty() ? "Always" : pod.spec.restart_policy();
  auto restart_at = [&](int restarts) {
    auto backoff = o_.restart_backoff * (1 << std::min(restarts, 8));
    return std::min<SteadyClock::duration>(backoff, std::chrono::minutes(5));
  };
  auto restart = [&](const v1::Container& c, bool init) -> Status {
    int next = 0;
    {
      std::lock_guard lock(mu_);
      auto* cs = FindStatus(pod.status, c.name());
      auto key = "restart:" + c.name();
      auto it = pod.not_before.find(key);
      if (it == pod.not_before.end()) {
        pod.not_before[key] = SteadyClock::now() + restart_at(cs->restart_count());
        return OkStatus();
      }
      if (SteadyClock::now() < it->second) return OkStatus();
      pod.not_before.erase(it);
      next = cs->restart_count() + 1;
      cs->set_restart_count(next);
      cs->mutable_waiting()->set_reason("ContainerCreating");
      pod.spawned[c.name()] = false;
      Publish(pod);
    }
    return StartContainer(pod, c, init, next);
  };
  // 4. Init containers, in order; then the containers.
  for (const auto& c : pod.spec.init_containers()) {
    v1::ContainerStatus cs;
    {
      std::lock_guard lock(mu_);
      cs = *FindStatus(pod.status, c.name());
    }
    if (ExitedOk(cs)) continue;
    if (!pod.spawned[c.name()]) {
      HS_RETURN_IF_ERROR(StartContainer(pod, c, true, cs.restart_count()));
      return OkStatus();
    }
    if (cs.has_terminated()) {
      if (policy == "Never") {
        std::lock_guard lock(mu_);
        pod.status.set_phase("Failed");
        pod.status.set_reason("InitContainerFailed");
        pod.status.set_message("init container " + c.name() + " exited " +
                               std::to_string(cs.terminated().exit_code()));
        Publish(pod);
        done = true;
        return OkStatus();
      }
      return restart(c, true);
    }
    return OkStatus();  // running or starting
  }
  bool any_running = false, all_final = true, all_ok = true;
  for (const auto& c : pod.spec.containers()) {
    v1::ContainerStatus cs;
    {
      std::lock_guard lock(mu_);
      cs = *FindStatus(pod.status, c.name());
    }
    if (!pod.spawned[c.name()]) {
      HS_RETURN_IF_ERROR(StartContainer(pod, c, false, cs.restart_count()));
      all_final = false;
      continue;
    }
    if (cs.has_terminated()) {
      bool again =
          policy == "Always" || (policy == "OnFailure" && cs.terminated().exit_code() != 0);
      if (again) {
        all_final = false;
        HS_RETURN_IF_ERROR(restart(c, false));
      } else if (cs.terminated().exit_code() != 0) {
        all_ok = false;
      }
      continue;
    }
    all_final = false;
    if (cs.has_running()) any_running = true;
  }
  std::lock_guard lock(mu_);
  std::string phase = pod.status.phase();
  if (all_final) {
    phase = all_ok ? "Succeeded" : "Failed";
    done = true;
  } else if (any_running || phase == "Running") {
    phase = "Running";
  }
  if (phase != pod.status.phase()) {
    pod.status.set_phase(phase);
    Publish(pod);
    log::Info("pod phase", {{"uid", pod.spec.pod().uid()}, {"phase", phase}});
  }
  return OkStatus();
}

// ---- deletion, logs, exec --------------------------------------------------------------------

Status PodManager::Delete(const std::string& uid, std::optional<std::chrono::seconds> grace) {
  std::shared_ptr<Pod> pod;
  {
    std::lock_guard lock(mu_);
    auto it = pods_.find(uid);
    if (it == pods_.end()) return OkStatus();
    pod = it->second;
    pods_.erase(it);
  }
  pod->stop = true;
  pod->wake.notify_all();
  if (pod->worker.joinable()) pod->worker.join();
  auto wait = grace ? *grace : std::chrono::seconds(pod->spec.termination_grace_seconds());
  ContainerAttempts containers;
  for (const auto* list :
       {&pod->status.init_container_statuses(), &pod->status.container_statuses()}) {
    for (const auto& cs : *list) containers.emplace_back(cs.name(), cs.restart_count());
  }
  PodRef ref = RefOf(*pod);
  Status result = o_.runtime->Stop(ref, containers, wait);
  if (Status st = o_.runtime->Remove(ref, containers); !st.ok()) result = st;
  if (result.ok()) {
    std::error_code ec;
    fs::remove_all(pod->dir, ec);
    if (!ec) o_.runtime->Forget(ref);
  }
  std::lock_guard lock(mu_);
  if (!result.ok()) {
    // Not gone: keep the pod (stopped, its worker joined) so that it is still listed and the
    // next DeletePod does the remaining steps again; every step above is idempotent. Forgetting
    // it here made that retry a no-op and left its namespace, mounts and folder behind.
    pods_.emplace(uid, pod);
    log::Warn("pod not deleted yet", {{"uid", uid}, {"error", result.error().message}});
    return result;
  }
  for (const auto& [name, list] : pod->devices) {
    for (const auto& d : list) used_devices_.erase(d.host_path);
  }
  pod->status.set_deleted(true);
  for (auto& w : watches_) {
    if (auto s = w.lock()) {
      std::lock_guard wl(s->mu_);
      s->queue_.push_back(pod->status);
      s->cv_.notify_all();
    }
  }
  log::Info("pod deleted", {{"uid", uid}});
  return result;
}

Result<PodManager::LogTarget> PodManager::Log(const std::string& uid, const std::string& container,
                                              bool previous) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(uid);
  if (it == pods_.end()) return Error::Make(Error::Code::kNotFound, "no pod with uid " + uid);
  auto* cs = FindStatus(it->second->status, container);
  if (cs == nullptr) {
    return Error::Make(Error::Code::kNotFound, "pod " + uid + " has no container " + container);
  }
  int attempt = cs->restart_count() - (previous ? 1 : 0);
  if (attempt < 0) {
    return Error::Make(Error::Code::kNotFound, "container " + container + " has no previous run");
  }
  std::weak_ptr<Pod> weak = it->second;
  LogTarget t;
  t.path = o_.runtime->LogPath(RefOf(*it->second), container, attempt);
  t.finished = [this, container, attempt, weak] {
    auto p = weak.lock();
    return !p || p->status.deleted() ||
           o_.runtime->Observe(RefOf(*p), container, attempt).exit.has_value();
  };
  return t;
}

grpc::Status PodManager::Exec(const v1::ExecInput::ExecStart& start, grpc::ServerContext* ctx,
                              grpc::ServerReaderWriter<v1::ExecOutput, v1::ExecInput>* stream) {
  std::shared_ptr<Pod> pod;
  int attempt = 0;
  {
    std::lock_guard lock(mu_);
    auto it = pods_.find(start.uid());
    if (it == pods_.end()) return {grpc::StatusCode::NOT_FOUND, "no pod with uid " + start.uid()};
    auto* cs = FindStatus(it->second->status, start.container());
    if (cs == nullptr) {
      return {grpc::StatusCode::NOT_FOUND,
              "pod " + start.uid() + " has no container " + start.container()};
    }
    if (!cs->has_running()) {
      return {grpc::StatusCode::FAILED_PRECONDITION,
              "container " + start.container() + " is not running"};
    }
    pod = it->second;
    attempt = cs->restart_count();
  }
  return o_.runtime->Exec(RefOf(*pod), start.container(), attempt, start, ctx, stream);
}

}  // namespace hyperslice::runners::agent
