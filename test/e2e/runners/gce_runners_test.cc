// Runners with spec.gce end to end (issue 20): the operator creates each Runner's Compute Engine
// instance through src/gce against sim/gce (two regions: us-central2-b and europe-west4-a), on a
// real kube-apiserver + kube-scheduler. The test plays the VMs' boot: for every instance the
// simulator reports RUNNING it starts `hyperslice runner-agent --gce-metadata` as a local process
// on a loopback address of its own, with GCE_METADATA_HOST naming that instance on the
// simulator's metadata server — the agent learns its name, the link server, the runners CA and
// its one-time join token from there, as on a real VM. For each instance the simulator deletes,
// the agent is killed (the VM is gone).
//
// Checked: the instances' zones, machine types, accelerators and labels; both runners link and
// the control node's capacity is their sum; a Job's pod runs on one of them as a runc container;
// the runners' dial address is the agent's loopback address, never the instance's private
// 10.128.x.y; deleting a Runner deletes its instance (finalizer) and its capacity leaves; a
// stockout gives InstanceReady=False and a Warning Event naming ZONE_RESOURCE_POOL_EXHAUSTED and
// leaves no instance; once linked, the join token is no longer in the instances' metadata; no
// join token ever appears in the operator's, the simulator's or the
// agents' logs.
#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "sim/gce/simulator.h"
#include "src/base/base64.h"
#include "src/base/command.h"
#include "src/base/json.h"
#include "src/base/log.h"
#include "src/gce/compute.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/kube/resource.h"
#include "src/net/http.h"
#include "src/runners/controlnode/api.h"
#include "src/runners/controlnode/controlnode.h"
#include "src/runners/controlnode/gce_runner.h"
#include "test/testenv/eventually.h"
#include "test/testenv/files.h"
#include "test/testenv/log_capture.h"
#include "test/testenv/registry.h"
#include "test/testenv/runners_env.h"
#include "test/testenv/runners_suite.h"

namespace hyperslice {
namespace {

namespace json = boost::json;
namespace cn = runners::controlnode;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testenv::Eventually;

const kube::Resource kJobs{"batch", "v1", "jobs", "Job", true};
constexpr char kControlNode[] = "gce-global";
constexpr char kProject[] = "my-gcp-project";
constexpr char kSimToken[] = "gce-e2e-static-token";

// The VMs' boot, played by local processes: one `hyperslice runner-agent --gce-metadata` per
// RUNNING simulated instance, each on its own loopback address (127.0.0.40 and up).
class VmBoot {
 public:
  VmBoot(sim::gce::Simulator* sim, std::string dir, std::string registry)
      : sim_(sim), dir_(std::move(dir)), registry_(std::move(registry)) {
    sub_ = sim_->SubscribeInstances([this](const sim::gce::InstanceEvent& e) {
      std::lock_guard lock(mu_);
      events_.push_back(e);
      cv_.notify_all();
    });
    thread_ = std::thread([this] { Loop(); });
  }
  ~VmBoot() {
    sim_->UnsubscribeInstances(sub_);
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      cv_.notify_all();
    }
    thread_.join();
    for (auto& [_, vm] : vms_) Kill(vm);
  }
  // Every agent log so far (for the token check and failure messages).
  std::string Logs() {
    std::lock_guard lock(mu_);
    std::string out;
    for (const auto& f : log_files_) out += testenv::ReadFile(f);
    return out;
  }
  std::vector<std::string> RuntimeRoots() {
    std::lock_guard lock(mu_);
    return roots_;
  }

 private:
  struct Vm {
    pid_t pid = -1;
    std::string address;
    std::string state;
  };
  // The VM is gone: its agent and everything the agent made go.
  void Kill(Vm& vm) {
    if (vm.pid <= 0) return;
    ::kill(vm.pid, SIGKILL);
    ::waitpid(vm.pid, nullptr, 0);
    vm.pid = -1;
    testenv::RemoveMachineRemains(vm.state);
  }
  void Loop() {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stopping_ || !events_.empty(); });
      if (stopping_) return;
      auto e = events_.front();
      events_.pop_front();
      const std::string key = e.zone + "/" + e.name;
      if (e.status == "RUNNING" && !vms_.count(key)) {
        Vm vm;
        const std::string ip = "127.0.0." + std::to_string(next_ip_++);
        auto port = FreeLoopbackPort(ip);
        vm.address = ip + ":" + std::to_string(port.ok() ? *port : 0);
        const std::string state = dir_ + "/vm-" + e.name + "-" + std::to_string(next_ip_);
        fs::create_directories(state);
        vm.state = state;
        const std::string log = state + ".log";
        std::vector<std::string> argv = {
            "/usr/bin/env",
            "GCE_METADATA_HOST=" + sim_->metadata_host(e.project, e.zone, e.name),
            HS_BINARY,
            "runner-agent",
            "--gce-metadata",
            "--state-dir",
            state,
            "--listen",
            vm.address,
            "--insecure-registry",
            registry_,
            "--capacity",
            "cpu=4",
            "--capacity",
            "memory=8Gi"};
        auto pid = StartBackground(argv, log);
        if (pid.ok()) vm.pid = *pid;
        log_files_.push_back(log);
        roots_.push_back(state + "/runtime");
        vms_[key] = vm;
      } else if (e.status.empty() && vms_.count(key)) {
        Kill(vms_[key]);  // the VM is gone, and so is its agent
        vms_.erase(key);
      }
    }
  }

  sim::gce::Simulator* sim_;
  std::string dir_, registry_;
  uint64_t sub_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<sim::gce::InstanceEvent> events_;
  bool stopping_ = false;
  std::map<std::string, Vm> vms_;
  std::vector<std::string> log_files_, roots_;
  int next_ip_ = 40;
  std::thread thread_;
};

class GceRunnersTest : public testenv::RunnersSuite<GceRunnersTest> {
 protected:
  static void SetUpTestSuite() {
    skip_ = testenv::RunnerToolsMissing();
    if (!skip_.empty()) return;
    // Every log line of this process (operator, link server, simulator, gce client), to prove
    // no join token is ever written.
    log_ = std::make_unique<testenv::LogCapture>(/*echo=*/true);

    // Compute Engine: the simulator in two regions, the product's client against it.
    sim::gce::Options so;
    so.projects = {kProject};
    so.regions = {"us-central2", "europe-west4"};
    so.static_tokens = {kSimToken};
    so.operation_latency = 300ms;
    so.instance_boot_latency = 300ms;
    auto sim = sim::gce::Simulator::Start(so);
    ASSERT_TRUE(sim.ok()) << sim.error().message;
    sim_ = std::move(*sim);
    gce::ComputeOptions co;
    co.endpoint = sim_->api_endpoint();
    co.tokens = gce::StaticTokenSource(kSimToken);
    co.min_wait_interval = 100ms;
    auto compute = gce::Compute::Create(co);
    ASSERT_TRUE(compute.ok()) << compute.error().message;
    compute_ = std::shared_ptr<gce::Compute>(std::move(*compute));

    // The operator's runners part with spec.gce: its instances learn the link server's address
    // from their metadata, so it is known before the servers start.
    testenv::RunnersEnvOptions eo;
    eo.name = "gce-runners-e2e";
    eo.configure = [](testenv::RunnersEnv& env, cn::OperatorOptions& oo,
                      cn::ServersOptions& sv) -> Status {
      HS_ASSIGN_OR_RETURN(int link_port, FreeLoopbackPort("127.0.0.1"));
      sv.link_address = "127.0.0.1:" + std::to_string(link_port);
      oo.gce.compute = compute_;
      oo.gce.link_endpoint = sv.link_address;
      oo.gce.ca_bundle_pem = env.ca().ca.cert_pem;
      oo.gce.operation_wait = 1s;
      oo.gce.retry_initial = 1s;
      oo.gce.retry_max = 2s;
      return OkStatus();
    };
    auto env = testenv::RunnersEnv::Start(eo);
    ASSERT_TRUE(env.ok()) << env.error().message;
    env_ = std::move(*env);
    boot_ = std::make_unique<VmBoot>(sim_.get(), env_->dir(), env_->registry().host());
    env_->WatchJoinTokens();  // every token minted, for the log check

    Status node = env_->CreateControlNode(kControlNode);
    ASSERT_TRUE(node.ok()) << node.error().message;
  }

  static void TearDownTestSuite() {
    boot_.reset();
    env_.reset();
    if (sim_) sim_->Stop();
    log_.reset();
  }

  static void CreateRunner(const std::string& name, const std::string& gce) {
    Status st = env_->CreateRunner(name, kControlNode, "gce", gce);
    ASSERT_TRUE(st.ok()) << st.error().message;
  }
  static int64_t NodeMilli(const char* which, const char* res) {
    return env_->NodeMilli(kControlNode, which, res);
  }
  static std::optional<json::object> Instance(const std::string& zone, const std::string& name) {
    auto got = compute_->GetInstance(kProject, zone, name);
    if (!got.ok()) return std::nullopt;
    return *got;
  }
  // The simulator's control endpoint (counters, stockouts, latency).
  static json::value SimControl(const std::string& method, const std::string& path,
                                const json::object& body = {}) {
    net::HttpClient::Options ho;
    ho.base_url = sim_->control_endpoint();
    auto http = net::HttpClient::Create(ho);
    if (!http.ok()) return nullptr;
    net::Request rq;
    rq.method = method;
    rq.target = path;
    if (method != "GET") {
      rq.headers = {{"Content-Type", "application/json"}};
      rq.body = json::serialize(body);
    }
    auto r = (*http)->Do(rq);
    if (!r.ok() || r->status != 200) return nullptr;
    boost::system::error_code ec;
    auto v = json::parse(r->body, ec);
    return ec ? json::value(nullptr) : v;
  }
  static int64_t SimCalls(const std::string& method) {
    auto c = SimControl("GET", "/control/counters");
    const json::value* v = c.is_object() ? c.as_object().if_contains(method) : nullptr;
    return v != nullptr && v->is_int64() ? v->as_int64() : 0;
  }
  static std::string Diagnostics() {
    std::string out;
    for (const char* r : {"gce-us", "gce-eu", "gce-stockout", "gce-slow"}) {
      auto o = Get(cn::Runners(), "", r);
      if (o) out += std::string(r) + ": " + json::serialize(*o) + "\n";
    }
    return out + boot_->Logs();
  }

  static inline std::unique_ptr<sim::gce::Simulator> sim_;
  static inline std::shared_ptr<gce::Compute> compute_;
  static inline std::unique_ptr<VmBoot> boot_;
  static inline std::unique_ptr<testenv::LogCapture> log_;
};

TEST_F(GceRunnersTest, RunnersInTwoRegionsGetInstancesLinkRunAPodAndLeaveWithTheirInstances) {
  const auto start = std::chrono::steady_clock::now();
  // A TPU v4 host in us-central2-b, a GPU host in europe-west4-a.
  CreateRunner(
      "gce-us",
      R"({"project":"my-gcp-project","zone":"us-central2-b","machineType":"ct4p-hightpu-4t"})");
  CreateRunner(
      "gce-eu",
      R"({"project":"my-gcp-project","region":"europe-west4","zone":"europe-west4-a",)"
      R"("machineType":"a2-highgpu-1g","acceleratorType":"nvidia-tesla-a100","acceleratorCount":1})");

  const std::string us_vm = cn::GceInstanceName("gce-us"), eu_vm = cn::GceInstanceName("gce-eu");
  ASSERT_TRUE(Eventually(
      [&] { return Instance("us-central2-b", us_vm) && Instance("europe-west4-a", eu_vm); }, 60s))
      << Diagnostics();
  auto us = *Instance("us-central2-b", us_vm);
  auto eu = *Instance("europe-west4-a", eu_vm);
  EXPECT_TRUE(testenv::StringAt(us, "", "machineType")
                  .ends_with("/zones/us-central2-b/machineTypes/ct4p-hightpu-4t"))
      << testenv::StringAt(us, "", "machineType");
  EXPECT_TRUE(testenv::StringAt(eu, "", "machineType")
                  .ends_with("/zones/europe-west4-a/machineTypes/a2-highgpu-1g"));
  const json::array* acc = jsonfield::ArrayField(eu, "guestAccelerators");
  ASSERT_TRUE(acc != nullptr && acc->size() == 1) << json::serialize(eu);
  EXPECT_TRUE(testenv::StringAt((*acc)[0].as_object(), "", "acceleratorType")
                  .ends_with("acceleratorTypes/nvidia-tesla-a100"));
  EXPECT_EQ(jsonfield::IntField((*acc)[0].as_object(), "acceleratorCount").value_or(0), 1);
  EXPECT_EQ(jsonfield::ArrayField(us, "guestAccelerators"), nullptr);
  EXPECT_EQ(testenv::StringAt(eu, "scheduling", "onHostMaintenance"), "TERMINATE");
  EXPECT_EQ(testenv::StringAt(us, "labels", cn::kLabelRunner), "gce-us");
  EXPECT_FALSE(testenv::StringAt(us, "labels", cn::kLabelRunnerUid).empty());
  auto items = gce::MetadataItemsOf(*jsonfield::ObjectField(us, "metadata"));
  EXPECT_EQ(items[cn::kMetadataRunnerName], "gce-us");
  EXPECT_FALSE(items[cn::kMetadataLinkEndpoint].empty());
  EXPECT_NE(items[cn::kMetadataRunnersCa].find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_EQ(items[cn::kMetadataJoinToken].size(), 64u);

  // Their agents boot from the metadata, link, and the control node sums their capacity.
  ASSERT_TRUE(Eventually(
      [] { return RunnerPhase("gce-us") == "Linked" && RunnerPhase("gce-eu") == "Linked"; }, 90s))
      << Diagnostics();
  ASSERT_TRUE(Eventually([] { return NodeMilli("capacity", "cpu") == 8000; }, 30s))
      << NodeMilli("capacity", "cpu");
  std::cout << "two spec.gce runners linked " << MsSince(start)
            << " ms after their Runners were created\n";
  for (const char* r : {"gce-us", "gce-eu"}) {
    auto o = *Get(cn::Runners(), "", r);
    EXPECT_TRUE(testenv::StringAt(o, "status", "address").rfind("127.0.0.", 0) == 0)
        << r << " is dialed at " << testenv::StringAt(o, "status", "address");
    EXPECT_TRUE(testenv::StringAt(o, "status.instance", "networkIP").rfind("10.128.", 0) == 0)
        << json::serialize(o);
    EXPECT_FALSE(testenv::StringAt(o, "status.instance", "selfLink").empty());
    EXPECT_FALSE(testenv::StringAt(o, "status.instance", "id").empty());
    EXPECT_EQ(testenv::StringAt(o, "status.instance", "status"), "RUNNING");
    EXPECT_EQ(Condition(r, "InstanceReady"), "True/InstanceRunning");
    EXPECT_TRUE(kube::HasFinalizer(o, cn::kInstanceFinalizer));
  }
  // The used join token leaves the instances' metadata (setMetadata), the rest stays.
  ASSERT_TRUE(Eventually(
      [&] {
        for (const auto& [zone, vm] :
             {std::pair{"us-central2-b", us_vm}, {"europe-west4-a", eu_vm}}) {
          auto i = Instance(zone, vm);
          if (!i || gce::MetadataItemsOf(*jsonfield::ObjectField(*i, "metadata"))
                        .contains(cn::kMetadataJoinToken)) {
            return false;
          }
        }
        return true;
      },
      30s))
      << Diagnostics();
  auto us_after =
      gce::MetadataItemsOf(*jsonfield::ObjectField(*Instance("us-central2-b", us_vm), "metadata"));
  EXPECT_EQ(us_after[cn::kMetadataRunnerName], "gce-us");
  EXPECT_EQ(us_after[cn::kMetadataLinkEndpoint], items[cn::kMetadataLinkEndpoint]);
  EXPECT_EQ(SimCalls("compute.instances.setMetadata"), 2);
  // Each Runner was inserted once, however often it was reconciled, and a finished operation
  // is not waited for again.
  EXPECT_EQ(SimCalls("compute.instances.insert"), 2);
  EXPECT_FALSE(jsonfield::ObjectAt(*Get(cn::Runners(), "", "gce-us"), "status.instance")
                   ->contains("operation"));
  const int64_t waits = SimCalls("compute.zoneOperations.wait");
  // Four more Runner reconciles (each health refresh requeues both Runners): none waits again.
  const double reconciles = testenv::RunnersEnv::RunnerReconciles();
  ASSERT_TRUE(
      Eventually([&] { return testenv::RunnersEnv::RunnerReconciles() >= reconciles + 4; }, 30s));
  EXPECT_EQ(SimCalls("compute.zoneOperations.wait"), waits);
  EXPECT_EQ(testenv::StringAt(*Get(cn::Runners(), "", "gce-us"), "status", "zone"),
            "us-central2-b");
  EXPECT_EQ(testenv::StringAt(*Get(cn::Runners(), "", "gce-eu"), "status", "region"),
            "europe-west4");

  // A Job's pod runs on one of them, as a real container.
  Create(
      kJobs, env_->ns(),
      R"({"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"on-gce"},"spec":)"
      R"({"backoffLimit":0,"template":{"spec":{"restartPolicy":"Never","tolerations":)"
      R"([{"key":"runners.hyperslice.dev/control-node","operator":"Exists",)"
      R"("effect":"NoSchedule"}],"containers":[{"name":"main","image":")" +
          env_->image() +
          R"(","args":["print:hello from a GCE runner"],"resources":{"requests":{"cpu":"1"}}}]}}}})");
  ASSERT_TRUE(Eventually(
      [] {
        auto j = Get(kJobs, env_->ns(), "on-gce");
        auto s = j ? jsonfield::ObjectField(*j, "status") : nullptr;
        return s && jsonfield::IntField(*s, "succeeded").value_or(0) == 1;
      },
      90s))
      << Diagnostics();

  // The pod goes first, so its runner removes its container, mounts and network namespace (a
  // deleted VM would take them along; a local process does not).
  ASSERT_TRUE(
      env_->client()
          ->Delete(kJobs, env_->ns(), "on-gce", {"Background", 0, std::nullopt, std::nullopt})
          .ok());
  ASSERT_TRUE(Eventually(
      [] {
        auto l = env_->client()->List(kube::resources::Pods(), env_->ns());
        return l.ok() && l->items.empty();
      },
      60s));

  // Deleting a Runner deletes its instance before the Runner goes; its capacity leaves.
  ASSERT_TRUE(env_->client()->Delete(cn::Runners(), "", "gce-eu").ok());
  ASSERT_TRUE(Eventually([] { return !Get(cn::Runners(), "", "gce-eu"); }, 60s)) << Diagnostics();
  EXPECT_FALSE(Instance("europe-west4-a", eu_vm)) << "the Runner went before its instance";
  ASSERT_TRUE(Eventually([] { return NodeMilli("capacity", "cpu") == 4000; }, 30s))
      << NodeMilli("capacity", "cpu");
  EXPECT_TRUE(Instance("us-central2-b", us_vm));
}

TEST_F(GceRunnersTest, AStockoutIsAConditionAndAnEventAndLeavesNoInstance) {
  auto stockout = [&](bool on) {
    return !SimControl(
                "POST", "/control/stockout",
                {{"zone", "europe-west4-b"}, {"machineType", "ct5lp-hightpu-4t"}, {"enabled", on}})
                .is_null();
  };
  ASSERT_TRUE(stockout(true));
  CreateRunner(
      "gce-stockout",
      R"({"project":"my-gcp-project","zone":"europe-west4-b","machineType":"ct5lp-hightpu-4t"})");
  std::string message;
  ASSERT_TRUE(Eventually(
      [&] {
        return Condition("gce-stockout", "InstanceReady", &message) ==
               "False/ZONE_RESOURCE_POOL_EXHAUSTED";
      },
      60s))
      << Diagnostics();
  EXPECT_NE(message.find("does not have enough resources"), std::string::npos) << message;
  EXPECT_EQ(RunnerPhase("gce-stockout"), "Pending");
  // The Warning Event names GCE's reason.
  ASSERT_TRUE(Eventually(
      [] {
        return WarningEvent("gce-stockout", "InstanceCreateFailed", "ZONE_RESOURCE_POOL_EXHAUSTED");
      },
      30s));
  // The retries back off (1 s, then 2 s: retry_initial and retry_max) and none leaves an
  // instance behind. Each failure's record (status.instance.lastError: failures, time) is seen
  // as it is written; the times the controller wrote, not when the test saw them, show the
  // backoff.
  std::map<int64_t, std::chrono::system_clock::time_point> failed_at;
  json::object r;
  ASSERT_TRUE(Eventually(
      [&] {
        auto got = Get(cn::Runners(), "", "gce-stockout");
        if (!got) return false;
        r = *got;
        if (const auto* last = jsonfield::ObjectAt(r, "status.instance.lastError")) {
          auto when = kube::ParseTime(jsonfield::StringField(*last, "time"));
          if (when) failed_at.emplace(jsonfield::IntField(*last, "failures").value_or(0), *when);
        }
        return failed_at.size() >= 2 && failed_at.rbegin()->first >= 3;
      },
      30s))
      << json::serialize(r);
  const auto [first, first_at] = *failed_at.begin();
  const auto [last, last_at] = *failed_at.rbegin();
  std::chrono::milliseconds backoff{0};
  for (int64_t k = first; k < last; ++k) backoff += k == 1 ? 1s : 2s;
  EXPECT_GE(last_at - first_at, backoff)
      << "retries did not back off: failure " << first << " to " << last << " in "
      << std::chrono::duration_cast<std::chrono::milliseconds>(last_at - first_at).count() << " ms";
  const std::string vm = cn::GceInstanceName("gce-stockout");
  EXPECT_FALSE(Instance("europe-west4-b", vm));
  auto listed = compute_->ListInstances(kProject, "europe-west4-b", {});
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty()) << listed->size() << " instances left in europe-west4-b";

  // Capacity returns: the next attempt creates the instance.
  ASSERT_TRUE(stockout(false));
  ASSERT_TRUE(Eventually([&] { return Instance("europe-west4-b", vm).has_value(); }, 30s))
      << Diagnostics();
  ASSERT_TRUE(Eventually([] { return RunnerPhase("gce-stockout") == "Linked"; }, 60s))
      << Diagnostics();
  ASSERT_TRUE(env_->client()->Delete(cn::Runners(), "", "gce-stockout").ok());
  ASSERT_TRUE(Eventually([] { return !Get(cn::Runners(), "", "gce-stockout"); }, 60s));
  EXPECT_FALSE(Instance("europe-west4-b", vm));
}

// A slow insert: its operation is in status.instance.operation while it runs (what a restarted
// operator resumes), it is inserted once, and the field goes when the operation is DONE.
TEST_F(GceRunnersTest, AnInsertsOperationIsRecordedWhileItRuns) {
  ASSERT_FALSE(SimControl("POST", "/control/latency", {{"operationMs", 6000}}).is_null());
  const int64_t inserts = SimCalls("compute.instances.insert");
  CreateRunner(
      "gce-slow",
      R"({"project":"my-gcp-project","zone":"us-central2-a","machineType":"n2-standard-8"})");
  std::string op;
  ASSERT_TRUE(Eventually(
      [&] {
        auto r = Get(cn::Runners(), "", "gce-slow");
        op = r ? testenv::StringAt(*r, "status.instance", "operation") : "";
        return !op.empty();
      },
      30s))
      << Diagnostics();
  EXPECT_NE(op.find("/zones/us-central2-a/operations/"), std::string::npos) << op;
  EXPECT_TRUE(Eventually(
      [] { return Condition("gce-slow", "InstanceReady") == "False/InstanceOperationPending"; }));
  ASSERT_FALSE(SimControl("POST", "/control/latency", {{"operationMs", 300}}).is_null());
  // The instance boots before its operation is DONE (as on GCE), so the runner may link first.
  ASSERT_TRUE(Eventually([] { return RunnerPhase("gce-slow") == "Linked"; }, 60s)) << Diagnostics();
  EXPECT_TRUE(Eventually(
      [] {
        return testenv::StringAt(*Get(cn::Runners(), "", "gce-slow"), "status.instance",
                                 "operation")
            .empty();
      },
      30s));
  // (status.instance is written before the conditions, by the same reconcile.)
  EXPECT_TRUE(Eventually([] {
    return Condition("gce-slow", "InstanceReady") == "True/InstanceRunning";
  })) << Condition("gce-slow", "InstanceReady");
  EXPECT_EQ(SimCalls("compute.instances.insert"), inserts + 1);
  ASSERT_TRUE(env_->client()->Delete(cn::Runners(), "", "gce-slow").ok());
  ASSERT_TRUE(Eventually([] { return !Get(cn::Runners(), "", "gce-slow"); }, 60s));
  EXPECT_FALSE(Instance("us-central2-a", cn::GceInstanceName("gce-slow")));
}

// Last (gtest runs a suite's tests in order): every token minted so far against every log line.
TEST_F(GceRunnersTest, ZNoJoinTokenAppearsInAnyLog) {
  const std::set<std::string> tokens = env_->MintedJoinTokens();
  const std::string op_log = log_->Text();
  const std::string agents = boot_->Logs();
  ASSERT_GE(tokens.size(), 2u) << "the test saw too few join tokens to check anything";
  ASSERT_FALSE(op_log.empty());
  ASSERT_FALSE(agents.empty());
  for (const auto& t : tokens) {
    EXPECT_EQ(op_log.find(t), std::string::npos) << "a join token is in the operator's log";
    EXPECT_EQ(agents.find(t), std::string::npos) << "a join token is in an agent's log";
  }
  std::cout << tokens.size() << " join tokens checked against " << op_log.size()
            << " bytes of operator/simulator log and " << agents.size() << " bytes of agent logs\n";
}

}  // namespace
}  // namespace hyperslice
