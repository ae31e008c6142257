// Giving machines back (issue "Ephemeral GPUs 4/4"), on a real kube-apiserver, kube-scheduler and
// kube-controller-manager (its Job, Deployment, ReplicaSet and disruption — PodDisruptionBudget —
// controllers; not its node lifecycle controller, since the stand-in machines send no
// heartbeats), seed 002's class and pool, the Lambda and RunPod simulators and stand-in machines
// whose "kubelet" runs the pods bound to them and honours their grace period (harness.h):
//  - a Job's pod completes → its machine is returned within consolidateAfter + 5 s and the pool
//    costs nothing;
//  - a PodDisruptionBudget that allows no eviction blocks the drain of a machine being returned,
//    with an Event that names it; the machine is returned once the budget allows, after the pod's
//    own grace period;
//  - deleting a Node returns its machine gracefully (drained first);
//  - an expired machine that runs a Deployment's pod is replaced first: the replacement is Ready
//    before the pod moves, and the pool never has fewer Ready machines than its pods need;
//  - a budget of 1 with 5 idle machines: never more than one being returned at once;
//  - a spot machine the provider reclaims: its Job's pod gets a new machine.
#include "src/gpu/drain.h"
#include "test/e2e/gpu_provisioning/harness.h"

namespace hyperslice::gpu::e2e {
namespace {

const kube::Resource& Pdbs() {
  static const kube::Resource r{"policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget",
                                true};
  return r;
}
const kube::Resource& Deployments() {
  static const kube::Resource r{"apps", "v1", "deployments", "Deployment", true};
  return r;
}

class GpuDisruption : public GpuHarness {
 protected:
  static void SetUpTestSuite() {
    localcluster::Options o;
    o.scheduler = true;
    o.controller_manager = true;
    // The stand-in machines renew no Lease: the node lifecycle controller would mark them
    // unreachable and evict their pods.
    o.extra_controller_manager_flags = {"--controllers=*,-node-lifecycle-controller"};
    testenv::ConfigureCluster(o);
  }

  void SetUp() override {
    GpuHarness::SetUp();
    if (HasFatalFailure()) return;
    // kube-controller-manager creates namespace default's ServiceAccount shortly after it starts;
    // the ServiceAccount admission plugin refuses pods until then (the first test of the binary
    // would race it).
    ASSERT_TRUE(Eventually(
        [&] {
          auto sa = client_->Raw("GET", "/api/v1/namespaces/default/serviceaccounts/default");
          return sa.ok() && sa->status == 200;
        },
        60s));
  }

  void SetPoolDisruption(bj::object disruption) {
    ASSERT_TRUE(Eventually([&] {
      auto pool = client_->Get(GPUNodePools(), "default", "ml-workload-pool");
      if (!pool.ok()) return false;
      (*pool)["spec"].as_object()["disruption"] = disruption;
      return client_->Update(GPUNodePools(), "default", *pool).ok();
    }));
  }

  void CreateJob(const std::string& name) {
    bj::object job = Yaml(std::string(R"(
apiVersion: batch/v1
kind: Job
metadata:
  name: NAME
  namespace: default
spec:
  backoffLimit: 6
  template:
    spec:
      restartPolicy: Never)") +
                          GpuPodSpec(6));
    job["metadata"].as_object()["name"] = name;
    auto created = client_->Create(kube::resources::Jobs(), "default", job);
    ASSERT_TRUE(created.ok()) << created.error().ToString();
  }

  // The running pods of a Job/Deployment (by the label its controller sets), not being deleted.
  std::vector<bj::object> PodsWith(const std::string& selector) {
    kube::ListOptions lo;
    lo.label_selector = selector;
    auto l = client_->List(kube::resources::Pods(), "default", lo);
    std::vector<bj::object> out;
    if (!l.ok()) return out;
    for (const auto& p : l->items)
      if (!kube::IsDeleting(p)) out.push_back(p);
    return out;
  }

  // The pod's containers exit 0: what the machine's kubelet reports when a Job's work is done
  // (once it reported the pod Running).
  void Finish(const std::string& pod) {
    ASSERT_TRUE(Eventually([&] {
      auto p = client_->Get(kube::resources::Pods(), "default", pod);
      return p.ok() && Str(*p, "status", "phase") == "Running";
    })) << Diagnose(pod);
    ASSERT_TRUE(client_
                    ->Patch(kube::resources::Pods(), "default", pod, kube::PatchType::kMerge,
                            R"({"status":{"phase":"Succeeded","containerStatuses":[{"name":"cuda",
                                "image":"nvidia/cuda:12.4.0-base-ubuntu22.04","imageID":"",
                                "ready":false,"restartCount":0,"state":{"terminated":{
                                "exitCode":0,"reason":"Completed"}}}]}})",
                            {.subresource = "status"})
                    .ok());
  }

  bool HasEvent(const std::string& reason, const std::string& containing) {
    auto events = client_->List(kube::resources::Events(), "");
    if (!events.ok()) return false;
    for (const auto& e : events->items)
      if (Str(e, "", "reason") == reason &&
          Str(e, "", "message").find(containing) != std::string::npos)
        return true;
    return false;
  }

  std::string PoolHourlyCost() {
    auto p = client_->Get(GPUNodePools(), "default", "ml-workload-pool");
    return p.ok() ? Str(*p, "status", "hourlyCost") : std::string("?");
  }

  bool NodeHasTaint(const std::string& node, const std::string& key) {
    auto n = client_->Get(kube::resources::Nodes(), "", node);
    if (!n.ok()) return false;
    for (const auto& t :
         kube::TaintsFrom(jsonfield::ObjectField(*n, "spec")
                              ? jsonfield::ObjectField(*n, "spec")->if_contains("taints")
                              : nullptr))
      if (t.key == key) return true;
    return false;
  }

  int RunningEverywhere() {
    int n = RunningInstances();
    for (const auto& i : runpod_->market().List(""))
      n += i.state != market::State::kTerminated && i.state != market::State::kStopping;
    return n;
  }
};

// A Job's pod completes: its machine goes within consolidateAfter + 5 s and the pool's cost is 0.
TEST_F(GpuDisruption, CompletedJobsMachineIsReturnedAndThePoolCostsNothing) {
  SetPoolDisruption(bj::object{{"consolidationPolicy", "WhenEmpty"}, {"consolidateAfter", "3s"}});
  CreateJob("train");
  std::string pod;
  ASSERT_TRUE(Eventually(
      [&] {
        auto pods = PodsWith("job-name=train");
        if (pods.size() != 1 || Str(pods[0], "status", "phase") != "Running") return false;
        pod = Str(pods[0], "metadata", "name");
        return true;
      },
      90s))
      << Diagnose("");
  EXPECT_NE(PoolHourlyCost(), FormatUsd(0));
  auto t0 = std::chrono::steady_clock::now();
  Finish(pod);
  ASSERT_TRUE(Eventually([&] { return ListClaims().empty(); }, 3s + 5s)) << Diagnose(pod);
  auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  std::printf("machine returned %lld ms after its Job's pod completed (consolidateAfter 3 s)\n",
              static_cast<long long>(took.count()));
  EXPECT_TRUE(Eventually([&] { return RunningEverywhere() == 0; }));
  EXPECT_TRUE(Eventually([&] { return PoolHourlyCost() == FormatUsd(0); })) << PoolHourlyCost();
  auto job = client_->Get(kube::resources::Jobs(), "default", "train");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(jsonfield::IntField(*jsonfield::ObjectField(*job, "status"), "succeeded"), 1);
  (void)client_->Delete(kube::resources::Jobs(), "default", "train",
                        kube::DeleteOptions{.propagation_policy = "Background"});
}

// Returning a machine drains it through the Eviction API: a PodDisruptionBudget that allows no
// disruption holds the drain (an Event names the budget) and the machine runs on; once the
// budget goes the pod is evicted, keeps its 3 s grace period, and only then is the machine
// returned.
TEST_F(GpuDisruption, PodDisruptionBudgetHoldsTheDrainAndGracePeriodIsKept) {
  bj::object pod = Yaml(std::string(R"(
apiVersion: v1
kind: Pod
metadata:
  name: guarded
  namespace: default
  labels:
    app: guarded
  annotations:
    e2e.hyperslice.dev/ignores-sigterm: "true"
spec:
  terminationGracePeriodSeconds: 3)") +
                        GpuPodSpec(2));
  ASSERT_TRUE(client_->Create(kube::resources::Pods(), "default", pod).ok());
  ASSERT_TRUE(client_
                  ->Create(Pdbs(), "default", Yaml(R"(
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: keep-guarded
  namespace: default
spec:
  minAvailable: 1
  selector:
    matchLabels:
      app: guarded
)"))
                  .ok());
  ASSERT_TRUE(Eventually(
      [&] {
        auto p = client_->Get(kube::resources::Pods(), "default", "guarded");
        return p.ok() && Str(*p, "status", "phase") == "Running";
      },
      90s))
      << Diagnose("guarded");
  // The disruption controller has seen the pod healthy: no disruption allowed.
  ASSERT_TRUE(Eventually([&] {
    auto pdb = client_->Get(Pdbs(), "default", "keep-guarded");
    const bj::object* st = pdb.ok() ? jsonfield::ObjectField(*pdb, "status") : nullptr;
    return st && jsonfield::IntField(*st, "currentHealthy") == 1 &&
           jsonfield::IntField(*st, "disruptionsAllowed") == 0;
  })) << Diagnose("guarded");
  const std::string node = NodeOf("guarded");
  auto claims = ListClaims();
  ASSERT_EQ(claims.size(), 1u);
  const std::string claim = Str(claims[0], "metadata", "name");
  // Manual disruption: the claim is deleted.
  ASSERT_TRUE(client_->Delete(GPUNodeClaims(), "", claim).ok());
  ASSERT_TRUE(Eventually([&] { return HasEvent("DrainBlocked", "keep-guarded"); }))
      << Diagnose("guarded");
  EXPECT_TRUE(NodeHasTaint(node, kTaintDisrupted));
  // Held through further drain steps (each a claim reconcile requeued after 1 s, counted by the
  // controller's metric): the claim, the machine and the pod stay.
  auto drain_steps = [] {
    return kube::metrics::Registry::Default()
        .GetCounter("controller_runtime_reconcile_total", "",
                    {{"controller", "gpunodeclaim"}, {"result", "requeue_after"}})
        .Value();
  };
  const double steps_before = drain_steps();
  ASSERT_TRUE(Eventually([&] { return drain_steps() >= steps_before + 2; }, 30s));
  EXPECT_EQ(ListClaims().size(), 1u);
  EXPECT_EQ(RunningEverywhere(), 1);
  auto p = client_->Get(kube::resources::Pods(), "default", "guarded");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(kube::IsDeleting(*p));
  // The budget goes: the pod is evicted with its grace period, then the machine is returned. The
  // delete reaches the provider no sooner than 2 s after the PDB went (the eviction comes later
  // still; its 3 s grace is written to the second, so at least 2 s remain): measured on the
  // simulator's own clock when it received the delete, not by when this test polled.
  const auto pdb_deleted = std::chrono::steady_clock::now();
  ASSERT_TRUE(client_->Delete(Pdbs(), "default", "keep-guarded").ok());
  ASSERT_TRUE(Eventually([&] {
    auto g = client_->Get(kube::resources::Pods(), "default", "guarded");
    return !g.ok() || kube::IsDeleting(*g);
  })) << Diagnose("guarded");
  ASSERT_TRUE(Eventually([&] { return RunningEverywhere() == 0; }, 30s)) << Diagnose("guarded");
  auto instances = sim_->market().List("");
  ASSERT_EQ(instances.size(), 1u);
  const auto delete_received =
      instances[0].terminated_at - sim_->market().options().terminate_delay;
  auto returned_after =
      std::chrono::duration_cast<std::chrono::milliseconds>(delete_received - pdb_deleted);
  std::printf("machine deleted at the provider %lld ms after the PDB went (pod grace period 3 s)\n",
              static_cast<long long>(returned_after.count()));
  EXPECT_GE(returned_after, 2s) << "the machine went before the pod's grace period ran out";
  EXPECT_TRUE(Eventually([&] { return ListClaims().empty(); })) << Diagnose("guarded");
  EXPECT_TRUE(Eventually([&] { return !client_->Get(kube::resources::Nodes(), "", node).ok(); }));
}

// kubectl delete node: the Node waits on our finalizer while its claim drains it and returns the
// machine; then it goes.
TEST_F(GpuDisruption, DeletingANodeReturnsItsMachineGracefully) {
  CreateGpuPod("tenant");
  ASSERT_TRUE(Eventually([&] { return !NodeOf("tenant").empty(); }, 90s)) << Diagnose("tenant");
  const std::string node = NodeOf("tenant");
  ASSERT_TRUE(client_->Delete(kube::resources::Nodes(), "", node).ok());
  // Drained (the pod evicted and gone), machine returned, claim and Node gone.
  EXPECT_TRUE(Eventually(
      [&] { return !client_->Get(kube::resources::Pods(), "default", "tenant").ok(); }, 30s))
      << Diagnose("tenant");
  EXPECT_TRUE(Eventually([&] { return RunningEverywhere() == 0; }, 30s));
  EXPECT_TRUE(Eventually([&] { return ListClaims().empty(); }, 30s)) << Diagnose("tenant");
  EXPECT_TRUE(Eventually([&] { return !client_->Get(kube::resources::Nodes(), "", node).ok(); }));
  EXPECT_TRUE(HasEvent("NodeDeleted", node));
}

// expireAfter with a Deployment's pod on the machine: a replacement is launched and Ready before
// the old machine is drained; the pod moves to it; at no time after the first machine was Ready
// is there no Ready machine for the pod.
TEST_F(GpuDisruption, ExpiredMachineIsReplacedBeforeItsPodMoves) {
  bj::object deployment = Yaml(std::string(R"(
apiVersion: apps/v1
kind: Deployment
metadata:
  name: serve
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels:
      app: serve
  template:
    metadata:
      labels:
        app: serve
    spec:
      terminationGracePeriodSeconds: 1)") +
                               GpuPodSpec(6));
  ASSERT_TRUE(client_->Create(Deployments(), "default", deployment).ok());
  ASSERT_TRUE(Eventually(
      [&] {
        auto pods = PodsWith("app=serve");
        return pods.size() == 1 && Str(pods[0], "status", "phase") == "Running";
      },
      90s))
      << Diagnose("");
  const std::string first_node = Str(PodsWith("app=serve")[0], "spec", "nodeName");
  const std::string first_claim = Str(ListClaims()[0], "metadata", "name");
  // Watch: the number of Ready claims never drops to 0 from here on.
  std::atomic<int> fewest_ready{1};
  std::atomic<bool> watching{true};
  std::thread watcher([&] {
    while (watching) {
      int ready = 0;
      for (const auto& c : ListClaims())
        ready += !kube::IsDeleting(c) && kube::IsConditionTrue(c, "Ready") ? 1 : 0;
      fewest_ready = std::min(fewest_ready.load(), ready);
      std::this_thread::sleep_for(20ms);
    }
  });
  // Expire it now (it is older than 1 s); consolidation off, so only expiry acts.
  SetPoolDisruption(bj::object{{"consolidateAfter", "Never"}, {"expireAfter", "1s"}});
  bool moved = Eventually(
      [&] {
        auto pods = PodsWith("app=serve");
        return pods.size() == 1 && Str(pods[0], "status", "phase") == "Running" &&
               Str(pods[0], "spec", "nodeName") != first_node;
      },
      90s);
  // Stop expiring before the replacement itself expires again.
  SetPoolDisruption(bj::object{{"consolidateAfter", "Never"}, {"expireAfter", "Never"}});
  ASSERT_TRUE(moved) << Diagnose("");
  EXPECT_TRUE(Eventually([&] {
    auto claims = ListClaims();
    return claims.size() == 1 && Str(claims[0], "metadata", "name") != first_claim;
  })) << Diagnose("");
  watching = false;
  watcher.join();
  EXPECT_GE(fewest_ready.load(), 1) << "the pod's machine went before its replacement was Ready";
  EXPECT_TRUE(HasEvent("Replacing", "expired"));
  EXPECT_TRUE(HasEvent("Disrupting", "older than expireAfter"));
  EXPECT_EQ(RunningEverywhere(), 1);
  ASSERT_TRUE(client_
                  ->Delete(Deployments(), "default", "serve",
                           kube::DeleteOptions{.propagation_policy = "Foreground"})
                  .ok());
}

// Five idle machines and a budget of one: never more than one being returned at a time, and all
// five are returned.
TEST_F(GpuDisruption, BudgetOfOneReturnsFiveIdleMachinesOneAtATime) {
  SetPoolDisruption(bj::object{{"consolidationPolicy", "WhenIdle"},
                               {"consolidateAfter", "1s"},
                               {"budgets", bj::array{bj::object{{"nodes", "1"}}}}});
  std::vector<std::string> pods;
  for (int i = 0; i < 5; ++i) {
    pods.push_back("batch-" + std::to_string(i));
    CreateGpuPod(pods.back());
  }
  ASSERT_TRUE(Eventually(
      [&] {
        for (const auto& p : pods)
          if (NodeOf(p).empty()) return false;
        return true;
      },
      120s))
      << Diagnose(pods[0]);
  ASSERT_EQ(ListClaims().size(), 5u);
  MaxSampler deleting([this] { return DeletingClaims(); }, 10ms);
  for (const auto& p : pods) Finish(p);
  bool all = Eventually([&] { return ListClaims().empty(); }, 60s);
  const int most_at_once = deleting.Stop();
  ASSERT_TRUE(all) << Diagnose(pods[0]);
  EXPECT_EQ(most_at_once, 1);
  EXPECT_EQ(RunningEverywhere(), 0);
}

// RunPod sells RTX 4090s as spot (interruptible) more cheaply than Lambda sells them on demand.
class GpuSpotReclaim : public GpuDisruption {
 protected:
  void Customize(market::ServerOptions& lambda, market::ServerOptions& runpod) override {
    (void)lambda;
    for (const auto& l : sim::runpod::DefaultListings()) {
      if (l.gpu_name.find("4090") == std::string::npos) continue;
      market::Listing spot = l;
      spot.price = 740000;
      spot.spot_price = 340000;
      spot.capacity = 4;
      runpod.market.listings.push_back(spot);
    }
  }
};

// The provider reclaims the spot machine under a Job's pod: the claim is released (MachineGone),
// the pod is deleted with the machine's Node, the Job makes a new one and it gets a new machine.
TEST_F(GpuSpotReclaim, ReclaimedSpotMachinesJobPodRunsOnAReplacement) {
  CreateJob("finetune");
  auto running = [&](std::string* node) {
    auto pods = PodsWith("job-name=finetune");
    if (pods.size() != 1 || Str(pods[0], "status", "phase") != "Running") return false;
    *node = Str(pods[0], "spec", "nodeName");
    return true;
  };
  std::string first;
  ASSERT_TRUE(Eventually([&] { return running(&first); }, 90s)) << Diagnose("");
  auto instances = runpod_->market().List("");
  ASSERT_EQ(instances.size(), 1u) << "the cheapest offer is RunPod's spot RTX 4090";
  ASSERT_TRUE(instances[0].spot);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(runpod_->market().Reclaim(instances[0].id));
  std::string second;
  ASSERT_TRUE(Eventually([&] { return running(&second) && second != first; }, 90s)) << Diagnose("");
  auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  std::printf("reclaimed spot machine: the Job's pod ran again on a new machine after %lld ms\n",
              static_cast<long long>(took.count()));
  EXPECT_TRUE(HasEvent("MachineGone", instances[0].id));
  EXPECT_TRUE(Eventually([&] { return !client_->Get(kube::resources::Nodes(), "", first).ok(); }));
  EXPECT_EQ(RunningEverywhere(), 1);
  (void)client_->Delete(kube::resources::Jobs(), "default", "finetune",
                        kube::DeleteOptions{.propagation_policy = "Background"});
}

}  // namespace
}  // namespace hyperslice::gpu::e2e
