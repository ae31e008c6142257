// Seed 002's GPUNodeClass and GPUNodePool, unchanged (RunPod and Lambda, pointed at their
// simulators by the operator's default endpoints),
// the GPU controllers in-process as `hyperslice operator --gpu` runs them, a real kube-apiserver
// and kube-scheduler: a pod asking for nvidia.com/gpu with the seed's toleration and a
// tgp.io/gpu-type=RTX4090 selector becomes a GPUNodeClaim, the cheapest fitting offer is launched
// on the simulator, a stand-in machine registers a Node with the claim's providerID (with the
// registration taint), the claim controller syncs the pool's labels and taints and removes that
// taint, the claim turns Ready and the scheduler binds the pod to the Node. Then: limits hold
// pods back with a condition; a capacity failure moves the claim to the next offer; a create
// whose answer is swallowed still yields exactly one machine; deleting a claim returns its
// machine (checked from the simulator's own state).
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

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
#include "test/testenv/testenv.h"
#include "test/testenv/tgp.h"

namespace hyperslice::gpu {
namespace {

namespace bj = boost::json;
using namespace std::chrono_literals;
using testenv::Eventually;
namespace market = sim::market;

constexpr char kLaunch[] = "POST /api/v1/instance-operations/launch";

market::Listing Rtx4090(const std::string& region, MicroUsd price, int capacity) {
  market::Listing l;
  l.id = "gpu_1x_rtx4090@" + region;
  l.gpu_name = "RTX 4090 (24 GB PCIe)";
  l.gpu_count = 1;
  l.gpu_memory_gb = 24;
  l.vcpus = 16;
  l.memory_gb = 64;
  l.disk_gb = 500;
  l.region = region;
  l.price = price;
  l.capacity = capacity;
  l.attributes = {{"instance_type", "gpu_1x_rtx4090"},
                  {"description", "1x RTX 4090 (24 GB PCIe)"},
                  {"gpu_description", "RTX 4090 (24 GB PCIe)"}};
  return l;
}

bj::object Yaml(const std::string& text) { return kube::YamlToJson(YAML::Load(text)).as_object(); }

std::string Str(const bj::object& o, std::string_view dotted, std::string_view key) {
  const bj::object* at = dotted.empty() ? &o : jsonfield::ObjectAt(o, dotted);
  return at ? std::string(jsonfield::StringField(*at, key)) : std::string();
}

class GpuProvisioning : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    localcluster::Options o;
    o.scheduler = true;
    testenv::ConfigureCluster(o);
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
    auto sim = sim::lambda::Start(so);
    ASSERT_TRUE(sim.ok()) << sim.error().ToString();
    sim_ = std::move(*sim);
    // Stand-in machines: a running instance registers its Node (what issue 3/4's simulated
    // machines do after booting from the payload).
    observer_ = sim_->market().Subscribe([this](const market::Instance& i) { OnInstance(i); });
    // Seed 002's class also names RunPod: its simulator sells the rest of its default market, but
    // no RTX 4090, so the pool's machines come from Lambda.
    market::ServerOptions ro;
    for (const auto& l : sim::runpod::DefaultListings()) {
      if (l.gpu_name.find("4090") == std::string::npos) ro.market.listings.push_back(l);
    }
    auto runpod = sim::runpod::Start(ro);
    ASSERT_TRUE(runpod.ok()) << runpod.error().ToString();
    runpod_ = std::move(*runpod);

    ASSERT_TRUE(
        testenv::PutSecret(*client_, "tgp-system", "tgp-operator-secret",
                           {{"RUNPOD_API_KEY", "sim-key"}, {"LAMBDA_LABS_API_KEY", "sim-key"}})
            .ok());

    kube::ManagerOptions mo;
    mo.client = client_;
    mo.registry = &registry_;
    auto m = kube::Manager::Create(std::move(mo));
    ASSERT_TRUE(m.ok()) << m.error().ToString();
    manager_ = std::move(*m);
    auto cache = std::make_shared<OfferCache>();
    auto unavailable = std::make_shared<UnavailableOffers>(std::chrono::minutes(3));
    kube::EventRecorderOptions eo;
    eo.component = "hyperslice-gpu";
    auto events = std::make_shared<kube::EventRecorder>(client_, eo);

    ClassControllerOptions co;
    co.client = client_;
    co.cache = cache;
    co.events = events;
    co.offer_refresh_interval = 2s;
    // The simulator allows what Lambda allows (1 request/s, 1 launch per 12 s); the client is
    // told a faster limit, so the test does not wait on it.
    co.factory = [](const ProviderConfig& c) {
      ProviderConfig x = c;
      x.requests_per_second = 50;
      x.burst = 50;
      return NewProvider(x);
    };
    // Seed 002's class names no endpoints: the operator's --gpu-endpoint defaults point them at
    // the simulators, so the class is applied exactly as the seed writes it.
    co.default_endpoints = {{kLambda, sim_->api_endpoint()}, {kRunPod, runpod_->api_endpoint()}};
    ASSERT_TRUE(RegisterClassController(*manager_, co).ok());
    ClaimControllerOptions cl;
    cl.client = client_;
    cl.cache = cache;
    cl.unavailable = unavailable;
    cl.events = events;
    cl.cluster_id = "e2e-cluster";
    cl.ambiguous_settle = 2s;
    cl.registration_timeout = 15s;  // stand-in Nodes register within a second or two
    cl.gc_interval = 1s;
    cl.gc_grace = 3s;
    // Lambda launches need one SSH key; the simulator's accounts have "sim-ssh-key".
    cl.payload = [](const BootContext&) -> Result<BootPayload> {
      BootPayload p;
      p.ssh_key_names = {"sim-ssh-key"};
      p.user_data = "#cloud-config\n";
      return p;  // (RunPod sells no RTX 4090 here, so no container payload is needed)
    };
    ASSERT_TRUE(RegisterClaimController(*manager_, cl).ok());
    ProvisionerOptions po;
    po.client = client_;
    po.cache = cache;
    po.unavailable = unavailable;
    po.events = events;
    po.status_interval = 1s;
    ASSERT_TRUE(RegisterProvisioner(*manager_, po).ok());
    DisruptionControllerOptions dc;
    dc.client = client_;
    dc.events = events;
    dc.budget_retry = 500ms;
    ASSERT_TRUE(RegisterDisruptionController(*manager_, dc).ok());
    runner_ = std::thread([this] { (void)manager_->Run(); });

    // Seed 002's class and pool, unchanged (deploy/examples holds them as the seed writes them).
    bj::object cls =
        kube::YamlToJson(YAML::LoadFile(HS_DEPLOY_DIR "/examples/gpunodeclass.yaml")).as_object();
    ASSERT_TRUE(client_->Create(GPUNodeClasses(), "", cls).ok());
    ASSERT_TRUE(
        client_
            ->Create(GPUNodePools(), "default",
                     kube::YamlToJson(YAML::LoadFile(HS_DEPLOY_DIR "/examples/gpunodepool.yaml"))
                         .as_object())
            .ok());
    ASSERT_TRUE(Eventually(
        [&] {
          auto c = client_->Get(GPUNodeClasses(), "", "standard-gpu-class");
          return c.ok() && kube::IsConditionTrue(*c, "Ready");
        },
        60s));
  }

  void TearDown() override {
    // Pods first (nothing pending, nothing to plan), then the pool (nothing to plan for), then
    // the claims (their finalizer returns the machines), then the class.
    auto pods = client_->List(kube::resources::Pods(), "default");
    if (pods.ok()) {
      for (const auto& p : pods->items) {
        kube::DeleteOptions d;
        d.grace_period_seconds = 0;
        (void)client_->Delete(kube::resources::Pods(), "default", Str(p, "metadata", "name"), d);
      }
    }
    EXPECT_TRUE(Eventually([&] {
      auto l = client_->List(kube::resources::Pods(), "default");
      return l.ok() && l->items.empty();
    }));
    (void)client_->Delete(GPUNodePools(), "default", "ml-workload-pool");
    EXPECT_TRUE(Eventually(
        [&] { return !client_->Get(GPUNodePools(), "default", "ml-workload-pool").ok(); }));
    for (auto& c : ListClaims()) {
      (void)client_->Delete(GPUNodeClaims(), "", Str(c, "metadata", "name"));
    }
    EXPECT_TRUE(Eventually([&] { return ListClaims().empty(); }, 60s)) << Diagnose("");
    (void)client_->Delete(GPUNodeClasses(), "", "standard-gpu-class");
    EXPECT_TRUE(
        Eventually([&] { return !client_->Get(GPUNodeClasses(), "", "standard-gpu-class").ok(); }));
    if (manager_) manager_->Stop();
    if (runner_.joinable()) runner_.join();
    if (sim_) {
      sim_->market().Unsubscribe(observer_);
      // Nothing left running at the provider: every instance was returned.
      for (const auto& i : sim_->market().List("")) {
        EXPECT_TRUE(i.state == market::State::kTerminated || i.state == market::State::kStopping)
            << i.id << " " << market::StateName(i.state);
      }
      sim_->Stop();
    }
    if (runpod_) {
      EXPECT_TRUE(runpod_->market().List("").empty()) << "nothing was to be rented on RunPod";
      runpod_->Stop();
    }
    auto nodes = client_->List(kube::resources::Nodes(), "");
    if (nodes.ok()) {
      for (const auto& n : nodes->items) {
        (void)client_->Delete(kube::resources::Nodes(), "", Str(n, "metadata", "name"));
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
    std::string name = "gpu-" + i.id;
    for (char& c : name) {
      auto u = static_cast<unsigned char>(c);
      c = std::isalnum(u) ? static_cast<char>(std::tolower(u)) : '-';
    }
    std::string gpus = std::to_string(i.listing.gpu_count);
    bj::object node{
        {"apiVersion", "v1"},
        {"kind", "Node"},
        {"metadata", bj::object{{"name", name}}},
        {"spec", bj::object{{"providerID", "lambdalabs://" + i.id},
                            {"taints", bj::array{bj::object{{"key", kTaintUnregistered},
                                                            {"value", "true"},
                                                            {"effect", "NoExecute"}}}}}}};
    if (!client_->Create(kube::resources::Nodes(), "", node).ok()) return;
    bj::object resources{{kResourceGpu, gpus}, {"cpu", "16"}, {"memory", "64Gi"}, {"pods", "110"}};
    auto now = kube::FormatTime(std::chrono::system_clock::now());
    bj::object status{
        {"capacity", resources},
        {"allocatable", resources},
        {"addresses", bj::array{bj::object{{"type", "InternalIP"}, {"address", "127.0.0.1"}}}},
        {"conditions", bj::array{bj::object{{"type", "Ready"},
                                            {"status", "True"},
                                            {"reason", "KubeletReady"},
                                            {"message", "stand-in machine"},
                                            {"lastHeartbeatTime", now},
                                            {"lastTransitionTime", now}}}}};
    kube::PatchOptions po;
    po.subresource = "status";
    (void)client_->Patch(kube::resources::Nodes(), "", name, kube::PatchType::kMerge,
                         bj::serialize(bj::object{{"status", status}}), po);
    // Remove node.kubernetes.io/not-ready against the version read (the claim controller edits
    // the taints too).
    (void)Eventually([&] {
      auto n = client_->Get(kube::resources::Nodes(), "", name);
      if (!n.ok()) return true;  // deleted meanwhile
      bj::array kept;
      bool had = false;
      if (const bj::object* spec = jsonfield::ObjectField(*n, "spec")) {
        if (const bj::array* t = jsonfield::ArrayField(*spec, "taints")) {
          for (const auto& taint : *t) {
            if (jsonfield::StringField(taint.as_object(), "key") ==
                "node.kubernetes.io/not-ready") {
              had = true;
            } else {
              kept.push_back(taint);
            }
          }
        }
      }
      if (!had) return true;
      (*n)["spec"].as_object()["taints"] = std::move(kept);
      return client_->Update(kube::resources::Nodes(), "", *n).ok();
    });
  }

  std::vector<bj::object> ListClaims() {
    auto l = client_->List(GPUNodeClaims(), "");
    return l.ok() ? l->items : std::vector<bj::object>{};
  }

  void CreateGpuPod(const std::string& name) {
    bj::object pod = Yaml(R"(
apiVersion: v1
kind: Pod
metadata:
  name: NAME
  namespace: default
spec:
  nodeSelector:
    tgp.io/gpu-type: RTX4090
  tolerations:
    - key: gpu-node
      operator: Equal
      value: "true"
      effect: NoSchedule
  containers:
    - name: cuda
      image: nvidia/cuda:12.4.0-base-ubuntu22.04
      resources:
        limits:
          nvidia.com/gpu: 1
)");
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
    auto events = client_->List(kube::resources::Events(), "");
    if (events.ok()) {
      for (const auto& e : events->items) {
        out += "event: " + Str(e, "involvedObject", "name") + " " + Str(e, "", "reason") + ": " +
               Str(e, "", "message") + "\n";
      }
    }
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
  uint64_t observer_ = 0;
  std::unique_ptr<kube::Manager> manager_;
  std::thread runner_;
  std::mutex mu_;
  std::set<std::string> registered_;
  bool register_nodes_ = true;  // guarded by mu_
};

TEST_F(GpuProvisioning, PendingPodGetsTheCheapestFittingMachineAndIsScheduledOnIt) {
  CreateGpuPod("trainer");
  ASSERT_TRUE(Eventually([&] { return !NodeOf("trainer").empty(); }, 90s)) << Diagnose("trainer");
  auto claims = ListClaims();
  ASSERT_EQ(claims.size(), 1u);
  const bj::object& claim = claims[0];
  EXPECT_TRUE(kube::IsConditionTrue(claim, "Ready")) << bj::serialize(claim);
  for (const char* c : {"Launched", "Registered", "Initialized"}) {
    EXPECT_TRUE(kube::IsConditionTrue(claim, c)) << c;
  }
  // The cheapest RTX 4090 ($0.69), not the cheaper A10 the pod cannot use.
  EXPECT_EQ(Str(claim, "status", "provider"), "lambdalabs");
  EXPECT_EQ(Str(claim, "status", "gpuType"), "RTX4090");
  std::string region = Str(claim, "status", "region");
  EXPECT_TRUE(region == "us-west" || region == "us-east") << region;
  EXPECT_EQ(Str(claim, "status", "price"), "0.69");
  std::string node = NodeOf("trainer");
  EXPECT_EQ(Str(claim, "status", "nodeName"), node);
  EXPECT_EQ(Str(claim, "metadata.labels", kLabelNodePool), "ml-workload-pool");

  // The Node: the pool's taint and the offer's labels on it, the registration taint gone.
  auto n = client_->Get(kube::resources::Nodes(), "", node);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(Str(*n, "metadata.labels", kLabelGpuType), "RTX4090");
  EXPECT_EQ(Str(*n, "metadata.labels", kLabelProvider), "lambdalabs");
  EXPECT_EQ(Str(*n, "metadata.labels", kLabelNodePool), "ml-workload-pool");
  std::string taints = bj::serialize(jsonfield::ObjectAt(*n, "spec")->at("taints"));
  EXPECT_NE(taints.find("gpu-node"), std::string::npos) << taints;
  EXPECT_EQ(taints.find(kTaintUnregistered), std::string::npos) << taints;

  // At the provider: one machine, tagged with the claim, billed at $0.69.
  auto instances = sim_->market().List("");
  ASSERT_EQ(instances.size(), 1u);
  EXPECT_EQ(instances[0].price, 690000);
  EXPECT_EQ(instances[0].listing.id.rfind("gpu_1x_rtx4090@", 0), 0u) << instances[0].listing.id;
  EXPECT_EQ(instances[0].name, Str(claim, "metadata", "name"));

  // The pool's status shows the node and the cost.
  EXPECT_TRUE(Eventually([&] {
    auto p = client_->Get(GPUNodePools(), "default", "ml-workload-pool");
    return p.ok() && Str(*p, "status", "hourlyCost") == "0.69" &&
           jsonfield::IntField(*jsonfield::ObjectField(*p, "status"), "nodes") == 1;
  }));

  // Deleting the claim returns the machine and removes the Node.
  ASSERT_TRUE(client_->Delete(GPUNodeClaims(), "", Str(claim, "metadata", "name")).ok());
  EXPECT_TRUE(Eventually([&] { return ListClaims().empty(); }, 30s));
  EXPECT_EQ(RunningInstances(), 0);
  EXPECT_FALSE(client_->Get(kube::resources::Nodes(), "", node).ok());
}

// Giving machines back (issue 19's empty consolidation): with consolidateAfter 2s and a budget of
// one machine at a time, a machine whose pod finished and one whose pod was deleted are returned
// one after the other within consolidateAfter + 5 s, never two at once; a machine whose pod says
// karpenter.sh/do-not-disrupt is kept until that pod goes; then the pool costs nothing.
TEST_F(GpuProvisioning, EmptyMachinesAreReturnedWithinTheBudgetAndDoNotDisruptHolds) {
  auto pool = client_->Get(GPUNodePools(), "default", "ml-workload-pool");
  ASSERT_TRUE(pool.ok());
  (*pool)["spec"].as_object()["disruption"] =
      bj::object{{"consolidationPolicy", "WhenEmpty"},
                 {"consolidateAfter", "2s"},
                 {"budgets", bj::array{bj::object{{"nodes", "1"}}}}};
  ASSERT_TRUE(client_->Update(GPUNodePools(), "default", *pool).ok());
  auto DisruptedCount = [] {
    return kube::metrics::Registry::Default()
        .GetCounter("karpenter_nodeclaims_disrupted_total", "",
                    {{"nodepool", "default/ml-workload-pool"}, {"reason", "empty"}})
        .Value();
  };
  const double disrupted_before = DisruptedCount();
  for (const char* p : {"done", "deleted", "precious"}) CreateGpuPod(p);
  auto precious = client_->Get(kube::resources::Pods(), "default", "precious");
  ASSERT_TRUE(precious.ok());
  ASSERT_TRUE(client_
                  ->Patch(kube::resources::Pods(), "default", "precious", kube::PatchType::kMerge,
                          R"({"metadata":{"annotations":{"karpenter.sh/do-not-disrupt":"true"}}})")
                  .ok());
  ASSERT_TRUE(Eventually(
      [&] {
        return !NodeOf("done").empty() && !NodeOf("deleted").empty() && !NodeOf("precious").empty();
      },
      90s))
      << Diagnose("done");
  ASSERT_EQ(ListClaims().size(), 3u);
  const std::string kept = NodeOf("precious");

  // Budget watch: how many of the pool's claims are being deleted at once, sampled throughout.
  std::atomic<int> most_at_once{0};
  std::atomic<bool> watching{true};
  std::thread watcher([&] {
    while (watching) {
      int deleting = 0;
      for (const auto& c : ListClaims()) deleting += kube::IsDeleting(c) ? 1 : 0;
      most_at_once = std::max(most_at_once.load(), deleting);
      std::this_thread::sleep_for(20ms);
    }
  });
  // Two pods finish (a Job's pod: phase Succeeded) — "precious" with its do-not-disrupt still on
  // the node — and one is deleted: all three nodes are empty from here on.
  auto t0 = std::chrono::steady_clock::now();
  for (const char* finished : {"done", "precious"}) {
    ASSERT_TRUE(client_
                    ->Patch(kube::resources::Pods(), "default", finished, kube::PatchType::kMerge,
                            R"({"status":{"phase":"Succeeded"}})", {.subresource = "status"})
                    .ok());
  }
  kube::DeleteOptions now;
  now.grace_period_seconds = 0;
  ASSERT_TRUE(client_->Delete(kube::resources::Pods(), "default", "deleted", now).ok());
  bool returned = Eventually([&] { return ListClaims().size() == 1; }, 2s + 5s + 5s);
  auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  watching = false;
  watcher.join();
  ASSERT_TRUE(returned) << Diagnose("done");
  std::printf(
      "two empty machines returned %lld ms after their pods ended (consolidateAfter 2 s, "
      "budget 1)\n",
      static_cast<long long>(took.count()));
  EXPECT_LE(took, 2s + 5s + 2s);  // each within consolidateAfter + 5 s, one after the other
  EXPECT_LE(most_at_once.load(), 1) << "the budget allows one at a time";
  EXPECT_EQ(Str(ListClaims()[0], "status", "nodeName"), kept);
  EXPECT_EQ(RunningInstances(), 1);

  // The kept machine has been empty as long as the two returned ones, past consolidateAfter:
  // a reconcile of the pool now (woken by touching the pool, counted by the controller's
  // reconcile metric) still keeps it, because of the do-not-disrupt pod...
  auto reconciles = [] {
    return kube::metrics::Registry::Default()
        .GetCounter("controller_runtime_reconcile_total", "",
                    {{"controller", "gpu-disruption"}, {"result", "success"}})
        .Value();
  };
  const double before = reconciles();
  ASSERT_TRUE(client_
                  ->Patch(GPUNodePools(), "default", "ml-workload-pool", kube::PatchType::kMerge,
                          R"({"metadata":{"annotations":{"test/poke":"1"}}})")
                  .ok());
  ASSERT_TRUE(Eventually([&] { return reconciles() > before; }));
  ASSERT_EQ(ListClaims().size(), 1u);
  // ...and goes once the pod does; the pool then costs nothing.
  ASSERT_TRUE(client_->Delete(kube::resources::Pods(), "default", "precious", now).ok());
  EXPECT_TRUE(Eventually([&] { return ListClaims().empty(); }, 2s + 5s + 5s)) << Diagnose("");
  EXPECT_EQ(RunningInstances(), 0);
  EXPECT_TRUE(Eventually([&] {
    auto p = client_->Get(GPUNodePools(), "default", "ml-workload-pool");
    return p.ok() && jsonfield::IntField(*jsonfield::ObjectField(*p, "status"), "nodes") == 0;
  }));
  // Counted as Karpenter counts it.
  EXPECT_EQ(DisruptedCount() - disrupted_before, 3);
  // One Disrupting event per returned machine, on its claim.
  EXPECT_TRUE(Eventually([&] {
    auto events = client_->List(kube::resources::Events(), "");
    int disrupting = 0;
    if (events.ok())
      for (const auto& e : events->items) disrupting += Str(e, "", "reason") == "Disrupting";
    return disrupting == 3;
  })) << Diagnose("");
}

// A machine that disappears under its claim (a spot machine reclaimed, or deleted in the
// provider's console): the claim is released with a MachineGone warning, its Node goes, and the
// pod, re-created as its controller would after the pod GC, gets a new machine.
TEST_F(GpuProvisioning, MachineGoneUnderItsClaimReleasesTheClaimAndThePodGetsANewOne) {
  CreateGpuPod("survivor");
  ASSERT_TRUE(Eventually([&] { return !NodeOf("survivor").empty(); }, 90s)) << Diagnose("survivor");
  const std::string first_node = NodeOf("survivor");
  auto instances = sim_->market().List("");
  ASSERT_EQ(instances.size(), 1u);
  ASSERT_TRUE(sim_->market().Terminate(instances[0].id, instances[0].owner));
  // GC pass every 1 s, 3 s grace.
  ASSERT_TRUE(Eventually([&] { return ListClaims().empty(); }, 30s)) << Diagnose("survivor");
  EXPECT_TRUE(Eventually(
      [&] { return !client_->Get(kube::resources::Nodes(), "", first_node).ok(); }, 30s));
  EXPECT_TRUE(Eventually([&] {
    auto events = client_->List(kube::resources::Events(), "");
    if (!events.ok()) return false;
    for (const auto& e : events->items)
      if (Str(e, "", "reason") == "MachineGone" &&
          Str(e, "", "message").find(instances[0].id) != std::string::npos)
        return true;
    return false;
  })) << Diagnose("survivor");
  kube::DeleteOptions now;
  now.grace_period_seconds = 0;
  ASSERT_TRUE(client_->Delete(kube::resources::Pods(), "default", "survivor", now).ok());
  ASSERT_TRUE(Eventually(
      [&] { return !client_->Get(kube::resources::Pods(), "default", "survivor").ok(); }));
  CreateGpuPod("survivor");
  ASSERT_TRUE(Eventually([&] { return !NodeOf("survivor").empty(); }, 90s)) << Diagnose("survivor");
  EXPECT_NE(NodeOf("survivor"), first_node);
  EXPECT_EQ(RunningInstances(), 1);
}

TEST_F(GpuProvisioning, PoolLimitHoldsPodsBackWithACondition) {
  auto pool = client_->Get(GPUNodePools(), "default", "ml-workload-pool");
  ASSERT_TRUE(pool.ok());
  (*pool)["spec"].as_object()["limits"] = bj::object{{"maxNodes", 10}};
  ASSERT_TRUE(client_->Update(GPUNodePools(), "default", *pool).ok());
  for (int i = 0; i < 12; ++i) CreateGpuPod("worker-" + std::to_string(i));
  ASSERT_TRUE(Eventually(
      [&] {
        int bound = 0;
        for (int i = 0; i < 12; ++i) bound += !NodeOf("worker-" + std::to_string(i)).empty();
        return bound == 10;
      },
      120s));
  EXPECT_EQ(ListClaims().size(), 10u);
  EXPECT_EQ(RunningInstances(), 10);
  ASSERT_TRUE(Eventually([&] {
    auto p = client_->Get(GPUNodePools(), "default", "ml-workload-pool");
    auto c = p.ok() ? kube::FindCondition(*p, "LimitsReached") : std::nullopt;
    return c && c->status == "True";
  })) << bj::serialize(*client_->Get(GPUNodePools(), "default", "ml-workload-pool"));
  auto p = client_->Get(GPUNodePools(), "default", "ml-workload-pool");
  EXPECT_NE(kube::FindCondition(*p, "LimitsReached")->message.find("node limit"), std::string::npos)
      << kube::FindCondition(*p, "LimitsReached")->message;
  // Still ten after more batches (the pool's status is refreshed every second here): two wait.
  EXPECT_FALSE(Eventually([&] { return ListClaims().size() > 10; }, 3s));
}

TEST_F(GpuProvisioning, ClassHourlyCostHoldsPodsBackWithACondition) {
  // $1.00/h for the whole class: one $0.69 machine fits, a second does not.
  auto cls = client_->Get(GPUNodeClasses(), "", "standard-gpu-class");
  ASSERT_TRUE(cls.ok());
  (*cls)["spec"].as_object()["limits"].as_object()["maxHourlyCost"] = "1.0";
  ASSERT_TRUE(client_->Update(GPUNodeClasses(), "", *cls).ok());
  CreateGpuPod("cost-0");
  ASSERT_TRUE(Eventually([&] { return !NodeOf("cost-0").empty(); }, 90s)) << Diagnose("cost-0");
  CreateGpuPod("cost-1");
  ASSERT_TRUE(Eventually([&] {
    auto p = client_->Get(GPUNodePools(), "default", "ml-workload-pool");
    auto c = p.ok() ? kube::FindCondition(*p, "LimitsReached") : std::nullopt;
    return c && c->status == "True";
  })) << Diagnose("cost-1");
  auto p = client_->Get(GPUNodePools(), "default", "ml-workload-pool");
  std::string msg = kube::FindCondition(*p, "LimitsReached")->message;
  EXPECT_NE(msg.find("GPUNodeClass standard-gpu-class has reached its hourly cost limit"),
            std::string::npos)
      << msg;
  EXPECT_EQ(ListClaims().size(), 1u);
  EXPECT_TRUE(NodeOf("cost-1").empty());
  EXPECT_TRUE(Eventually([&] {
    auto c = client_->Get(GPUNodeClasses(), "", "standard-gpu-class");
    return c.ok() && Str(*c, "status", "hourlyCost") == "0.69";
  }));
}

TEST_F(GpuProvisioning, MachineThatNeverRegistersIsReturnedAfterTheTimeout) {
  {
    std::lock_guard lock(mu_);
    register_nodes_ = false;  // the machine runs but its payload never joins it
  }
  CreateGpuPod("stranded");
  std::string claim;
  ASSERT_TRUE(Eventually(
      [&] {
        auto l = ListClaims();
        if (l.size() != 1 || !kube::IsConditionTrue(l[0], "Launched")) return false;
        claim = Str(l[0], "metadata", "name");
        return true;
      },
      60s))
      << Diagnose("stranded");
  std::string instance = Str(ListClaims()[0], "status", "instanceID");
  // 15 s after the launch the claim goes with the reason, and its machine is returned.
  ASSERT_TRUE(Eventually(
      [&] {
        auto events = client_->List(kube::resources::Events(), "");
        if (!events.ok()) return false;
        for (const auto& e : events->items) {
          if (Str(e, "involvedObject", "name") == claim &&
              Str(e, "", "reason") == "RegistrationTimeout") {
            return true;
          }
        }
        return false;
      },
      60s))
      << Diagnose("stranded");
  ASSERT_TRUE(Eventually(
      [&] {
        auto c = client_->Get(GPUNodeClaims(), "", claim);
        auto i = sim_->market().Get(instance);
        return !c.ok() && i && i->state == market::State::kTerminated;
      },
      30s))
      << Diagnose("stranded");
  kube::DeleteOptions d;
  d.grace_period_seconds = 0;
  ASSERT_TRUE(client_->Delete(kube::resources::Pods(), "default", "stranded", d).ok());
}

TEST_F(GpuProvisioning, GarbageCollectorReturnsOurMachinesThatNoClaimOwns) {
  ProviderConfig c;
  c.name = kLambda;
  c.endpoint = sim_->api_endpoint();
  c.credentials = StaticCredential("sim-key");
  c.requests_per_second = 50;
  c.burst = 50;
  auto lambda = NewProvider(c);
  ASSERT_TRUE(lambda.ok());
  auto offers = (*lambda)->ListOffers();
  ASSERT_TRUE(offers.ok() && !offers->empty());
  auto launch = [&](const std::string& name, const std::string& cluster) {
    LaunchRequest req;
    req.offer = &offers->front();
    req.name = name;
    req.claim_uid = "00000000-0000-0000-0000-00000000dead";
    req.tags = {{kTagCluster, cluster}, {kTagClaimUid, req.claim_uid}};
    req.payload.ssh_key_names = {"sim-ssh-key"};
    return (*lambda)->Create(req);
  };
  // One tagged with this cluster and a claim that does not exist; one of another cluster.
  auto ours = launch("leaked", "e2e-cluster");
  ASSERT_TRUE(ours.ok()) << ours.error().ToString();
  auto theirs = launch("not-ours", "other-cluster");
  ASSERT_TRUE(theirs.ok()) << theirs.error().ToString();
  ASSERT_TRUE(Eventually(
      [&] {
        auto i = sim_->market().Get(ours->id);
        return i &&
               (i->state == market::State::kTerminated || i->state == market::State::kStopping);
      },
      30s));
  auto other = sim_->market().Get(theirs->id);
  ASSERT_TRUE(other);
  EXPECT_NE(other->state, market::State::kTerminated) << "another cluster's machine was collected";
  EXPECT_NE(other->state, market::State::kStopping) << "another cluster's machine was collected";
  ASSERT_TRUE((*lambda)->Delete(theirs->id).ok());
}

TEST_F(GpuProvisioning, CapacityFailureMovesToTheNextOfferAndSwallowedCreateIsNotDoubled) {
  // The first launch fails for capacity: that offer (one region) is left out and the claim is
  // replanned onto the next one (the other region).
  auto ctl = net::HttpClient::Create({.base_url = sim_->control_endpoint()});
  ASSERT_TRUE(ctl.ok());
  auto fault = (*ctl)->Do(
      {.method = "POST",
       .target = "/control/faults",
       .body = bj::serialize(bj::object{{"method", kLaunch}, {"kind", "capacity"}, {"count", 1}})});
  ASSERT_TRUE(fault.ok() && fault->status == 200);
  CreateGpuPod("failover");
  ASSERT_TRUE(Eventually([&] { return !NodeOf("failover").empty(); }, 90s)) << Diagnose("failover");
  auto claims = ListClaims();
  ASSERT_EQ(claims.size(), 1u);
  EXPECT_EQ(Str(claims[0], "status", "price"), "0.69");
  // Two launches were sent: the refused one and the one in the other region.
  EXPECT_EQ(sim_->market().Counters()[kLaunch], 2);
  EXPECT_EQ(RunningInstances(), 1);

  // A create whose answer is lost: the machine is found by its tag, never created twice.
  auto swallow = (*ctl)->Do(
      {.method = "POST",
       .target = "/control/faults",
       .body = bj::serialize(bj::object{{"method", kLaunch}, {"kind", "swallow"}, {"count", 1}})});
  ASSERT_TRUE(swallow.ok() && swallow->status == 200);
  CreateGpuPod("swallowed");
  ASSERT_TRUE(Eventually([&] { return !NodeOf("swallowed").empty(); }, 90s))
      << Diagnose("swallowed");
  EXPECT_EQ(ListClaims().size(), 2u);
  EXPECT_EQ(RunningInstances(), 2);
  std::map<std::string, int> per_claim;
  for (const auto& i : sim_->market().List("")) ++per_claim[i.name];
  for (const auto& [claim, n] : per_claim) EXPECT_EQ(n, 1) << claim;
}

}  // namespace
}  // namespace hyperslice::gpu
