// PodRuntime (pod_runtime.h): pods bound to a simulated VM, run as the kubelet admits and reports
// them, with the real device-plugin protocol underneath.
#include "sim/kubelet/pod_runtime.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/json.h"
#include "src/base/log.h"
#include "src/deviceplugin/deviceplugin.h"
#include "src/kube/client.h"
#include "src/kube/informer.h"
#include "src/kube/object_helpers.h"
#include "src/kube/store.h"
#include "src/net/pki.h"
#include "src/net/server.h"

namespace hyperslice::sim::kubelet {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using jsonfield::ArrayField;
using jsonfield::ObjectField;
using jsonfield::StringValue;

constexpr uint16_t kKubeletPort = 10250;
constexpr char kPluginDir[] = "/var/lib/kubelet/device-plugins";

// A container's status as kubelet reports it (started when ready), with the simulator's image and
// container ids.
json::object ContainerStatus(const json::object& container, const std::string& uid, bool ready,
                             json::object state) {
  std::string name = StringValue(container, "name");
  std::string image = StringValue(container, "image");
  return json::object{{"name", name},
                      {"image", image},
                      {"imageID", "sim://" + image},
                      {"containerID", "sim://" + uid + "/" + name},
                      {"ready", ready},
                      {"started", ready},
                      {"restartCount", 0},
                      {"state", std::move(state)}};
}

std::string Meta(const json::object& pod, std::string_view key) {
  const json::object* m = ObjectField(pod, "metadata");
  return m != nullptr ? StringValue(*m, key) : std::string();
}

// The pod's PodScheduled condition as the scheduler wrote it: every status this kubelet writes
// keeps it (a merge patch replaces the whole conditions list).
json::array ScheduledCondition(const json::object& pod) {
  json::array out;
  const json::array* conditions = ArrayField(ObjectField(&pod, "status"), "conditions");
  for (const auto& c : conditions ? *conditions : json::array{}) {
    if (c.is_object() && StringValue(c.as_object(), "type") == "PodScheduled") out.push_back(c);
  }
  return out;
}

// Merge-patches the pod's status subresource with `status`.
Result<kube::Object> PatchStatus(kube::Client& client, const json::object& pod,
                                 const json::object& status) {
  kube::PatchOptions po;
  po.subresource = "status";
  return client.Patch(kube::resources::Pods(), Meta(pod, "namespace"), Meta(pod, "name"),
                      kube::PatchType::kMerge, json::serialize(json::object{{"status", status}}),
                      po);
}

// kubelet's expansion.Expand: $(VAR) from the variables defined so far, $$ is a literal $, an
// unknown reference stays as written.
std::string Expand(const std::string& in, const std::map<std::string, std::string>& vars) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '$' || i + 1 >= in.size()) {
      out += in[i];
      continue;
    }
    if (in[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    if (in[i + 1] == '(') {
      size_t close = in.find(')', i + 2);
      if (close != std::string::npos) {
        std::string name = in.substr(i + 2, close - i - 2);
        auto it = vars.find(name);
        if (it != vars.end()) {
          out += it->second;
        } else {
          out += in.substr(i, close - i + 1);
        }
        i = close;
        continue;
      }
    }
    out += in[i];
  }
  return out;
}

// metadata.labels['key'] → ("labels", "key")
std::optional<std::pair<std::string, std::string>> Subscript(const std::string& path) {
  for (const char* field : {"metadata.labels", "metadata.annotations"}) {
    std::string prefix = std::string(field) + "['";
    if (path.rfind(prefix, 0) == 0 && path.size() > prefix.size() + 2 &&
        path.compare(path.size() - 2, 2, "']") == 0)
      return std::make_pair(std::string(field).substr(9),
                            path.substr(prefix.size(), path.size() - prefix.size() - 2));
  }
  return std::nullopt;
}

// The ServerAddresses a fresh VM takes: 127.A.B.1 with A.B random, so simulated VMs of parallel
// test processes do not meet on one address.
std::vector<std::string> CandidateAddresses(const std::string& seed) {
  std::seed_seq seq(seed.begin(), seed.end());
  std::mt19937 rng(seq);
  rng.discard(static_cast<unsigned long long>(::getpid()) % 1000);
  std::uniform_int_distribution<int> a(16, 250), b(0, 255);
  std::vector<std::string> out;
  out.reserve(32);
  for (int i = 0; i < 32; ++i)
    out.push_back("127." + std::to_string(a(rng)) + "." + std::to_string(b(rng)) + ".1");
  return out;
}

struct RunningPod {
  std::string uid, ns, name;
  std::string pod_ip;
  std::string started_at;
  std::map<std::string, ContainerRecord> containers;   // by container name
  std::unique_ptr<deviceplugin::DevicePlugin> plugin;  // the DaemonSet's plugin, in process
  bool status_written = false;
  // A pod whose containers all run `sleep N` (restartPolicy Never or OnFailure: a Job's) exits 0
  // at this time and is reported Succeeded (sim convention, pod_runtime.h).
  std::optional<std::chrono::steady_clock::time_point> exits_at;
  bool finished = false;
  std::string failure;         // admission failure message ("" when admitted)
  std::string failure_reason;  // UnexpectedAdmissionError (final) or CreateContainerConfigError
                               // (the pod stays Pending and is retried)
};

class PodRuntimeImpl final : public PodRuntime {
 public:
  explicit PodRuntimeImpl(PodRuntimeOptions o) : o_(std::move(o)) {}
  ~PodRuntimeImpl() override { Stop(); }

  Status Init() {
    std::error_code ec;
    fs::create_directories(fs::path(o_.vm_root) / "var/lib/kubelet/pki", ec);
    if (ec) return Error::Make(Error::Code::kInternal, "sim kubelet: " + ec.message());
    HS_RETURN_IF_ERROR(ServeKubeletApi());
    if (!o_.run_pods) return OkStatus();
    HS_ASSIGN_OR_RETURN(
        devices_, DeviceManager::Start({.plugin_dir = o_.vm_root + kPluginDir, .on_change = [this] {
                                          if (o_.on_resources_changed) o_.on_resources_changed();
                                        }}));
    kube::InformerOptions io;
    io.field_selector = "spec.nodeName=" + o_.node_name;
    pods_ = std::make_unique<kube::SharedInformer>(o_.node_client, kube::resources::Pods(), io);
    auto enqueue = [this](const kube::ObjectPtr& p) {
      if (p) Enqueue(kube::ObjectKey(*p));
    };
    pods_->AddEventHandler(
        {.on_add = enqueue,
         .on_update = [enqueue](const kube::ObjectPtr&,
                                const kube::ObjectPtr& cur) { enqueue(cur); },
         .on_delete = [enqueue](const kube::ObjectPtr& last, bool) { enqueue(last); }});
    worker_ = std::thread([this] { Work(); });
    pods_->Start();
    return OkStatus();
  }

  KubeletEndpoint endpoint() const override { return endpoint_; }

  std::map<std::string, ResourceDevices> Resources() const override {
    auto out = devices_ ? devices_->Resources() : std::map<std::string, ResourceDevices>{};
    std::lock_guard lock(mu_);
    for (const auto& [name, n] : o_.static_devices) {
      int used = 0;
      for (const auto& [uid, held] : static_held_) {
        for (const auto& [res, ids] : held) used += res == name ? static_cast<int>(ids.size()) : 0;
      }
      out[name] = ResourceDevices{.capacity = n, .allocatable = n, .allocated = used};
    }
    return out;
  }
  int plugin_registrations() const override {
    return devices_ ? devices_->report().registrations : 0;
  }

  std::map<std::string, ContainerRecord> Containers() const override {
    std::lock_guard lock(mu_);
    std::map<std::string, ContainerRecord> out;
    for (const auto& [key, p] : running_)
      for (const auto& [c, rec] : p.containers) {
        std::string k = key;
        k += '/';
        k += c;
        out[k] = rec;
      }
    return out;
  }

  void Stop() override {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      cv_.notify_all();
    }
    if (pods_) pods_->Stop();
    if (worker_.joinable()) worker_.join();
    std::map<std::string, RunningPod> running;
    {
      std::lock_guard lock(mu_);
      running.swap(running_);
    }
    for (auto& [key, p] : running)
      if (p.plugin) p.plugin->Stop();
    if (devices_) devices_->Stop();
    if (server_) server_->Stop(std::chrono::milliseconds(500));
  }

 private:
  // ---- the kubelet API ----------------------------------------------------------------------

  Status ServeKubeletApi() {
    HS_ASSIGN_OR_RETURN(auto ca, net::pki::MakeCa(o_.node_name + "-ca@sim"));
    std::vector<std::string> candidates = CandidateAddresses(o_.node_name + o_.vm_root);
    Error last = Error::Make(Error::Code::kUnavailable, "no address tried");
    for (uint16_t port : {kKubeletPort, uint16_t{0}}) {
      for (const auto& ip : candidates) {
        net::pki::CertRequest req{.common_name = o_.node_name,
                                  .dns_names = {o_.node_name},
                                  .ip_addresses = {ip},
                                  .server = true};
        HS_ASSIGN_OR_RETURN(auto pair, net::pki::Issue(ca, req));
        fs::path dir = fs::path(o_.vm_root) / "var/lib/kubelet/pki";
        std::ofstream(dir / "kubelet.crt") << pair.cert_pem << ca.cert_pem;
        std::ofstream(dir / "kubelet.key") << pair.key_pem;
        net::HttpServer::Options so;
        so.address = ip;
        so.port = port;
        so.tls =
            net::ServerTlsFiles{(dir / "kubelet.crt").string(), (dir / "kubelet.key").string()};
        auto server = net::HttpServer::Start(
            so, [this](const net::ServerRequest& r, const std::shared_ptr<net::Responder>& w) {
              HandleKubeletApi(r, w);
            });
        if (server.ok()) {
          server_ = std::move(*server);
          endpoint_ = {ip, server_->port()};
          return OkStatus();
        }
        last = server.error();
      }
    }
    return Error::Make(
        Error::Code::kUnavailable,
        "sim kubelet: cannot serve the kubelet API on a loopback address: " + last.message);
  }

  void HandleKubeletApi(const net::ServerRequest& r, const std::shared_ptr<net::Responder>& w) {
    const net::Headers text{{"Content-Type", "text/plain; charset=utf-8"}};
    if (r.path == "/healthz") {
      w->Send(200, "ok", text);
      return;
    }
    // /containerLogs/{namespace}/{pod}/{container}
    constexpr std::string_view kLogs = "/containerLogs/";
    if (r.method == "GET" && r.path.rfind(kLogs, 0) == 0) {
      std::string rest = r.path.substr(kLogs.size());
      std::vector<std::string> parts;
      size_t start = 0;
      for (size_t i = 0; i <= rest.size(); ++i) {
        if (i == rest.size() || rest[i] == '/') {
          parts.push_back(rest.substr(start, i - start));
          start = i + 1;
        }
      }
      if (parts.size() != 3) {
        w->Send(400, "expected /containerLogs/{namespace}/{pod}/{container}", text);
        return;
      }
      std::string body;
      {
        std::lock_guard lock(mu_);
        auto it = running_.find(parts[0] + "/" + parts[1]);
        if (it == running_.end() || it->second.containers.count(parts[2]) == 0) {
          w->Send(404,
                  "container \"" + parts[2] + "\" in pod " + parts[0] + "/" + parts[1] +
                      " is not running on node " + o_.node_name,
                  text);
          return;
        }
        for (const auto& [k, v] : it->second.containers.at(parts[2]).env) {
          body += k;
          body += '=';
          body += v;
          body += '\n';
        }
      }
      std::string tail = r.Query("tailLines");
      if (!tail.empty()) {
        long n = std::strtol(tail.c_str(), nullptr, 10);
        size_t pos = body.size();
        for (long i = 0; i <= n && pos > 0; ++i) {
          size_t nl = body.rfind('\n', pos - 1);
          if (nl == std::string::npos) {
            pos = 0;
            break;
          }
          if (i < n)
            pos = nl;
          else
            pos = nl + 1;
        }
        body = body.substr(pos);
      }
      w->Send(200, std::move(body), text);
      return;
    }
    // exec, attach, port-forward and the rest: a simulated VM has no containers to enter.
    w->Send(404, "the simulated kubelet serves /healthz and /containerLogs only", text);
  }

  // ---- pods ---------------------------------------------------------------------------------

  void Enqueue(const std::string& key) {
    std::lock_guard lock(mu_);
    dirty_.insert(key);
    cv_.notify_all();
  }

  void Work() {
    while (true) {
      std::string key;
      {
        std::unique_lock lock(mu_);
        auto wake = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        for (const auto& [k, p] : running_)
          if (p.exits_at && !p.finished) wake = std::min(wake, *p.exits_at);
        cv_.wait_until(lock, wake, [&] { return stopped_ || !dirty_.empty(); });
        if (stopped_) return;
        for (const auto& [k, p] : running_)
          if (p.exits_at && !p.finished && std::chrono::steady_clock::now() >= *p.exits_at)
            dirty_.insert(k);
        if (dirty_.empty()) {
          // Retry pods whose status could not be written, and containers waiting for a
          // ConfigMap or Secret.
          for (const auto& [k, p] : running_)
            if (!p.status_written || p.failure_reason == "CreateContainerConfigError")
              dirty_.insert(k);
          continue;
        }
        key = *dirty_.begin();
        dirty_.erase(dirty_.begin());
      }
      Sync(key);
    }
  }

  void Sync(const std::string& key) {
    kube::ObjectPtr pod = pods_->store().Get(key);
    std::string uid = pod ? Meta(*pod, "uid") : std::string();
    bool known = false, same_uid = false, waiting = false;
    {
      std::lock_guard lock(mu_);
      auto it = running_.find(key);
      known = it != running_.end();
      same_uid = known && it->second.uid == uid;
      waiting = known && it->second.failure_reason == "CreateContainerConfigError";
    }
    if (known && (!pod || !same_uid || waiting || kube::IsDeleting(*pod))) {
      Terminate(key);
      known = false;
    }
    if (!pod) return;
    if (kube::IsDeleting(*pod)) {
      // The kubelet's final delete, once the containers stopped.
      kube::DeleteOptions d;
      d.grace_period_seconds = 0;
      d.precondition_uid = uid;
      auto st = o_.node_client->Delete(kube::resources::Pods(), Meta(*pod, "namespace"),
                                       Meta(*pod, "name"), d);
      if (!st.ok() && st.error().code != Error::Code::kNotFound &&
          st.error().code != Error::Code::kConflict)
        log::Warn("sim kubelet: deleting a terminated pod failed",
                  {{"pod", key}, {"error", st.error().message}});
      return;
    }
    const json::object* status = ObjectField(*pod, "status");
    std::string phase = status ? StringValue(*status, "phase") : "";
    if (known && Exited(key)) {
      WriteFinished(*pod, key);
      return;
    }
    if (!known) {
      if (phase == "Succeeded" || phase == "Failed") return;  // finished before we saw it
      Admit(*pod, key);
    }
    WriteStatus(*pod, key);
  }

  void Terminate(const std::string& key) {
    RunningPod p;
    {
      std::lock_guard lock(mu_);
      auto it = running_.find(key);
      if (it == running_.end()) return;
      p = std::move(it->second);
      running_.erase(it);
    }
    if (p.plugin) p.plugin->Stop();
    ReleaseDevices(p.uid);
    log::Info("sim kubelet: pod stopped", {{"node", o_.node_name}, {"pod", key}});
  }

  std::string NextPodIp() {
    // endpoint_.ip is 127.A.B.1; pods take 127.A.B.2..254.
    std::string base = endpoint_.ip.substr(0, endpoint_.ip.rfind('.') + 1);
    next_pod_ip_ = next_pod_ip_ >= 254 ? 2 : next_pod_ip_ + 1;
    return base + std::to_string(next_pod_ip_);
  }

  void Admit(const json::object& pod, const std::string& key) {
    RunningPod p;
    p.uid = Meta(pod, "uid");
    p.ns = Meta(pod, "namespace");
    p.name = Meta(pod, "name");
    p.started_at = kube::FormatTime(std::chrono::system_clock::now());
    const json::object* spec = ObjectField(pod, "spec");
    bool host_network = false;
    if (spec != nullptr) {
      auto* hn = spec->if_contains("hostNetwork");
      host_network = hn != nullptr && hn->is_bool() && hn->as_bool();
    }
    {
      std::lock_guard lock(mu_);
      p.pod_ip = host_network ? endpoint_.ip : NextPodIp();
    }
    const json::array* containers = spec ? ArrayField(*spec, "containers") : nullptr;
    for (const auto& cv : containers ? *containers : json::array{}) {
      if (!cv.is_object()) continue;
      const json::object& c = cv.as_object();
      std::string cname = StringValue(c, "name");
      ContainerRecord rec;
      std::vector<std::pair<std::string, std::string>> device_env;
      // Extended resources: requests equal limits; the limits say how many.
      if (const json::object* res = ObjectField(c, "resources")) {
        if (const json::object* limits = ObjectField(*res, "limits")) {
          for (const auto& [name, q] : *limits) {
            std::string rn(name);
            if (rn.find('/') == std::string::npos || rn.rfind("kubernetes.io/", 0) == 0) continue;
            long n = q.is_string() ? std::strtol(q.as_string().c_str(), nullptr, 10)
                                   : (q.is_int64() ? static_cast<long>(q.as_int64()) : 0);
            if (n <= 0) continue;
            auto alloc = AllocateDevices(rn, p.uid, cname, static_cast<int>(n));
            if (!alloc.ok()) {
              p.failure = alloc.error().message;
              p.failure_reason = "UnexpectedAdmissionError";
              break;
            }
            rec.device_ids.insert(rec.device_ids.end(), alloc->device_ids.begin(),
                                  alloc->device_ids.end());
            for (const auto& [k, v] : alloc->envs) device_env.emplace_back(k, v);
          }
        }
      }
      if (!p.failure.empty()) break;
      auto env = ResolveEnv(pod, c, p.pod_ip);
      if (!env.ok()) {
        p.failure = env.error().message;
        p.failure_reason = env.error().reason;
        break;
      }
      // The plugin's variables first, then the container's own (kubelet's
      // GenerateRunContainerOptions order); a name set twice keeps the later value.
      std::vector<std::pair<std::string, std::string>> all = device_env;
      all.insert(all.end(), env->begin(), env->end());
      for (const auto& kv : all) {
        auto same = std::find_if(rec.env.begin(), rec.env.end(),
                                 [&kv](const auto& e) { return e.first == kv.first; });
        if (same != rec.env.end()) rec.env.erase(same);
        rec.env.push_back(kv);
      }
      if (auto plugin = MaybeStartPlugin(c); plugin.ok() && *plugin) {
        p.plugin = std::move(*plugin);
      } else if (!plugin.ok()) {
        p.failure = "device plugin: " + plugin.error().message;
        p.failure_reason = "UnexpectedAdmissionError";
        break;
      }
      p.containers[cname] = std::move(rec);
    }
    if (!p.failure.empty()) {
      ReleaseDevices(p.uid);
      if (p.plugin) p.plugin->Stop();
      p.plugin.reset();
      p.containers.clear();
      log::Warn("sim kubelet: pod admission failed",
                {{"node", o_.node_name}, {"pod", key}, {"error", p.failure}});
    } else {
      log::Info("sim kubelet: pod started",
                {{"node", o_.node_name}, {"pod", key}, {"podIP", p.pod_ip}});
    }
    // `sleep N` in every container of a pod that is not restarted: it finishes after N seconds.
    if (p.failure.empty() && containers != nullptr && !containers->empty() && spec != nullptr &&
        StringValue(*spec, "restartPolicy") != "Always" &&
        !StringValue(*spec, "restartPolicy").empty()) {
      double longest = 0;
      bool all = true;
      for (const auto& cv : *containers) {
        auto secs = cv.is_object() ? SleepSeconds(cv.as_object()) : std::nullopt;
        if (!secs) {
          all = false;
          break;
        }
        longest = std::max(longest, *secs);
      }
      if (all) {
        p.exits_at = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(longest));
      }
    }
    std::lock_guard lock(mu_);
    running_[key] = std::move(p);
  }

  // N when the container's command and args are `sleep N` (any path to sleep; N in seconds).
  static std::optional<double> SleepSeconds(const json::object& c) {
    std::vector<std::string> argv;
    for (const char* field : {"command", "args"}) {
      if (const json::array* a = ArrayField(c, field))
        for (const auto& v : *a)
          if (v.is_string()) argv.emplace_back(v.as_string());
    }
    if (argv.size() != 2) return std::nullopt;
    std::string prog = argv[0].substr(argv[0].rfind('/') + 1);
    if (prog != "sleep") return std::nullopt;
    char* end = nullptr;
    double n = std::strtod(argv[1].c_str(), &end);
    if (end == argv[1].c_str() || (*end != '\0' && std::string_view(end) != "s") || n < 0)
      return std::nullopt;
    return n;
  }

  bool Exited(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = running_.find(key);
    return it != running_.end() && it->second.exits_at && !it->second.finished &&
           std::chrono::steady_clock::now() >= *it->second.exits_at;
  }

  // The containers exited 0: the pod Succeeded, its devices free again.
  void WriteFinished(const json::object& pod, const std::string& key) {
    std::string now = kube::FormatTime(std::chrono::system_clock::now());
    std::string started_at, uid;
    {
      std::lock_guard lock(mu_);
      auto it = running_.find(key);
      if (it == running_.end()) return;
      started_at = it->second.started_at;
      uid = it->second.uid;
    }
    json::array cstatuses;
    const json::object* spec = ObjectField(pod, "spec");
    const json::array* containers = spec ? ArrayField(*spec, "containers") : nullptr;
    for (const auto& cv : containers ? *containers : json::array{}) {
      if (!cv.is_object()) continue;
      cstatuses.push_back(
          ContainerStatus(cv.as_object(), uid, /*ready=*/false,
                          json::object{{"terminated", json::object{{"exitCode", 0},
                                                                   {"reason", "Completed"},
                                                                   {"startedAt", started_at},
                                                                   {"finishedAt", now}}}}));
    }
    json::array conds = ScheduledCondition(pod);
    for (const char* type : {"Initialized", "ContainersReady", "Ready"})
      conds.push_back(
          json::object{{"type", type},
                       {"status", std::string(type) == "Initialized" ? "True" : "False"},
                       {"reason", "PodCompleted"},
                       {"lastProbeTime", nullptr},
                       {"lastTransitionTime", now}});
    json::object status{{"phase", "Succeeded"},
                        {"conditions", std::move(conds)},
                        {"containerStatuses", std::move(cstatuses)}};
    auto patched = PatchStatus(*o_.node_client, pod, status);
    if (!patched.ok()) {
      if (patched.error().code != Error::Code::kNotFound)
        log::Warn("sim kubelet: pod status update failed",
                  {{"pod", key}, {"error", patched.error().message}});
      return;
    }
    ReleaseDevices(uid);
    std::lock_guard lock(mu_);
    auto it = running_.find(key);
    if (it == running_.end()) return;
    it->second.finished = true;
    it->second.status_written = true;
    log::Info("sim kubelet: pod completed", {{"node", o_.node_name}, {"pod", key}});
  }

  // hyperslice's device-plugin role, as the operator's DaemonSet runs it: args[0] ==
  // "device-plugin". Its paths are the container's view of the VM through hostPath mounts, which
  // map the node's folders into the same paths, so they are the VM's paths below vm_root.
  Result<std::unique_ptr<deviceplugin::DevicePlugin>> MaybeStartPlugin(const json::object& c) {
    const json::array* args = ArrayField(c, "args");
    if (args == nullptr || args->empty() || !(*args)[0].is_string() ||
        (*args)[0].as_string() != "device-plugin")
      return std::unique_ptr<deviceplugin::DevicePlugin>();
    deviceplugin::Options opts;
    opts.root = o_.vm_root;
    opts.plugin_dir = o_.vm_root + kPluginDir;
    for (size_t i = 1; i < args->size(); ++i) {
      if (!(*args)[i].is_string()) continue;
      std::string a((*args)[i].as_string());
      std::string name = a, value;
      if (auto eq = a.find('='); eq != std::string::npos) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
      } else if (i + 1 < args->size() && (*args)[i + 1].is_string()) {
        value = std::string((*args)[++i].as_string());
      }
      if (name == "--root") {
        opts.root = (fs::path(o_.vm_root) / fs::path(value).relative_path()).string();
      } else if (name == "--plugin-dir") {
        opts.plugin_dir = (fs::path(o_.vm_root) / fs::path(value).relative_path()).string();
      } else if (name == "--socket-name") {
        opts.socket_name = value;
      } else if (name == "--mode") {
        auto m = deviceplugin::ParseMode(value);
        if (!m.ok()) return m.error();
        opts.mode = *m;
      } else if (name == "--expected-chips") {
        opts.expected_chips = std::atoi(value.c_str());
      } else if (name == "--rescan-interval") {
        opts.rescan_interval = std::chrono::seconds(std::atoi(value.c_str()));
      }
    }
    while (!opts.root.empty() && opts.root.size() > 1 && opts.root.back() == '/')
      opts.root.pop_back();
    return deviceplugin::DevicePlugin::Start(opts);
  }

  // The container's own variables, in spec order: envFrom first, then env (kubelet's
  // makeEnvironmentVariables). kInvalidArgument (CreateContainerConfigError) for a missing
  // non-optional ConfigMap/Secret key.
  Result<std::vector<std::pair<std::string, std::string>>> ResolveEnv(const json::object& pod,
                                                                      const json::object& c,
                                                                      const std::string& pod_ip) {
    std::vector<std::pair<std::string, std::string>> out;
    std::map<std::string, std::string> vars;
    auto set = [&](const std::string& k, const std::string& v) {
      auto same = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == k; });
      if (same != out.end()) out.erase(same);
      out.emplace_back(k, v);
      vars[k] = v;
    };
    std::string ns = Meta(pod, "namespace");
    if (const json::array* env_from = ArrayField(c, "envFrom")) {
      for (const auto& ef : *env_from) {
        if (!ef.is_object()) continue;
        const json::object& e = ef.as_object();
        std::string prefix = StringValue(e, "prefix");
        for (const auto& [field, secret] :
             {std::pair{"configMapRef", false}, std::pair{"secretRef", true}}) {
          const json::object* ref = ObjectField(e, field);
          if (ref == nullptr) continue;
          auto data = ReadData(ns, StringValue(*ref, "name"), secret);
          if (!data.ok()) {
            auto* opt = ref->if_contains("optional");
            if (opt != nullptr && opt->is_bool() && opt->as_bool()) continue;
            return data.error();
          }
          for (const auto& [k, v] : *data) set(prefix + k, v);
        }
      }
    }
    const json::array* env = ArrayField(c, "env");
    for (const auto& ev : env ? *env : json::array{}) {
      if (!ev.is_object()) continue;
      const json::object& e = ev.as_object();
      std::string name = StringValue(e, "name");
      const json::object* from = ObjectField(e, "valueFrom");
      if (from == nullptr) {
        set(name, Expand(StringValue(e, "value"), vars));
        continue;
      }
      if (const json::object* f = ObjectField(*from, "fieldRef")) {
        set(name, FieldRef(pod, StringValue(*f, "fieldPath"), pod_ip));
      } else if (const json::object* rf = ObjectField(*from, "resourceFieldRef")) {
        std::string res = StringValue(*rf, "resource");  // limits.cpu, requests.memory, ...
        std::string value;
        if (auto dot = res.find('.'); dot != std::string::npos)
          if (const json::object* r = ObjectField(c, "resources"))
            if (const json::object* kind = ObjectField(*r, res.substr(0, dot)))
              value = StringValue(*kind, res.substr(dot + 1));
        set(name, value);
      } else {
        for (const auto& [field, secret] :
             {std::pair{"configMapKeyRef", false}, std::pair{"secretKeyRef", true}}) {
          const json::object* ref = ObjectField(*from, field);
          if (ref == nullptr) continue;
          auto* opt = ref->if_contains("optional");
          bool optional = opt != nullptr && opt->is_bool() && opt->as_bool();
          auto data = ReadData(ns, StringValue(*ref, "name"), secret);
          std::string key = StringValue(*ref, "key");
          if (data.ok() && data->count(key)) {
            set(name, data->at(key));
          } else if (!optional) {
            return Error::Make(Error::Code::kInvalidArgument,
                               std::string(secret ? "secret" : "configmap") + " \"" +
                                   StringValue(*ref, "name") + "\" key \"" + key + "\" not found",
                               "CreateContainerConfigError");
          }
        }
      }
    }
    return out;
  }

  std::string FieldRef(const json::object& pod, const std::string& path,
                       const std::string& pod_ip) const {
    if (path == "metadata.name") return Meta(pod, "name");
    if (path == "metadata.namespace") return Meta(pod, "namespace");
    if (path == "metadata.uid") return Meta(pod, "uid");
    if (path == "spec.nodeName") return o_.node_name;
    if (path == "spec.serviceAccountName") {
      const json::object* spec = ObjectField(pod, "spec");
      return spec ? StringValue(*spec, "serviceAccountName") : "";
    }
    if (path == "status.hostIP" || path == "status.hostIPs") return endpoint_.ip;
    if (path == "status.podIP" || path == "status.podIPs") return pod_ip;
    if (auto sub = Subscript(path)) {
      const json::object* m = ObjectField(pod, "metadata");
      const json::object* map = m ? ObjectField(*m, sub->first) : nullptr;
      return map ? StringValue(*map, sub->second) : "";
    }
    return "";
  }

  // A ConfigMap's data or a Secret's decoded data, read with the node's credentials (the Node
  // authorizer lets a node read what its pods reference).
  Result<std::map<std::string, std::string>> ReadData(const std::string& ns,
                                                      const std::string& name, bool secret) {
    auto got = o_.node_client->Get(
        secret ? kube::resources::Secrets() : kube::resources::ConfigMaps(), ns, name);
    if (!got.ok())
      return Error::Make(
          Error::Code::kInvalidArgument,
          std::string(secret ? "secret" : "configmap") + " \"" + name + "\" not found",
          "CreateContainerConfigError");
    std::map<std::string, std::string> out;
    if (const json::object* data = ObjectField(*got, "data")) {
      for (const auto& [k, v] : *data) {
        if (!v.is_string()) continue;
        if (!secret) {
          out[std::string(k)] = std::string(v.as_string());
          continue;
        }
        auto decoded = Base64Decode(std::string_view(v.as_string().data(), v.as_string().size()),
                                    "secret data");
        if (decoded.ok()) out[std::string(k)] = std::move(*decoded);
      }
    }
    return out;
  }

  void WriteStatus(const json::object& pod, const std::string& key) {
    json::object status;
    std::string now = kube::FormatTime(std::chrono::system_clock::now());
    {
      std::lock_guard lock(mu_);
      auto it = running_.find(key);
      if (it == running_.end()) return;
      RunningPod& p = it->second;
      if (p.status_written) return;
      json::array conds = ScheduledCondition(pod);
      status["hostIP"] = endpoint_.ip;
      status["hostIPs"] = json::array{json::object{{"ip", endpoint_.ip}}};
      status["startTime"] = p.started_at;
      if (p.failure_reason == "CreateContainerConfigError") {
        // The kubelet keeps such a pod Pending, its containers waiting, and tries again.
        status["phase"] = "Pending";
        json::array waiting;
        const json::object* spec = ObjectField(pod, "spec");
        const json::array* containers = spec ? ArrayField(*spec, "containers") : nullptr;
        for (const auto& cv : containers ? *containers : json::array{}) {
          if (!cv.is_object()) continue;
          waiting.push_back(json::object{
              {"name", StringValue(cv.as_object(), "name")},
              {"image", StringValue(cv.as_object(), "image")},
              {"imageID", ""},
              {"ready", false},
              {"started", false},
              {"restartCount", 0},
              {"state", json::object{{"waiting", json::object{{"reason", p.failure_reason},
                                                              {"message", p.failure}}}}}});
        }
        status["containerStatuses"] = std::move(waiting);
      } else if (!p.failure.empty()) {
        // kubelet's admission failure: the pod fails at once.
        status["phase"] = "Failed";
        status["reason"] = p.failure_reason;
        status["message"] = "Pod was rejected: " + p.failure;
      } else {
        status["phase"] = "Running";
        status["podIP"] = p.pod_ip;
        status["podIPs"] = json::array{json::object{{"ip", p.pod_ip}}};
        for (const char* type :
             {"PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"})
          conds.push_back(json::object{{"type", type},
                                       {"status", "True"},
                                       {"lastProbeTime", nullptr},
                                       {"lastTransitionTime", now}});
        json::array cstatuses;
        const json::object* spec = ObjectField(pod, "spec");
        const json::array* containers = spec ? ArrayField(*spec, "containers") : nullptr;
        for (const auto& cv : containers ? *containers : json::array{}) {
          if (!cv.is_object()) continue;
          cstatuses.push_back(ContainerStatus(
              cv.as_object(), p.uid, /*ready=*/true,
              json::object{{"running", json::object{{"startedAt", p.started_at}}}}));
        }
        status["containerStatuses"] = std::move(cstatuses);
        if (const json::array* inits = spec ? ArrayField(*spec, "initContainers") : nullptr) {
          json::array istatuses;
          for (const auto& cv : *inits) {
            if (!cv.is_object()) continue;
            istatuses.push_back(json::object{
                {"name", StringValue(cv.as_object(), "name")},
                {"image", StringValue(cv.as_object(), "image")},
                {"imageID", "sim://" + StringValue(cv.as_object(), "image")},
                {"ready", true},
                {"restartCount", 0},
                {"state",
                 json::object{{"terminated", json::object{{"exitCode", 0},
                                                          {"reason", "Completed"},
                                                          {"startedAt", p.started_at},
                                                          {"finishedAt", p.started_at}}}}}});
          }
          status["initContainerStatuses"] = std::move(istatuses);
        }
      }
      status["conditions"] = std::move(conds);
    }
    auto patched = PatchStatus(*o_.node_client, pod, status);
    std::lock_guard lock(mu_);
    auto it = running_.find(key);
    if (it == running_.end()) return;
    if (patched.ok()) {
      it->second.status_written = true;
    } else if (patched.error().code != Error::Code::kNotFound) {
      log::Warn("sim kubelet: pod status update failed",
                {{"pod", key}, {"error", patched.error().message}});
    }
  }

  // Static devices (PodRuntimeOptions::static_devices) by count; the rest through the device
  // manager.
  Result<ContainerAllocation> AllocateDevices(const std::string& resource,
                                              const std::string& pod_uid,
                                              const std::string& container, int count) {
    auto it = o_.static_devices.find(resource);
    if (it == o_.static_devices.end()) {
      return devices_->Allocate(resource, pod_uid, container, count);
    }
    std::lock_guard lock(mu_);
    std::set<std::string> used;
    for (const auto& [uid, held] : static_held_) {
      for (const auto& [res, ids] : held) {
        if (res == resource) used.insert(ids.begin(), ids.end());
      }
    }
    std::string prefix = resource == "nvidia.com/gpu" ? "GPU" : "dev";
    ContainerAllocation a;
    for (int i = 0; i < it->second && static_cast<int>(a.device_ids.size()) < count; ++i) {
      std::string id = prefix + "-" + std::to_string(i);
      if (used.count(id) == 0) a.device_ids.push_back(id);
    }
    if (static_cast<int>(a.device_ids.size()) < count) {
      return Error::Make(Error::Code::kUnavailable,
                         "Allocate failed due to requested number of devices unavailable for " +
                             resource + ". Requested: " + std::to_string(count) +
                             ", Available: " + std::to_string(a.device_ids.size()));
    }
    if (resource == "nvidia.com/gpu") {
      std::string visible;
      for (const auto& id : a.device_ids) visible += (visible.empty() ? "" : ",") + id;
      a.envs["NVIDIA_VISIBLE_DEVICES"] = visible;
    }
    auto& held = static_held_[pod_uid];
    held.emplace_back(resource, a.device_ids);
    (void)container;
    return a;
  }

  void ReleaseDevices(const std::string& pod_uid) {
    devices_->Release(pod_uid);
    std::lock_guard lock(mu_);
    static_held_.erase(pod_uid);
  }

  const PodRuntimeOptions o_;
  KubeletEndpoint endpoint_;
  std::unique_ptr<net::HttpServer> server_;
  std::unique_ptr<DeviceManager> devices_;
  std::unique_ptr<kube::SharedInformer> pods_;
  std::thread worker_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::set<std::string> dirty_;
  std::map<std::string, RunningPod> running_;  // by namespace/name
  int next_pod_ip_ = 1;
  // Static devices held, by pod uid: (resource, device ids) per admitted container.
  std::map<std::string, std::vector<std::pair<std::string, std::vector<std::string>>>> static_held_;
};

}  // namespace

Result<std::unique_ptr<PodRuntime>> PodRuntime::Start(PodRuntimeOptions options) {
  if (options.node_name.empty() || options.vm_root.empty() ||
      (options.run_pods && options.node_client == nullptr))
    return Error::Make(Error::Code::kInvalidArgument,
                       "sim kubelet: pod runtime needs node_name, vm_root and a node client");
  auto r = std::make_unique<PodRuntimeImpl>(std::move(options));
  HS_RETURN_IF_ERROR(r->Init());
  return std::unique_ptr<PodRuntime>(std::move(r));
}

}  // namespace hyperslice::sim::kubelet
