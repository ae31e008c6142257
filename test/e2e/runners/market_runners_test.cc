// Runners with spec.marketplace end to end (issue 20): the operator rents a container machine for
// each Runner from the RunPod or the Vast.ai simulator (sim/runpod, sim/vast over sim/market) with
// the providers and credentials of a GPUNodeClass, on a real kube-apiserver + kube-scheduler +
// kube-controller-manager. sim/gpumachine boots each machine from the payload its provider
// received, relaying the ports the create published from the machine's public address (a
// loopback one) to the container's own; the test supplies its runner-agent seam, which runs the
// real `hyperslice runner-agent --link-from-env` on the container's address with the container's
// env (runner name, link endpoint, runners CA, join token, the provider's public address and
// mapped ports) as its environment.
//
// Checked: the cheapest container offer that fits (RTX4090 in EU-RO-1 at $0.59/h on RunPod;
// California at $0.35/h on Vast) is rented once, with the agent image, `runner-agent
// --link-from-env` args, the link env and the agent's port published (RunPod `ports: "7443/tcp"`,
// Vast env "-p 7443:7443"); the agent links at the public address and mapped port, which is what
// the control node dials (status.address, connections through the mapping); a pod runs on it as a
// runc container; deleting the Runner terminates the machine before the Runner goes; a container
// whose port was not published gets no mapping and its agent refuses to start; a GPUNodeClass
// deleted before its Runner waits (finalizer runners.hyperslice.dev/in-use, condition, Event)
// until the machine is returned, then goes; a provider refusal (no capacity) and an impossible
// request (no offer fits) are MachineReady=False conditions with the reason and a Warning Event,
// and rent nothing; no join token appears in any log line of the operator, the simulators or the
// agents.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "sim/gpumachine/gpumachine.h"
#include "sim/market/simulator.h"
#include "sim/runpod/simulator.h"
#include "sim/vast/simulator.h"
#include "src/base/base64.h"
#include "src/base/command.h"
#include "src/base/json.h"
#include "src/base/log.h"
#include "src/gpu/api.h"
#include "src/gpu/providers.h"
#include "src/kube/client.h"
#include "src/kube/manager.h"
#include "src/kube/metrics.h"
#include "src/kube/object_helpers.h"
#include "src/kube/quantity.h"
#include "src/kube/resource.h"
#include "src/runners/controlnode/api.h"
#include "src/runners/controlnode/class_protection.h"
#include "src/runners/controlnode/controlnode.h"
#include "src/runners/controlnode/market_runner.h"
#include "src/runners/controlnode/servers.h"
#include "test/testenv/eventually.h"
#include "test/testenv/files.h"
#include "test/testenv/log_capture.h"
#include "test/testenv/runners_env.h"
#include "test/testenv/runners_suite.h"
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
constexpr char kClass[] = "runner-gpus";           // RunPod only
constexpr char kVastClass[] = "runner-gpus-vast";  // Vast.ai only
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
    for (auto& [id, pid] : pids_) Kill(pid, dir_ + "/machine-" + id);
  }
  Result<std::function<void()>> Start(const sim::market::Instance& i,
                                      const sim::gpumachine::RunnerAgentContainer& c) {
    std::lock_guard lock(mu_);
    const std::string state = dir_ + "/machine-" + i.id;
    fs::create_directories(state);
    const std::string log = state + ".log";
    images_.push_back(c.image);
    args_.push_back(c.args);
    // The container's command; its 0.0.0.0 is the container's own address in the simulator
    // (same port: only the provider's mapping of that port reaches it).
    std::vector<std::string> argv = {HS_BINARY};
    for (const auto& a : c.args) {
      argv.push_back(a.starts_with("0.0.0.0:") ? c.address + a.substr(7) : a);
    }
    for (std::string a : {std::string("--state-dir"), state, std::string("--insecure-registry"),
                          registry_, std::string("--capacity"), std::string("cpu=4"),
                          std::string("--capacity"), std::string("memory=8Gi")}) {
      argv.push_back(std::move(a));
    }
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    for (const auto& [k, v] : c.env) {
      std::string kv = k;
      kv.append("=").append(v);
      env.push_back(std::move(kv));
    }
    HS_ASSIGN_OR_RETURN(pid_t pid, Spawn(argv, env, log));
    pids_[i.id] = pid;
    logs_.push_back(log);
    log_of_[i.id] = log;
    roots_.push_back(state + "/runtime");
    addresses_.push_back(c.address);
    envs_[i.id] = c.env;
    std::string id = i.id;
    return std::function<void()>([this, id] {
      std::lock_guard lock(mu_);
      if (auto it = pids_.find(id); it != pids_.end()) {
        Kill(it->second, dir_ + "/machine-" + id);
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
  std::string Log(const std::string& machine) {
    std::lock_guard lock(mu_);
    auto it = log_of_.find(machine);
    return it == log_of_.end() ? std::string() : testenv::ReadFile(it->second);
  }
  // The env a machine's container ran with (the create's and the provider's variables).
  std::map<std::string, std::string> Env(const std::string& machine) {
    std::lock_guard lock(mu_);
    return envs_[machine];
  }

 private:
  // The machine is returned: its agent and everything the agent made go.
  static void Kill(pid_t pid, const std::string& state) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    testenv::RemoveMachineRemains(state);
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
  std::map<std::string, std::map<std::string, std::string>> envs_;
  std::map<std::string, std::string> log_of_;
};

class MarketRunnersTest : public testenv::RunnersSuite<MarketRunnersTest> {
 protected:
  static void SetUpTestSuite() {
    skip_ = testenv::RunnerToolsMissing();
    if (!skip_.empty()) return;
    // Every log line of this process (operator, link server, simulators, provider client).
    log_ = std::make_unique<testenv::LogCapture>(/*echo=*/true);

    // RunPod: its default market (container pods only).
    sim::market::ServerOptions ro;
    ro.market.api_keys = {{"runpod-test-key", "runners"}};
    auto runpod = sim::runpod::Start(ro);
    ASSERT_TRUE(runpod.ok()) << runpod.error().message;
    runpod_ = std::move(*runpod);
    // Vast.ai: its default market (container asks; none on a VM machine).
    sim::market::ServerOptions vo;
    vo.market.api_keys = {{"vast-test-key", "runners"}};
    auto vast = sim::vast::Start(vo);
    ASSERT_TRUE(vast.ok()) << vast.error().message;
    vast_ = std::move(*vast);

    // The operator's runners part with spec.marketplace: the containers learn the link server's
    // address from their env, so it is known before the servers start.
    testenv::RunnersEnvOptions eo;
    eo.name = "market-runners-e2e";
    eo.extra_crds = {{"tgp.io_gpunodeclasses.yaml", gpu::GPUNodeClasses()}};
    eo.configure = [](testenv::RunnersEnv& env, cn::OperatorOptions& oo,
                      cn::ServersOptions& sv) -> Status {
      HS_ASSIGN_OR_RETURN(int link_port, FreeLoopbackPort("127.0.0.1"));
      sv.link_address = "127.0.0.1:" + std::to_string(link_port);
      link_address_ = sv.link_address;
      // Vast's documented pace (one request per 2 s) would make the test minutes long; the
      // simulator has no limit, so the clients may go faster.
      oo.market.classes =
          cn::GpuNodeClassSource(env.client(), env.ns(), {}, [](gpu::ProviderConfig c) {
            c.requests_per_second = 50;
            c.burst = 50;
            return gpu::NewProvider(c);
          });
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
    for (auto* sim : {runpod_.get(), vast_.get()}) {
      sim::gpumachine::Options fo;
      fo.market = &sim->market();
      fo.runner_agent = [](const sim::market::Instance& i,
                           const sim::gpumachine::RunnerAgentContainer& c) {
        return containers_->Start(i, c);
      };
      auto fleet = sim::gpumachine::Fleet::Start(fo);
      ASSERT_TRUE(fleet.ok()) << fleet.error().message;
      fleets_[sim->market().options().provider] = std::move(*fleet);
    }

    // The GPUNodeClasses whose provider and credentials the Runners rent with.
    Create(kube::resources::Secrets(), env_->ns(),
           R"({"apiVersion":"v1","kind":"Secret","metadata":{"name":"runpod-key"},)"
           R"("stringData":{"api-key":"runpod-test-key"}})");
    Create(kube::resources::Secrets(), env_->ns(),
           R"({"apiVersion":"v1","kind":"Secret","metadata":{"name":"vast-key"},)"
           R"("stringData":{"api-key":"vast-test-key"}})");
    CreateClass(kClass, "runpod");
    CreateClass(kVastClass, "vastai");
    env_->WatchJoinTokens();  // every token minted, for the log check
    Status node = env_->CreateControlNode(kControlNode);
    ASSERT_TRUE(node.ok()) << node.error().message;
  }

  static void TearDownTestSuite() {
    for (auto& [_, fleet] : fleets_) fleet->Stop();
    containers_.reset();
    env_.reset();
    if (runpod_) runpod_->Stop();
    if (vast_) vast_->Stop();
    log_.reset();
  }

  // A GPUNodeClass with one provider: the RunPod simulator ("runpod") or Vast's ("vastai").
  static void CreateClass(const std::string& name, const std::string& provider) {
    const bool runpod = provider == "runpod";
    Create(gpu::GPUNodeClasses(), "",
           R"({"apiVersion":"tgp.io/v1","kind":"GPUNodeClass","metadata":{"name":")" + name +
               R"("},"spec":{"providers":[{"name":")" + provider + R"(","endpoint":")" +
               (runpod ? runpod_ : vast_)->api_endpoint() + R"(","credentialsRef":{"name":")" +
               (runpod ? "runpod-key" : "vast-key") + R"(","key":"api-key"}}]}})");
  }
  static void CreateRunner(const std::string& name, const std::string& marketplace) {
    Status st = env_->CreateRunner(name, kControlNode, "marketplace", marketplace);
    ASSERT_TRUE(st.ok()) << st.error().message;
  }
  // A pod tolerating the control node runs to completion on the (only) linked runner, then goes.
  static void RunsAPod(const std::string& name) {
    Create(kube::resources::Pods(), env_->ns(),
           R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":")" + name +
               R"("},"spec":{"restartPolicy":"Never","tolerations":)"
               R"([{"key":"runners.hyperslice.dev/control-node","operator":"Exists",)"
               R"("effect":"NoSchedule"}],"containers":[{"name":"main","image":")" +
               env_->image() +
               R"(","args":["print:hello from a rented runner"],)"
               R"("resources":{"requests":{"cpu":"1"}}}]}})");
    ASSERT_TRUE(Eventually(
        [&] {
          auto p = Get(kube::resources::Pods(), env_->ns(), name);
          return p && StringAt(*p, "status", "phase") == "Succeeded";
        },
        90s))
        << Diagnostics();
    ASSERT_TRUE(env_->client()
                    ->Delete(kube::resources::Pods(), env_->ns(), name,
                             {"Background", 0, std::nullopt, std::nullopt})
                    .ok());
    ASSERT_TRUE(Eventually([&] { return !Get(kube::resources::Pods(), env_->ns(), name); }, 60s));
  }
  static bool ClassInUse(const std::string& cls) {
    auto c = Get(gpu::GPUNodeClasses(), "", cls);
    return c && kube::HasFinalizer(*c, cn::kClassInUseFinalizer);
  }
  // GETs of GPUNodeClasses the apiserver has served (its apiserver_request_total), whoever asked.
  static double ClassGets() {
    auto m = env_->client()->Raw("GET", "/metrics");
    if (!m.ok() || m->status != 200) return -1;
    double total = 0;
    std::istringstream lines(m->body);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("apiserver_request_total{", 0) != 0) continue;
      if (line.find(R"(resource="gpunodeclasses")") == std::string::npos) continue;
      if (line.find(R"(verb="GET")") == std::string::npos) continue;
      total += std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
    }
    return total;
  }
  // Finished Runner reconciles, whatever their result.
  static double RunnerReconciles() {
    double total = 0;
    for (const char* result : {"success", "error", "requeue", "requeue_after"}) {
      total += kube::metrics::Registry::Default()
                   .GetCounter("controller_runtime_reconcile_total", "",
                               {{"controller", "runners-runner"}, {"result", result}})
                   .Value();
    }
    return total;
  }
  // Instances of the simulated markets that are not terminated.
  static std::vector<sim::market::Instance> Live() {
    std::vector<sim::market::Instance> out;
    for (auto* sim : {runpod_.get(), vast_.get()}) {
      for (auto& i : sim->market().List("")) {
        if (i.state != sim::market::State::kTerminated) out.push_back(i);
      }
    }
    return out;
  }
  // What sim/gpumachine made of a machine (its published ports, the connections through them).
  static sim::gpumachine::Machine MachineOf(const std::string& provider, const std::string& id) {
    auto m = fleets_.at(provider)->Get(id);
    return m ? *m : sim::gpumachine::Machine{};
  }
  static std::string Diagnostics() {
    std::string out;
    for (const char* r :
         {"market-a", "market-nocap", "market-nofit", "market-vast", "market-doomed"}) {
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
    return out + json::serialize(runpod_->market().Dump()) + "\n" +
           json::serialize(vast_->market().Dump()) + "\n" + containers_->Logs();
  }

  static inline std::string link_address_;
  static inline std::unique_ptr<sim::market::MarketSimulator> runpod_, vast_;
  static inline std::unique_ptr<Containers> containers_;
  static inline std::map<std::string, std::unique_ptr<sim::gpumachine::Fleet>> fleets_;
  static inline std::unique_ptr<testenv::LogCapture> log_;
};

TEST_F(MarketRunnersTest, ARentedContainerLinksRunsAPodAndIsReturnedWithItsRunner) {
  const auto start = std::chrono::steady_clock::now();
  CreateRunner("market-a", R"({"gpuNodeClass":")" + std::string(kClass) +
                               R"(","gpuType":"RTX4090","gpuCount":1})");
  ASSERT_TRUE(Eventually([] { return RunnerPhase("market-a") == "Linked"; }, 90s)) << Diagnostics();
  std::cout << "a spec.marketplace runner linked " << MsSince(start)
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
  // The agent's port was published (RunPod `ports`), and what the control node dials is the
  // machine's public address and the port RunPod mapped to it (the agent read them from its env),
  // never the container's own address; the control node's connections came through the mapping.
  EXPECT_EQ(StringAt(m.payload, "", "ports"), "7443/tcp");
  ASSERT_EQ(m.tcp_ports.count(7443), 1u) << Diagnostics();
  const auto machine = MachineOf("runpod", m.id);
  ASSERT_EQ(machine.published.count(7443), 1u);
  const std::string published = machine.published.at(7443);
  EXPECT_EQ(published.substr(published.rfind(':') + 1), std::to_string(m.tcp_ports.at(7443)));
  EXPECT_EQ(StringAt(r, "status", "address"), published);
  ASSERT_EQ(containers_->Addresses().size(), 1u);
  EXPECT_NE(published.rfind(containers_->Addresses()[0] + ":", 0), 0u) << published;
  EXPECT_GT(machine.published_connections, 0u);
  auto cenv = containers_->Env(m.id);
  EXPECT_EQ(cenv["RUNPOD_PUBLIC_IP"] + ":" + cenv["RUNPOD_TCP_PORT_7443"], published);
  // The class is kept while the Runner rents with it.
  EXPECT_TRUE(ClassInUse(kClass));
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
  // The class is read once per reconcile (Protect's GET; the provisioner rents with what it
  // read), not once more to rent: over six more reconciles at most one GET each, give or take
  // the reconcile under way at either end.
  const double gets_before = ClassGets();
  const double reconciles_before = RunnerReconciles();
  ASSERT_GE(gets_before, 0) << "the apiserver's /metrics is not readable";
  ASSERT_TRUE(Eventually([&] { return RunnerReconciles() >= reconciles_before + 6; }, 60s));
  const double class_gets = ClassGets() - gets_before;
  const double reconciles = RunnerReconciles() - reconciles_before;
  std::cout << "GPUNodeClass GETs over " << reconciles << " Runner reconciles: " << class_gets
            << "\n";
  EXPECT_LE(class_gets, reconciles + 2);

  // A pod runs on it as a real container.
  RunsAPod("on-market");

  // Deleting the Runner terminates its machine at the provider before the Runner goes.
  ASSERT_TRUE(env_->client()->Delete(cn::Runners(), "", "market-a").ok());
  ASSERT_TRUE(Eventually([] { return !Get(cn::Runners(), "", "market-a"); }, 60s)) << Diagnostics();
  auto after = runpod_->market().Get(m.id);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->state, sim::market::State::kTerminated) << sim::market::StateName(after->state);
  EXPECT_TRUE(Live().empty()) << Diagnostics();
  EXPECT_TRUE(Eventually([] { return containers_->Running() == 0; }, 10s));
  // No Runner rents with the class any more: it is not held.
  EXPECT_TRUE(Eventually([] { return !ClassInUse(kClass); }, 10s));
}

TEST_F(MarketRunnersTest, AVastContainerLinksThroughItsPublishedPortRunsAPodAndIsReturned) {
  const auto start = std::chrono::steady_clock::now();
  CreateRunner("market-vast",
               R"({"gpuNodeClass":")" + std::string(kVastClass) + R"(","gpuType":"RTX4090"})");
  ASSERT_TRUE(Eventually([] { return RunnerPhase("market-vast") == "Linked"; }, 90s))
      << Diagnostics();
  std::cout << "a Vast.ai runner linked " << MsSince(start) << " ms after its Runner was created\n";
  std::vector<sim::market::Instance> live;
  for (auto& i : vast_->market().List("")) {
    if (i.state != sim::market::State::kTerminated) live.push_back(i);
  }
  ASSERT_EQ(live.size(), 1u) << Diagnostics();
  const auto& m = live[0];
  EXPECT_EQ(m.listing.id, "18420311");  // the cheapest RTX 4090 ask (California, $0.35/h)
  auto r = *Get(cn::Runners(), "", "market-vast");
  EXPECT_EQ(StringAt(r, "status.machine", "provider"), "vastai");
  EXPECT_EQ(StringAt(r, "status.machine", "id"), m.id);
  EXPECT_EQ(StringAt(r, "status.machine", "price"), "0.35");
  EXPECT_EQ(vast_->market().Counters()["PUT /api/v0/asks/{id}/"], 1);
  // Vast's create: the image's entrypoint with the agent's args, the port as a docker option in
  // env (vast-cli's "-p <port>:<port>": "1"), which is an option, not a variable, in the container.
  EXPECT_EQ(StringAt(m.payload, "", "runtype"), "args");
  EXPECT_EQ(StringAt(m.payload.at("env").as_object(), "", "-p 7443:7443"), "1");
  EXPECT_EQ(StringAt(m.payload.at("env").as_object(), "", cn::kEnvRunnerName), "market-vast");
  auto cenv = containers_->Env(m.id);
  EXPECT_EQ(cenv.count("-p 7443:7443"), 0u);
  // Dialed at the machine's public address and the port Vast mapped (PUBLIC_IPADDR,
  // VAST_TCP_PORT_7443), through the mapping.
  ASSERT_EQ(m.tcp_ports.count(7443), 1u) << Diagnostics();
  const auto machine = MachineOf("vastai", m.id);
  ASSERT_EQ(machine.published.count(7443), 1u);
  EXPECT_EQ(cenv["PUBLIC_IPADDR"] + ":" + cenv["VAST_TCP_PORT_7443"], machine.published.at(7443));
  EXPECT_EQ(cenv["VAST_TCP_PORT_7443"], std::to_string(m.tcp_ports.at(7443)));
  EXPECT_EQ(StringAt(r, "status", "address"), machine.published.at(7443));
  EXPECT_GT(machine.published_connections, 0u);

  RunsAPod("on-vast");

  ASSERT_TRUE(env_->client()->Delete(cn::Runners(), "", "market-vast").ok());
  ASSERT_TRUE(Eventually([] { return !Get(cn::Runners(), "", "market-vast"); }, 60s))
      << Diagnostics();
  // Destroyed: gone from Vast's reads at once, terminated by the market a moment later.
  EXPECT_TRUE(Eventually([&] { return Live().empty(); }, 10s)) << Diagnostics();
  EXPECT_EQ(vast_->market().Get(m.id)->state, sim::market::State::kTerminated);
  EXPECT_TRUE(Eventually([] { return !ClassInUse(kVastClass); }, 10s));
}

// The other side of exposure: a runner-agent container whose create published no port (sent
// through RunPod's API as the operator would, minus `ports`) gets no mapping and no
// RUNPOD_TCP_PORT_7443, so its agent refuses to start: there is nothing a control node could dial.
TEST_F(MarketRunnersTest, AContainerWithoutItsPortPublishedIsReachableFromNowhere) {
  gpu::ProviderConfig pc;
  pc.name = "runpod";
  pc.endpoint = runpod_->api_endpoint();
  pc.credentials = gpu::StaticCredential("runpod-test-key");
  auto client = gpu::NewProvider(pc);
  ASSERT_TRUE(client.ok()) << client.error().message;
  auto offers = (*client)->ListOffers();
  ASSERT_TRUE(offers.ok()) << offers.error().message;
  const gpu::Offer* offer = nullptr;
  for (const auto& o : *offers) {
    if (o.gpu_type == "RTX4090" && o.gpu_count == 1) offer = &o;
  }
  ASSERT_NE(offer, nullptr);
  gpu::LaunchRequest lr;
  lr.offer = offer;
  lr.name = "hs-runner-unpublished";
  lr.payload.image = kAgentImage;
  lr.payload.args = {"runner-agent", "--link-from-env", "--listen", "0.0.0.0:7443"};
  lr.payload.env = {{cn::kEnvRunnerName, "unpublished"},
                    {cn::kEnvLinkEndpoint, link_address_},
                    {cn::kEnvRunnersCa, env_->ca().ca.cert_pem}};
  auto created = (*client)->Create(lr);
  ASSERT_TRUE(created.ok()) << created.error().message;
  const std::string id = created->id;
  ASSERT_TRUE(Eventually(
      [&] { return containers_->Log(id).find("is not published") != std::string::npos; }, 60s))
      << containers_->Log(id) << Diagnostics();
  EXPECT_TRUE(MachineOf("runpod", id).published.empty());
  auto cenv = containers_->Env(id);
  EXPECT_EQ(cenv.count("RUNPOD_TCP_PORT_7443"), 0u);
  EXPECT_FALSE(cenv["RUNPOD_PUBLIC_IP"].empty());  // the machine has a public address, no mapping
  EXPECT_EQ(runpod_->market().Get(id)->tcp_ports.size(), 0u);
  ASSERT_TRUE((*client)->Delete(id).ok());
  EXPECT_TRUE(Eventually([] { return Live().empty(); }, 30s)) << Diagnostics();
}

// Deleting the GPUNodeClass first does not strand the Runner: the class waits (finalizer
// runners.hyperslice.dev/in-use, condition and Event naming the Runner) until the Runner is
// deleted and its machine returned through the class's provider; then the class goes.
TEST_F(MarketRunnersTest, AClassDeletedBeforeItsRunnerWaitsUntilTheMachineIsReturned) {
  constexpr char kDoomed[] = "runner-gpus-doomed";
  CreateClass(kDoomed, "runpod");
  CreateRunner("market-doomed",
               R"({"gpuNodeClass":")" + std::string(kDoomed) + R"(","gpuType":"RTX4090"})");
  ASSERT_TRUE(Eventually([] { return RunnerPhase("market-doomed") == "Linked"; }, 90s))
      << Diagnostics();
  EXPECT_TRUE(ClassInUse(kDoomed));
  const std::string id = StringAt(*Get(cn::Runners(), "", "market-doomed"), "status.machine", "id");
  ASSERT_FALSE(id.empty());

  const auto deleted = std::chrono::steady_clock::now();
  ASSERT_TRUE(env_->client()->Delete(gpu::GPUNodeClasses(), "", kDoomed).ok());
  std::string message;
  ASSERT_TRUE(Eventually(
      [&] {
        auto c = Get(gpu::GPUNodeClasses(), "", kDoomed);
        if (!c || !kube::IsDeleting(*c)) return false;
        auto cond = kube::FindCondition(*c, "RunnersReleased");
        if (cond) message = cond->message;
        return cond && cond->status == "False" && cond->reason == "InUseByRunners";
      },
      30s))
      << Diagnostics();
  EXPECT_NE(message.find("market-doomed"), std::string::npos) << message;
  EXPECT_TRUE(Eventually([&] { return WarningEvent(kDoomed, "InUse", "market-doomed"); }, 30s));
  // Held, with the machine still running and the Runner still linked, over three more
  // reconciles of the Runner (the only one; the first may be the one that wrote the condition):
  // each reads the deleting class again and could release it.
  const double reconciles = testenv::RunnersEnv::RunnerReconciles();
  ASSERT_TRUE(
      Eventually([&] { return testenv::RunnersEnv::RunnerReconciles() >= reconciles + 3; }, 30s))
      << Diagnostics();
  EXPECT_TRUE(Get(gpu::GPUNodeClasses(), "", kDoomed).has_value());
  EXPECT_EQ(runpod_->market().Get(id)->state, sim::market::State::kRunning);
  EXPECT_EQ(RunnerPhase("market-doomed"), "Linked");

  ASSERT_TRUE(env_->client()->Delete(cn::Runners(), "", "market-doomed").ok());
  ASSERT_TRUE(Eventually([] { return !Get(cn::Runners(), "", "market-doomed"); }, 60s))
      << Diagnostics();
  EXPECT_EQ(runpod_->market().Get(id)->state, sim::market::State::kTerminated);
  ASSERT_TRUE(Eventually([&] { return !Get(gpu::GPUNodeClasses(), "", kDoomed); }, 30s))
      << Diagnostics();
  std::cout << "class deleted first: Runner and class gone " << MsSince(deleted)
            << " ms after the class's delete\n";
  EXPECT_TRUE(Live().empty()) << Diagnostics();
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
  const std::set<std::string> tokens = env_->MintedJoinTokens();
  ASSERT_FALSE(tokens.empty());
  const std::string op_log = log_->Text();
  ASSERT_FALSE(op_log.empty());
  const std::string agents = containers_->Logs();
  for (const auto& t : tokens) {
    EXPECT_EQ(op_log.find(t), std::string::npos) << "a join token is in the operator's log";
    EXPECT_EQ(agents.find(t), std::string::npos) << "a join token is in an agent's log";
  }
}

}  // namespace
}  // namespace hyperslice
