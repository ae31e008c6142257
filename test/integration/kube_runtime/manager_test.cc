// Manager on the real apiserver: /healthz, /readyz and /metrics over HTTP with controller-runtime
// names; readiness follows caches, not leadership; a standby waits; Stop() lets the running
// reconcile finish and releases the Lease.
#include "src/kube/manager.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "src/kube/controller.h"
#include "src/kube/informer.h"
#include "src/kube/object_helpers.h"
#include "src/net/http.h"
#include "test/integration/kube_runtime/lease_record.h"
#include "test/testenv/eventually.h"
#include "test/testenv/testenv.h"

namespace hyperslice::kube {
namespace {

using std::chrono::milliseconds;

using testenv::Eventually;

net::Response Get(uint16_t port, const std::string& path) {
  net::HttpClient::Options o;
  o.base_url = "http://127.0.0.1:" + std::to_string(port);
  auto client = net::HttpClient::Create(o);
  EXPECT_TRUE(client.ok());
  net::Request r;
  r.target = path;
  r.timeout = milliseconds(5000);
  auto resp = (*client)->Do(r);
  EXPECT_TRUE(resp.ok()) << resp.error().ToString();
  return resp.ok() ? *resp : net::Response{};
}

// A runnable standing in for an informer cache: not leader-elected, ready when told.
class FakeCache final : public Runnable {
 public:
  std::string Name() const override { return "configmap-informer"; }
  Status Start() override { return OkStatus(); }
  void Stop(std::chrono::milliseconds) override {}
  bool NeedLeaderElection() const override { return false; }
  bool Ready() const override { return synced; }
  std::atomic<bool> synced{false};
};

class Seed final : public Runnable {
 public:
  explicit Seed(std::shared_ptr<Controller> c) : c_(std::move(c)) {}
  std::string Name() const override { return "seed"; }
  Status Start() override {
    c_->Enqueue("ns/a");
    return OkStatus();
  }
  void Stop(std::chrono::milliseconds) override {}

 private:
  std::shared_ptr<Controller> c_;
};

ManagerOptions LeOptions(const std::string& identity, const std::string& lease,
                         metrics::Registry* reg) {
  ManagerOptions o;
  o.client = testenv::AdminClient();
  o.leader_election = true;
  o.leader_election_namespace = testenv::TestNamespace();
  o.leader_election_id = lease;
  o.identity = identity;
  o.lease_duration = milliseconds(4000);
  o.renew_deadline = milliseconds(3000);
  o.retry_period = milliseconds(500);
  o.health_probe_port = 0;
  o.registry = reg;
  return o;
}

// A controller counting its reconciles in `calls`; each succeeds without a requeue.
std::shared_ptr<Controller> CountingController(const std::string& name, metrics::Registry* reg,
                                               std::atomic<int>& calls) {
  ControllerOptions co;
  co.name = name;
  co.registry = reg;
  return std::make_shared<Controller>(std::move(co), [&calls](const std::string&) {
    ++calls;
    return Result<ReconcileResult>(ReconcileResult{});
  });
}

TEST(Manager, ServesHealthReadinessAndMetricsWithControllerRuntimeNames) {
  metrics::Registry reg;
  auto m = Manager::Create(LeOptions("mgr-health", "mgr-health", &reg));
  ASSERT_TRUE(m.ok()) << m.error().ToString();
  auto cache = std::make_shared<FakeCache>();
  std::atomic<int> reconciles{0};
  auto controller = CountingController("health-demo", &reg, reconciles);
  (*m)->Add(cache);
  (*m)->Add(controller);
  (*m)->Add(std::make_shared<Seed>(controller));
  const uint16_t port = (*m)->health_port();
  ASSERT_NE(port, 0);

  EXPECT_EQ(Get(port, "/readyz").status, 500) << "not ready before Run";
  Status run_status;
  std::thread runner([&] { run_status = (*m)->Run(); });

  auto health = Get(port, "/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "ok");
  // Once Run() has started the caches, readiness names the one not synced.
  net::Response not_ready;
  EXPECT_TRUE(Eventually(
      [&] {
        not_ready = Get(port, "/readyz?verbose");
        return not_ready.body.find("configmap-informer not synced") != std::string::npos;
      },
      milliseconds(5000)))
      << not_ready.body;
  EXPECT_EQ(not_ready.status, 500);
  cache->synced = true;
  EXPECT_TRUE(Eventually([&] { return Get(port, "/readyz").status == 200; }, milliseconds(5000)));

  ASSERT_TRUE(Eventually([&] { return reconciles.load() >= 1; }, milliseconds(20000)));
  EXPECT_TRUE((*m)->IsLeader());
  auto metrics = Get(port, "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.Header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  for (
      const char* want : {
          "controller_runtime_reconcile_total{controller=\"health-demo\",result=\"success\"} 1",
          "controller_runtime_reconcile_errors_total{controller=\"health-demo\"} 0",
          R"(controller_runtime_reconcile_time_seconds_bucket{controller="health-demo",le="+Inf"} 1)",
          "controller_runtime_max_concurrent_reconciles{controller=\"health-demo\"} 1",
          "controller_runtime_active_workers{controller=\"health-demo\"} 0",
          "workqueue_adds_total{controller=\"health-demo\",name=\"health-demo\"} 1",
          "workqueue_depth{controller=\"health-demo\",name=\"health-demo\"} 0",
          "# TYPE workqueue_queue_duration_seconds histogram",
          "leader_election_master_status{name=\"mgr-health\"} 1",
          "# TYPE rest_client_requests_total counter",
          "rest_client_requests_total{code=\"",  // the Lease GET/POST/PUT of this manager
          "method=\"GET\"} ",
          "# TYPE rest_client_request_duration_seconds histogram",
      }) {
    EXPECT_NE(metrics.body.find(want), std::string::npos) << "missing: " << want;
  }
  EXPECT_EQ(Get(port, "/nope").status, 404);
  (*m)->Stop();
  runner.join();
  EXPECT_TRUE(run_status.ok()) << run_status.error().ToString();
}

TEST(Manager, StandbyIsReadyButDoesNotReconcileUntilTheLeaderStops) {
  metrics::Registry reg1, reg2;
  const std::string lease = "mgr-standby";
  std::atomic<int> first_calls{0}, second_calls{0};
  std::atomic<bool> in_reconcile{false}, finish{false};
  auto make = [&](const std::string& id, metrics::Registry* reg, std::atomic<int>* calls,
                  bool slow) {
    auto m = Manager::Create(LeOptions(id, lease, reg));
    EXPECT_TRUE(m.ok());
    ControllerOptions co;
    co.name = "standby-demo";
    co.registry = reg;
    auto c = std::make_shared<Controller>(std::move(co), [&, calls, slow](const std::string&) {
      ++*calls;
      if (slow) {
        in_reconcile = true;
        while (!finish) std::this_thread::sleep_for(milliseconds(5));
      }
      return Result<ReconcileResult>(ReconcileResult{false, milliseconds(50)});
    });
    (*m)->Add(c);
    (*m)->Add(std::make_shared<Seed>(c));
    return std::move(*m);
  };
  auto first = make("first", &reg1, &first_calls, /*slow=*/true);
  Status s1, s2;
  std::thread t1([&] { s1 = first->Run(); });
  ASSERT_TRUE(Eventually([&] { return in_reconcile.load(); }, milliseconds(20000)));

  auto second = make("second", &reg2, &second_calls, /*slow=*/false);
  std::thread t2([&] { s2 = second->Run(); });
  EXPECT_TRUE(Eventually([&] { return Get(second->health_port(), "/readyz").status == 200; },
                         milliseconds(5000)))
      << "a standby replica is ready (readiness does not depend on leadership)";
  // Three of the leader's renewals: the standby has tried (and failed) to acquire each round.
  ASSERT_TRUE(WaitForRenewals(lease, "first", 3)) << "the leader stopped renewing its Lease";
  EXPECT_EQ(second_calls.load(), 0);
  EXPECT_FALSE(second->IsLeader());

  // Graceful stop of the leader: its running reconcile finishes before the Lease is released.
  std::atomic<bool> first_stopped{false};
  std::thread stopper([&] {
    first->Stop();
    t1.join();
    first_stopped = true;
  });
  // The stopping leader keeps renewing while its reconcile runs (the Lease is released only after
  // it): two renewals after Stop() began, Run() has still not returned.
  ASSERT_TRUE(WaitForRenewals(lease, "first", 2)) << "the Lease was released during the reconcile";
  EXPECT_FALSE(first_stopped.load()) << "Run returned while a reconcile was still running";
  EXPECT_EQ(second_calls.load(), 0) << "the standby started while the leader was reconciling";
  finish = true;
  stopper.join();
  EXPECT_TRUE(s1.ok());
  // Released, not expired: the standby takes over within a couple of retry periods.
  ASSERT_TRUE(Eventually([&] { return second_calls.load() > 0; }, milliseconds(3000)));
  EXPECT_EQ(first_calls.load(), 1) << "the stopping leader must not start new reconciles";
  second->Stop();
  t2.join();
  EXPECT_TRUE(s2.ok());
}

TEST(Manager, WithoutLeaderElectionControllersStartAtOnce) {
  metrics::Registry reg;
  ManagerOptions o;
  o.registry = &reg;
  auto m = Manager::Create(std::move(o));
  ASSERT_TRUE(m.ok());
  std::atomic<int> calls{0};
  auto c = CountingController("no-le", &reg, calls);
  (*m)->Add(c);
  (*m)->Add(std::make_shared<Seed>(c));
  std::thread t([&] { EXPECT_TRUE((*m)->Run().ok()); });
  EXPECT_TRUE(Eventually([&] { return calls.load() == 1; }, milliseconds(5000)));
  EXPECT_TRUE((*m)->IsLeader());
  (*m)->Stop();
  t.join();
}

// Was disabled after an invalid read seen at 50f6daa (an early informer commit, RelWithDebInfo);
// passes 4/4 at the current head in a clean Release build, and runs under ASan/TSan in CI.
TEST(Manager, ControllersReconcileWhatTheSharedInformersSee) {
  metrics::Registry reg;
  auto admin = testenv::AdminClient();
  const std::string ns = testenv::TestNamespace();
  ManagerOptions o;
  o.client = admin;
  o.registry = &reg;
  o.health_probe_port = 0;
  auto m = Manager::Create(std::move(o));
  ASSERT_TRUE(m.ok());
  ASSERT_NE((*m)->informers(), nullptr);
  InformerOptions io;
  io.ns = ns;
  io.label_selector = "app=informer-demo";
  auto informer = (*m)->informers()->For(resources::ConfigMaps(), &io);

  std::mutex mu;
  std::set<std::string> seen_direct, seen_owner;
  ControllerOptions direct_opts;
  direct_opts.name = "informer-direct";
  direct_opts.registry = &reg;
  auto direct = std::make_shared<Controller>(std::move(direct_opts), [&](const std::string& key) {
    std::lock_guard lock(mu);
    seen_direct.insert(key);
    return Result<ReconcileResult>(ReconcileResult{});
  });
  ControllerOptions owner_opts;
  owner_opts.name = "informer-owner";
  owner_opts.registry = &reg;
  auto owner = std::make_shared<Controller>(std::move(owner_opts), [&](const std::string& key) {
    std::lock_guard lock(mu);
    seen_owner.insert(key);
    return Result<ReconcileResult>(ReconcileResult{});
  });
  direct->Watch(*informer);
  owner->WatchOwned(*informer, "ConfigMap");
  (*m)->Add(direct);
  (*m)->Add(owner);

  auto make = [&](const std::string& name) {
    Object cm{{"apiVersion", "v1"},
              {"kind", "ConfigMap"},
              {"metadata",
               boost::json::object{
                   {"name", name}, {"namespace", ns}, {"labels", {{"app", "informer-demo"}}}}}};
    return cm;
  };
  // Exists before the cache starts: delivered by the initial list.
  auto parent = admin->Create(resources::ConfigMaps(), ns, make("parent"));
  ASSERT_TRUE(parent.ok()) << parent.error().ToString();

  std::thread t([&] { EXPECT_TRUE((*m)->Run().ok()); });
  struct StopAndJoin {
    Manager& m;
    std::thread& t;
    ~StopAndJoin() {
      m.Stop();
      t.join();
    }
  } stop_and_join{**m, t};
  ASSERT_TRUE(Eventually([&] { return Get((*m)->health_port(), "/readyz").status == 200; },
                         milliseconds(20000)))
      << "ready once the informer cache has synced";

  // Created while running: delivered by the watch.
  Object child = make("child");
  ASSERT_TRUE(SetControllerReference(*parent, child).ok());
  ASSERT_TRUE(admin->Create(resources::ConfigMaps(), ns, child).ok());
  Object other = make("unlabelled");
  other["metadata"].as_object().erase("labels");
  ASSERT_TRUE(admin->Create(resources::ConfigMaps(), ns, other).ok());

  EXPECT_TRUE(Eventually(
      [&] {
        std::lock_guard lock(mu);
        return seen_direct.count(ns + "/parent") && seen_direct.count(ns + "/child") &&
               seen_owner.count(ns + "/parent");
      },
      milliseconds(20000)));
  // A labelled object created after the unlabelled one: the watch delivers events in order and the
  // controller's one worker reconciles its queue in order, so once this one is seen, the unlabelled
  // one would have been seen before it had the selector let it through.
  ASSERT_TRUE(admin->Create(resources::ConfigMaps(), ns, make("sentinel")).ok());
  ASSERT_TRUE(Eventually(
      [&] {
        std::lock_guard lock(mu);
        return seen_direct.count(ns + "/sentinel") > 0;
      },
      milliseconds(20000)));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(seen_direct, (std::set<std::string>{ns + "/parent", ns + "/child", ns + "/sentinel"}))
        << "the label selector keeps other objects out of the cache";
    EXPECT_EQ(seen_owner, (std::set<std::string>{ns + "/parent"}));
  }
}

TEST(Manager, LeaderElectionNeedsAClientAndALeaseName) {
  ManagerOptions o;
  o.leader_election = true;
  EXPECT_FALSE(Manager::Create(o).ok());
  o.client = testenv::AdminClient();
  EXPECT_FALSE(Manager::Create(o).ok());
}

}  // namespace
}  // namespace hyperslice::kube
