// Shared by the chaos e2e test (test/e2e/tpu_chaos) and the scale benchmark
// (bench/tpu_scale_bench.cc): the real control plane (test/testenv) with the TPU CRDs, the GCE
// simulator (sim/gce) and its control endpoint, `hyperslice operator` as a child process, and
// kubelet stand-ins that register a Node (spec.providerID, Ready) for every RUNNING simulator VM,
// as a kubelet joining would. Header-only; no gtest dependency (errors are returned as strings).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>

#include "sim/gce/simulator.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/kube/yaml.h"
#include "src/net/http.h"
#include "src/tpu/api.h"
#include "test/testenv/eventually.h"
#include "test/testenv/testenv.h"

namespace hyperslice::tpu::chaos {

namespace json = boost::json;
using namespace std::chrono_literals;

inline constexpr char kProject[] = "my-gcp-project";
inline constexpr char kRegion[] = "us-central1";
inline constexpr char kV6eZone[] = "us-central1-a";
inline constexpr char kStockoutZone[] = "us-central1-b";
inline constexpr char kZone[] = "us-central1-c";
inline constexpr char kOperatorNs[] = "tpu-node-group";

using testenv::Eventually;  // polls a condition until it holds or the timeout passes

using kube::YamlToJson;

// The simulator's control endpoint. Never subject to injected faults.
class Control {
 public:
  explicit Control(const std::string& endpoint) {
    net::HttpClient::Options o;
    o.base_url = endpoint;
    http_ = net::HttpClient::Create(o).value();
  }
  // The parsed answer, or an error string.
  Result<json::value> Call(const std::string& method, const std::string& path,
                           const json::object& body = {}) {
    net::Request req;
    req.method = method;
    req.target = path;
    if (method != "GET") {
      req.body = json::serialize(body);
      req.headers = {{"Content-Type", "application/json"}};
    }
    HS_ASSIGN_OR_RETURN(auto resp, http_->Do(req));
    if (resp.status != 200) {
      return Error::Make(Error::Code::kInternal,
                         method + " " + path + ": " + std::to_string(resp.status) + resp.body);
    }
    boost::system::error_code ec;
    auto v = json::parse(resp.body, ec);
    if (ec) return Error::Make(Error::Code::kInternal, "control answer is not JSON");
    return v;
  }
  json::object State() {
    auto v = Call("GET", "/control/state");
    return v.ok() && v->is_object() ? v->as_object() : json::object{};
  }
  std::map<std::string, int64_t> Counters() {
    std::map<std::string, int64_t> out;
    auto v = Call("GET", "/control/counters");
    if (!v.ok() || !v->is_object()) return out;
    const json::object* o = &v->as_object();
    if (const auto* c = o->if_contains("counters"); c && c->is_object()) o = &c->as_object();
    for (const auto& [k, n] : *o) {
      if (n.is_int64()) out[std::string(k)] = n.as_int64();
    }
    return out;
  }

 private:
  std::shared_ptr<net::HttpClient> http_;
};

// The group uid a GCE resource of ours names: the "uid=<uid>" of the description's owner marker,
// or the hyperslice-group-uid label. "" when none.
inline std::string OwnerUid(const json::object& r) {
  if (const auto* d = r.if_contains("description"); d && d->is_string()) {
    std::string s(d->as_string());
    if (size_t p = s.rfind("uid="); p != std::string::npos) {
      size_t e = s.find(' ', p);
      return s.substr(p + 4, e == std::string::npos ? std::string::npos : e - p - 4);
    }
  }
  const json::object* labels = nullptr;
  if (const auto* l = r.if_contains("labels"); l && l->is_object()) labels = &l->as_object();
  if (const auto* p = r.if_contains("properties"); !labels && p && p->is_object()) {
    if (const auto* l = p->as_object().if_contains("labels"); l && l->is_object()) {
      labels = &l->as_object();
    }
  }
  if (labels) {
    if (const auto* u = labels->if_contains(kGceLabelGroupUid); u && u->is_string()) {
      return std::string(u->as_string());
    }
  }
  return "";
}

inline size_t Count(const json::object& state, const char* kind) {
  const auto* a = state.if_contains(kind);
  return a && a->is_array() ? a->as_array().size() : 0;
}
inline size_t TotalResources(const json::object& state) {
  return Count(state, "resourcePolicies") + Count(state, "instanceTemplates") +
         Count(state, "instanceGroupManagers") + Count(state, "instances");
}
inline std::string DescribeResources(const json::object& state) {
  std::string out;
  for (const char* kind :
       {"resourcePolicies", "instanceTemplates", "instanceGroupManagers", "instances"}) {
    if (const auto* a = state.if_contains(kind); a && a->is_array()) {
      for (const auto& r : a->as_array()) {
        out += std::string(kind) + " " + std::string(r.at("name").as_string()) + " (" +
               OwnerUid(r.as_object()) + ")\n";
      }
    }
  }
  return out;
}
// GCE resources of one group (by owner uid).
inline size_t ResourcesOf(const json::object& state, const std::string& uid) {
  size_t n = 0;
  for (const char* kind :
       {"resourcePolicies", "instanceTemplates", "instanceGroupManagers", "instances"}) {
    if (const auto* a = state.if_contains(kind); a && a->is_array()) {
      for (const auto& r : a->as_array()) n += OwnerUid(r.as_object()) == uid;
    }
  }
  return n;
}

// The invariants that must hold at every instant, checked on one state dump: at most one
// policy/template/MIG per group uid; a BULK MIG holds either none or all of its VMs.
inline std::vector<std::string> CheckInvariants(const json::object& state) {
  std::vector<std::string> bad;
  for (const char* kind : {"resourcePolicies", "instanceTemplates", "instanceGroupManagers"}) {
    std::map<std::string, std::vector<std::string>> by_uid;
    if (const auto* a = state.if_contains(kind); a && a->is_array()) {
      for (const auto& r : a->as_array()) {
        by_uid[OwnerUid(r.as_object())].push_back(std::string(r.at("name").as_string()));
      }
    }
    for (const auto& [uid, names] : by_uid) {
      if (names.size() > 1) {
        std::string s = std::string(kind) + ": " + std::to_string(names.size()) + " for group " +
                        (uid.empty() ? "<no owner>" : uid) + ":";
        for (const auto& n : names) s += " " + n;
        bad.push_back(s);
      }
    }
  }
  std::map<std::string, int64_t> vms_of_mig;
  if (const auto* a = state.if_contains("instances"); a && a->is_array()) {
    for (const auto& i : a->as_array()) {
      if (const auto* m = i.as_object().if_contains("simMig"); m && m->is_string()) {
        ++vms_of_mig[std::string(m->as_string())];
      }
    }
  }
  if (const auto* a = state.if_contains("instanceGroupManagers"); a && a->is_array()) {
    for (const auto& mv : a->as_array()) {
      const json::object& m = mv.as_object();
      const auto* tsp = m.if_contains("targetSizePolicy");
      bool bulk = tsp && tsp->is_object() && tsp->as_object().if_contains("mode") &&
                  tsp->as_object().at("mode") == "BULK";
      if (!bulk) continue;
      std::string zone(m.at("zone").as_string());
      zone = zone.substr(zone.rfind('/') + 1);
      std::string key =
          std::string(kProject) + "/" + zone + "/" + std::string(m.at("name").as_string());
      int64_t target = 0;
      if (const auto* t = m.if_contains("targetSize")) {
        target = t->is_int64()    ? t->as_int64()
                 : t->is_string() ? std::stoll(std::string(t->as_string()))
                                  : 0;
      }
      int64_t have = vms_of_mig.count(key) ? vms_of_mig[key] : 0;
      if (have != 0 && have != target) {
        bad.push_back("BULK MIG " + key + " holds " + std::to_string(have) + " of " +
                      std::to_string(target) + " VMs");
      }
    }
  }
  return bad;
}

// Polls the simulator's state every `every` and records every invariant violation (deduplicated).
class InvariantWatch {
 public:
  InvariantWatch(Control& control, std::chrono::milliseconds every = 50ms) : control_(control) {
    thread_ = std::thread([this, every] {
      while (!stop_) {
        json::object st = control_.State();
        ++polls_;
        for (auto& v : CheckInvariants(st)) {
          std::lock_guard lock(mu_);
          violations_.insert(std::move(v));
        }
        std::this_thread::sleep_for(every);
      }
    });
  }
  ~InvariantWatch() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::set<std::string> violations() {
    std::lock_guard lock(mu_);
    return violations_;
  }
  int64_t polls() const { return polls_; }

 private:
  Control& control_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> polls_{0};
  std::mutex mu_;
  std::set<std::string> violations_;
  std::thread thread_;
};

// The control plane with the TPU CRDs, the simulator, a GCE token file.
class Env {
 public:
  static Env& Get() {
    static Env* env = new Env();  // lives until exit, like the cluster
    return *env;
  }
  std::shared_ptr<kube::Client> client;
  std::unique_ptr<sim::gce::Simulator> sim;
  std::unique_ptr<Control> control;
  std::string token, token_file, kubeconfig;
  std::filesystem::path dir;
  std::string error;

 private:
  Env() {
    client = testenv::AdminClient();
    if (!client) {
      error = "no admin client";
      return;
    }
    kubeconfig = testenv::Cluster().kubeconfig_path();
    dir = std::filesystem::temp_directory_path() / ("hs-tpu-chaos-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    sim::gce::Options o;
    o.projects = {kProject};
    o.regions = {kRegion};
    o.operation_latency = 100ms;
    o.instance_boot_latency = 100ms;
    o.mig_retry_interval = 200ms;
    o.api_threads = 4;
    auto s = sim::gce::Simulator::Start(o);
    if (!s.ok()) {
      error = "simulator: " + s.error().ToString();
      return;
    }
    sim = std::move(s).value();
    control = std::make_unique<Control>(sim->control_endpoint());
    auto t = control->Call("POST", "/control/tokens", {{"ttlSeconds", 86400}});
    if (!t.ok()) {
      error = "token: " + t.error().ToString();
      return;
    }
    token = std::string(t->at("access_token").as_string());
    token_file = (dir / "gce-token").string();
    std::ofstream(token_file) << token << "\n";
    for (const char* crd :
         {"tpunodegroups", "resourcepolicies", "instancetemplates", "managedinstancegroups"}) {
      if (Status st = InstallCrd(crd); !st.ok()) {
        error = std::string("CRD ") + crd + ": " + st.error().ToString();
        return;
      }
    }
    kube::Object ns{{"apiVersion", "v1"},
                    {"kind", "Namespace"},
                    {"metadata", json::object{{"name", kOperatorNs}}}};
    (void)client->Create(kube::resources::Namespaces(), "", ns);
  }

  Status InstallCrd(const std::string& plural) {
    json::object crd;
    try {
      crd = YamlToJson(YAML::LoadFile(std::string(HS_DEPLOY_DIR) + "/crds/tpu.google.com_" +
                                      plural + ".yaml"))
                .as_object();
    } catch (const std::exception& e) {
      return Error::Make(Error::Code::kInvalidArgument, e.what());
    }
    auto created = client->Create(kube::resources::CustomResourceDefinitions(), "", crd);
    if (!created.ok() && created.error().code != Error::Code::kAlreadyExists) {
      return created.error();
    }
    kube::Resource r{kGroup, kVersion, plural, "", true};
    if (Eventually([&] { return client->List(r, "default").ok(); }, 60s)) return OkStatus();
    return Error::Make(Error::Code::kTimeout, "CRD " + plural + " not served");
  }
};

// `hyperslice operator` as a child process, its output appended to a file.
class OperatorProcess {
 public:
  OperatorProcess() = default;
  OperatorProcess(const OperatorProcess&) = delete;
  OperatorProcess& operator=(const OperatorProcess&) = delete;
  ~OperatorProcess() { Kill(); }

  // `extra` flags ("--name=value" or "--name", "value") are appended and replace the defaults
  // of the same name (leader election is off unless `extra` turns it on).
  void Start(const Env& env, const std::string& log_path, std::vector<std::string> extra = {},
             const std::string& workers = "2") {
    log_path_ = log_path;
    const std::vector<std::pair<std::string, std::string>> defaults = {
        {"--kubeconfig", env.kubeconfig},
        {"--gce-endpoint", env.sim->api_endpoint()},
        {"--gce-access-token-file", env.token_file},
        {"--health-probe-port", "-1"},
        {"--orphan-sweep-interval", "0"},
        {"--drift-check-interval", "1h"},
        {"--device-plugin-namespace", kOperatorNs},
        {"--workers", workers},
        {"--leader-elect", "false"}};
    std::vector<std::string> args = {HS_HYPERSLICE_BIN, "operator"};
    for (const auto& [flag, value] : defaults) {
      bool overridden = false;
      for (const auto& e : extra) {
        overridden |= e == flag || e.rfind(flag + "=", 0) == 0;
      }
      if (!overridden) args.push_back(flag + "=" + value);
    }
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ == 0) {
      int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(HS_HYPERSLICE_BIN, argv.data());
      _exit(127);
    }
  }
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  int Terminate() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string Log() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // The last `n` lines of the log.
  std::string Tail(size_t n = 30) const {
    std::string all = Log();
    size_t pos = all.size();
    for (size_t i = 0; i <= n && pos != std::string::npos && pos > 0; ++i) {
      pos = all.rfind('\n', pos - 1);
    }
    return pos == std::string::npos ? all : all.substr(pos + 1);
  }

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

// Plays kubelet for every simulator VM that becomes RUNNING (the simulator's instance events, so
// injected API faults do not hide VMs): creates its Node named like the VM with spec.providerID,
// a Ready condition and google.com/tpu capacity (status subresource), as a kubelet registering
// would. Each VM is registered once.
class FakeKubelets {
 public:
  explicit FakeKubelets(Env& env) : env_(env) {
    worker_ = std::thread([this] { Work(); });
    sub_ = env_.sim->SubscribeInstances([this](const sim::gce::InstanceEvent& e) {
      if (e.status != "RUNNING") return;
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({e.zone, e.name});
      cv_.notify_one();
    });
  }
  ~FakeKubelets() {
    env_.sim->UnsubscribeInstances(sub_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    worker_.join();
  }
  std::set<std::string> registered() {
    std::lock_guard<std::mutex> lock(mu_);
    return registered_;
  }

  static Status SetNodeReady(const std::shared_ptr<kube::Client>& client, const std::string& name) {
    std::string now = kube::FormatTime(std::chrono::system_clock::now());
    json::object patch{
        {"status", json::object{{"conditions", json::array{json::object{
                                                   {"type", "Ready"},
                                                   {"status", "True"},
                                                   {"reason", "KubeletReady"},
                                                   {"message", "kubelet is posting ready status"},
                                                   {"lastHeartbeatTime", now},
                                                   {"lastTransitionTime", now}}}},
                                {"capacity", json::object{{kTpuResourceName, "4"}}}}}};
    auto r = client->Patch(kube::resources::Nodes(), "", name, kube::PatchType::kStrategicMerge,
                           json::serialize(patch), {.subresource = "status"});
    return r.ok() ? OkStatus() : Status(r.error());
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait_for(lock, 200ms, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      if (queue_.empty()) continue;
      auto [zone, name] = queue_.front();
      queue_.pop_front();
      if (registered_.count(name)) continue;
      lock.unlock();
      bool ok = Register(zone, name);
      lock.lock();
      if (ok) {
        registered_.insert(name);
      } else if (!stop_) {
        queue_.push_back({zone, name});  // the apiserver may be restarting: try again
        lock.unlock();
        std::this_thread::sleep_for(100ms);
        lock.lock();
      }
    }
  }
  bool Register(const std::string& zone, const std::string& name) {
    kube::Object node{
        {"apiVersion", "v1"},
        {"kind", "Node"},
        {"metadata",
         json::object{{"name", name}, {"labels", json::object{{"kubernetes.io/hostname", name}}}}},
        {"spec", json::object{{"providerID", ProviderId(kProject, zone, name)}}}};
    auto created = env_.client->Create(kube::resources::Nodes(), "", node);
    if (!created.ok() && created.error().code != Error::Code::kAlreadyExists) return false;
    return SetNodeReady(env_.client, name).ok();
  }

  Env& env_;
  uint64_t sub_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<std::pair<std::string, std::string>> queue_;
  std::set<std::string> registered_;
  std::thread worker_;
};

// Slice shapes: 1 host (v6e 2x2, SPOT), 2, 4 and 8 hosts (tpu7x 2x2x2 / 2x2x4 / 2x4x4, BULK).
inline json::object Group(const std::string& ns, const std::string& name, int hosts,
                          const std::string& zone_override = "") {
  json::object spec;
  if (hosts == 1) {
    spec = json::object{{"project", kProject},
                        {"nodeLocation", zone_override.empty() ? kV6eZone : zone_override},
                        {"nodeCount", 1},
                        {"topology", "2x2"},
                        {"instanceConfig", json::object{{"machineType", "ct6e-standard-4t"},
                                                        {"provisioningModel", "SPOT"}}}};
  } else {
    spec = json::object{{"project", kProject},
                        {"nodeLocation", zone_override.empty() ? kZone : zone_override},
                        {"nodeCount", hosts},
                        {"topology", hosts == 2   ? "2x2x2"
                                     : hosts == 4 ? "2x2x4"
                                                  : "2x4x4"},
                        {"targetSizePolicyMode", "BULK"},
                        {"instanceConfig", json::object{{"machineType", "tpu7x-standard-4t"},
                                                        {"provisioningModel", "STANDARD"}}}};
  }
  return json::object{{"apiVersion", kApiVersion},
                      {"kind", "TPUNodeGroup"},
                      {"metadata", json::object{{"name", name}, {"namespace", ns}}},
                      {"spec", std::move(spec)}};
}

inline std::optional<kube::Condition> Cond(kube::Client& c, const std::string& ns,
                                           const std::string& name, const std::string& type) {
  auto g = c.Get(TPUNodeGroups(), ns, name);
  if (!g.ok()) return std::nullopt;
  return kube::FindCondition(*g, type);
}
inline bool IsReady(kube::Client& c, const std::string& ns, const std::string& name) {
  auto g = c.Get(TPUNodeGroups(), ns, name);
  if (!g.ok()) return false;
  auto cond = kube::FindCondition(*g, kCondReady);
  return cond && cond->status == "True" && cond->observed_generation == kube::Generation(*g);
}
inline bool IsGone(kube::Client& c, const kube::Resource& r, const std::string& ns,
                   const std::string& name) {
  auto g = c.Get(r, ns, name);
  return !g.ok() && g.error().code == Error::Code::kNotFound;
}
inline std::string DescribeGroup(kube::Client& c, const std::string& ns, const std::string& name) {
  auto g = c.Get(TPUNodeGroups(), ns, name);
  if (!g.ok()) return g.error().ToString();
  const auto* st = g->if_contains("status");
  return (g->at("metadata").as_object().contains("deletionTimestamp") ? "(deleting) " : "") +
         (st ? json::serialize(*st) : std::string("no status"));
}

// What survives of everything a group owned: the given Nodes, Nodes labelled for the group,
// bootstrap Secrets of its uid, the child CRs, GCE resources carrying its uid. Empty when nothing.
inline std::string Leftovers(Env& env, const std::string& ns, const std::string& name,
                             const std::string& uid, const std::set<std::string>& node_names = {}) {
  std::string out;
  auto& c = *env.client;
  auto nodes = c.List(
      kube::resources::Nodes(), "",
      {.label_selector = std::string(kLabelNodeGroup) + "=" + NodeGroupLabelValue(ns, name)});
  if (nodes.ok() && !nodes->items.empty()) {
    out += std::to_string(nodes->items.size()) + " Node(s) labelled for the group; ";
  }
  for (const auto& n : node_names) {
    if (!IsGone(c, kube::resources::Nodes(), "", n)) out += "Node " + n + "; ";
  }
  auto secrets = c.List(kube::resources::Secrets(), "kube-system",
                        {.label_selector = std::string(kSecretLabelGroupUid) + "=" + uid});
  if (secrets.ok() && !secrets->items.empty()) {
    out += std::to_string(secrets->items.size()) + " bootstrap Secret(s); ";
  }
  for (const auto* r : {&ResourcePolicies(), &InstanceTemplates(), &ManagedInstanceGroups()}) {
    if (!IsGone(c, *r, ns, name)) out += r->kind + " CR; ";
  }
  if (size_t n = ResourcesOf(env.control->State(), uid); n > 0) {
    out += std::to_string(n) + " GCE resource(s); ";
  }
  return out;
}

}  // namespace hyperslice::tpu::chaos
