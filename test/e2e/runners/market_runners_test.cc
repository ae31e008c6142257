// Runners with spec.marketplace end to end (issue 20): the operator rents a container machine for
// each Runner from the RunPod simulator (sim/runpod over sim/market) with the providers and
// credentials of a GPUNodeClass, on a real kube-apiserver + kube-scheduler +
// kube-controller-manager. sim/gpumachine boots each machine from the payload RunPod received; the
// test supplies its runner-agent seam, which runs the real `hyperslice runner-agent
// --link-from-env` on a loopback address of its own with the container's env (runner name, link
// endpoint, runners CA, join token) as its environment.
//
// Checked: the cheapest container offer that fits (RTX4090 in EU-RO-1 at $0.59/h) is rented once,
// with the agent image, `runner-agent --link-from-env` args and the link env; the provider and
// machine id are in status.machine; the agent links (status.address its loopback address) and a
// pod runs on it as a runc container; deleting the Runner terminates the machine at the
// simulator before the Runner goes; a provider refusal (no capacity) and an impossible request
// (no offer fits) are MachineReady=False conditions with the reason and a Warning Event, and rent
// nothing; no join token appears in any log line of the operator, the simulators or the agents.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "sim/gpumachine/gpumachine.h"
#include "sim/market/simulator.h"
#include "sim/runpod/simulator.h"
#include "src/base/base64.h"
#include "src/base/command.h"
#include "src/base/json.h"
#include "src/base/log.h"
#include "src/gpu/api.h"
#include "src/kube/client.h"
#include "src/kube/manager.h"
#include "src/kube/object_helpers.h"
#include "src/kube/quantity.h"
#include "src/kube/resource.h"
#include "src/runners/controlnode/api.h"
#include "src/runners/controlnode/controlnode.h"
#include "src/runners/controlnode/market_runner.h"
#include "src/runners/controlnode/servers.h"
#include "test/testenv/eventually.h"
#include "test/testenv/files.h"
#include "test/testenv/runners_env.h"
#include "test/testenv/testenv.h"

extern char** environ;

namespace hyperslice {
namespace {

namespace json = boost::json;
namespace cn = runners::controlnode;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testenv::Eventually;

constexpr char kControlNode[] = "market-global";
constexpr char kClass[] = "runner-gpus";
constexpr char kAgentImage[] = "registry.example/hyperslice/hyperslice:test";

using testenv::StringAt;

// The rented containers' agents: `hyperslice runner-agent` with the container's env added to
// this process's environment (never on a command line), each on its own loopback address
// (127.0.0.60 and up), killed when its machine stops.
class Containers {
 public:
  Containers(std::string dir, std::string registry)
      : dir_(std::move(dir)), registry_(std::move(registry)) {}
  ~Containers() {
    std::lock_guard lock(mu_);
    for (auto& [_, pid] : pids_) Kill(pid);
  }
  Result<std::function<void()>> Start(const sim::market::Instance& i,
                                      const sim::gpumachine::RunnerAgentContainer& c) {
    std::lock_guard lock(mu_);
    const std::string ip = "127.0.0." + std::to_string(next_ip_++);
    HS_ASSIGN_OR_RETURN(int port, FreeLoopbackPort(ip));
    const std::string state = dir_ + "/machine-" + i.id;
    fs::create_directories(state);
    const std::string log = state + ".log";
    images_.push_back(c.image);
    args_.push_back(c.args);
    // The container's command, with what a loopback "machine" needs instead of 0.0.0.0.
    std::vector<std::string> argv = {HS_BINARY};
    for (size_t k = 0; k < c.args.size(); ++k) {
      if (c.args[k] == "--listen" && k + 1 < c.args.size()) {
        ++k;
        continue;
      }
      argv.push_back(c.args[k]);
    }
    for (std::string a :
         {std::string("--listen"), ip + ":" + std::to_string(port), std::string("--state-dir"),
          state, std::string("--insecure-registry"), registry_, std::string("--capacity"),
          std::string("cpu=4"), std::string("--capacity"), std::string("memory=8Gi")}) {
      argv.push_back(std::move(a));
    }
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    for (const auto& [k, v] : c.env) env.push_back(k + "=" + v);
    HS_ASSIGN_OR_RETURN(pid_t pid, Spawn(argv, env, log));
    pids_[i.id] = pid;
    logs_.push_back(log);
    roots_.push_back(state + "/runtime");
    addresses_.push_back(ip);
    std::string id = i.id;
    return std::function<void()>([this, id] {
      std::lock_guard lock(mu_);
      if (auto it = pids_.find(id); it != pids_.end()) {
        Kill(it->second);
        pids_.erase(it);
      }
    });
  }
  std::string Logs() {
    std::lock_guard lock(mu_);
    std::string out;
    for (const auto& f : logs_) out += testenv::ReadFile(f);
    return out;
  }
  size_t Running() {
    std::lock_guard lock(mu_);
    return pids_.size();
  }
  std::vector<std::string> Images() {
    std::lock_guard lock(mu_);
    return images_;
  }
  std::vector<std::vector<std::string>> Args() {
    std::lock_guard lock(mu_);
    return args_;
  }
  std::vector<std::string> Addresses() {
    std::lock_guard lock(mu_);
    return addresses_;
  }

 private:
  static void Kill(pid_t pid) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  static Result<pid_t> Spawn(const std::vector<std::string>& argv,
                             const std::vector<std::string>& env, const std::string& log) {
    std::vector<char*> a, e;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
    e.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, a[0], &fa, &attr, a.data(), e.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) return Error::Make(Error::Code::kInternal, "posix_spawn: " + std::to_string(rc));
    return pid;
  }

  std::string dir_, registry_;
  std::mutex mu_;
  std::map<std::string, pid_t> pids_;
  std::vector<std::string> logs_, roots_, images_, addresses_;
  std::vector<std::vector<std::string>> args_;
  int next_ip_ = 60;
};

class MarketRunnersTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_ = testenv::RunnerToolsMissing();
    if (!skip_.empty()) return;
    // Every log line of this process (operator, link server, simulators, provider client).
    log::SetSink([](std::string_view line) {
      std::lock_guard lock(log_mu_);
      operator_log_.append(line).push_back('\n');
      std::fwrite(line.data(), 1, line.size(), stderr);
      std::fputc('\n', stderr);
    });

    // RunPod: its default market (container pods only).
    sim::market::ServerOptions ro;
    ro.market.api_keys = {{"runpod-test-key", "runners"}};
    auto runpod = sim::runpod::Start(ro);
    ASSERT_TRUE(runpod.ok()) << runpod.error().message;
    runpod_ = std::move(*runpod);

    // The operator's runners part with spec.marketplace: the containers learn the link server's
    // address from their env, so it is known before the servers start.
    testenv::RunnersEnvOptions eo;
    eo.name = "market-runners-e2e";
    eo.extra_crds = {{"tgp.io_gpunodeclasses.yaml", gpu::GPUNodeClasses()}};
    eo.configure = [](testenv::RunnersEnv& env, cn::OperatorOptions& oo,
                      cn::ServersOptions& sv) -> Status {
      HS_ASSIGN_OR_RETURN(int link_port, FreeLoopbackPort("127.0.0.1"));
      sv.link_address = "127.0.0.1:" + std::to_string(link_port);
      oo.market.classes = cn::GpuNodeClassSource(env.client(), env.ns(), {});
      oo.market.agent_image = kAgentImage;
      oo.market.link_endpoint = sv.link_address;
      oo.market.ca_bundle_pem = env.ca().ca.cert_pem;
      oo.market.retry_initial = 1s;
      oo.market.retry_max = 2s;
      return OkStatus();
    };
    auto env = testenv::RunnersEnv::Start(eo);
    ASSERT_TRUE(env.ok()) << env.error().message;
    env_ = std::move(*env);

    // Machines that boot the payload RunPod received; the runner-agent seam starts the agent.
    containers_ = std::make_unique<Containers>(env_->dir(), env_->registry().host());
    sim::gpumachine::Options fo;
    fo.market = &runpod_->market();
    fo.runner_agent = [](const sim::market::Instance& i,
                         const sim::gpumachine::RunnerAgentContainer& c) {
      return containers_->Start(i, c);
    };
    auto fleet = sim::gpumachine::Fleet::Start(fo);
    ASSERT_TRUE(fleet.ok()) << fleet.error().message;
    fleet_ = std::move(*fleet);

    // The GPUNodeClass whose provider and credentials the Runners rent with.
    Create(kube::resources::Secrets(), env_->ns(),
           R"({"apiVersion":"v1","kind":"Secret","metadata":{"name":"runpod-key"},)"
           R"("stringData":{"api-key":"runpod-test-key"}})");
    Create(gpu::GPUNodeClasses(), "",
           R"({"apiVersion":"tgp.io/v1","kind":"GPUNodeClass","metadata":{"name":")" +
               std::string(kClass) + R"("},"spec":{"providers":[{"name":"runpod","endpoint":")" +
               runpod_->api_endpoint() + R"(","credentialsRef":{"name":"runpod-key","key":)" +
               R"("api-key"}}]}})");
    // Every token the operator mints, read as the admin could (Secrets in its namespace).
    token_watch_ = std::thread([] {
      while (!stop_tokens_.load()) {
        kube::ListOptions lo;
        lo.label_selector = "runners.hyperslice.dev/runner";
        auto l = env_->client()->List(kube::resources::Secrets(), env_->ns(), lo);
        if (l.ok()) {
          std::lock_guard lock(log_mu_);
          for (const auto& s : l->items) {
            auto d = Base64Decode(testenv::StringAt(s, "data", "token"));
            if (d.ok() && !d->empty()) tokens_.insert(*d);
          }
        }
        std::this_thread::sleep_for(50ms);
      }
    });
    Status node = env_->CreateControlNode(kControlNode);
    ASSERT_TRUE(node.ok()) << node.error().message;
  }

  static void TearDownTestSuite() {
    stop_tokens_ = true;
    if (token_watch_.joinable()) token_watch_.join();
    if (fleet_) fleet_->Stop();
    containers_.reset();
    env_.reset();
    if (runpod_) runpod_->Stop();
    log::SetSink(nullptr);
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  static void Create(const kube::Resource& r, const std::string& ns, const std::string& body) {
    Status st = env_->Create(r, ns, body);
    ASSERT_TRUE(st.ok()) << st.error().message << "\n" << body;
  }
  static void CreateRunner(const std::string& name, const std::string& marketplace) {
    Create(
        cn::Runners(), "",
        R"({"apiVersion":"runners.hyperslice.dev/v1alpha1","kind":"Runner","metadata":{"name":")" +
            name + R"("},"spec":{"controlNode":")" + kControlNode + R"(","marketplace":)" +
            marketplace + "}}");
  }
  static std::optional<json::object> Get(const kube::Resource& r, const std::string& ns,
                                         const std::string& name) {
    return env_->Get(r, ns, name);
  }
  static std::string RunnerPhase(const std::string& name) { return env_->RunnerPhase(name); }
  static std::string Condition(const std::string& runner, const std::string& type,
                               std::string* message = nullptr) {
    auto r = Get(cn::Runners(), "", runner);
    const json::object* st = r ? jsonfield::ObjectField(*r, "status") : nullptr;
    const json::array* conds = st ? jsonfield::ArrayField(*st, "conditions") : nullptr;
    if (conds == nullptr) return "";
    for (const auto& c : *conds) {
      if (!c.is_object() || jsonfield::StringField(c.as_object(), "type") != type) continue;
      if (message) *message = std::string(jsonfield::StringField(c.as_object(), "message"));
      return std::string(jsonfield::StringField(c.as_object(), "status")) + "/" +
             std::string(jsonfield::StringField(c.as_object(), "reason"));
    }
    return "";
  }
  static bool WarningEvent(const std::string& runner, const std::string& reason,
                           const std::string& text) {
    kube::ListOptions lo;
    lo.field_selector = "involvedObject.name=" + runner;
    auto l = env_->client()->List(kube::resources::Events(), "default", lo);
    if (!l.ok()) return false;
    for (const auto& e : l->items) {
      if (StringAt(e, "", "type") == "Warning" && StringAt(e, "", "reason") == reason &&
          StringAt(e, "", "message").find(text) != std::string::npos) {
        return true;
      }
    }
    return false;
  }
  // Instances of the simulated market that are not terminated.
  static std::vector<sim::market::Instance> Live() {
    std::vector<sim::market::Instance> out;
    for (auto& i : runpod_->market().List("")) {
      if (i.state != sim::market::State::kTerminated) out.push_back(i);
    }
    return out;
  }
  static std::string Diagnostics() {
    std::string out;
    for (const char* r : {"market-a", "market-nocap", "market-nofit"}) {
      auto o = Get(cn::Runners(), "", r);
      if (o) out += std::string(r) + ": " + json::serialize(*o) + "\n";
    }
    if (auto p = Get(kube::resources::Pods(), env_->ns(), "on-market"))
      out += json::serialize(*p) + "\n";
    if (auto n = Get(kube::resources::Nodes(), "", kControlNode)) out += json::serialize(*n) + "\n";
    if (auto e = env_->client()->List(kube::resources::Events(), "default"); e.ok()) {
      for (const auto& ev : e->items) {
        out += StringAt(ev, "involvedObject", "name") + " " + StringAt(ev, "", "reason") + " " +
               StringAt(ev, "", "message") + "\n";
      }
    }
    return out + json::serialize(runpod_->market().Dump()) + "\n" + containers_->Logs();
  }

  static inline std::string skip_;
  static inline std::unique_ptr<sim::market::MarketSimulator> runpod_;
  static inline std::unique_ptr<testenv::RunnersEnv> env_;
  static inline std::unique_ptr<Containers> containers_;
  static inline std::unique_ptr<sim::gpumachine::Fleet> fleet_;
  static inline std::thread token_watch_;
  static inline std::mutex log_mu_;
  static inline std::string operator_log_;
  static inline std::set<std::string> tokens_;
  static inline std::atomic<bool> stop_tokens_{false};
};

TEST_F(MarketRunnersTest, ARentedContainerLinksRunsAPodAndIsReturnedWithItsRunner) {
  const auto start = std::chrono::steady_clock::now();
  CreateRunner("market-a", R"({"gpuNodeClass":")" + std::string(kClass) +
                               R"(","gpuType":"RTX4090","gpuCount":1})");
  ASSERT_TRUE(Eventually([] { return RunnerPhase("market-a") == "Linked"; }, 90s)) << Diagnostics();
  std::cout << "a spec.marketplace runner linked "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - start)
                   .count()
            << " ms after its Runner was created\n";

  // One machine, the cheapest RTX 4090 container offer, recorded in the Runner's status.
  auto live = Live();
  ASSERT_EQ(live.size(), 1u) << Diagnostics();
  const auto& m = live[0];
  EXPECT_EQ(m.listing.region, "EU-RO-1");
  EXPECT_EQ(m.listing.gpu_name, "NVIDIA GeForce RTX 4090");
  auto r = *Get(cn::Runners(), "", "market-a");
  EXPECT_EQ(StringAt(r, "status.machine", "provider"), "runpod");
  EXPECT_EQ(StringAt(r, "status.machine", "id"), m.id);
  EXPECT_EQ(StringAt(r, "status.machine", "gpuType"), "RTX4090");
  EXPECT_EQ(StringAt(r, "status.machine", "price"), "0.59");
  EXPECT_EQ(StringAt(r, "status.machine", "state"), "Running");
  EXPECT_EQ(Condition("market-a", "MachineReady"), "True/MachineRunning");
  EXPECT_TRUE(kube::HasFinalizer(r, cn::kMachineFinalizer));
  // The agent linked on the address it reported (its loopback address, never the machine's).
  ASSERT_EQ(containers_->Addresses().size(), 1u);
  EXPECT_EQ(StringAt(r, "status", "address").rfind(containers_->Addresses()[0] + ":", 0), 0u)
      << StringAt(r, "status", "address");
  // The container: the agent image, its command, the link env (the token is the minted one).
  EXPECT_EQ(containers_->Images(), std::vector<std::string>{kAgentImage});
  const auto args = containers_->Args()[0];
  ASSERT_GE(args.size(), 2u);
  EXPECT_EQ(args[0], "runner-agent");
  EXPECT_EQ(args[1], "--link-from-env");
  const json::object* env =
      m.payload.if_contains("env") ? &m.payload.at("env").as_object() : nullptr;
  ASSERT_NE(env, nullptr);
  EXPECT_EQ(StringAt(*env, "", cn::kEnvRunnerName), "market-a");
  EXPECT_NE(StringAt(*env, "", cn::kEnvRunnersCa).find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_EQ(StringAt(*env, "", cn::kEnvJoinToken).size(), 64u);
  // Rented once however often the Runner was reconciled.
  EXPECT_EQ(runpod_->market().Counters()["podFindAndDeployOnDemand"], 1);

  // A pod runs on it as a real container.
  Create(kube::resources::Pods(), env_->ns(),
         R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"on-market"},"spec":)"
         R"({"restartPolicy":"Never","tolerations":)"
         R"([{"key":"runners.hyperslice.dev/control-node","operator":"Exists",)"
         R"("effect":"NoSchedule"}],"containers":[{"name":"main","image":")" +
             env_->image() +
             R"(","args":["print:hello from a rented runner"],)"
             R"("resources":{"requests":{"cpu":"1"}}}]}})");
  ASSERT_TRUE(Eventually(
      [] {
        auto p = Get(kube::resources::Pods(), env_->ns(), "on-market");
        return p && StringAt(*p, "status", "phase") == "Succeeded";
      },
      90s))
      << Diagnostics();
  ASSERT_TRUE(env_->client()
                  ->Delete(kube::resources::Pods(), env_->ns(), "on-market",
                           {"Background", 0, std::nullopt, std::nullopt})
                  .ok());
  ASSERT_TRUE(
      Eventually([] { return !Get(kube::resources::Pods(), env_->ns(), "on-market"); }, 60s));

  // Deleting the Runner terminates its machine at the provider before the Runner goes.
  ASSERT_TRUE(env_->client()->Delete(cn::Runners(), "", "market-a").ok());
  ASSERT_TRUE(Eventually([] { return !Get(cn::Runners(), "", "market-a"); }, 60s)) << Diagnostics();
  auto after = runpod_->market().Get(m.id);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->state, sim::market::State::kTerminated) << sim::market::StateName(after->state);
  EXPECT_TRUE(Live().empty()) << Diagnostics();
  EXPECT_TRUE(Eventually([] { return containers_->Running() == 0; }, 10s));
}

TEST_F(MarketRunnersTest, ProviderFailuresAreConditionsAndEventsAndRentNothing) {
  // RunPod has no capacity for the create: the provider's refusal is the condition.
  sim::market::Fault f;
  f.kind = sim::market::Fault::Kind::kCapacity;
  runpod_->market().SetFault("podFindAndDeployOnDemand", f);
  CreateRunner("market-nocap", R"({"gpuNodeClass":")" + std::string(kClass) + R"("})");
  std::string message;
  ASSERT_TRUE(Eventually(
      [&] {
        return Condition("market-nocap", "MachineReady", &message) == "False/InsufficientCapacity";
      },
      60s))
      << Diagnostics();
  EXPECT_NE(message.find("runpod"), std::string::npos) << message;
  EXPECT_EQ(RunnerPhase("market-nocap"), "Pending");
  EXPECT_TRUE(Eventually(
      [] { return WarningEvent("market-nocap", "MachineLaunchFailed", "InsufficientCapacity"); },
      30s));
  EXPECT_TRUE(Live().empty());

  // No offer fits: named, nothing rented.
  CreateRunner("market-nofit", R"({"gpuNodeClass":")" + std::string(kClass) +
                                   R"(","gpuType":"RTX4090","gpuCount":8})");
  ASSERT_TRUE(Eventually(
      [&] { return Condition("market-nofit", "MachineReady", &message) == "False/NoOfferFits"; },
      60s))
      << Diagnostics();
  EXPECT_FALSE(message.empty());
  EXPECT_TRUE(Eventually(
      [] { return WarningEvent("market-nofit", "MachineLaunchFailed", "NoOfferFits"); }, 30s));

  // Capacity returns: the next attempt rents and the runner links.
  runpod_->market().ClearFaults();
  ASSERT_TRUE(Eventually([] { return RunnerPhase("market-nocap") == "Linked"; }, 60s))
      << Diagnostics();
  EXPECT_EQ(Live().size(), 1u);
  for (const char* r : {"market-nocap", "market-nofit"}) {
    ASSERT_TRUE(env_->client()->Delete(cn::Runners(), "", r).ok());
  }
  ASSERT_TRUE(Eventually(
      [] {
        return !Get(cn::Runners(), "", "market-nocap") && !Get(cn::Runners(), "", "market-nofit");
      },
      60s))
      << Diagnostics();
  EXPECT_TRUE(Live().empty()) << Diagnostics();
}

// Last (gtest runs a suite's tests in order): every token minted so far against every log line.
TEST_F(MarketRunnersTest, ZNoJoinTokenAppearsInAnyLog) {
  std::lock_guard lock(log_mu_);
  ASSERT_FALSE(tokens_.empty());
  const std::string agents = containers_->Logs();
  for (const auto& t : tokens_) {
    EXPECT_EQ(operator_log_.find(t), std::string::npos) << "a join token is in the operator's log";
    EXPECT_EQ(agents.find(t), std::string::npos) << "a join token is in an agent's log";
  }
}

}  // namespace
}  // namespace hyperslice
