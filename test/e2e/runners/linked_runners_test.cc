// Linked runners end to end (issue 20): the operator's control node, link server and kubelet API
// on a real kube-apiserver + kube-scheduler + kube-controller-manager; two real
// `hyperslice runner-agent` processes "in two regions" (127.0.0.2 and 127.0.0.3), linked with
// their one-time join tokens, running a Job's pod as a real OCI container (runc) from an image
// pulled by digest from a local registry. kubectl logs and kubectl exec go through the apiserver
// to the control node's kubelet API (serving certificate from an approved kubelet-serving CSR),
// then to the agent. A runner killed with kill -9 is marked Unhealthy, its pod fails and the
// Node's allocatable drops; restarted, it relinks and takes work; no container is left behind.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/command.h"
#include "src/base/json.h"
#include "src/kube/client.h"
#include "src/kube/manager.h"
#include "src/kube/object_helpers.h"
#include "src/kube/quantity.h"
#include "src/kube/resource.h"
#include "src/kube/store.h"
#include "src/runners/controlnode/api.h"
#include "src/runners/controlnode/controlnode.h"
#include "src/runners/controlnode/servers.h"
#include "test/e2e/runners/operator_part.h"
#include "test/testenv/command.h"
#include "test/testenv/crds.h"
#include "test/testenv/eventually.h"
#include "test/testenv/registry.h"
#include "test/testenv/testenv.h"

extern char** environ;

namespace hyperslice {
namespace {

namespace json = boost::json;
namespace cn = runners::controlnode;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testenv::Eventually;

const kube::Resource kJobs{"batch", "v1", "jobs", "Job", true};
constexpr char kControlNode[] = "runners-global";

// A free port on a loopback address, or 0 (the caller's start then fails visibly).
int FreePort(const std::string& ip) {
  auto port = FreeLoopbackPort(ip);
  return port.ok() ? *port : 0;
}

std::string At(const json::object& o, std::string_view dotted, std::string_view key) {
  const json::object* at = dotted.empty() ? &o : jsonfield::ObjectAt(o, dotted);
  return at != nullptr ? std::string(jsonfield::StringField(*at, key)) : std::string();
}

int64_t Milli(const std::string& q) {
  auto v = kube::Quantity::Parse(q);
  return v.ok() ? v->MilliValue() : -1;
}

// Who made the requests in the apiserver's audit log (Metadata level, JSON lines).
struct AuditTally {
  int64_t events = 0;
  // The test process, which is the control node (operator) and the admin: its certificate's
  // user and the kube client's user agent, from 127.0.0.1.
  int64_t from_control_node = 0;
  // Anything a runner agent could have sent: a runner's address as a source, a runner's
  // identity (its certificate's CN or the runners' group), the agent's user agent or gRPC's, or
  // a request the apiserver could not authenticate (an agent's certificate is from the runners
  // CA, which the apiserver does not trust) or took as anonymous.
  int64_t from_runner_address = 0, runner_identity = 0, agent_user_agent = 0, unauthenticated = 0;
  std::vector<std::string> suspicious;  // the first few such events, verbatim
};

AuditTally TallyAuditLog(const std::string& path, const std::vector<std::string>& runner_ips,
                         const std::vector<std::string>& runner_names) {
  AuditTally t;
  std::ifstream in(path);
  std::string line;
  auto contains = [](const std::vector<std::string>& v, std::string_view x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  while (std::getline(in, line)) {
    boost::system::error_code ec;
    auto v = json::parse(line, ec);
    if (ec || !v.is_object()) continue;
    const auto& e = v.as_object();
    ++t.events;
    std::string user, agent = std::string(jsonfield::StringField(e, "userAgent"));
    std::vector<std::string> groups, ips;
    if (const auto* u = jsonfield::ObjectField(e, "user")) {
      user = std::string(jsonfield::StringField(*u, "username"));
      if (const auto* g = jsonfield::ArrayField(*u, "groups")) {
        for (const auto& x : *g) {
          if (x.is_string()) groups.emplace_back(x.as_string());
        }
      }
    }
    if (const auto* a = jsonfield::ArrayField(e, "sourceIPs")) {
      for (const auto& x : *a) {
        if (x.is_string()) ips.emplace_back(x.as_string());
      }
    }
    bool bad = false;
    for (const auto& ip : ips) {
      if (contains(runner_ips, ip)) {
        ++t.from_runner_address;
        bad = true;
        break;
      }
    }
    if (contains(runner_names, user) || contains(groups, "runners.hyperslice.dev:runners")) {
      ++t.runner_identity;
      bad = true;
    }
    if (agent.find("runner-agent") != std::string::npos || agent.rfind("grpc", 0) == 0) {
      ++t.agent_user_agent;
      bad = true;
    }
    if (user.empty() || user == "system:anonymous") {
      ++t.unauthenticated;
      bad = true;
    }
    if (user == "kubernetes-admin" && agent.rfind("hyperslice", 0) == 0 &&
        contains(ips, "127.0.0.1")) {
      ++t.from_control_node;
    }
    if (bad && t.suspicious.size() < 5) t.suspicious.push_back(line);
  }
  return t;
}

// One `hyperslice runner-agent` process on its own loopback address.
class Agent {
 public:
  Agent(std::string name, std::string ip, std::string region, const std::string& dir)
      : name_(std::move(name)), ip_(std::move(ip)), region_(std::move(region)) {
    state_dir_ = dir + "/" + name_;
    fs::create_directories(state_dir_);
    token_file_ = dir + "/" + name_ + ".token";
    log_file_ = dir + "/" + name_ + ".log";
    address_ = ip_ + ":" + std::to_string(FreePort(ip_));
  }
  ~Agent() { Kill9(); }
  const std::string& address() const { return address_; }
  std::string runtime_root() const { return state_dir_ + "/runtime"; }
  void SetToken(const std::string& token) { std::ofstream(token_file_) << token << "\n"; }

  bool Start(int link_port, const std::string& ca_file, const std::string& registry) {
    std::vector<std::string> args = {HS_BINARY,
                                     "runner-agent",
                                     "--name",
                                     name_,
                                     "--state-dir",
                                     state_dir_,
                                     "--listen",
                                     address_,
                                     "--link-endpoint",
                                     "127.0.0.1:" + std::to_string(link_port),
                                     "--join-token-file",
                                     token_file_,
                                     "--link-ca-file",
                                     ca_file,
                                     "--insecure-registry",
                                     registry,
                                     "--capacity",
                                     "cpu=4",
                                     "--capacity",
                                     "memory=8Gi",
                                     "--region",
                                     region_,
                                     "--zone",
                                     region_ + "-a"};
    auto pid = StartBackground(args, log_file_);
    if (!pid.ok()) return false;
    pid_ = *pid;
    return true;
  }
  void Kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string Log() const {
    std::ifstream in(log_file_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // The runtime's containers of this agent: all of them, or those not stopped (a completed
  // pod's exited container stays, stopped, until its pod is deleted, as with a kubelet).
  // Pods the agent still holds (their directories go last in its DeletePod, after the
  // containers, mounts and network namespace).
  bool HoldsPods() const {
    std::error_code ec;
    return fs::exists(state_dir_ + "/pods", ec) && !fs::is_empty(state_dir_ + "/pods", ec);
  }
  std::vector<std::string> Containers(bool live_only = false) const {
    std::vector<std::string> ids;
    auto r = RunCommand({"runc", "--root", runtime_root(), "list", "--format", "json"});
    if (r.exit_code != 0) return ids;
    boost::system::error_code ec;
    auto v = json::parse(r.output, ec);
    if (ec || !v.is_array()) return ids;
    for (const auto& c : v.as_array()) {
      if (!c.is_object()) continue;
      if (live_only && jsonfield::StringField(c.as_object(), "status") == "stopped") continue;
      ids.emplace_back(jsonfield::StringField(c.as_object(), "id"));
    }
    return ids;
  }

 private:
  std::string name_, ip_, region_, state_dir_, token_file_, log_file_, address_;
  pid_t pid_ = -1;
};

class LinkedRunnersTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_ = testenv::RunnerToolsMissing();
    if (!skip_.empty()) return;
    localcluster::Options o;
    o.controller_manager = true;
    o.scheduler = true;
    o.audit_log = true;  // to prove the runners never talked to the apiserver
    testenv::ConfigureCluster(o);
    client_ = testenv::AdminClient();
    ASSERT_TRUE(client_);
    Status crds =
        testenv::InstallCrds({HS_DEPLOY_DIR "/crds/runners.hyperslice.dev_controlnodes.yaml",
                              HS_DEPLOY_DIR "/crds/runners.hyperslice.dev_runners.yaml"},
                             {cn::ControlNodes(), cn::Runners()});
    ASSERT_TRUE(crds.ok()) << crds.error().message;
    ns_ = testenv::TestNamespace();
    char tmpl[] = "/tmp/hs-runners-e2e-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;

    auto reg = testenv::LocalRegistry::Start();
    ASSERT_TRUE(reg.ok()) << reg.error().message;
    registry_ = std::move(*reg);
    auto image = registry_->PushTestImage("hs/hstest");
    ASSERT_TRUE(image.ok()) << image.error().message;
    image_ = *image;

    // The operator's runners part, as `hyperslice operator --runners` composes it.
    auto ca = cn::EnsureRunnersCa(*client_, ns_, "hyperslice-runners-ca");
    ASSERT_TRUE(ca.ok()) << ca.error().message;
    ca_file_ = dir_ + "/runners-ca.crt";
    std::ofstream(ca_file_) << ca->ca.cert_pem;
    kube::ManagerOptions mo;
    mo.client = client_;
    auto mgr = kube::Manager::Create(mo);
    ASSERT_TRUE(mgr.ok());
    mgr_ = std::move(*mgr);
    cn::OperatorOptions oo = runners_e2e::TestOperatorOptions(client_, ns_, *ca);
    auto set = cn::RegisterOperator(*mgr_, oo);
    ASSERT_TRUE(set.ok()) << set.error().message;
    cn::ServersOptions sv;
    sv.client = client_;
    sv.link_address = "127.0.0.1:0";
    kubelet_port_ = FreePort("127.0.0.1");
    sv.kubelet_address = "127.0.0.1:" + std::to_string(kubelet_port_);
    sv.state_dir = dir_ + "/operator";
    sv.csr_timeout = 60s;
    auto servers = cn::RunnerServers::Start(sv, *ca, *set);
    ASSERT_TRUE(servers.ok()) << servers.error().message;
    servers_ = std::move(*servers);
    run_ = std::thread([] { (void)mgr_->Run(); });

    // One control node; two runners in two "regions".
    Create(cn::ControlNodes(), "",
           R"({"apiVersion":"runners.hyperslice.dev/v1alpha1","kind":"ControlNode",)"
           R"("metadata":{"name":")" +
               std::string(kControlNode) + R"("},"spec":{"address":"127.0.0.1","kubeletPort":)" +
               std::to_string(kubelet_port_) + "}}");
    eu_ = std::make_unique<Agent>("runner-eu", "127.0.0.2", "europe-west4", dir_);
    us_ = std::make_unique<Agent>("runner-us", "127.0.0.3", "us-central1", dir_);
    for (Agent* a : {eu_.get(), us_.get()}) {
      const std::string name = a == eu_.get() ? "runner-eu" : "runner-us";
      Create(
          cn::Runners(), "",
          R"({"apiVersion":"runners.hyperslice.dev/v1alpha1","kind":"Runner","metadata":{"name":")" +
              name + R"("},"spec":{"controlNode":")" + kControlNode + R"(","host":{"address":")" +
              a->address() + R"("}}})");
      std::string token;
      ASSERT_TRUE(Eventually(
          [&] {
            auto s = client_->Get(kube::resources::Secrets(), ns_, "runner-join-" + name);
            if (!s.ok()) return false;
            auto d = Base64Decode(At(*s, "data", "token"));
            token = d.ok() ? *d : "";
            return !token.empty();
          },
          30s))
          << "no join token Secret for " << name;
      a->SetToken(token);
      ASSERT_TRUE(a->Start(servers_->link_port(), ca_file_, registry_->host()));
    }
  }

  static void TearDownTestSuite() {
    if (client_ && skip_.empty()) {
      // Pods first, so agents remove their containers while they still run: every Job the
      // tests made (an agent keeps a pod's container, mount and network namespace across its own
      // restarts, so a pod left here would outlive the test on the host).
      if (auto jobs = client_->List(kJobs, ns_); jobs.ok()) {
        for (const auto& j : jobs->items) {
          (void)client_->Delete(kJobs, ns_, std::string(kube::MetaString(j, "name")),
                                {"Background", 0, std::nullopt, std::nullopt});
        }
      }
      Eventually(
          [] {
            auto l = client_->List(kube::resources::Pods(), ns_);
            return l.ok() && l->items.empty();
          },
          30s);
      // A pod gone from the API may still be on its agent until the control node's next sync
      // with it deletes it there: wait for that before stopping the agents.
      Eventually([] { return (!eu_ || !eu_->HoldsPods()) && (!us_ || !us_->HoldsPods()); }, 30s);
    }
    eu_.reset();
    us_.reset();
    if (servers_) servers_->Stop();
    if (mgr_) mgr_->Stop();
    if (run_.joinable()) run_.join();
    mgr_.reset();
    registry_.reset();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  static void Create(const kube::Resource& r, const std::string& ns, const std::string& body) {
    auto created = client_->Create(r, ns, json::parse(body).as_object());
    ASSERT_TRUE(created.ok()) << created.error().message << "\n" << body;
  }
  static std::optional<json::object> Get(const kube::Resource& r, const std::string& ns,
                                         const std::string& name) {
    auto got = client_->Get(r, ns, name);
    if (!got.ok()) return std::nullopt;
    return *got;
  }
  static int64_t NodeMilli(const char* which, const char* res) {
    auto n = Get(kube::resources::Nodes(), "", kControlNode);
    return n ? Milli(At(*n, std::string("status.") + which, res)) : -1;
  }
  static std::string RunnerPhase(const std::string& name) {
    auto r = Get(cn::Runners(), "", name);
    return r ? At(*r, "status", "phase") : "";
  }
  // The pods of a Job.
  static std::vector<json::object> JobPods(const std::string& job) {
    kube::ListOptions lo;
    lo.label_selector = "job-name=" + job;
    auto l = client_->List(kube::resources::Pods(), ns_, lo);
    return l.ok() ? l->items : std::vector<json::object>{};
  }
  static std::string Job(const std::string& name, const std::string& args) {
    return R"({"apiVersion":"batch/v1","kind":"Job","metadata":{"name":")" + name +
           R"("},"spec":{"backoffLimit":0,"template":{"spec":{"restartPolicy":"Never",)"
           R"("tolerations":[{"key":"runners.hyperslice.dev/control-node","operator":"Exists",)"
           R"("effect":"NoSchedule"}],"containers":[{"name":"main","image":")" +
           image_ + R"(","args":)" + args +
           R"(,"resources":{"requests":{"cpu":"1","memory":"64Mi"}}}]}}}})";
  }

  static inline std::string skip_;
  static inline std::shared_ptr<kube::Client> client_;
  static inline std::string ns_, dir_, image_, ca_file_;
  static inline int kubelet_port_ = 0;
  static inline std::unique_ptr<testenv::LocalRegistry> registry_;
  static inline std::unique_ptr<kube::Manager> mgr_;
  static inline std::unique_ptr<cn::RunnerServers> servers_;
  static inline std::thread run_;
  static inline std::unique_ptr<Agent> eu_, us_;
};

TEST_F(LinkedRunnersTest, AJobRunsOnALinkedRunnerWithLogsAndExecThroughTheApiserver) {
  // Both runners link (one-time tokens) and the control node sums their capacity.
  ASSERT_TRUE(Eventually(
      [] { return RunnerPhase("runner-eu") == "Linked" && RunnerPhase("runner-us") == "Linked"; },
      60s))
      << "eu=" << RunnerPhase("runner-eu") << " us=" << RunnerPhase("runner-us") << "\n"
      << eu_->Log() << us_->Log();
  ASSERT_TRUE(Eventually([] { return NodeMilli("capacity", "cpu") == 8000; }, 30s))
      << "cpu capacity " << NodeMilli("capacity", "cpu");
  EXPECT_EQ(Get(kube::resources::Secrets(), ns_, "runner-join-runner-eu"), std::nullopt)
      << "a used join token Secret must be gone";

  // kubectl shows the control node only: runners are never Nodes.
  auto nodes = testenv::Kubectl({"get", "nodes", "-o", "name"});
  ASSERT_EQ(nodes.exit_code, 0) << nodes.output;
  EXPECT_EQ(nodes.output, "node/" + std::string(kControlNode) + "\n");

  // A Job whose pod prints, stays up long enough to exec into, and exits 0.
  Create(kJobs, ns_,
         Job("hello", R"(["print:hello from a linked runner","env:GREETING","sleep:6"])"));
  std::string pod, runner;
  ASSERT_TRUE(Eventually(
      [&] {
        for (const auto& p : JobPods("hello")) {
          if (At(p, "status", "phase") != "Running") continue;
          pod = std::string(kube::MetaString(p, "name"));
          const auto* ann = jsonfield::ObjectAt(p, "metadata.annotations");
          runner =
              ann ? std::string(jsonfield::StringField(*ann, "runners.hyperslice.dev/runner")) : "";
          return true;
        }
        return false;
      },
      90s))
      << "the Job's pod never ran\n"
      << eu_->Log() << us_->Log();
  EXPECT_TRUE(runner == "runner-eu" || runner == "runner-us") << runner;
  auto p = Get(kube::resources::Pods(), ns_, pod);
  ASSERT_TRUE(p);
  EXPECT_EQ(At(*p, "spec", "nodeName"), kControlNode);

  // The container is real: the runner's runtime lists it.
  Agent* on = runner == "runner-eu" ? eu_.get() : us_.get();
  EXPECT_FALSE(on->Containers().empty());

  // kubectl logs through the apiserver -> control node kubelet API -> agent.
  std::string logs;
  ASSERT_TRUE(Eventually(
      [&] {
        auto r = testenv::Kubectl({"logs", "-n", ns_, pod});
        logs = r.output;
        return r.exit_code == 0 && logs.find("hello from a linked runner") != std::string::npos;
      },
      30s))
      << logs;
  EXPECT_NE(logs.find("GREETING=hello"), std::string::npos) << logs;

  // kubectl exec in the default mode: output and exit code.
  auto ex = testenv::Kubectl({"exec", "-n", ns_, pod, "--", "/hstest", "print:inside", "exit:3"});
  EXPECT_EQ(ex.exit_code, 3) << ex.output;
  EXPECT_NE(ex.output.find("inside"), std::string::npos) << ex.output;

  // The Job completes.
  ASSERT_TRUE(Eventually(
      [] {
        auto j = Get(kJobs, ns_, "hello");
        if (!j) return false;
        auto s = jsonfield::ObjectField(*j, "status");
        return s && jsonfield::IntField(*s, "succeeded").value_or(0) == 1;
      },
      60s))
      << "the Job did not complete";
  // The serving certificate came from the kubelet-serving CSR KCM signed.
  EXPECT_TRUE(Eventually([] { return servers_->serving_from_csr(); }, 60s));

  // The runners made no request to the apiserver: only the control node (this process) did.
  // The audit log has every request since the cluster started, both agents' whole lives so far
  // included (link, Job, logs, exec).
  const std::string audit = testenv::Cluster().audit_log_path();
  ASSERT_FALSE(audit.empty());
  AuditTally t = TallyAuditLog(audit, {"127.0.0.2", "127.0.0.3"}, {"runner-eu", "runner-us"});
  std::cout << "apiserver audit log: " << t.events << " requests, " << t.from_control_node
            << " from the control node (kubernetes-admin, 127.0.0.1); from the runners: "
            << t.from_runner_address << " by address, " << t.runner_identity << " by identity, "
            << t.agent_user_agent << " by user agent, " << t.unauthenticated
            << " unauthenticated or anonymous\n";
  EXPECT_GT(t.from_control_node, 0)
      << "the audit log does not show the control node's requests: " << audit;
  EXPECT_EQ(t.from_runner_address, 0);
  EXPECT_EQ(t.runner_identity, 0);
  EXPECT_EQ(t.agent_user_agent, 0);
  EXPECT_EQ(t.unauthenticated, 0);
  for (const auto& e : t.suspicious) ADD_FAILURE() << "a request not from the control node: " << e;
}

TEST_F(LinkedRunnersTest, AKilledRunnerIsLostThenRelinksWithoutOrphans) {
  ASSERT_TRUE(Eventually([] { return NodeMilli("allocatable", "cpu") == 8000; }, 60s))
      << NodeMilli("allocatable", "cpu");
  Create(kJobs, ns_, Job("long", R"(["print:working","sleep:300"])"));
  std::string pod, runner;
  ASSERT_TRUE(Eventually(
      [&] {
        for (const auto& p : JobPods("long")) {
          if (At(p, "status", "phase") != "Running") continue;
          pod = std::string(kube::MetaString(p, "name"));
          const auto* ann = jsonfield::ObjectAt(p, "metadata.annotations");
          runner =
              ann ? std::string(jsonfield::StringField(*ann, "runners.hyperslice.dev/runner")) : "";
          return true;
        }
        return false;
      },
      90s));
  Agent* on = runner == "runner-eu" ? eu_.get() : us_.get();
  auto lost_pod = Get(kube::resources::Pods(), ns_, pod);
  ASSERT_TRUE(lost_pod);
  const std::string uid(kube::MetaString(*lost_pod, "uid"));
  // Its containers (hs-<uid>-<name>) and whatever else runs there.
  auto orphans = [&] {
    std::vector<std::string> left;
    for (const auto& id : on->Containers()) {
      if (id.find(uid) != std::string::npos) left.push_back(id);
    }
    for (const auto& id : on->Containers(/*live_only=*/true)) {
      if (id.find(uid) == std::string::npos) left.push_back(id);
    }
    return left;
  };
  ASSERT_EQ(orphans().size(), 1u);

  on->Kill9();
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([] { return NodeMilli("allocatable", "cpu") == 4000; }, 30s))
      << "allocatable did not drop: " << NodeMilli("allocatable", "cpu");
  ASSERT_TRUE(Eventually(
      [&] {
        auto pp = Get(kube::resources::Pods(), ns_, pod);
        return pp && At(*pp, "status", "phase") == "Failed";
      },
      30s))
      << "the lost runner's pod was not reported failed";
  const auto lost_after = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - killed);
  std::cout << "runner lost -> pod Failed after " << lost_after.count() << " ms (bound 4 s)\n";
  EXPECT_EQ(RunnerPhase(runner), "Unhealthy");

  // Restarted with the same state dir: relinks (saved identity), capacity returns, and the
  // container of the failed pod is removed (no orphan).
  ASSERT_TRUE(on->Start(servers_->link_port(), ca_file_, registry_->host()));
  const auto restarted = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([] { return NodeMilli("allocatable", "cpu") == 8000; }, 60s)) << on->Log();
  const auto relinked = std::chrono::steady_clock::now();
  // The control node deletes the lost pod's container with grace 0: SIGKILL at once, even for
  // a container the restarted agent adopted and whose process ignores SIGTERM (hstest is PID 1).
  // A completed pod's stopped container (the first test's Job, if it ran here) is not an orphan.
  // 15 s: relinking takes about 0.5 s and the deletion well under 1 s; a deletion that waited out
  // the pod's 30 s grace, as it once did, would not make it.
  EXPECT_TRUE(Eventually([&] { return orphans().empty(); }, 15s))
      << "orphan containers on " << runner << ": " << testing::PrintToString(orphans()) << "\n"
      << on->Log();
  auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
  std::cout << "runner restarted -> allocatable back after " << ms(relinked - restarted)
            << " ms, lost pod's container removed after "
            << ms(std::chrono::steady_clock::now() - restarted) << " ms\n";
  (void)client_->Delete(kJobs, ns_, "long", {"Background", 0, std::nullopt, std::nullopt});

  // And it takes work again.
  Create(kJobs, ns_, Job("again", R"(["print:again"])"));
  EXPECT_TRUE(Eventually(
      [] {
        auto j = Get(kJobs, ns_, "again");
        if (!j) return false;
        auto s = jsonfield::ObjectField(*j, "status");
        return s && jsonfield::IntField(*s, "succeeded").value_or(0) == 1;
      },
      90s));
}

}  // namespace
}  // namespace hyperslice
