// The GPU e2e fixture shared by gpu_provisioning_e2e_test and gpu_disruption_e2e_test: seed 002's
// GPUNodeClass and GPUNodePool, unchanged (RunPod and Lambda, pointed at their simulators by the
// operator's default endpoints), the GPU controllers in-process as `hyperslice operator --gpu`
// runs them, a real kube-apiserver and kube-scheduler (and kube-controller-manager where a test
// binary asks for it), and stand-in machines: a running instance registers a Node with the claim's
// providerID (with the registration taint); with run_pods_ its "kubelet" reports bound pods
// Running and finishes deletions after their grace period.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>

#include "sim/lambda/simulator.h"
#include "sim/runpod/simulator.h"
#include "src/base/json.h"
#include "src/gpu/api.h"
#include "src/gpu/claim_controller.h"
#include "src/gpu/class_controller.h"
#include "src/gpu/disruption_controller.h"
#include "src/gpu/planner.h"
#include "src/gpu/providers.h"
#include "src/gpu/provisioner.h"
#include "src/kube/client.h"
#include "src/kube/events.h"
#include "src/kube/manager.h"
#include "src/kube/metrics.h"
#include "src/kube/object_helpers.h"
#include "src/kube/yaml.h"
#include "src/net/http.h"
#include "test/testenv/eventually.h"
#include "test/testenv/gpu_market.h"
#include "test/testenv/stand_in_node.h"
#include "test/testenv/testenv.h"
#include "test/testenv/tgp.h"

namespace hyperslice::gpu::e2e {

namespace bj = boost::json;
using namespace std::chrono_literals;
using testenv::Eventually;
namespace market = sim::market;

// A pod annotated so is stopped only when its grace period has run out (its container ignores
// SIGTERM), by the stand-in kubelet.
inline constexpr char kIgnoresSigterm[] = "e2e.hyperslice.dev/ignores-sigterm";

inline market::Listing Rtx4090(const std::string& region, MicroUsd price, int capacity) {
  return sim::lambda::Rtx4090Listing(region, price, capacity);
}

// `v` as block YAML at `indent` spaces, each key and scalar written as its JSON (a valid YAML
// scalar), so that it can continue a mapping written around it.
inline void AppendYamlBlock(const bj::value& v, int indent, std::string& out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  auto nested = [](const bj::value& x) {
    return (x.is_object() && !x.as_object().empty()) || (x.is_array() && !x.as_array().empty());
  };
  if (v.is_object()) {
    for (const auto& [k, val] : v.as_object()) {
      out += pad + bj::serialize(bj::value(k)) + ":";
      if (nested(val)) {
        out += "\n";
        AppendYamlBlock(val, indent + 2, out);
      } else {
        out += " " + bj::serialize(val) + "\n";
      }
    }
    return;
  }
  for (const auto& item : v.as_array()) {
    if (item.is_object() && nested(item)) {
      std::string block;
      AppendYamlBlock(item, indent + 2, block);
      block.replace(0, pad.size() + 2, pad + "- ");
      out += block;
    } else {
      out += pad + "- " + bj::serialize(item) + "\n";
    }
  }
}

// Seed 002's GPU pod spec (testenv::SeedGpuPod: deploy/examples/gpu-job.yaml's template, its
// toleration, its selector, one GPU), indented to sit under a `spec:` key at `indent` spaces.
inline std::string GpuPodSpec(int indent) {
  std::string out = "\n";
  AppendYamlBlock(testenv::SeedGpuPod(HS_DEPLOY_DIR, "unused").at("spec"), indent, out);
  return out;
}

// The largest value `sample` returned, polled every `period` on its own thread from construction
// until Stop() (budget checks: how many claims were being deleted at once).
class MaxSampler {
 public:
  MaxSampler(std::function<int()> sample, std::chrono::milliseconds period)
      : thread_([this, sample = std::move(sample), period] {
          while (!stop_) {
            int v = sample();
            if (v > max_) max_ = v;
            std::this_thread::sleep_for(period);
          }
        }) {}
  ~MaxSampler() { Stop(); }
  int Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return max_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> max_{0};
  std::thread thread_;
};

inline bj::object Yaml(const std::string& text) {
  return kube::YamlToJson(YAML::Load(text)).as_object();
}

using testenv::Str;

// The fixture: seed 002's class and pool on a real apiserver + scheduler, the GPU controllers in
// process, the Lambda simulator selling RTX 4090s and A10s and the RunPod simulator selling the
// rest of its default market. A test binary derives from it and configures the cluster in its
// SetUpTestSuite.
class GpuHarness : public ::testing::Test {
 protected:
  // Before SetUp starts the simulators: a derived fixture may change what they sell.
  virtual void Customize(market::ServerOptions& lambda, market::ServerOptions& runpod) {
    (void)lambda;
    (void)runpod;
  }

  void SetUp() override {
    client_ = testenv::AdminClient();
    ASSERT_TRUE(client_);
    Status st = testenv::InstallTgpCrds(HS_DEPLOY_DIR);
    ASSERT_TRUE(st.ok()) << st.error().ToString();

    // The market: RTX 4090s in two regions (us-west cheapest), an A10 cheaper still (but not
    // what the pool asks for).
    market::ServerOptions so;
    // Lambda prices an instance type the same in every region: the choice between regions is
    // the tie-break, between types the price.
    so.market.listings = {Rtx4090("us-west-1", 690000, 8), Rtx4090("us-east-1", 690000, 8)};
    market::Listing a10 = Rtx4090("us-west-1", 500000, 5);
    a10.id = "gpu_1x_a10@us-west-1";
    a10.gpu_name = "A10 (24 GB PCIe)";
    a10.attributes = {{"instance_type", "gpu_1x_a10"}, {"gpu_description", "A10 (24 GB PCIe)"}};
    so.market.listings.push_back(a10);
    // Instance ids come from the seed: a new seed per test, so no id (and no Node name) repeats.
    static int seed = 0;
    so.market.seed = static_cast<uint64_t>(++seed) * 7919;
    so.market.boot_delay = 100ms;
    so.market.running_delay = 100ms;
    so.market.terminate_delay = 100ms;
    // Seed 002's class also names RunPod: its simulator sells the rest of its default market, but
    // no RTX 4090, so the pool's machines come from Lambda (unless Customize says otherwise).
    market::ServerOptions ro;
    for (const auto& l : sim::runpod::DefaultListings()) {
      if (l.gpu_name.find("4090") == std::string::npos) ro.market.listings.push_back(l);
    }
    ro.market.seed = so.market.seed;
    ro.market.boot_delay = ro.market.running_delay = ro.market.terminate_delay = 100ms;
    Customize(so, ro);
    auto sim = sim::lambda::Start(so);
    ASSERT_TRUE(sim.ok()) << sim.error().ToString();
    sim_ = std::move(*sim);
    // Stand-in machines: a running instance registers its Node (what issue 3/4's simulated
    // machines do after booting from the payload).
    observer_ = sim_->market().Subscribe([this](const market::Instance& i) { OnInstance(i); });
    auto runpod = sim::runpod::Start(ro);
    ASSERT_TRUE(runpod.ok()) << runpod.error().ToString();
    runpod_ = std::move(*runpod);
    runpod_observer_ =
        runpod_->market().Subscribe([this](const market::Instance& i) { OnInstance(i); });
    if (run_pods_) kubelet_ = std::thread([this] { StandInKubelet(); });

    ASSERT_TRUE(testenv::PutSimOperatorSecret(*client_).ok());

    auto kit = testenv::NewGpuControllerKit(client_, &registry_);
    ASSERT_TRUE(kit.ok()) << kit.error().ToString();
    manager_ = std::move(kit->manager);

    ClassControllerOptions co =
        kit->ClassOptions({{kLambda, sim_->api_endpoint()}, {kRunPod, runpod_->api_endpoint()}});
    ASSERT_TRUE(RegisterClassController(*manager_, co).ok());
    ClaimControllerOptions cl = kit->ClaimOptions();
    cl.cluster_id = "e2e-cluster";
    cl.ambiguous_settle = 2s;
    cl.registration_timeout = 15s;  // stand-in Nodes register within a second or two
    cl.gc_interval = 1s;
    cl.gc_grace = 3s;
    // Lambda launches need one SSH key; the simulator's accounts have "sim-ssh-key". RunPod
    // boots a container image and takes nothing else.
    cl.payload = [](const BootContext& ctx) -> Result<BootPayload> {
      BootPayload p;
      if (ctx.offer != nullptr && ctx.offer->provider == kRunPod) {
        p.image = "nvidia/cuda:12.4.0-base-ubuntu22.04";
        return p;
      }
      p.ssh_key_names = {"sim-ssh-key"};
      p.user_data = "#cloud-config\n";
      return p;
    };
    ASSERT_TRUE(RegisterClaimController(*manager_, cl).ok());
    ProvisionerOptions po = kit->ProvisionerOptions();
    ASSERT_TRUE(RegisterProvisioner(*manager_, po).ok());
    DisruptionControllerOptions dc;
    dc.client = client_;
    dc.events = kit->events;
    dc.budget_retry = 500ms;
    ASSERT_TRUE(RegisterDisruptionController(*manager_, dc).ok());
    runner_ = std::thread([this] { (void)manager_->Run(); });

    // Seed 002's class and pool, unchanged (deploy/examples holds them as the seed writes them).
    Status seeded = testenv::CreateGpuClassAndPool(*client_, testenv::SeedGpuClass(HS_DEPLOY_DIR),
                                                   testenv::SeedGpuPool(HS_DEPLOY_DIR));
    ASSERT_TRUE(seeded.ok()) << seeded.error().ToString();
  }

  void TearDown() override {
    // Pods first (nothing pending, nothing to plan), then the pool (nothing to plan for), then
    // the claims (their finalizer returns the machines), then the class.
    testenv::DeletePodsNow(*client_, "default");
    EXPECT_TRUE(Eventually([&] {
      auto l = client_->List(kube::resources::Pods(), "default");
      return l.ok() && l->items.empty();
    }));
    Status cleaned = testenv::DeleteGpuClassAndPool(*client_, "default", "ml-workload-pool",
                                                    "standard-gpu-class");
    EXPECT_TRUE(cleaned.ok()) << cleaned.error().ToString() << "\n" << Diagnose("");
    if (manager_) manager_->Stop();
    if (runner_.joinable()) runner_.join();
    kubelet_stop_ = true;
    if (kubelet_.joinable()) kubelet_.join();
    if (sim_) {
      sim_->market().Unsubscribe(observer_);
      // Nothing left running at the provider: every instance was returned.
      testenv::ExpectAllReturned(sim_->market(), "lambda");
      sim_->Stop();
    }
    if (runpod_) {
      runpod_->market().Unsubscribe(runpod_observer_);
      testenv::ExpectAllReturned(runpod_->market(), "runpod");
      runpod_->Stop();
    }
    testenv::DeleteNodes(*client_);
  }

  // The provider name a machine's providerID carries (the market's own, "lambdalabs", "runpod").
  std::string ProviderOf(const market::Instance& i) {
    if (runpod_ && runpod_->market().Get(i.id)) return runpod_->market().options().provider;
    return sim_->market().options().provider;
  }

  static std::string NodeName(const market::Instance& i) {
    std::string name = "gpu-" + i.id;
    for (char& c : name) {
      auto u = static_cast<unsigned char>(c);
      c = std::isalnum(u) ? static_cast<char>(std::tolower(u)) : '-';
    }
    return name;
  }

  // With run_pods_: what the stand-in machines' kubelets do with pods bound to them, by polling —
  // a new pod is reported Running; a pod being deleted ends as a container that exits on SIGTERM
  // does (at once), or, annotated kIgnoresSigterm, stays Terminating until its deletionTimestamp
  // (now + its grace period, as the apiserver set it: the kubelet's SIGKILL); then it is deleted
  // for good. (Issue 3/4's simulated machines run pods with sim/kubelet's runtime.)
  void StandInKubelet() {
    while (!kubelet_stop_) {
      std::this_thread::sleep_for(50ms);
      auto pods = client_->List(kube::resources::Pods(), "");
      if (!pods.ok()) continue;
      for (const auto& pod : pods->items) {
        std::string node = Str(pod, "spec", "nodeName");
        if (node.rfind("gpu-", 0) != 0) continue;
        std::string ns = Str(pod, "metadata", "namespace"), name = Str(pod, "metadata", "name");
        if (kube::IsDeleting(pod)) {
          auto at = kube::ParseTime(Str(pod, "metadata", "deletionTimestamp"));
          const bj::object* ann = jsonfield::ObjectAt(pod, "metadata.annotations");
          bool slow = ann != nullptr && jsonfield::StringField(*ann, kIgnoresSigterm) == "true";
          if (slow && at && std::chrono::system_clock::now() < *at) continue;
          kube::DeleteOptions d;
          d.grace_period_seconds = 0;
          d.precondition_uid = Str(pod, "metadata", "uid");
          (void)client_->Delete(kube::resources::Pods(), ns, name, d);
          continue;
        }
        std::string phase = Str(pod, "status", "phase");
        if (!phase.empty() && phase != "Pending") continue;
        // Strategic merge: conditions merge by type, the scheduler's PodScheduled stays.
        std::string now = kube::FormatTime(std::chrono::system_clock::now());
        bj::array conditions;
        for (const char* type : {"Initialized", "ContainersReady", "Ready"})
          conditions.push_back(
              bj::object{{"type", type}, {"status", "True"}, {"lastTransitionTime", now}});
        bj::object status{
            {"phase", "Running"}, {"startTime", now}, {"conditions", std::move(conditions)}};
        // Against the version listed: a status the test wrote meanwhile (Succeeded) is not
        // overwritten.
        bj::object patch{
            {"metadata", bj::object{{"resourceVersion", Str(pod, "metadata", "resourceVersion")}}},
            {"status", std::move(status)}};
        (void)client_->Patch(kube::resources::Pods(), ns, name, kube::PatchType::kStrategicMerge,
                             bj::serialize(patch), {.subresource = "status"});
      }
    }
  }

  void OnInstance(const market::Instance& i) {
    if (i.state != market::State::kRunning) return;
    {
      std::lock_guard lock(mu_);
      if (!register_nodes_) return;  // a machine whose payload does not boot
      if (!registered_.insert(i.id).second) return;
    }
    // On its own thread: the observer must not block the market.
    std::thread([this, i] { RegisterNode(i); }).detach();
  }

  // What a machine's kubelet does on registration (and what kube-controller-manager's node
  // lifecycle controller, not running here, does once the Node is Ready: remove the not-ready
  // taint the apiserver's admission put on the new Node).
  void RegisterNode(const market::Instance& i) {
    std::string name = NodeName(i);
    if (!client_
             ->Create(kube::resources::Nodes(), "",
                      testenv::StandInNode(name, ProviderOf(i) + "://" + i.id))
             .ok()) {
      return;
    }
    (void)testenv::PostStandInNodeStatus(*client_, name, i.listing.gpu_count);
    (void)Eventually([&] { return testenv::DropNotReadyTaint(*client_, name); });
  }

  // How many claims are being deleted now.
  int DeletingClaims() {
    int n = 0;
    for (const auto& c : ListClaims()) n += kube::IsDeleting(c) ? 1 : 0;
    return n;
  }

  std::vector<bj::object> ListClaims() { return testenv::ListClaims(*client_); }

  void CreateGpuPod(const std::string& name) {
    bj::object pod = Yaml(std::string(R"(
apiVersion: v1
kind: Pod
metadata:
  name: NAME
  namespace: default
spec:)") + GpuPodSpec(2));
    pod["metadata"].as_object()["name"] = name;
    auto created = client_->Create(kube::resources::Pods(), "default", pod);
    ASSERT_TRUE(created.ok()) << created.error().ToString();
  }

  // What a failed wait leaves to read: the pod, the claims, the Nodes.
  std::string Diagnose(const std::string& pod) {
    std::string out;
    auto p = client_->Get(kube::resources::Pods(), "default", pod);
    if (p.ok() && p->contains("status"))
      out += "pod status: " + bj::serialize(p->at("status")) + "\n";
    for (auto c : ListClaims()) {
      c["metadata"].as_object().erase("managedFields");
      out += "claim: " + bj::serialize(c) + "\n";
    }
    out += testenv::DescribeEvents(*client_);
    auto nodes = client_->List(kube::resources::Nodes(), "");
    if (nodes.ok()) {
      for (const auto& n : nodes->items) out += "node: " + bj::serialize(n) + "\n";
    }
    return out;
  }

  std::string NodeOf(const std::string& pod) {
    auto p = client_->Get(kube::resources::Pods(), "default", pod);
    return p.ok() ? Str(*p, "spec", "nodeName") : std::string();
  }

  int RunningInstances() {
    int n = 0;
    for (const auto& i : sim_->market().List("")) {
      n += i.state != market::State::kTerminated && i.state != market::State::kStopping;
    }
    return n;
  }

  std::shared_ptr<kube::Client> client_;
  kube::metrics::Registry registry_;
  std::unique_ptr<market::MarketSimulator> sim_;     // Lambda
  std::unique_ptr<market::MarketSimulator> runpod_;  // sells no RTX 4090
  uint64_t observer_ = 0, runpod_observer_ = 0;
  std::unique_ptr<kube::Manager> manager_;
  std::thread runner_;
  std::mutex mu_;
  std::set<std::string> registered_;
  bool register_nodes_ = true;  // guarded by mu_
  bool run_pods_ = true;        // set before SetUp: the stand-in kubelet runs
  std::atomic<bool> kubelet_stop_{false};
  std::thread kubelet_;
};

}  // namespace hyperslice::gpu::e2e
