// Linked runners end to end (issue 20): the operator's control node, link server and kubelet API
// on a real kube-apiserver + kube-scheduler + kube-controller-manager; two real
// `hyperslice runner-agent` processes "in two regions" (127.0.0.2 and 127.0.0.3), linked with
// their one-time join tokens, running a Job's pod as a real OCI container (runc) from an image
// pulled by digest from a local registry. kubectl logs and kubectl exec go through the apiserver
// to the control node's kubelet API (serving certificate from an approved kubelet-serving CSR),
// then to the agent. A runner killed with kill -9 is marked Unhealthy, its pod fails and the
// Node's allocatable drops; restarted, it relinks and takes work; no container is left behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/kube/resource.h"
#include "src/kube/store.h"
#include "src/runners/controlnode/api.h"
#include "test/testenv/command.h"
#include "test/testenv/eventually.h"
#include "test/testenv/own_netns.h"
#include "test/testenv/registry.h"
#include "test/testenv/runner_agent.h"
#include "test/testenv/runners_env.h"
#include "test/testenv/runners_suite.h"
#include "test/testenv/testenv.h"

namespace hyperslice {
namespace {

namespace json = boost::json;
namespace cn = runners::controlnode;
using namespace std::chrono_literals;
using testenv::Eventually;

const kube::Resource kJobs{"batch", "v1", "jobs", "Job", true};
constexpr char kControlNode[] = "runners-global";

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

class LinkedRunnersTest : public testenv::RunnersSuite<LinkedRunnersTest> {
 protected:
  static void SetUpTestSuite() {
    skip_ = testenv::RunnerToolsMissing();
    if (skip_.empty()) skip_ = testenv::OwnNetworkNamespaceError();
    if (!skip_.empty()) return;
    testenv::RunnersEnvOptions eo;
    eo.name = "runners-e2e";
    eo.audit_log = true;  // to prove the runners never talked to the apiserver
    eo.configure = [](testenv::RunnersEnv&, cn::OperatorOptions&, cn::ServersOptions& sv) {
      sv.csr_timeout = 60s;
      return OkStatus();
    };
    auto env = testenv::RunnersEnv::Start(eo);
    ASSERT_TRUE(env.ok()) << env.error().message;
    env_ = std::move(*env);

    // One control node; two runners in two "regions".
    Status node = env_->CreateControlNode(kControlNode);
    ASSERT_TRUE(node.ok()) << node.error().message;
    eu_ = std::make_unique<testenv::RunnerAgent>("runner-eu", "127.0.0.2", env_->dir());
    us_ = std::make_unique<testenv::RunnerAgent>("runner-us", "127.0.0.3", env_->dir());
    for (testenv::RunnerAgent* a : {eu_.get(), us_.get()}) {
      Create(
          cn::Runners(), "",
          R"({"apiVersion":"runners.hyperslice.dev/v1alpha1","kind":"Runner","metadata":{"name":")" +
              a->name() + R"("},"spec":{"controlNode":")" + kControlNode +
              R"(","host":{"address":")" + a->address() + R"("}}})");
      auto token = env_->JoinToken(a->name(), 30s);
      ASSERT_TRUE(token.ok()) << token.error().message;
      a->SetToken(*token);
      ASSERT_TRUE(Start(*a));
    }
  }

  static void TearDownTestSuite() {
    if (env_) {
      // Pods first, so agents remove their containers while they still run: every Job the
      // tests made (an agent keeps a pod's container, mount and network namespace across its own
      // restarts, so a pod left here would outlive the test on the host).
      if (auto jobs = env_->client()->List(kJobs, env_->ns()); jobs.ok()) {
        for (const auto& j : jobs->items) {
          (void)env_->client()->Delete(kJobs, env_->ns(), std::string(kube::MetaString(j, "name")),
                                       {"Background", 0, std::nullopt, std::nullopt});
        }
      }
      env_->WaitNoPods(30s);
      // A pod gone from the API may still be on its agent until the control node's next sync
      // with it deletes it there: wait for that before stopping the agents.
      Eventually([] { return (!eu_ || !eu_->HoldsPods()) && (!us_ || !us_->HoldsPods()); }, 30s);
    }
    eu_.reset();
    us_.reset();
    env_.reset();
  }

  // (Re)starts a runner's agent: link flags, the registry, 4 CPUs, its region and zone, its pod
  // network (a bridge of its own in this binary's network namespace, own_netns.h).
  static bool Start(testenv::RunnerAgent& a) {
    const bool eu = &a == eu_.get();
    const std::string region = eu ? "europe-west4" : "us-central1";
    return a.Start(env_->servers().link_port(), env_->ca_file(),
                   {"--insecure-registry", env_->registry().host(), "--capacity", "cpu=4",
                    "--capacity", "memory=8Gi", "--region", region, "--zone", region + "-a",
                    "--pod-cidr", eu ? kEuPodCidr : kUsPodCidr, "--pod-bridge", "hs-" + a.name()});
  }
  static constexpr char kEuPodCidr[] = "192.0.2.128/26";
  static constexpr char kUsPodCidr[] = "192.0.2.192/26";

  static int64_t NodeMilli(const char* which, const char* res) {
    return env_->NodeMilli(kControlNode, which, res);
  }
  // The pods of a Job.
  static std::vector<json::object> JobPods(const std::string& job) {
    kube::ListOptions lo;
    lo.label_selector = "job-name=" + job;
    auto l = env_->client()->List(kube::resources::Pods(), env_->ns(), lo);
    return l.ok() ? l->items : std::vector<json::object>{};
  }
  // Whether a pod of the Job runs; its name and its runner (annotation) when it does.
  static bool RunningPod(const std::string& job, std::string* pod, std::string* runner) {
    for (const auto& p : JobPods(job)) {
      if (testenv::StringAt(p, "status", "phase") != "Running") continue;
      *pod = std::string(kube::MetaString(p, "name"));
      *runner = testenv::StringAt(p, "metadata.annotations", "runners.hyperslice.dev/runner");
      return true;
    }
    return false;
  }
  static std::string Job(const std::string& name, const std::string& args) {
    return R"({"apiVersion":"batch/v1","kind":"Job","metadata":{"name":")" + name +
           R"("},"spec":{"backoffLimit":0,"template":{"spec":{"restartPolicy":"Never",)"
           R"("tolerations":[{"key":"runners.hyperslice.dev/control-node","operator":"Exists",)"
           R"("effect":"NoSchedule"}],"containers":[{"name":"main","image":")" +
           env_->image() + R"(","args":)" + args +
           R"(,"resources":{"requests":{"cpu":"1","memory":"64Mi"}}}]}}}})";
  }

  static inline std::unique_ptr<testenv::RunnerAgent> eu_, us_;
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
  EXPECT_EQ(Get(kube::resources::Secrets(), env_->ns(), "runner-join-runner-eu"), std::nullopt)
      << "a used join token Secret must be gone";

  // kubectl shows the control node only: runners are never Nodes.
  auto nodes = testenv::Kubectl({"get", "nodes", "-o", "name"});
  ASSERT_EQ(nodes.exit_code, 0) << nodes.output;
  EXPECT_EQ(nodes.output, "node/" + std::string(kControlNode) + "\n");

  // A Job whose pod prints, stays up long enough to exec into, and exits 0.
  Create(kJobs, env_->ns(),
         Job("hello", R"(["print:hello from a linked runner","env:GREETING","sleep:6"])"));
  std::string pod, runner;
  ASSERT_TRUE(Eventually([&] { return RunningPod("hello", &pod, &runner); }, 90s))
      << "the Job's pod never ran\n"
      << eu_->Log() << us_->Log();
  EXPECT_TRUE(runner == "runner-eu" || runner == "runner-us") << runner;
  auto p = Get(kube::resources::Pods(), env_->ns(), pod);
  ASSERT_TRUE(p);
  EXPECT_EQ(testenv::StringAt(*p, "spec", "nodeName"), kControlNode);

  // The container is real: the runner's runtime lists it.
  testenv::RunnerAgent* on = runner == "runner-eu" ? eu_.get() : us_.get();
  EXPECT_FALSE(on->Containers().empty());

  // kubectl logs through the apiserver -> control node kubelet API -> agent.
  std::string logs;
  ASSERT_TRUE(Eventually(
      [&] {
        auto r = testenv::Kubectl({"logs", "-n", env_->ns(), pod});
        logs = r.output;
        return r.exit_code == 0 && logs.find("hello from a linked runner") != std::string::npos;
      },
      30s))
      << logs;
  EXPECT_NE(logs.find("GREETING=hello"), std::string::npos) << logs;

  // kubectl exec in the default mode: output and exit code.
  auto ex =
      testenv::Kubectl({"exec", "-n", env_->ns(), pod, "--", "/hstest", "print:inside", "exit:3"});
  EXPECT_EQ(ex.exit_code, 3) << ex.output;
  EXPECT_NE(ex.output.find("inside"), std::string::npos) << ex.output;

  // The Job completes.
  ASSERT_TRUE(Eventually(
      [] {
        auto j = Get(kJobs, env_->ns(), "hello");
        if (!j) return false;
        auto s = jsonfield::ObjectField(*j, "status");
        return s && jsonfield::IntField(*s, "succeeded").value_or(0) == 1;
      },
      60s))
      << "the Job did not complete";
  // The serving certificate came from the kubelet-serving CSR KCM signed.
  EXPECT_TRUE(Eventually([] { return env_->servers().serving_from_csr(); }, 60s));

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
  Create(kJobs, env_->ns(), Job("long", R"(["print:working","sleep:300"])"));
  std::string pod, runner;
  ASSERT_TRUE(Eventually([&] { return RunningPod("long", &pod, &runner); }, 90s));
  testenv::RunnerAgent* on = runner == "runner-eu" ? eu_.get() : us_.get();
  auto lost_pod = Get(kube::resources::Pods(), env_->ns(), pod);
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
        auto pp = Get(kube::resources::Pods(), env_->ns(), pod);
        return pp && testenv::StringAt(*pp, "status", "phase") == "Failed";
      },
      30s))
      << "the lost runner's pod was not reported failed";
  const auto lost_after = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - killed);
  std::cout << "runner lost -> pod Failed after " << lost_after.count() << " ms (bound 4 s)\n";
  EXPECT_EQ(RunnerPhase(runner), "Unhealthy");

  // Restarted with the same state dir: relinks (saved identity), capacity returns, and the
  // container of the failed pod is removed (no orphan).
  ASSERT_TRUE(Start(*on));
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
  (void)env_->client()->Delete(kJobs, env_->ns(), "long",
                               {"Background", 0, std::nullopt, std::nullopt});

  // And it takes work again.
  Create(kJobs, env_->ns(), Job("again", R"(["print:again"])"));
  EXPECT_TRUE(Eventually(
      [] {
        auto j = Get(kJobs, env_->ns(), "again");
        if (!j) return false;
        auto s = jsonfield::ObjectField(*j, "status");
        return s && jsonfield::IntField(*s, "succeeded").value_or(0) == 1;
      },
      90s));
}

// A pod on a runner gets an address from its runner's --pod-cidr, which the control node writes
// as status.podIP (kubectl get pod -o wide shows it); kubectl exec -it gives the command a
// terminal (kubectl itself runs under script(1), as in a user's terminal) and its exit code.
TEST_F(LinkedRunnersTest, APodHasItsRunnersPodIpAndExecWithATerminal) {
  ASSERT_TRUE(Eventually(
      [] { return RunnerPhase("runner-eu") == "Linked" && RunnerPhase("runner-us") == "Linked"; },
      60s));
  Create(kube::resources::Pods(), env_->ns(),
         R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"net"},"spec":{)"
         R"("terminationGracePeriodSeconds":1,)"  // hstest is PID 1 and ignores SIGTERM
         R"("tolerations":[{"key":"runners.hyperslice.dev/control-node","operator":"Exists",)"
         R"("effect":"NoSchedule"}],"containers":[{"name":"main","image":")" +
             env_->image() +
             R"(","args":["serve:8080:hello-net"],)"
             R"("resources":{"requests":{"cpu":"1","memory":"64Mi"}}}]}})");
  std::string ip, runner;
  ASSERT_TRUE(Eventually(
      [&] {
        auto p = Get(kube::resources::Pods(), env_->ns(), "net");
        if (!p) return false;
        ip = testenv::StringAt(*p, "status", "podIP");
        runner = testenv::StringAt(*p, "metadata.annotations", "runners.hyperslice.dev/runner");
        return !ip.empty() && testenv::StringAt(*p, "status", "phase") == "Running";
      },
      60s))
      << "podIP " << ip;
  // In the chosen runner's CIDR: .130-.190 for runner-eu (.129 is its bridge), .194-.254 for
  // runner-us.
  const std::string prefix = "192.0.2.";
  ASSERT_EQ(ip.rfind(prefix, 0), 0u) << ip;
  int last = std::stoi(ip.substr(prefix.size()));
  if (runner == "runner-eu") {
    EXPECT_TRUE(last >= 130 && last <= 190) << ip;
  } else {
    EXPECT_EQ(runner, "runner-us");
    EXPECT_TRUE(last >= 194 && last <= 254) << ip;
  }
  auto wide = testenv::Kubectl({"get", "pod", "-n", env_->ns(), "net", "-o", "wide"});
  EXPECT_EQ(wide.exit_code, 0) << wide.output;
  EXPECT_NE(wide.output.find(ip), std::string::npos) << wide.output;
  EXPECT_NE(wide.output.find(kControlNode), std::string::npos) << wide.output;
  std::cout << wide.output;

  // kubectl exec -it: the command sees a terminal, reads the line typed, exits 5. script gives
  // kubectl a terminal; its input is typed 2 s in (kubectl is connected by then) and held open
  // a little longer so that the end of input does not end the session first.
  const std::string kubectl = testenv::KubectlPath() + " --kubeconfig " +
                              testenv::Cluster().kubeconfig_path() + " exec -it -n " + env_->ns() +
                              " net -- /hstest tty readline connect:" + ip + ":8080 exit:5";
  auto tty = RunCommand(
      {"sh", "-c",
       "(sleep 2; printf 'typed-line\\r'; sleep 4) | script -qec '" + kubectl + "' /dev/null"});
  EXPECT_EQ(tty.exit_code, 5) << tty.output << tty.errors;
  EXPECT_NE(tty.output.find("tty=yes"), std::string::npos) << tty.output;
  EXPECT_NE(tty.output.find("line=typed-line"), std::string::npos) << tty.output;
  // The pod reaches its own server by its pod IP.
  EXPECT_NE(tty.output.find("connect " + ip + ":8080: hello-net"), std::string::npos) << tty.output;
  // Deleted as a user does (gracefully: the control node deletes it on its runner, then the
  // object goes); its runner removes the veth and the namespace.
  const std::string uid =
      testenv::StringAt(*Get(kube::resources::Pods(), env_->ns(), "net"), "metadata", "uid");
  ASSERT_TRUE(env_->client()
                  ->Delete(kube::resources::Pods(), env_->ns(), "net",
                           {"Background", 1, std::nullopt, std::nullopt})
                  .ok());
  EXPECT_TRUE(Eventually(
      [&] {
        return !Get(kube::resources::Pods(), env_->ns(), "net") &&
               !std::filesystem::exists("/var/run/netns/hs-" + uid);
      },
      60s));
}

}  // namespace
}  // namespace hyperslice
