// The real control plane: LocalCluster, the shared test cluster, and `hyperslice dev`.
// kubectl (the real one, $KUBECTL or /usr/bin/kubectl) is the independent observer throughout.
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "src/localcluster/localcluster.h"
#include "test/testenv/eventually.h"
#include "test/testenv/piped_child.h"
#include "test/testenv/processes.h"
#include "test/testenv/testenv.h"

namespace hyperslice::localcluster {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

CommandResult RunCommand(const std::vector<std::string>& argv) {
  std::string cmd;
  for (const auto& a : argv) cmd += Quote(a) + " ";
  cmd += "2>&1";
  CommandResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) r.output.append(buf.data(), n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string Kubectl() {
  const char* env = std::getenv("KUBECTL");
  return env && *env ? env : "/usr/bin/kubectl";
}

// kubectl as the cluster's admin.
CommandResult AdminKubectl(const LocalCluster& c, std::vector<std::string> args) {
  std::vector<std::string> argv = {Kubectl(), "--kubeconfig=" + c.kubeconfig_path(),
                                   "--cache-dir=" + c.work_dir() + "/kubectl-cache"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

// kubectl with only a bearer token (no kubeconfig identity).
CommandResult TokenKubectl(const LocalCluster& c, const std::string& token,
                           std::vector<std::string> args) {
  std::string empty = c.work_dir() + "/empty.kubeconfig";
  std::ofstream(empty) << "apiVersion: v1\nkind: Config\n";
  std::vector<std::string> argv = {Kubectl(),
                                   "--kubeconfig=" + empty,
                                   "--cache-dir=" + c.work_dir() + "/kubectl-cache-token",
                                   "--server=" + c.server_url(),
                                   "--certificate-authority=" + c.ca_cert_path(),
                                   "--token=" + token};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

std::string Unique(const std::string& prefix) {
  static int n = 0;
  return prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

using testenv::Eventually;  // polls a condition until it holds or the timeout passes

TEST(SharedCluster, KubectlReadsReadyzAndCreatesNamespace) {
  LocalCluster& c = testenv::Cluster();
  ASSERT_TRUE(fs::exists(c.kubeconfig_path()));
  EXPECT_EQ(c.kubeconfig_path(), c.work_dir() + "/admin.kubeconfig");

  auto readyz = AdminKubectl(c, {"get", "--raw", "/readyz"});
  ASSERT_EQ(readyz.exit_code, 0) << readyz.output;
  EXPECT_THAT(readyz.output, HasSubstr("ok"));

  std::string ns = Unique("lc-kubectl");
  auto created = AdminKubectl(c, {"create", "namespace", ns});
  ASSERT_EQ(created.exit_code, 0) << created.output;
  auto phase = AdminKubectl(c, {"get", "namespace", ns, "-o", "jsonpath={.status.phase}"});
  ASSERT_EQ(phase.exit_code, 0) << phase.output;
  EXPECT_EQ(phase.output, "Active");
}

TEST(SharedCluster, RbacForbidsBootstrapTokenThatAuthenticates) {
  LocalCluster& c = testenv::Cluster();
  // A bootstrap token: id [a-z0-9]{6}, secret [a-z0-9]{16}, unique per run.
  std::string id = "a" + std::to_string(100000 + getpid() % 90000).substr(0, 5);
  std::string secret = "0123456789abcdef";
  std::string manifest = c.work_dir() + "/bootstrap-token.yaml";
  std::ofstream(manifest) << "apiVersion: v1\nkind: Secret\nmetadata:\n"
                          << "  name: bootstrap-token-" << id << "\n  namespace: kube-system\n"
                          << "type: bootstrap.kubernetes.io/token\nstringData:\n"
                          << "  token-id: " << id << "\n  token-secret: " << secret << "\n"
                          << "  usage-bootstrap-authentication: \"true\"\n";
  auto applied = AdminKubectl(c, {"apply", "-f", manifest});
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  std::string token = id + "." + secret;

  // The token authenticates (bootstrap-token auth is on)...
  auto whoami =
      TokenKubectl(c, token, {"auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"});
  ASSERT_EQ(whoami.exit_code, 0) << whoami.output;
  EXPECT_EQ(whoami.output, "system:bootstrap:" + id);

  // ...but RBAC gives it no right to list pods: 403, not 401.
  auto pods = TokenKubectl(c, token, {"get", "pods", "-A"});
  EXPECT_NE(pods.exit_code, 0);
  EXPECT_THAT(pods.output, HasSubstr("forbidden"));
  EXPECT_THAT(pods.output, HasSubstr("system:bootstrap:" + id));
  EXPECT_THAT(pods.output, Not(HasSubstr("Unauthorized")));

  // A token the cluster does not know is rejected outright (401).
  auto unknown = TokenKubectl(c, "zzzzzz.0000000000000000", {"get", "pods", "-A"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_THAT(unknown.output, HasSubstr("Unauthorized"));
}

TEST(SharedCluster, RestartApiserverKeepsPortAndData) {
  LocalCluster& c = testenv::Cluster();
  std::string name = Unique("lc-restart");
  auto created = AdminKubectl(
      c, {"create", "configmap", name, "-n", "default", "--from-literal=survives=yes"});
  ASSERT_EQ(created.exit_code, 0) << created.output;

  std::string url = c.server_url();
  auto before = c.Pids();
  auto restarted = c.RestartApiserver();
  ASSERT_TRUE(restarted.ok()) << restarted.error().ToString();
  auto after = c.Pids();

  EXPECT_EQ(c.server_url(), url);
  ASSERT_EQ(before.size(), after.size());
  std::set<int> old_pids(before.begin(), before.end());
  int replaced = 0;
  for (int pid : after) replaced += old_pids.count(pid) == 0 ? 1 : 0;
  EXPECT_EQ(replaced, 1) << "exactly the apiserver should have a new pid";

  auto got = AdminKubectl(
      c, {"get", "configmap", name, "-n", "default", "-o", "jsonpath={.data.survives}"});
  ASSERT_EQ(got.exit_code, 0) << got.output;
  EXPECT_EQ(got.output, "yes");

  // Stop + Start is the same operation in two halves; the apiserver is unreachable in between.
  ASSERT_TRUE(c.StopApiserver().ok());
  auto down = AdminKubectl(c, {"get", "--raw", "/readyz", "--request-timeout=5s"});
  EXPECT_NE(down.exit_code, 0) << down.output;
  auto started = c.StartApiserver();
  ASSERT_TRUE(started.ok()) << started.error().ToString();
  auto up = AdminKubectl(c, {"get", "--raw", "/readyz"});
  EXPECT_EQ(up.exit_code, 0) << up.output;
}

// A cluster of the other shape: kube-controller-manager on, watch cache off.
class ControllerManagerCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Options o;
    o.controller_manager = true;
    o.watch_cache = false;
    auto c = LocalCluster::Start(o);
    if (!c.ok()) {
      start_error_ = new std::string(c.error().ToString());
      return;
    }
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(cluster_, nullptr) << (start_error_ ? *start_error_ : "not started");
  }
  static LocalCluster* cluster_;
  static std::string* start_error_;
};
LocalCluster* ControllerManagerCluster::cluster_ = nullptr;
std::string* ControllerManagerCluster::start_error_ = nullptr;

TEST_F(ControllerManagerCluster, ControllersPopulateNewNamespace) {
  LocalCluster& c = *cluster_;
  EXPECT_EQ(c.Pids().size(), 3u);
  std::string ns = Unique("lc-kcm");
  auto created = AdminKubectl(c, {"create", "namespace", ns});
  ASSERT_EQ(created.exit_code, 0) << created.output;
  // The serviceaccount controller creates "default"; the root-ca publisher creates
  // kube-root-ca.crt with our CA.
  EXPECT_TRUE(Eventually(
      [&] {
        return AdminKubectl(c, {"get", "serviceaccount", "default", "-n", ns}).exit_code == 0;
      },
      std::chrono::seconds(90)))
      << fs::path(c.work_dir()) / "kube-controller-manager.log";
  std::string ca;
  EXPECT_TRUE(Eventually(
      [&] {
        auto r = AdminKubectl(c, {"get", "configmap", "kube-root-ca.crt", "-n", ns, "-o",
                                  "jsonpath={.data.ca\\.crt}"});
        ca = r.output;
        return r.exit_code == 0;
      },
      std::chrono::seconds(90)));
  std::ifstream in(c.ca_cert_path());
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(ca, want.str());
}

TEST_F(ControllerManagerCluster, CompactEtcdMakesOldResourceVersionGone) {
  LocalCluster& c = *cluster_;
  std::string name = Unique("lc-compact");
  auto created =
      AdminKubectl(c, {"create", "configmap", name, "-n", "default", "--from-literal=v=0"});
  ASSERT_EQ(created.exit_code, 0) << created.output;
  auto rv = AdminKubectl(
      c, {"get", "configmap", name, "-n", "default", "-o", "jsonpath={.metadata.resourceVersion}"});
  ASSERT_EQ(rv.exit_code, 0) << rv.output;
  for (int i = 1; i <= 3; ++i) {
    auto patched = AdminKubectl(c, {"patch", "configmap", name, "-n", "default", "--type=merge",
                                    "-p", "{\"data\":{\"v\":\"" + std::to_string(i) + "\"}}"});
    ASSERT_EQ(patched.exit_code, 0) << patched.output;
  }
  std::string watch =
      "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=2&"
      "fieldSelector=metadata.name%3D" +
      name + "&resourceVersion=" + rv.output;

  // Before compaction the old revision is still in etcd's history: the watch replays it.
  auto replay = AdminKubectl(c, {"get", "--raw", watch});
  EXPECT_THAT(replay.output, HasSubstr("\"MODIFIED\""));
  EXPECT_THAT(replay.output, Not(HasSubstr("\"code\":410")));

  auto compacted = c.CompactEtcd();
  ASSERT_TRUE(compacted.ok()) << compacted.error().ToString();

  // After it, a watch from that revision is 410 Gone (the watch cache is off).
  auto gone = AdminKubectl(c, {"get", "--raw", watch});
  EXPECT_THAT(gone.output, HasSubstr("\"code\":410")) << gone.output;
}

TEST(Ownership, NextStartRemovesTempDirOfDeadOwnerOnly) {
  char tmpl[] = "/tmp/hyperslice-tmpdir-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  fs::path tmp = tmpl;
  // A pid that is certainly dead: a child that exited and was reaped.
  pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  fs::create_directories(tmp / "hyperslice-cluster-dead");
  std::ofstream(tmp / "hyperslice-cluster-dead" / "owner.pid") << dead;
  fs::create_directories(tmp / "hyperslice-cluster-live");
  std::ofstream(tmp / "hyperslice-cluster-live" / "owner.pid") << getpid();
  fs::create_directories(tmp / "hyperslice-cluster-nopid");

  const char* old = std::getenv("TMPDIR");
  std::string saved = old ? old : "";
  setenv("TMPDIR", tmp.c_str(), 1);
  auto cluster = LocalCluster::Start({});
  if (old) {
    setenv("TMPDIR", saved.c_str(), 1);
  } else {
    unsetenv("TMPDIR");
  }
  ASSERT_TRUE(cluster.ok()) << cluster.error().ToString();
  EXPECT_EQ(fs::path((*cluster)->work_dir()).parent_path(), tmp);
  EXPECT_FALSE(fs::exists(tmp / "hyperslice-cluster-dead"));
  EXPECT_TRUE(fs::exists(tmp / "hyperslice-cluster-live"));
  EXPECT_TRUE(fs::exists(tmp / "hyperslice-cluster-nopid"));
  std::string own = (*cluster)->work_dir();
  cluster->reset();
  EXPECT_FALSE(fs::exists(own)) << "a temp work dir is removed when its cluster stops";
  std::error_code ec;
  fs::remove_all(tmp, ec);
}

// Reads lines from `fd` until one starts with "PIDS " or "ERROR ", or the timeout passes.
std::string ReadHelperLine(int fd, std::chrono::seconds timeout) {
  std::string buf;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 500) <= 0) continue;
    char chunk[512];
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
    std::istringstream lines(buf);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind("PIDS ", 0) == 0 || line.rfind("ERROR ", 0) == 0) return line;
    }
  }
  return buf;
}

TEST(Ownership, NoProcessOutlivesKilledOwner) {
  // Become the subreaper: the helper's orphans are re-parented to this process, so we can reap
  // them and see exactly how each one ended.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  char tmpl[] = "/tmp/hyperslice-owner-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string work_dir = tmpl;

  const testenv::PipedChild child = testenv::SpawnPiped({HS_OWNER_HELPER, work_dir});
  const pid_t helper = child.pid;
  ASSERT_GE(helper, 0);
  std::string line = ReadHelperLine(child.out, std::chrono::seconds(300));
  close(child.out);
  ASSERT_EQ(line.rfind("PIDS ", 0), 0u) << "helper said: " << line;
  std::vector<pid_t> pids;
  std::istringstream in(line.substr(5));
  for (pid_t p; in >> p;) pids.push_back(p);
  ASSERT_EQ(pids.size(), 3u) << line;  // etcd, kube-apiserver, kube-controller-manager
  for (pid_t p : pids) EXPECT_EQ(kill(p, 0), 0) << "pid " << p << " should run before the kill";

  ASSERT_EQ(kill(helper, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(helper, &status, 0), helper);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  // Every control-plane process must die (PDEATHSIG=SIGKILL) and reach us as an orphan.
  std::set<pid_t> alive(pids.begin(), pids.end());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!alive.empty() && std::chrono::steady_clock::now() < deadline) {
    for (auto it = alive.begin(); it != alive.end();) {
      int st = 0;
      if (waitpid(*it, &st, WNOHANG) == *it) {
        EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "pid " << *it;
        it = alive.erase(it);
      } else {
        ++it;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (pid_t p : alive) {
    ADD_FAILURE() << "pid " << p << " outlived its owner";
    kill(p, SIGKILL);
    waitpid(p, nullptr, 0);  // ours once re-parented; ECHILD otherwise
  }
  prctl(PR_SET_CHILD_SUBREAPER, 0);
  std::error_code ec;
  fs::remove_all(work_dir, ec);
}

#ifdef HS_HYPERSLICE_BIN
TEST(DevRole, StartsPrintsKubeconfigAndStops) {
  char tmpl[] = "/tmp/hyperslice-dev-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string work_dir = tmpl;
  auto r = RunCommand({HS_HYPERSLICE_BIN, "dev", "--exit-after-ready", "--work-dir", work_dir});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("export KUBECONFIG=" + work_dir + "/admin.kubeconfig"));
  EXPECT_THAT(r.output, HasSubstr("kubectl get ns"));
  EXPECT_TRUE(fs::exists(work_dir + "/admin.kubeconfig"));
  std::error_code ec;
  fs::remove_all(work_dir, ec);
}

using testenv::ProcessesMentioning;

TEST(DevRole, RunsUntilSigintThenStopsEveryProcess) {
  char tmpl[] = "/tmp/hyperslice-devint-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string work_dir = tmpl;
  const testenv::PipedChild child =
      testenv::SpawnPiped({HS_HYPERSLICE_BIN, "dev", "--work-dir", work_dir});
  const pid_t dev = child.pid;
  const int out = child.out;
  ASSERT_GE(dev, 0);
  // Wait for the prompt that follows readiness.
  std::string seen;
  testenv::ReadUntil(out, &seen, "Press Ctrl-C", std::chrono::seconds(300));
  ASSERT_THAT(seen, HasSubstr("Press Ctrl-C"));
  EXPECT_THAT(seen, HasSubstr("export KUBECONFIG=" + work_dir + "/admin.kubeconfig"));
  // etcd, kube-apiserver, kube-controller-manager and kube-scheduler run, each naming the work
  // dir (as does hyperslice itself).
  auto running = ProcessesMentioning(work_dir);
  EXPECT_EQ(running.size(), 5u);
  EXPECT_EQ(std::count(running.begin(), running.end(), dev), 1);

  ASSERT_EQ(kill(dev, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(waitpid(dev, &status, 0), dev);
  close(out);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_TRUE(ProcessesMentioning(work_dir).empty());
  std::error_code ec;
  fs::remove_all(work_dir, ec);
}

#endif  // HS_HYPERSLICE_BIN

}  // namespace
}  // namespace hyperslice::localcluster
