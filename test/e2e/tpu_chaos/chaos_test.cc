// The TPU operator under fire (issue 8): `hyperslice operator` as a real process on the real
// control plane (test/testenv) with the GCE simulator (sim/gce) over HTTP.
//   CrashAnywhere     create → Ready → delete cycles of 1-, 2- and 4-host slices with a kill -9 at
//   a
//                     seeded random point of every phase and a restart.
//   CloudFaults       20 % of GCE calls fail with 429/503, slow operations, a stockout that clears.
//   LeaderFailover    two leader-elected replicas; the leader killed during a create and a delete.
//   ApiserverRestart  kube-apiserver restarted while a create is in flight.
// Throughout, a watcher polls the simulator's state and records every instant where one group has
// two MIGs/templates/policies or a BULK MIG holds part of its VMs.
//
// HS_CHAOS_SEED=<n> reproduces a run (the seed is printed); HS_CHAOS_CYCLES=<n> sets the number of
// crash-anywhere cycles (default 8).
#include <cstdlib>
#include <iostream>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test/e2e/tpu_chaos/harness.h"

namespace hyperslice::tpu::chaos {
namespace {

using ::testing::IsEmpty;

uint64_t Seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("HS_CHAOS_SEED"); s && *s)
      return static_cast<uint64_t>(std::stoull(s));
    return static_cast<uint64_t>(std::random_device{}());
  }();
  return seed;
}

int Cycles() {
  if (const char* s = std::getenv("HS_CHAOS_CYCLES"); s && *s) return std::max(1, std::atoi(s));
  return 8;
}

bool HasInFlightOperation(kube::Client& c, const std::string& ns, const std::string& name,
                          bool deleting) {
  auto mig = c.Get(ManagedInstanceGroups(), ns, name);
  if (!mig.ok()) return false;
  if (deleting && !mig->at("metadata").as_object().contains("deletionTimestamp")) return false;
  const auto* st = mig->if_contains("status");
  return st && st->is_object() && st->as_object().contains("operation");
}

// One line on where a kill landed: the group's Ready reason and in-flight operations.
std::string Where(kube::Client& c, const std::string& ns, const std::string& name) {
  auto g = c.Get(TPUNodeGroups(), ns, name);
  if (!g.ok()) return "group gone";
  std::string out = g->at("metadata").as_object().contains("deletionTimestamp") ? "deleting" : "";
  if (auto cond = kube::FindCondition(*g, kCondReady)) {
    out += " Ready=" + cond->status + "/" + cond->reason;
  } else {
    out += " no Ready condition";
  }
  if (HasInFlightOperation(c, ns, name, false)) out += " MIG operation in flight";
  return out;
}

class TpuChaosTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Env& env = ChaosEnv();
    ASSERT_TRUE(env.error.empty()) << env.error;
    env_ = &env;
    client_ = env.client;
    ASSERT_EQ(TotalResources(env.control->State()), 0u)
        << "the simulator is not empty at the start:\n"
        << DescribeResources(env.control->State());
  }
  void TearDown() override {
    // Whatever a test did to the simulator, the next one starts without it.
    (void)env_->control->Call("DELETE", "/control/faults");
    (void)env_->control->Call("POST", "/control/latency",
                              {{"operationMs", 100}, {"instanceBootMs", 100}});
  }
  std::string LogPath(const std::string& name) { return (env_->dir / (name + ".log")).string(); }

  // The end state of every test: the simulator empty, no Node, no bootstrap Secret, and no
  // TPUNodeGroup or child CR (so no finalizer) in `ns`.
  void ExpectNothingLeft(const std::string& ns) {
    json::object st = env_->control->State();
    EXPECT_EQ(TotalResources(st), 0u) << DescribeResources(st);
    auto nodes = client_->List(kube::resources::Nodes(), "");
    ASSERT_TRUE(nodes.ok());
    EXPECT_THAT(nodes->items, IsEmpty()) << nodes->items.size() << " Nodes left";
    auto secrets = client_->List(kube::resources::Secrets(), "kube-system",
                                 {.label_selector = std::string(kSecretLabelGroupUid)});
    ASSERT_TRUE(secrets.ok());
    EXPECT_THAT(secrets->items, IsEmpty()) << secrets->items.size() << " bootstrap Secrets left";
    for (const auto* r :
         {&TPUNodeGroups(), &ResourcePolicies(), &InstanceTemplates(), &ManagedInstanceGroups()}) {
      auto l = client_->List(*r, ns);
      ASSERT_TRUE(l.ok());
      EXPECT_THAT(l->items, IsEmpty()) << r->kind << " left (with finalizers)";
    }
  }

  Env* env_ = nullptr;
  std::shared_ptr<kube::Client> client_;
};

TEST_F(TpuChaosTest, CrashAnywhere) {
  const uint64_t seed = Seed();
  const int cycles = Cycles();
  std::cout << "CrashAnywhere: seed " << seed << " (HS_CHAOS_SEED), " << cycles
            << " cycles (HS_CHAOS_CYCLES)" << std::endl;
  std::mt19937 rng(static_cast<std::mt19937::result_type>(seed));
  // Slow enough that a phase spans several GCE operations, so random kills land inside them.
  ASSERT_TRUE(
      env_->control
          ->Call("POST", "/control/latency", {{"operationMs", 300}, {"instanceBootMs", 200}})
          .ok());
  const std::string ns = testenv::TestNamespace();
  FakeKubelets kubelets(*env_);
  InvariantWatch watch(*env_->control);
  OperatorProcess op;
  int restarts = 0;
  op.Start(*env_, LogPath("crash-" + std::to_string(restarts)));
  auto kill_and_restart = [&](std::chrono::milliseconds after, const std::string& name,
                              const std::string& phase) {
    std::this_thread::sleep_for(after);  // the random kill point, not a wait for a condition
    std::string where = Where(*client_, ns, name);
    op.Kill();
    std::cout << "  " << name << " " << phase << ": kill -9 at +" << after.count() << " ms ("
              << where << ")" << std::endl;
    op.Start(*env_, LogPath("crash-" + std::to_string(++restarts)));
  };
  std::uniform_int_distribution<int> create_kill(0, 1600), delete_kill(0, 1100);
  const int shapes[] = {1, 2, 4};
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < cycles; ++i) {
    const int hosts = shapes[i % 3];
    const std::string name = "crash-" + std::to_string(i) + "-" + std::to_string(hosts) + "h";
    auto created = client_->Create(TPUNodeGroups(), ns, Group(ns, name, hosts));
    ASSERT_TRUE(created.ok()) << created.error().ToString();
    const std::string uid(created->at("metadata").at("uid").as_string());
    kill_and_restart(std::chrono::milliseconds(create_kill(rng)), name, "create");
    ASSERT_TRUE(Eventually([&] { return IsReady(*client_, ns, name); }, 120s))
        << "cycle " << i << " (seed " << seed << "): " << name
        << " never Ready: " << DescribeGroup(*client_, ns, name) << "\n"
        << DescribeResources(env_->control->State()) << "operator log:\n"
        << op.Tail();
    json::object st = env_->control->State();
    EXPECT_EQ(ResourcesOf(st, uid), static_cast<size_t>((hosts == 1 ? 2 : 3) + hosts))
        << "cycle " << i << " (seed " << seed << "):\n"
        << DescribeResources(st);

    ASSERT_TRUE(client_->Delete(TPUNodeGroups(), ns, name).ok());
    kill_and_restart(std::chrono::milliseconds(delete_kill(rng)), name, "delete");
    ASSERT_TRUE(Eventually([&] { return IsGone(*client_, TPUNodeGroups(), ns, name); }, 120s))
        << "cycle " << i << " (seed " << seed << "): " << name
        << " never deleted: " << DescribeGroup(*client_, ns, name) << "\n"
        << DescribeResources(env_->control->State()) << "operator log:\n"
        << op.Tail();
    EXPECT_EQ(Leftovers(*env_, ns, name, uid, kubelets.registered()), "")
        << "cycle " << i << " (seed " << seed << ")";
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "CrashAnywhere: " << cycles << " cycles, " << restarts << " kills, " << secs
            << " s, " << watch.polls() << " invariant polls" << std::endl;
  watch.Stop();
  EXPECT_THAT(watch.violations(), IsEmpty()) << "seed " << seed;
  ExpectNothingLeft(ns);
  EXPECT_EQ(op.Terminate(), 0);
}

TEST_F(TpuChaosTest, CloudFaults) {
  auto& control = *env_->control;
  // 20 % of every GCE call fails: 503 by default, 429 for the hottest methods.
  ASSERT_TRUE(
      control.Call("POST", "/control/faults", {{"method", "*"}, {"rate", 0.2}, {"code", 503}})
          .ok());
  for (const char* m : {"compute.instanceGroupManagers.get", "compute.instanceGroupManagers.insert",
                        "compute.instanceGroupManagers.listManagedInstances",
                        "compute.instanceTemplates.insert", "compute.resourcePolicies.insert",
                        "compute.zoneOperations.wait", "compute.zoneOperations.get",
                        "compute.globalOperations.wait", "compute.regionOperations.wait"}) {
    ASSERT_TRUE(
        control.Call("POST", "/control/faults", {{"method", m}, {"rate", 0.2}, {"code", 429}})
            .ok());
  }
  ASSERT_TRUE(control.Call("POST", "/control/seed", {{"seed", static_cast<int64_t>(Seed())}}).ok());
  // Operations that take a while, VMs that boot slowly, and no tpu7x capacity in one zone.
  ASSERT_TRUE(
      control.Call("POST", "/control/latency", {{"operationMs", 2000}, {"instanceBootMs", 1000}})
          .ok());
  ASSERT_TRUE(
      control
          .Call("POST", "/control/stockout",
                {{"zone", kStockoutZone}, {"machineType", "tpu7x-standard-4t"}, {"enabled", true}})
          .ok());

  const std::string ns = testenv::TestNamespace();
  FakeKubelets kubelets(*env_);
  InvariantWatch watch(control);
  OperatorProcess op;
  op.Start(*env_, LogPath("faults"));
  struct G {
    std::string name;
    int hosts;
    std::string zone;
    std::string uid;
  };
  std::vector<G> groups = {{"out-of-stock", 2, kStockoutZone, ""},
                           {"four", 4, kZone, ""},
                           {"two", 2, kZone, ""},
                           {"one", 1, kV6eZone, ""}};
  for (auto& g : groups) {
    auto created = client_->Create(TPUNodeGroups(), ns, Group(ns, g.name, g.hosts, g.zone));
    ASSERT_TRUE(created.ok()) << created.error().ToString();
    g.uid = std::string(created->at("metadata").at("uid").as_string());
  }
  // While stocked out: GCE's reason on the group's Ready and MIG conditions and in its Events.
  ASSERT_TRUE(Eventually(
      [&] {
        auto c = Cond(*client_, ns, "out-of-stock", kCondReady);
        return c && c->status == "False" && c->reason == "ZONE_RESOURCE_POOL_EXHAUSTED";
      },
      120s))
      << DescribeGroup(*client_, ns, "out-of-stock") << "\n"
      << op.Tail();
  auto mc = Cond(*client_, ns, "out-of-stock", kCondManagedInstanceGroupReady);
  ASSERT_TRUE(mc);
  EXPECT_EQ(mc->reason, "ZONE_RESOURCE_POOL_EXHAUSTED");
  EXPECT_TRUE(Eventually(
      [&] {
        auto ev = client_->List(kube::resources::Events(), ns);
        if (!ev.ok()) return false;
        for (const auto& e : ev->items) {
          const auto& io = e.at("involvedObject").as_object();
          if (io.at("kind") == "TPUNodeGroup" && io.at("name") == "out-of-stock" &&
              e.at("reason") == "ZONE_RESOURCE_POOL_EXHAUSTED") {
            return true;
          }
        }
        return false;
      },
      30s))
      << "no Event with GCE's reason on the stocked-out group";
  EXPECT_EQ(ResourcesOf(control.State(), groups[0].uid), 3u) << "VMs in a stocked-out zone";

  for (const auto& g : groups) {
    if (g.zone == kStockoutZone) continue;
    EXPECT_TRUE(Eventually([&] { return IsReady(*client_, ns, g.name); }, 240s, 200ms))
        << g.name << ": " << DescribeGroup(*client_, ns, g.name) << "\n"
        << op.Tail();
  }
  // Capacity comes back: the stocked-out group converges with no user action.
  ASSERT_TRUE(
      control
          .Call("POST", "/control/stockout",
                {{"zone", kStockoutZone}, {"machineType", "tpu7x-standard-4t"}, {"enabled", false}})
          .ok());
  EXPECT_TRUE(Eventually([&] { return IsReady(*client_, ns, "out-of-stock"); }, 240s, 200ms))
      << DescribeGroup(*client_, ns, "out-of-stock") << "\n"
      << op.Tail();
  json::object st = control.State();
  for (const auto& g : groups) {
    EXPECT_EQ(ResourcesOf(st, g.uid), static_cast<size_t>((g.hosts == 1 ? 2 : 3) + g.hosts))
        << g.name << "\n"
        << DescribeResources(st);
  }

  // Teardown under the same faults.
  for (const auto& g : groups) ASSERT_TRUE(client_->Delete(TPUNodeGroups(), ns, g.name).ok());
  for (const auto& g : groups) {
    EXPECT_TRUE(
        Eventually([&] { return IsGone(*client_, TPUNodeGroups(), ns, g.name); }, 240s, 200ms))
        << g.name << ": " << DescribeGroup(*client_, ns, g.name) << "\n"
        << op.Tail();
  }
  watch.Stop();
  EXPECT_THAT(watch.violations(), IsEmpty());
  ExpectNothingLeft(ns);
  EXPECT_EQ(op.Terminate(), 0);
  // The faults were met (and retried), not dodged.
  std::string log = op.Log();
  EXPECT_NE(log.find("[HTTP 503]"), std::string::npos) << "no 503 reached the operator";
  EXPECT_NE(log.find("[HTTP 429]"), std::string::npos) << "no 429 reached the operator";
}

// GCE's mutating calls on the three resource kinds, from the simulator's counters.
std::map<std::string, int64_t> Mutations(GceControl& control) {
  std::map<std::string, int64_t> out;
  for (const auto& [m, n] : control.Counters()) {
    bool ours = m.find("instanceGroupManagers.") != std::string::npos ||
                m.find("instanceTemplates.") != std::string::npos ||
                m.find("resourcePolicies.") != std::string::npos;
    bool read = m.ends_with(".get") || m.ends_with(".list") ||
                m.ends_with(".listManagedInstances") || m.ends_with(".listErrors") ||
                m.ends_with(".aggregatedList");
    if (ours && !read) out[m] = n;
  }
  return out;
}

TEST_F(TpuChaosTest, LeaderFailover) {
  auto& control = *env_->control;
  ASSERT_TRUE(control.Call("POST", "/control/latency", {{"operationMs", 1500}}).ok());
  const std::string ns = testenv::TestNamespace();
  FakeKubelets kubelets(*env_);
  InvariantWatch watch(control);
  // Short Lease timings (the defaults are 15 s / 10 s / 2 s): a standby takes over at most
  // lease-duration + retry-period after the leader's last renewal.
  const std::vector<std::string> le = {"--leader-elect=true",
                                       "--leader-election-namespace",
                                       kOperatorNs,
                                       "--leader-election-id",
                                       "chaos-failover",
                                       "--leader-election-lease-duration=5s",
                                       "--leader-election-renew-deadline=3s",
                                       "--leader-election-retry-period=500ms"};
  OperatorProcess a, b;
  a.Start(*env_, LogPath("leader-a"), le);
  b.Start(*env_, LogPath("leader-b"), le);
  auto is_leader = [](const OperatorProcess& p) {
    return p.running() && p.Log().find("acquired the Lease") != std::string::npos;
  };
  ASSERT_TRUE(Eventually([&] { return is_leader(a) || is_leader(b); }, 60s))
      << a.Tail() << b.Tail();
  ASSERT_FALSE(is_leader(a) && is_leader(b)) << "two leaders";
  auto before = Mutations(control);

  const std::string name = "failover";
  auto created = client_->Create(TPUNodeGroups(), ns, Group(ns, name, 2));
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  ASSERT_TRUE(
      Eventually([&] { return HasInFlightOperation(*client_, ns, name, false); }, 60s, 20ms))
      << DescribeGroup(*client_, ns, name);
  OperatorProcess& leader1 = is_leader(a) ? a : b;
  OperatorProcess& standby1 = is_leader(a) ? b : a;
  leader1.Kill();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(Eventually([&] { return IsReady(*client_, ns, name); }, 20s, 20ms))
      << "the standby did not finish the create within 20 s: " << DescribeGroup(*client_, ns, name)
      << "\n"
      << standby1.Tail();
  ASSERT_TRUE(Eventually([&] { return IsReady(*client_, ns, name); }, 60s))
      << DescribeGroup(*client_, ns, name);
  std::cout << "LeaderFailover: create finished "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
            << " s after the leader was killed" << std::endl;
  ASSERT_TRUE(is_leader(standby1));
  // The killed replica comes back as the standby.
  leader1.Start(*env_, LogPath("leader-restarted"), le);

  ASSERT_TRUE(client_->Delete(TPUNodeGroups(), ns, name).ok());
  ASSERT_TRUE(Eventually([&] { return HasInFlightOperation(*client_, ns, name, true); }, 60s, 20ms))
      << DescribeGroup(*client_, ns, name);
  standby1.Kill();
  t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(Eventually([&] { return IsGone(*client_, TPUNodeGroups(), ns, name); }, 20s, 20ms))
      << "the standby did not finish the delete within 20 s: " << DescribeGroup(*client_, ns, name)
      << "\n"
      << leader1.Tail();
  ASSERT_TRUE(Eventually([&] { return IsGone(*client_, TPUNodeGroups(), ns, name); }, 60s));
  std::cout << "LeaderFailover: delete finished "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
            << " s after the leader was killed" << std::endl;

  // One intent, one call: each insert and delete exactly once.
  auto after = Mutations(control);
  std::map<std::string, int64_t> delta;
  for (const auto& [m, n] : after) {
    int64_t d = n - (before.count(m) ? before[m] : 0);
    if (d != 0) delta[m] = d;
  }
  std::map<std::string, int64_t> want;
  for (const char* kind : {"instanceGroupManagers", "instanceTemplates", "resourcePolicies"}) {
    want[std::string("compute.") + kind + ".insert"] = 1;
    want[std::string("compute.") + kind + ".delete"] = 1;
  }
  EXPECT_EQ(delta, want);
  watch.Stop();
  EXPECT_THAT(watch.violations(), IsEmpty());
  ExpectNothingLeft(ns);
  EXPECT_EQ(leader1.Terminate(), 0);
}

TEST_F(TpuChaosTest, ApiserverRestartDuringCreate) {
  auto& control = *env_->control;
  ASSERT_TRUE(control.Call("POST", "/control/latency", {{"operationMs", 1500}}).ok());
  const std::string ns = testenv::TestNamespace();
  FakeKubelets kubelets(*env_);
  OperatorProcess op;  // --drift-check-interval 1h: no periodic resync can finish the create
  op.Start(*env_, LogPath("apiserver-restart"));
  const std::string name = "through-restart";
  auto created = client_->Create(TPUNodeGroups(), ns, Group(ns, name, 2));
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  const std::string uid(created->at("metadata").at("uid").as_string());
  ASSERT_TRUE(
      Eventually([&] { return HasInFlightOperation(*client_, ns, name, false); }, 60s, 20ms))
      << DescribeGroup(*client_, ns, name);
  auto t0 = std::chrono::steady_clock::now();
  Status restarted = testenv::Cluster().RestartApiserver();
  ASSERT_TRUE(restarted.ok()) << restarted.error().ToString();
  double restart_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(Eventually([&] { return IsReady(*client_, ns, name); }, 60s, 100ms))
      << DescribeGroup(*client_, ns, name) << "\n"
      << op.Tail();
  std::cout << "ApiserverRestart: apiserver back after " << restart_s << " s; group Ready "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
            << " s after the restart began" << std::endl;
  ASSERT_TRUE(client_->Delete(TPUNodeGroups(), ns, name).ok());
  EXPECT_TRUE(Eventually([&] { return IsGone(*client_, TPUNodeGroups(), ns, name); }, 60s))
      << DescribeGroup(*client_, ns, name);
  EXPECT_EQ(Leftovers(*env_, ns, name, uid, kubelets.registered()), "");
  ExpectNothingLeft(ns);
  EXPECT_EQ(op.Terminate(), 0);
}

}  // namespace
}  // namespace hyperslice::tpu::chaos
