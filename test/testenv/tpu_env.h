// The TPU operator's test environment, shared by its integration test (test/integration/
// tpu_operator), its chaos e2e test (test/e2e/tpu_chaos), its end-to-end test with joining VMs
// (test/e2e/tpu_slice) and the scale benchmark (bench/tpu_scale_bench.cc): the real control plane
// (testenv.h) with the TPU CRDs of deploy/crds, the GCE simulator (sim/gce) with its control
// endpoint and a token file, a Compute client on it, and kubelet stand-ins that register a Node
// (spec.providerID, Ready, google.com/tpu) for every VM that turns RUNNING, as a kubelet joining
// would. The operator as a process is operator_process.h, in process in_process_operator.h.
// Header-only, so hs_testenv itself does not depend on hs_tpu or the simulator; errors are
// returned as values or strings (no gtest dependency).
#pragma once

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "sim/gce/simulator.h"
#include "src/gce/compute.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/tpu/api.h"
#include "test/testenv/crds.h"
#include "test/testenv/gce_control.h"
#include "test/testenv/sim_compute.h"
#include "test/testenv/testenv.h"

namespace hyperslice::testenv::tpuenv {

inline constexpr char kProject[] = "my-gcp-project";
inline constexpr char kRegion[] = "us-central1";
inline constexpr char kV6eZone[] = "us-central1-a";
inline constexpr char kStockoutZone[] = "us-central1-b";  // capacity limited by a test
inline constexpr char kZone[] = "us-central1-c";          // seed 000's zone
inline constexpr char kOperatorNs[] = "tpu-node-group";   // --device-plugin-namespace

// The simulator's options of the shared environment: kProject in kRegion, 100 ms operations and
// boots, a MIG retrying every 200 ms. A test adds reservations, threads, capacity.
inline sim::gce::Options SimOptions() {
  using namespace std::chrono_literals;
  sim::gce::Options o;
  o.projects = {kProject};
  o.regions = {kRegion};
  o.operation_latency = 100ms;
  o.instance_boot_latency = 100ms;
  o.mig_retry_interval = 200ms;
  return o;
}

// The control plane with the TPU CRDs and namespace kOperatorNs, the simulator, a GCE token (in
// `token_file` too, for the operator process) and a Compute client with it.
class Env {
 public:
  // `name` names the temporary folder (hs-<name>-<pid>). `error` says what failed.
  Env(const std::string& name, const sim::gce::Options& sim_options) {
    client = AdminClient();
    if (!client) {
      error = "no admin client";
      return;
    }
    kubeconfig = Cluster().kubeconfig_path();
    dir = std::filesystem::temp_directory_path() / ("hs-" + name + "-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    auto s = sim::gce::Simulator::Start(sim_options);
    if (!s.ok()) {
      error = "simulator: " + s.error().ToString();
      return;
    }
    sim = std::move(s).value();
    control = std::make_unique<GceControl>(sim->control_endpoint());
    auto t = control->Call("POST", "/control/tokens", {{"ttlSeconds", 86400}});
    if (!t.ok()) {
      error = "token: " + t.error().ToString();
      return;
    }
    token = std::string(t->at("access_token").as_string());
    token_file = (dir / "gce-token").string();
    std::ofstream(token_file) << token << "\n";
    auto c = SimCompute(*sim, token);
    if (!c.ok()) {
      error = "compute: " + c.error().ToString();
      return;
    }
    compute = std::move(*c);
    if (Status st = InstallTpuCrds(HS_DEPLOY_DIR); !st.ok()) {
      error = "CRDs: " + st.error().ToString();
      return;
    }
    kube::Object ns{{"apiVersion", "v1"},
                    {"kind", "Namespace"},
                    {"metadata", boost::json::object{{"name", kOperatorNs}}}};
    (void)client->Create(kube::resources::Namespaces(), "", ns);
  }

  std::shared_ptr<kube::Client> client;
  std::unique_ptr<sim::gce::Simulator> sim;
  std::unique_ptr<GceControl> control;
  std::shared_ptr<gce::Compute> compute;
  std::string token, token_file, kubeconfig;
  std::filesystem::path dir;
  std::string error;
};

// The binary's one Env, started by the first call (later calls' arguments are ignored); it lives
// until exit, like the cluster.
inline Env& SharedEnv(const std::string& name, const sim::gce::Options& sim_options) {
  static Env* env = new Env(name, sim_options);
  return *env;
}

// Patches Node `name`'s status as its kubelet would: Ready (or not, as a kubelet that stopped
// posting) with google.com/tpu capacity 4.
inline Status SetNodeReady(kube::Client& client, const std::string& name, bool ready = true) {
  namespace json = boost::json;
  std::string now = kube::FormatTime(std::chrono::system_clock::now());
  json::object patch{
      {"status",
       json::object{{"conditions", json::array{json::object{
                                       {"type", "Ready"},
                                       {"status", ready ? "True" : "False"},
                                       {"reason", ready ? "KubeletReady" : "NodeStatusUnknown"},
                                       {"message", ready ? "kubelet is posting ready status"
                                                         : "Kubelet stopped posting node status."},
                                       {"lastHeartbeatTime", now},
                                       {"lastTransitionTime", now}}}},
                    {"capacity", json::object{{tpu::kTpuResourceName, "4"}}}}}};
  auto r = client.Patch(kube::resources::Nodes(), "", name, kube::PatchType::kStrategicMerge,
                        json::serialize(patch), {.subresource = "status"});
  return r.ok() ? OkStatus() : Status(r.error());
}

// Plays kubelet for every simulator VM that becomes RUNNING (the simulator's instance events, so
// injected API faults do not hide VMs): creates its Node named like the VM with spec.providerID
// and the hostname label, then SetNodeReady. Each VM is registered once.
class FakeKubelets {
 public:
  explicit FakeKubelets(Env& env) : env_(env) {
    worker_ = std::thread([this] { Work(); });
    sub_ = env_.sim->SubscribeInstances([this](const sim::gce::InstanceEvent& e) {
      if (e.status != "RUNNING") return;
      std::lock_guard<std::mutex> lock(mu_);
      queue_.emplace_back(e.zone, e.name);
      cv_.notify_one();
    });
  }
  FakeKubelets(const FakeKubelets&) = delete;
  FakeKubelets& operator=(const FakeKubelets&) = delete;
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

 private:
  void Work() {
    using namespace std::chrono_literals;
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
        queue_.emplace_back(zone, name);  // the apiserver may be restarting: try again
        lock.unlock();
        std::this_thread::sleep_for(100ms);
        lock.lock();
      }
    }
  }
  bool Register(const std::string& zone, const std::string& name) {
    namespace json = boost::json;
    kube::Object node{
        {"apiVersion", "v1"},
        {"kind", "Node"},
        {"metadata",
         json::object{{"name", name}, {"labels", json::object{{"kubernetes.io/hostname", name}}}}},
        {"spec", json::object{{"providerID", tpu::ProviderId(kProject, zone, name)}}}};
    auto created = env_.client->Create(kube::resources::Nodes(), "", node);
    if (!created.ok() && created.error().code != Error::Code::kAlreadyExists) return false;
    return SetNodeReady(*env_.client, name).ok();
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

// A TPUNodeGroup's condition of `type`; none when the group cannot be read or has none.
inline std::optional<kube::Condition> Cond(kube::Client& c, const std::string& ns,
                                           const std::string& name, const std::string& type) {
  auto g = c.Get(tpu::TPUNodeGroups(), ns, name);
  if (!g.ok()) return std::nullopt;
  return kube::FindCondition(*g, type);
}
// True when the object is gone (NotFound).
inline bool IsGone(kube::Client& c, const kube::Resource& r, const std::string& ns,
                   const std::string& name) {
  auto g = c.Get(r, ns, name);
  return !g.ok() && g.error().code == Error::Code::kNotFound;
}
// The group's status for a failure message, "(deleting) " first while it is being deleted.
inline std::string DescribeGroup(kube::Client& c, const std::string& ns, const std::string& name) {
  auto g = c.Get(tpu::TPUNodeGroups(), ns, name);
  if (!g.ok()) return g.error().ToString();
  const auto* st = g->if_contains("status");
  return (g->at("metadata").as_object().contains("deletionTimestamp") ? "(deleting) " : "") +
         (st ? boost::json::serialize(*st) : std::string("no status"));
}

}  // namespace hyperslice::testenv::tpuenv
