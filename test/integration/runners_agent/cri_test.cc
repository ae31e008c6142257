// The runner agent's CRI path (--container-runtime-endpoint, src/runners/agent/cri_runtime.h)
// against a PRIVATE containerd this test starts: its own config, root, state and socket under the
// test's folder, the CRI plugin with sandbox_image = a pause image the test builds
// (test/integration/runners_agent/pause.c) and pushes to the loopback registry, registry hosts
// that send every pull to that registry over plain HTTP, and a CNI bridge + host-local config on
// 192.0.2.64/26 (Debian's containernetworking-plugins). The binary runs in a network namespace
// of its own (test/testenv/own_netns.h): the registry, containerd, the agent and the bridge and
// veths live there, so nothing reaches beyond loopback and no other runners test sees them.
// Skips with the reason when not root or containerd, its runc shim or the CNI plugins are missing.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "src/base/command.h"
#include "test/integration/runners_agent/fixture.h"
#include "test/integration/runners_agent/own_netns_test.h"
#include "test/testenv/child_process.h"
#include "test/testenv/own_netns.h"

namespace hyperslice::runners::testing {
namespace {
namespace fs = std::filesystem;

constexpr char kCniDir[] = "/usr/lib/cni";
constexpr char kSubnet[] = "192.0.2.64/26";

std::string ContainerdMissing() {
  for (const char* tool : {"containerd", "containerd-shim-runc-v2", "ctr"}) {
    if (RunCommand({"sh", "-c", std::string("command -v ") + tool}).exit_code != 0) {
      return std::string(tool) + " is not installed (Debian package containerd)";
    }
  }
  for (const char* plugin : {"bridge", "host-local", "loopback"}) {
    if (!fs::exists(std::string(kCniDir) + "/" + plugin)) {
      return std::string("CNI plugin ") + plugin +
             " is missing (Debian package containernetworking-plugins)";
    }
  }
  return "";
}

// The private containerd: started once per binary, stopped (with every shim it left) at exit.
class Containerd {
 public:
  // nullptr with `why` when it cannot run.
  static Containerd* Shared(Env& env, std::string* why) {
    static std::string reason;
    static std::unique_ptr<Containerd> instance = [&] {
      auto c = std::unique_ptr<Containerd>(new Containerd(env.dir + "/containerd"));
      reason = c->Start(env);
      return reason.empty() ? std::move(c) : nullptr;
    }();
    *why = reason;
    return instance.get();
  }
  ~Containerd() {
    (void)process_.Stop(SIGTERM);
    // A shim outlives its containerd (that is what shims are for): end those of ours, found by
    // the socket in their command line, so nothing of this test runs on.
    for (const auto& e : fs::directory_iterator("/proc")) {
      std::ifstream in(e.path() / "cmdline");
      std::string cmd((std::istreambuf_iterator<char>(in)), {});
      if (cmd.find("containerd-shim") != std::string::npos &&
          cmd.find(socket()) != std::string::npos) {
        ::kill(std::stoi(e.path().filename()), SIGKILL);
      }
    }
    for (const auto& m : Mounts()) RunCommand({"umount", "-l", m});
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string socket() const { return dir_ + "/containerd.sock"; }
  std::string endpoint() const { return "unix://" + socket(); }
  std::string dir() const { return dir_; }
  std::string ipam_dir() const { return dir_ + "/cni-ipam/hs-cri-test"; }
  std::string netns_dir() const { return dir_ + "/state/io.containerd.grpc.v1.cri/netns"; }
  // `ctr` on this containerd's CRI namespace.
  std::string Ctr(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {"ctr", "--address", socket(), "--namespace", "k8s.io"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv).output;
  }
  std::vector<std::string> Containers() const { return Lines(Ctr({"containers", "ls", "-q"})); }
  // The size of containerd's log now (trace level: a line per CRI call it serves).
  size_t LogSize() const {
    std::error_code ec;
    const auto n = fs::file_size(dir_ + "/log", ec);
    return ec ? 0 : static_cast<size_t>(n);
  }
  // How many ContainerStatus calls containerd served after the first `skip` bytes of its log: each
  // is one look of a pod worker at a container (CriRuntime::Observe).
  int ContainerStatusCallsAfter(size_t skip) const {
    std::ifstream in(dir_ + "/log");
    in.seekg(static_cast<std::streamoff>(skip));
    int calls = 0;
    for (std::string line; std::getline(in, line);) {
      // The call's line, not its "returns status" or "failed" line.
      if (line.find("msg=\"ContainerStatus for ") != std::string::npos &&
          line.find("returns") == std::string::npos && line.find("failed") == std::string::npos) {
        ++calls;
      }
    }
    return calls;
  }
  // Mount points under this containerd's folder.
  std::vector<std::string> Mounts() const {
    std::ifstream in("/proc/self/mounts");
    std::vector<std::string> out;
    std::string dev, point, rest;
    while (in >> dev >> point && std::getline(in, rest)) {
      if (point.rfind(dir_ + "/", 0) == 0) out.push_back(point);
    }
    return out;
  }
  // Addresses host-local still holds (its files are named by address).
  std::vector<std::string> Allocations() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(ipam_dir(), ec)) {
      std::string name = e.path().filename();
      if (name.rfind("192.0.2.", 0) == 0) out.push_back(name);
    }
    return out;
  }
  std::string Log() const { return process_.Tail(60); }

  static std::vector<std::string> Lines(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) {
      if (!l.empty()) out.push_back(l);
    }
    return out;
  }

 private:
  explicit Containerd(std::string dir) : dir_(std::move(dir)) {}

  std::string Start(Env& env) {
    std::error_code ec;
    for (const char* sub : {"root", "state", "cni-conf", "certs.d", "cni-ipam"}) {
      fs::create_directories(dir_ + "/" + sub, ec);
    }
    // The sandbox image: built here and pulled by containerd from the loopback registry (never
    // registry.k8s.io).
    std::string pause_bin = dir_ + "/pause";
    auto cc = RunCommand({"cc", "-static", "-O2", "-o", pause_bin, HS_PAUSE_SOURCE});
    if (cc.exit_code != 0) return "cannot build the pause program: " + cc.errors;
    auto pause = env.registry->PushProgramImage("hs/pause", "v1", pause_bin);
    if (!pause.ok()) return "cannot push the pause image: " + pause.error().message;
    std::string host = env.registry->host();
    fs::create_directories(dir_ + "/certs.d/" + host, ec);
    std::ofstream(dir_ + "/certs.d/" + host + "/hosts.toml")
        << "server = \"http://" << host << "\"\n[host.\"http://" << host
        << "\"]\n  capabilities = [\"pull\", \"resolve\"]\n";
    std::ofstream(dir_ + "/cni-conf/10-hs-cri-test.conflist")
        << R"({"cniVersion": "0.4.0", "name": "hs-cri-test", "plugins": [{"type": "bridge", )"
        << R"("bridge": "hscri0", "isGateway": true, "ipMasq": false, "ipam": {"type": )"
        << R"("host-local", "ranges": [[{"subnet": ")" << kSubnet << R"("}]], "dataDir": ")" << dir_
        << R"(/cni-ipam", "routes": [{"dst": "0.0.0.0/0"}]}}]})";
    // Plugins that could reach beyond this namespace or the host's paths are off; every address
    // and directory is the test's.
    std::ofstream(dir_ + "/config.toml")
        << "version = 2\nroot = \"" << dir_ << "/root\"\nstate = \"" << dir_ << "/state\"\n"
        << "disabled_plugins = [\"io.containerd.tracing.processor.v1.otlp\", "
           "\"io.containerd.internal.v1.tracing\", \"io.containerd.snapshotter.v1.btrfs\", "
           "\"io.containerd.snapshotter.v1.zfs\", \"io.containerd.snapshotter.v1.devmapper\", "
           "\"io.containerd.snapshotter.v1.aufs\", \"io.containerd.internal.v1.opt\"]\n"
        << "[grpc]\n  address = \"" << socket() << "\"\n"
        << "[ttrpc]\n  address = \"" << socket()
        << ".ttrpc\"\n"
        // Trace level: the CRI calls it serves are the restart test's signal.
        << "[debug]\n  address = \"\"\n  level = \"trace\"\n[metrics]\n  address = \"\"\n"
        << "[plugins.\"io.containerd.grpc.v1.cri\"]\n"
        << "  sandbox_image = \"" << *pause << "\"\n"
        << "  disable_apparmor = true\n  stream_server_address = \"127.0.0.1\"\n"
        << "  stream_server_port = \"0\"\n  netns_mounts_under_state_dir = true\n"
        // The sandbox's -998 is refused where the agent itself runs with a higher floor (a
        // container): cap every container's at containerd's own, as kind does.
        << "  restrict_oom_score_adj = true\n"
        << "  [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n    snapshotter = \"overlayfs\"\n"
        << "  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n"
        << "    runtime_type = \"io.containerd.runc.v2\"\n"
        << "  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n"
        << "    Root = \"" << dir_ << "/runc\"\n"
        << "  [plugins.\"io.containerd.grpc.v1.cri\".cni]\n    bin_dir = \"" << kCniDir
        << "\"\n    conf_dir = \"" << dir_ << "/cni-conf\"\n"
        << "  [plugins.\"io.containerd.grpc.v1.cri\".registry]\n    config_path = \"" << dir_
        << "/certs.d\"\n";
    process_.Start({"/usr/bin/containerd", "--config", dir_ + "/config.toml"}, dir_ + "/log");
    for (int i = 0; i < 200; ++i) {
      if (fs::exists(socket()) &&
          RunCommand({"ctr", "--address", socket(), "version"}).exit_code == 0) {
        return "";
      }
      if (!process_.Alive()) return "containerd exited:\n" + process_.Tail();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "containerd did not serve:\n" + process_.Tail();
  }

  std::string dir_;
  testenv::ChildProcess process_;
};

class CriAgentTest : public OwnNetnsTest {
 protected:
  void SetUp() override {
    OwnNetnsTest::SetUp();
    if (IsSkipped()) return;
    std::string why;
    if (std::string missing = ContainerdMissing(); !missing.empty()) GTEST_SKIP() << missing;
    containerd_ = Containerd::Shared(*env_, &why);
    ASSERT_NE(containerd_, nullptr) << why;
  }
  std::vector<std::string> Flags() const {
    return {"--container-runtime-endpoint", containerd_->endpoint()};
  }
  // Nothing of any pod is left: no container, sandbox, mount, namespace, veth or address.
  void ExpectNothingLeft() const {
    EXPECT_EQ(containerd_->Containers(), std::vector<std::string>{});
    EXPECT_EQ(Containerd::Lines(containerd_->Ctr({"tasks", "ls", "-q"})),
              std::vector<std::string>{});
    std::vector<std::string> task_mounts;
    for (const auto& m : containerd_->Mounts()) {
      // The runtime's own (its snapshotter's root) may stay; a pod's rootfs or netns may not.
      if (m.find("/io.containerd.runtime.v2.task/") != std::string::npos ||
          m.find("/netns/") != std::string::npos) {
        task_mounts.push_back(m);
      }
    }
    EXPECT_EQ(task_mounts, std::vector<std::string>{});
    std::error_code ec;
    EXPECT_TRUE(fs::is_empty(containerd_->netns_dir(), ec) ||
                !fs::exists(containerd_->netns_dir()));
    EXPECT_EQ(containerd_->Allocations(), std::vector<std::string>{});
    std::string links = RunCommand({"ip", "-o", "link", "show"}).output;
    EXPECT_EQ(links.find("veth"), std::string::npos) << links;
  }

  Containerd* containerd_ = nullptr;
};

TEST_F(CriAgentTest, RunsAPodByDigestWithLogsExitCodesMountsAndLimits) {
  AgentProcess agent(*env_, "runner-cri", Flags());
  ASSERT_TRUE(agent.Start());
  auto stub = agent.Stub();
  {
    grpc::ClientContext ctx;
    v1::RunnerInfo info;
    ASSERT_TRUE(stub->Info(&ctx, v1::InfoRequest(), &info).ok());
    EXPECT_TRUE(info.healthy()) << info.health_message();
  }
  auto pod = Pod("cri-ok", env_->image,
                 {"print:hello-cri", "env:GREETING", "env:FROM_POD", "cat:/etc/cfg/greeting",
                  "eprint:to-stderr"});
  auto* c = pod.mutable_containers(0);
  auto* e = c->add_env();
  e->set_name("FROM_POD");
  e->set_value("pod-value");
  (*c->mutable_limits())["memory"] = "64Mi";
  (*c->mutable_limits())["cpu"] = "250m";
  auto* v = pod.add_volumes();
  v->set_name("cfg");
  auto* f = v->mutable_files()->add_files();
  f->set_path("greeting");
  f->set_content("from-a-configmap");
  auto* m = c->add_mounts();
  m->set_volume("cfg");
  m->set_container_path("/etc/cfg");
  m->set_read_only(true);
  auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(RunPod(*stub, pod).ok());
  auto st =
      WaitFor(*stub, "cri-ok", [](const v1::PodStatus& p) { return p.phase() == "Succeeded"; });
  ASSERT_TRUE(st) << containerd_->Log();
  std::cout << "cri pod succeeded after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - started)
                   .count()
            << " ms\n";
  const auto& cs = st->container_statuses(0);
  EXPECT_EQ(cs.terminated().exit_code(), 0);
  EXPECT_EQ(cs.terminated().reason(), "Completed");
  EXPECT_GT(cs.terminated().started_at_unix(), 0);
  EXPECT_GE(cs.terminated().finished_at_unix(), cs.terminated().started_at_unix());
  EXPECT_EQ(cs.image_id(), env_->image.substr(env_->image.find('@') + 1));
  EXPECT_NE(st->pod_ip().rfind("192.0.2.", 0), std::string::npos) << st->pod_ip();
  // The runtime wrote the CRI log format; the agent's reader streams it.
  // containerd copies stdout and stderr from two pipes, so no order holds between the streams:
  // stdout's lines in order, and stderr's one line somewhere among them.
  std::string logs = Logs(*stub, "cri-ok", "main");
  const std::string err_line = "to-stderr\n";
  std::string out_lines = logs;
  if (auto at = out_lines.find(err_line); at != std::string::npos)
    out_lines.erase(at, err_line.size());
  EXPECT_EQ(out_lines, "hello-cri\nGREETING=hello\nFROM_POD=pod-value\nfrom-a-configmap\n") << logs;
  EXPECT_EQ(logs.size(), out_lines.size() + err_line.size()) << logs;
  // containerd created the containers with the limits asked for.
  auto ids = containerd_->Containers();
  EXPECT_EQ(ids.size(), 2u);  // the sandbox's pause and main
  std::string info;
  for (const auto& id : ids) info += containerd_->Ctr({"containers", "info", id});
  EXPECT_NE(info.find("\"limit\": 67108864"), std::string::npos);
  EXPECT_NE(info.find("\"quota\": 25000"), std::string::npos);

  auto fail = Pod("cri-fail", env_->image, {"print:failing", "exit:3"});
  ASSERT_TRUE(RunPod(*stub, fail).ok());
  st = WaitFor(*stub, "cri-fail", [](const v1::PodStatus& p) { return p.phase() == "Failed"; });
  ASSERT_TRUE(st);
  EXPECT_EQ(st->container_statuses(0).terminated().exit_code(), 3);
  EXPECT_EQ(st->container_statuses(0).terminated().reason(), "Error");
  EXPECT_EQ(Logs(*stub, "cri-fail", "main"), "failing\n");

  // A tag is refused by the agent's digest policy before containerd sees it.
  auto tagged = Pod("cri-tag", env_->registry->host() + "/hs/hstest:v1", {});
  EXPECT_EQ(RunPod(*stub, tagged).error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  ASSERT_TRUE(DeleteNow(*stub, "cri-ok").ok());
  ASSERT_TRUE(DeleteNow(*stub, "cri-fail").ok());
  EXPECT_FALSE(fs::exists(agent.state_dir() + "/pods/cri-ok"));
  ExpectNothingLeft();
}

TEST_F(CriAgentTest, ExecThroughTheRuntimesStreamingServerWithAndWithoutATerminal) {
  AgentProcess agent(*env_, "runner-cri-exec", Flags());
  ASSERT_TRUE(agent.Start());
  auto stub = agent.Stub();
  ASSERT_TRUE(RunPod(*stub, Pod("cri-exec", env_->image, {"sleep:600"})).ok());
  ASSERT_TRUE(
      WaitFor(*stub, "cri-exec", [](const v1::PodStatus& p) { return p.phase() == "Running"; }));
  // Without a terminal: stdout and stderr apart (each its own channel of the runtime's stream,
  // so no order holds between them), and the exit code.
  auto r = ExecIn(*stub, "cri-exec", {"/hstest", "print:inside", "eprint:err", "exit:3"});
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.stdout_text, "inside\n");
  EXPECT_EQ(r.stderr_text, "err\n");
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(ExecIn(*stub, "cri-exec", {"/hstest", "tty"}).out, "tty=no\n");
  EXPECT_EQ(ExecIn(*stub, "cri-exec", {"/hstest"}).code, 0);
  // With a terminal: the command sees one, its exit code comes back; resized, a line typed.
  ExpectTerminalExec(*stub, "cri-exec", "hello-cri");
  // A command that cannot start is an exit with an error, not a failed call.
  auto missing = ExecIn(*stub, "cri-exec", {"/no-such-command"});
  EXPECT_NE(missing.code, 0);
  ASSERT_TRUE(DeleteNow(*stub, "cri-exec").ok());
  ExpectNothingLeft();
}

TEST_F(CriAgentTest, ARestartedAgentFindsItsContainersAndDuplicatesNone) {
  AgentProcess agent(*env_, "runner-cri-restart", Flags());
  ASSERT_TRUE(agent.Start());
  auto stub = agent.Stub();
  ASSERT_TRUE(RunPod(*stub, Pod("cri-keep", env_->image, {"print:once", "sleep:600"})).ok());
  auto before = WaitFor(*stub, "cri-keep", [](const v1::PodStatus& p) {
    return p.phase() == "Running" && !p.pod_ip().empty();
  });
  ASSERT_TRUE(before);
  auto ids = containerd_->Containers();
  ASSERT_EQ(ids.size(), 2u);

  agent.Kill9();
  ASSERT_TRUE(agent.Start());
  stub = agent.Stub();
  auto after =
      WaitFor(*stub, "cri-keep", [](const v1::PodStatus& p) { return p.phase() == "Running"; });
  ASSERT_TRUE(after);
  EXPECT_EQ(after->pod_ip(), before->pod_ip());
  EXPECT_EQ(after->container_statuses(0).restart_count(), 0);
  // The recovered worker looks at its container every step: after 40 more looks (about 2 s) it
  // has had every chance to (wrongly) start anything again.
  const size_t seen = containerd_->LogSize();
  constexpr int kLooks = 40;
  int looks = 0;
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       looks < kLooks && std::chrono::steady_clock::now() < until;
       looks = containerd_->ContainerStatusCallsAfter(seen)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(looks, kLooks) << "the recovered worker stopped looking at its container";
  EXPECT_EQ(containerd_->Containers(), ids);
  EXPECT_EQ(Logs(*stub, "cri-keep", "main"), "once\n");
  EXPECT_EQ(ExecIn(*stub, "cri-keep", {"/hstest", "print:still-here"}).out, "still-here\n");

  ASSERT_TRUE(DeleteNow(*stub, "cri-keep").ok());
  ExpectNothingLeft();
}

}  // namespace
}  // namespace hyperslice::runners::testing
