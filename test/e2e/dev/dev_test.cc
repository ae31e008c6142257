// `hyperslice dev` end to end, as the README runs it: the real binary starts the control plane,
// the GCE simulator, the simulated TPU VMs and the operator, applies seed 000's example, and with
// --exit-when-ready exits 0 once the TPUNodeGroup is Ready — after printing the real kubectl's
// `get tpunodegroups,nodes`. Short simulator latencies keep each run to a few tens of seconds.
// `--example gpu` and `--example runners` (linked runners: real agents and runc containers, then
// Ctrl-C and nothing left) have a case each.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test/testenv/piped_child.h"
#include "test/testenv/processes.h"
#include "test/testenv/shell.h"

namespace hyperslice::dev_test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

struct DevRun {
  int exit_code = -1;
  std::string output;
};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs a command line through the shell: its exit code and stdout+stderr (testenv::Shell).
DevRun Shell(const std::string& cmd) {
  auto [code, output] = testenv::Shell(cmd);
  return {code, std::move(output)};
}

// Runs the binary with a hard time limit (coreutils timeout: 124 when it fired).
DevRun RunDev(const std::vector<std::string>& args, int limit_seconds) {
  std::string cmd = "timeout -s INT -k 30 " + std::to_string(limit_seconds) + " " +
                    Quote(HS_HYPERSLICE_BIN) + " dev";
  for (const auto& a : args) cmd += " " + Quote(a);
  return Shell(cmd);
}

// `hyperslice dev <args>` with its stdout and stderr into a pipe (testenv::SpawnPiped).
testenv::PipedChild SpawnDev(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {HS_HYPERSLICE_BIN, "dev"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testenv::SpawnPiped(std::move(argv), /*with_stderr=*/true);
}

bool HaveKubectl() { return std::system("kubectl version --client >/dev/null 2>&1") == 0; }

using testenv::ProcessesMentioning;

int CountMatches(const std::string& text, const std::regex& re) {
  return static_cast<int>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

class DevRole : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveKubectl()) GTEST_SKIP() << "kubectl is not installed (dev prints its output)";
    char tmpl[] = "/tmp/hyperslice-dev-e2e-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    work_dir_ = tmpl;
  }
  void TearDown() override {
    if (work_dir_.empty()) return;
    if (HasFailure()) {
      std::ifstream log(work_dir_ + "/hyperslice.log");
      std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
      if (text.size() > 6000) text = text.substr(text.size() - 6000);
      std::printf("--- tail of %s/hyperslice.log ---\n%s\n", work_dir_.c_str(), text.c_str());
    }
    std::error_code ec;
    fs::remove_all(work_dir_, ec);
  }

  void ExpectReadyRun(const std::string& example, int nodes) {
    DevRun r = RunDev({"--exit-when-ready", "--example", example, "--sim-latency-ms", "100",
                       "--ready-timeout", "240", "--work-dir", work_dir_},
                      420);
    output_ = r.output;
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("TPUNodeGroup default/my-tpu-node-group is Ready after"));
    // Progress was printed on the way: a not-Ready line before the Ready one.
    EXPECT_THAT(r.output, HasSubstr("Ready=False"));
    // The real kubectl's table: the group Ready with all its nodes, and that many Ready Nodes.
    EXPECT_THAT(r.output, HasSubstr("$ kubectl get tpunodegroups,nodes"));
    std::regex group_row(
        "tpunodegroup\\.tpu\\.google\\.com/my-tpu-node-group\\s+True\\s+\\S+\\s+\\S+\\s+" +
        std::to_string(nodes) + "\\s+" + std::to_string(nodes) + "\\s");
    EXPECT_EQ(CountMatches(r.output, group_row), 1) << r.output;
    EXPECT_EQ(CountMatches(r.output, std::regex("node/my-tpu-node-group-\\S+\\s+Ready\\s")), nodes)
        << r.output;
    EXPECT_THAT(r.output, HasSubstr("export KUBECONFIG=" + work_dir_ + "/admin.kubeconfig"));
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("NOT RUNNING")));
    // Stopped cleanly: nothing it started is left.
    EXPECT_TRUE(ProcessesMentioning(work_dir_).empty());
    // The operator's and simulators' log never holds a kubeadm bootstrap token
    // ([a-z0-9]{6}.[a-z0-9]{16}), although tokens were minted and used for the join.
    std::ifstream log(work_dir_ + "/hyperslice.log");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_FALSE(text.empty());
    EXPECT_EQ(CountMatches(text, std::regex("\\b[a-z0-9]{6}\\.[a-z0-9]{16}\\b")), 0);
  }

  std::string work_dir_;
  std::string output_;  // of the last ExpectReadyRun
};

// The GPU story (issue "Ephemeral GPUs 4/4", item 3): seed 002's class and pool, the four
// marketplace simulators and a GPU Job — every step printed in order, the machine returned after
// consolidateAfter, the money spent reported next to the simulators' ledgers, the pool at $0/h.
TEST_F(DevRole, GpuExampleRentsAMachineRunsTheJobAndGivesTheMachineBack) {
  DevRun r = RunDev({"--exit-when-ready", "--example", "gpu", "--sim-latency-ms", "300",
                     "--ready-timeout", "300", "--work-dir", work_dir_},
                    480);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> steps = {
      "Job default/gpu-job submitted",
      "Pending",
      "created by the provisioner: cheapest fitting offer lambdalabs/gpu_1x_rtx4090",
      "launched on lambdalabs",
      "it boots from its CloudInit payload",
      "lambdalabs reports machine",
      "registered (TLS bootstrap",
      "Ready: nvidia.com/gpu allocatable",
      "Running on Node",
      "Succeeded (exit code 0)",
      "Job gpu-job complete",
      "returning it (drain, then delete at lambdalabs)",
      "terminated",
      "machine returned; pool default/ml-workload-pool costs $0.00/h now and has spent $"};
  size_t at = 0;
  for (const auto& step : steps) {
    size_t found = r.output.find(step, at);
    ASSERT_NE(found, std::string::npos) << "step \"" << step << "\" missing or out of order in\n"
                                        << r.output;
    at = found;
  }
  // With the mesh (scripts/build-mesh.sh, root): headscale, the machine on the tailnet, and its
  // node gone with it.
  if (r.output.find("hyperslice dev: headscale at") != std::string::npos) {
    EXPECT_THAT(r.output, HasSubstr("joined the tailnet with its single-use key: 100."));
    EXPECT_THAT(r.output, HasSubstr("its headscale node is deleted"));
  } else {
    EXPECT_THAT(r.output, HasSubstr("tailnet off ("));
  }
  // The operator's spend and the simulators' ledgers agree to within the claim controller's 1 s
  // termination poll on a run of about a minute.
  std::smatch m;
  std::regex money(R"(has spent \$([0-9.]+) \(the simulators' ledgers: \$([0-9.]+)\))");
  ASSERT_TRUE(std::regex_search(r.output, m, money)) << r.output;
  double ours = std::stod(m[1]), ledger = std::stod(m[2]);
  EXPECT_GT(ledger, 0);
  EXPECT_NEAR(ours, ledger, ledger * 0.05) << r.output;
  EXPECT_TRUE(ProcessesMentioning(work_dir_).empty());
  // No bootstrap token in the components' log.
  std::ifstream log(work_dir_ + "/hyperslice.log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(CountMatches(text, std::regex("\\b[a-z0-9]{6}\\.[a-z0-9]{16}\\b")), 0);
}

TEST_F(DevRole, SeedExampleTpu7xReachesReadyWithTwoNodesAndExits) {
  ExpectReadyRun("tpu7x-2x2x2", 2);
  if (HasFatalFailure()) return;
  // Then the seed's workload ran: both pods on the slice's two Nodes, all four chips each, the
  // webhook's worker variables and the seed's own, as dev prints them from `kubectl logs`.
  EXPECT_THAT(output_, HasSubstr("applied StatefulSet default/tpu-worker-v7x"));
  EXPECT_EQ(CountMatches(output_, std::regex("pod tpu-worker-v7x-[01] on node "
                                             "my-tpu-node-group-\\S+ \\(chips 0,1,2,3\\)")),
            2)
      << output_;
  std::smatch m0, m1;
  ASSERT_TRUE(std::regex_search(output_, m0, std::regex("pod tpu-worker-v7x-0 on node (\\S+)")));
  ASSERT_TRUE(std::regex_search(output_, m1, std::regex("pod tpu-worker-v7x-1 on node (\\S+)")));
  EXPECT_NE(m0[1].str(), m1[1].str()) << "one pod per host";
  EXPECT_THAT(output_, HasSubstr("TPU_WORKER_ID=0"));
  EXPECT_THAT(output_, HasSubstr("TPU_WORKER_ID=1"));
  EXPECT_EQ(CountMatches(output_, std::regex("TPU_WORKER_HOSTNAMES=tpu-worker-v7x-0\\.tpu-svc-v7x,"
                                             "tpu-worker-v7x-1\\.tpu-svc-v7x")),
            2);
  EXPECT_EQ(CountMatches(output_, std::regex("TPU_ACCELERATOR_TYPE=tpu7x-4\\n")), 2);
  EXPECT_EQ(CountMatches(output_, std::regex("TPU_HOST_BOUNDS=1,1,2\\n")), 2);
  EXPECT_EQ(CountMatches(output_, std::regex("pod/tpu-worker-v7x-[01]\\s+1/1\\s+Running")), 2)
      << output_;
}

TEST_F(DevRole, SingleHostV6eExampleReachesReadyWithOneNode) { ExpectReadyRun("v6e-2x2", 1); }

// Ctrl-C while the slice is still provisioning (long simulated operations) stops everything and
// exits 0.
TEST_F(DevRole, SigintWhileWaitingStopsEverything) {
  const testenv::PipedChild child =
      SpawnDev({"--work-dir", work_dir_, "--sim-latency-ms", "60000"});
  const pid_t dev = child.pid;
  const int out = child.out;
  ASSERT_GE(dev, 0);
  std::string seen;
  testenv::ReadUntil(out, &seen, "Press Ctrl-C", std::chrono::seconds(300));
  ASSERT_THAT(seen, HasSubstr("Waiting for my-tpu-node-group to become Ready"));
  EXPECT_FALSE(ProcessesMentioning(work_dir_).empty());
  ASSERT_EQ(::kill(dev, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(dev, &status, 0), dev);
  char chunk[4096];
  ssize_t n = 0;
  while ((n = ::read(out, chunk, sizeof chunk)) > 0) seen.append(chunk, static_cast<size_t>(n));
  ::close(out);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n" << seen;
  EXPECT_THAT(seen, HasSubstr("stopping (signal 2)"));
  EXPECT_THAT(seen, ::testing::Not(HasSubstr("is Ready after")));
  EXPECT_TRUE(ProcessesMentioning(work_dir_).empty());
}

// Mount points at or below `dir`.
int MountsUnder(const std::string& dir) {
  std::ifstream in("/proc/self/mountinfo");
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    n += line.find(" " + dir + "/") != std::string::npos ? 1 : 0;
  }
  return n;
}

// Linked runners (issue 20, item 5): `hyperslice dev --example runners` as a user runs it — a
// control node linking two runner agents "in two regions" and the example Job's pod running as a
// real container on one of them — then Ctrl-C, after which nothing of it is left: no process, no
// container, no network namespace, no mount, no temporary folder.
TEST_F(DevRole, RunnersExampleRunsTheJobOnALinkedRunnerAndCtrlCLeavesNothing) {
  const testenv::PipedChild child =
      SpawnDev({"--example", "runners", "--work-dir", work_dir_, "--ready-timeout", "240"});
  const pid_t dev = child.pid;
  const int out = child.out;
  ASSERT_GE(dev, 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::string seen;
  auto read_some = [&](int timeout_ms) {
    pollfd p{.fd = out, .events = POLLIN};
    if (::poll(&p, 1, timeout_ms) <= 0) return true;
    char chunk[4096];
    ssize_t n = ::read(out, chunk, sizeof chunk);
    if (n <= 0) return false;
    seen.append(chunk, static_cast<size_t>(n));
    return true;
  };
  const auto deadline = t0 + std::chrono::seconds(300);
  while (seen.find("Press Ctrl-C") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline && read_some(500)) {
  }
  const double up_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (seen.find("Press Ctrl-C") == std::string::npos) {
    int status = 0;
    if (::waitpid(dev, &status, WNOHANG) == 0) {
      ::kill(dev, SIGINT);
      ::waitpid(dev, &status, 0);
    }
    ::close(out);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2 &&
        seen.find("cannot run here") != std::string::npos) {
      EXPECT_THAT(seen, HasSubstr("scripts/deps.sh"));
      GTEST_SKIP() << seen;
    }
    FAIL() << "dev did not get the Job running\n" << seen;
  }
  std::printf("hyperslice dev --example runners: the Job's pod running after %.1f s\n", up_s);
  const std::string kubectl = "kubectl --kubeconfig " + Quote(work_dir_ + "/admin.kubeconfig");

  // The control node only, with the two runners' summed capacity.
  DevRun nodes = Shell(kubectl + " get nodes -o name");
  EXPECT_EQ(nodes.output, "node/runners-global\n");
  DevRun cpu = Shell(kubectl + " get node runners-global -o jsonpath='{.status.capacity.cpu}'");
  EXPECT_EQ(cpu.output, "8");
  // The example Job's pod on one of the runners, its output through kubectl logs and exec.
  DevRun pod = Shell(kubectl +
                     " get pods -l job-name=hello-runners -o jsonpath='{.items[0].metadata.name} "
                     "{.items[0].metadata.uid} {.items[0].status.phase} "
                     "{.items[0].metadata.annotations.runners\\.hyperslice\\.dev/runner}'");
  std::smatch m;
  ASSERT_TRUE(
      std::regex_match(pod.output, m, std::regex(R"((\S+) (\S+) Running (runner-eu|runner-us))")))
      << pod.output << "\n"
      << seen;
  const std::string uid = m[2], runner = m[3];
  EXPECT_THAT(seen, HasSubstr("as a runc container on runner " + runner));
  DevRun logs = Shell(kubectl + " logs job/hello-runners");
  EXPECT_EQ(logs.exit_code, 0) << logs.output;
  EXPECT_THAT(logs.output, HasSubstr("hello from a linked runner"));
  DevRun exec = Shell(kubectl + " exec job/hello-runners -- /hstest print:inside exit:3");
  EXPECT_EQ(exec.exit_code, 3) << exec.output;
  EXPECT_THAT(exec.output, HasSubstr("inside"));

  // The container is real: runc lists it under that agent's state; its init process runs.
  ASSERT_TRUE(std::regex_search(seen, m, std::regex("state in (/tmp/\\S+)/" + runner + ",")))
      << seen;
  const std::string tmp_dir = m[1];
  const std::string root = tmp_dir + "/" + runner + "/runtime";
  DevRun ids = Shell("runc --root " + Quote(root) + " list -q");
  ASSERT_EQ(ids.exit_code, 0) << ids.output;
  ASSERT_FALSE(ids.output.empty()) << "no container on " << runner;
  const std::string id = ids.output.substr(0, ids.output.find('\n'));
  DevRun state = Shell("runc --root " + Quote(root) + " state " + Quote(id));
  ASSERT_TRUE(std::regex_search(state.output, m, std::regex(R"("pid": ([0-9]+))"))) << state.output;
  const pid_t container_pid = std::stoi(m[1]);
  EXPECT_TRUE(fs::exists("/proc/" + std::to_string(container_pid)));
  EXPECT_TRUE(fs::exists("/run/netns/hs-" + uid));
  EXPECT_FALSE(ProcessesMentioning(tmp_dir).empty());

  // Ctrl-C: everything stops and is removed.
  const auto stop0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(dev, SIGINT), 0);
  while (read_some(500)) {
  }
  ::close(out);
  int status = 0;
  ASSERT_EQ(::waitpid(dev, &status, 0), dev);
  std::printf("hyperslice dev --example runners: stopped %.1f s after SIGINT\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - stop0).count());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n" << seen;
  EXPECT_THAT(seen, HasSubstr("stopping (signal 2)"));
  EXPECT_THAT(seen, ::testing::Not(HasSubstr("was left on")));  // no container needed forcing
  EXPECT_TRUE(ProcessesMentioning(work_dir_).empty());
  EXPECT_TRUE(ProcessesMentioning(tmp_dir).empty());  // agents, shims, the registry
  EXPECT_FALSE(fs::exists("/proc/" + std::to_string(container_pid)));
  EXPECT_FALSE(fs::exists("/run/netns/hs-" + uid));
  EXPECT_EQ(MountsUnder(tmp_dir), 0);
  EXPECT_FALSE(fs::exists(tmp_dir));
}

// Without root or the container tools, the runners example says what is missing and starts
// nothing.
TEST_F(DevRole, RunnersExampleSaysWhatIsMissing) {
  DevRun r = Shell("env PATH=/nonexistent " + Quote(HS_HYPERSLICE_BIN) +
                   " dev --example runners --work-dir " + Quote(work_dir_));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot run here"));
  EXPECT_THAT(r.output, HasSubstr("scripts/deps.sh installs them"));
  EXPECT_FALSE(fs::exists(work_dir_ + "/admin.kubeconfig"));
}

TEST_F(DevRole, UnknownExampleIsRejectedBeforeAnythingStarts) {
  DevRun r = RunDev({"--example", "v5p-2x2", "--work-dir", work_dir_}, 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("--example"));
  EXPECT_FALSE(fs::exists(work_dir_ + "/admin.kubeconfig"));
}

}  // namespace
}  // namespace hyperslice::dev_test
