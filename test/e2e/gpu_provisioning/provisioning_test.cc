// Seed 002's GPUNodeClass and GPUNodePool, unchanged, on a real kube-apiserver and kube-scheduler
// (harness.h): a pod asking for nvidia.com/gpu with the seed's toleration and a
// tgp.io/gpu-type=RTX4090 selector becomes a GPUNodeClaim, the cheapest fitting offer is launched
// on the simulator, a stand-in machine registers a Node with the claim's providerID (with the
// registration taint), the claim controller syncs the pool's labels and taints and removes that
// taint, the claim turns Ready and the scheduler binds the pod to the Node. Then: limits hold
// pods back with a condition; a capacity failure moves the claim to the next offer; a create
// whose answer is swallowed still yields exactly one machine; deleting a claim returns its
// machine (checked from the simulator's own state).
#include "test/e2e/gpu_provisioning/harness.h"

namespace hyperslice::gpu::e2e {
namespace {

constexpr char kLaunch[] = "POST /api/v1/instance-operations/launch";

class GpuProvisioning : public GpuHarness {
 protected:
  static void SetUpTestSuite() { testenv::ConfigureSchedulingCluster(); }
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
  MaxSampler deleting([this] { return DeletingClaims(); }, 20ms);
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
  const int most_at_once = deleting.Stop();
  ASSERT_TRUE(returned) << Diagnose("done");
  std::printf(
      "two empty machines returned %lld ms after their pods ended (consolidateAfter 2 s, "
      "budget 1)\n",
      static_cast<long long>(took.count()));
  EXPECT_LE(took, 2s + 5s + 2s);  // each within consolidateAfter + 5 s, one after the other
  EXPECT_LE(most_at_once, 1) << "the budget allows one at a time";
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
// provider's console): the claim is released with a MachineGone warning, its Node goes with the
// pod bound to it, and the pod, re-created as its controller would, gets a new machine.
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
  // The pod bound to the gone machine's Node is deleted with it (no kubelet will confirm its
  // end); its controller would re-create it.
  ASSERT_TRUE(Eventually([&] {
    return !client_->Get(kube::resources::Pods(), "default", "survivor").ok();
  })) << Diagnose("survivor");
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
  // Still ten after more batches (the pool's status is refreshed every second here): two wait,
  // and the condition says so all along. The scheduler binds pods in its own order, often the
  // two the limit held back onto machines rented for others: those others wait on the limit now.
  EXPECT_FALSE(Eventually(
      [&] {
        if (ListClaims().size() > 10) return true;
        auto now = client_->Get(GPUNodePools(), "default", "ml-workload-pool");
        return now.ok() && !kube::IsConditionTrue(*now, "LimitsReached");
      },
      3s))
      << bj::serialize(*client_->Get(GPUNodePools(), "default", "ml-workload-pool"));
}

// A machine rented for one pod can go to another (the scheduler does not know nominations): here
// a pod bound to its Node directly. The nominated pod then needs a machine the pool's limit does
// not allow, and the condition says so at once, not after the nomination's grace (30 s).
TEST_F(GpuProvisioning, PodWhoseMachineWentToAnotherIsHeldBackByTheLimit) {
  auto pool = client_->Get(GPUNodePools(), "default", "ml-workload-pool");
  ASSERT_TRUE(pool.ok());
  (*pool)["spec"].as_object()["limits"] = bj::object{{"maxNodes", 1}};
  ASSERT_TRUE(client_->Update(GPUNodePools(), "default", *pool).ok());
  {
    std::lock_guard lock(mu_);
    register_nodes_ = false;  // this test registers the machine's Node itself, below
  }
  CreateGpuPod("nominated");
  std::optional<market::Instance> machine;
  ASSERT_TRUE(Eventually(
      [&] {
        auto l = ListClaims();
        if (l.size() != 1) return false;
        std::string id = Str(l[0], "status", "instanceID");
        machine = id.empty() ? std::nullopt : sim_->market().Get(id);
        return machine && machine->state == market::State::kRunning;
      },
      60s))
      << Diagnose("nominated");
  // Another pod takes the machine's one GPU before its Node is there to schedule onto.
  bj::object squatter = Yaml(std::string(R"(
apiVersion: v1
kind: Pod
metadata:
  name: squatter
  namespace: default
spec:)") + GpuPodSpec(2));
  squatter["spec"].as_object()["nodeName"] = NodeName(*machine);
  ASSERT_TRUE(client_->Create(kube::resources::Pods(), "default", squatter).ok());
  RegisterNode(*machine);
  ASSERT_TRUE(Eventually([&] {
    auto l = ListClaims();
    return l.size() == 1 && kube::IsConditionTrue(l[0], "Ready");
  })) << Diagnose("nominated");

  auto held = [&] {
    auto p = client_->Get(GPUNodePools(), "default", "ml-workload-pool");
    auto c = p.ok() ? kube::FindCondition(*p, "LimitsReached") : std::nullopt;
    return c && c->status == "True" &&
           c->message.find(
               "default/nominated: pool "
               "default/ml-workload-pool has reached its "
               "node limit") != std::string::npos;
  };
  EXPECT_TRUE(Eventually(held, 10s))
      << bj::serialize(*client_->Get(GPUNodePools(), "default", "ml-workload-pool"));
  EXPECT_FALSE(Eventually([&] { return !held(); }, 3s))
      << bj::serialize(*client_->Get(GPUNodePools(), "default", "ml-workload-pool"));
  EXPECT_TRUE(NodeOf("nominated").empty());
  EXPECT_EQ(ListClaims().size(), 1u);
}

// The other side of the test above: when the pod that took a machine leaves its own launching
// machine free, the pod it displaced waits for that one, and nothing more is rented.
TEST_F(GpuProvisioning, PodsThatSwapMachinesRentNoMore) {
  {
    std::lock_guard lock(mu_);
    register_nodes_ = false;  // this test registers the Nodes itself, below
  }
  CreateGpuPod("a");
  CreateGpuPod("b");
  std::map<std::string, market::Instance> machine_of;  // pod name -> the machine rented for it
  ASSERT_TRUE(Eventually(
      [&] {
        auto l = ListClaims();
        if (l.size() != 2) return false;
        machine_of.clear();
        for (const auto& c : l) {
          auto i = Str(c, "status", "instanceID");
          auto m = i.empty() ? std::nullopt : sim_->market().Get(i);
          if (!m || m->state != market::State::kRunning) return false;
          std::string nominated = bj::serialize(c.at("metadata").at("annotations"));
          for (const std::string name : {"a", "b"}) {
            auto pod = client_->Get(kube::resources::Pods(), "default", name);
            if (pod.ok() && nominated.find(Str(*pod, "metadata", "uid")) != std::string::npos) {
              machine_of.emplace(name, *m);
            }
          }
        }
        return machine_of.size() == 2;
      },
      60s))
      << Diagnose("a");
  // As the scheduler may: a onto b's machine.
  std::string b_node = NodeName(machine_of.at("b"));
  auto bound = client_->Raw(
      "POST", "/api/v1/namespaces/default/pods/a/binding",
      bj::serialize(bj::object{{"apiVersion", "v1"},
                               {"kind", "Binding"},
                               {"metadata", bj::object{{"name", "a"}}},
                               {"target", bj::object{{"kind", "Node"}, {"name", b_node}}}}));
  ASSERT_TRUE(bound.ok() && bound->status / 100 == 2)
      << (bound.ok() ? bound->body : bound.error().ToString());
  RegisterNode(machine_of.at("b"));
  ASSERT_TRUE(Eventually([&] {
    for (const auto& c : ListClaims()) {
      if (Str(c, "status", "nodeName") == b_node) return kube::IsConditionTrue(c, "Ready");
    }
    return false;
  })) << Diagnose("b");
  // b waits for a's machine, still launching: no third claim over more batches.
  EXPECT_FALSE(Eventually([&] { return ListClaims().size() > 2; }, 3s));
  RegisterNode(machine_of.at("a"));
  EXPECT_TRUE(Eventually([&] { return NodeOf("b") == NodeName(machine_of.at("a")); }, 30s))
      << Diagnose("b");
  EXPECT_EQ(ListClaims().size(), 2u);
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
}  // namespace hyperslice::gpu::e2e
