// Time from RunPod to "container running" on a runner agent, for a cached image, split into the
// runtime's share (runc create + start, as the container shim measures it) and the agent's share
// (the rest: gRPC, admission, sandbox — network namespace, volumes —, bundle, overlay mount,
// shim start, and noticing the start). Issue 20: "time from pod bound to container running (the
// control node's share vs the runtime's)"; this is the runner's part of that path.
//
// Needs root, runc, umoci, skopeo, docker-registry (prints why and exits 0 otherwise). Runs the
// real `hyperslice runner-agent` against a loopback registry with the test image; N pods
// (default 10, HS_BENCH_PODS) one after another, then deletes them.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "src/runners/agent.grpc.pb.h"
#include "src/runners/agent/agent.h"
#include "src/runners/link/link.h"
#include "test/testenv/registry.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX leaves it undeclared

namespace {

using namespace hyperslice;  // NOLINT(google-build-using-namespace): a benchmark's main
namespace v1 = runners::v1;
using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void Print(const char* what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  std::printf("  %-34s mean %7.1f ms  p50 %7.1f ms  max %7.1f ms\n", what,
              sum / static_cast<double>(v.size()), v[v.size() / 2], v.back());
}

}  // namespace

int main() {
  std::string why = testenv::RunnerToolsMissing();
  if (!why.empty()) {
    std::printf("runner_agent_bench: skipped: %s\n", why.c_str());
    return 0;
  }
  int pods = 10;
  if (const char* n = std::getenv("HS_BENCH_PODS")) pods = std::max(1, std::atoi(n));
  char tmpl[] = "/tmp/hs-agent-bench-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  auto ca = runners::link::MakeRunnersCa();
  auto cn = runners::link::IssueControlNodeClientCert(*ca, "bench-control-node");
  auto serving = runners::link::IssueLinkServerCert(*ca, "127.0.0.1");
  runners::link::MemoryJoinTokenStore tokens;
  tokens.Add("bench-runner", "bench-token");
  runners::link::LinkServer::Options lo;
  lo.ca = *ca;
  lo.serving = *serving;
  lo.tokens = &tokens;
  auto link = runners::link::LinkServer::Start(lo);
  auto registry = testenv::LocalRegistry::Start();
  if (!link.ok() || !registry.ok()) {
    std::printf("runner_agent_bench: set-up failed\n");
    return 1;
  }
  auto image = (*registry)->PushTestImage("hs/bench");
  if (!image.ok()) {
    std::printf("runner_agent_bench: image: %s\n", image.error().message.c_str());
    return 1;
  }
  std::ofstream(dir + "/ca.pem") << ca->cert_pem;
  std::ofstream(dir + "/token") << "bench-token\n";
  // The agent takes host:port (it advertises it); a port the kernel just handed out is free.
  int port = 0;
  {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return 1;
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
    ::close(fd);
  }
  std::string listen = "127.0.0.1:" + std::to_string(port);
  std::string log_path = dir + "/agent.log";
  std::vector<std::string> args = {HS_HYPERSLICE_BIN,
                                   "runner-agent",
                                   "--name",
                                   "bench-runner",
                                   "--state-dir",
                                   dir + "/state",
                                   "--listen",
                                   listen,
                                   "--link-endpoint",
                                   "127.0.0.1:" + std::to_string((*link)->port()),
                                   "--join-token-file",
                                   dir + "/token",
                                   "--link-ca-file",
                                   dir + "/ca.pem",
                                   "--insecure-registry",
                                   (*registry)->host()};
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t agent_pid = -1;
  posix_spawn(&agent_pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);

  auto stub = v1::RunnerAgent::NewStub(runners::agent::DialAgent(listen, ca->cert_pem, *cn));
  for (int i = 0; i < 100; ++i) {
    grpc::ClientContext ctx;
    v1::RunnerInfo info;
    if (stub->Info(&ctx, v1::InfoRequest(), &info).ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  grpc::ClientContext wctx;
  auto watch = stub->WatchPods(&wctx, v1::WatchPodsRequest());
  auto run_until_running = [&](const std::string& uid) -> double {
    v1::RunPodRequest r;
    r.mutable_pod()->set_uid(uid);
    r.mutable_pod()->set_name(uid);
    r.mutable_pod()->set_namespace_("bench");
    r.set_restart_policy("Never");
    auto* c = r.add_containers();
    c->set_name("main");
    c->set_image(*image);
    c->add_args("sleep:60");
    auto t0 = Clock::now();
    grpc::ClientContext ctx;
    v1::PodStatus st;
    if (!stub->RunPod(&ctx, r, &st).ok()) return -1;
    v1::PodStatus s;
    while (watch->Read(&s)) {
      if (s.pod().uid() == uid && s.container_statuses_size() > 0 &&
          s.container_statuses(0).has_running()) {
        return Ms(Clock::now() - t0);
      }
    }
    return -1;
  };
  // The first pod pulls and unpacks the image; the measured ones find it cached.
  double first = run_until_running("bench-warm");
  std::vector<double> total;
  total.reserve(static_cast<size_t>(pods));
  for (int i = 0; i < pods; ++i) total.push_back(run_until_running("bench-" + std::to_string(i)));
  wctx.TryCancel();

  // The shim's own measurement of runc create + start, from the agent's "container running" log.
  std::map<std::string, double> runtime_ms;
  std::ifstream in(log_path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"container running\"") == std::string::npos) continue;
    boost::system::error_code ec;
    auto v = boost::json::parse(line, ec);
    if (ec || !v.is_object()) continue;
    const auto& o = v.as_object();
    runtime_ms[std::string(o.at("uid").as_string())] = o.at("runtime_ms").to_number<double>();
  }
  std::vector<double> runtime, agent_share;
  runtime.reserve(static_cast<size_t>(pods));
  agent_share.reserve(static_cast<size_t>(pods));
  for (int i = 0; i < pods; ++i) {
    double rt = runtime_ms["bench-" + std::to_string(i)];
    runtime.push_back(rt);
    agent_share.push_back(total[static_cast<size_t>(i)] - rt);
  }
  std::printf(
      "runner_agent_bench: %d pods, one after another, image cached (first pod with the "
      "pull: %.1f ms)\n",
      pods, first);
  std::printf(
      "  measured: RunPod sent -> WatchPods reports the container running (client side);\n"
      "  runtime share = runc create + runc start timed by the shim\n");
  Print("RunPod -> running (total)", total);
  Print("runtime share (runc)", runtime);
  Print("agent share (total - runtime)", agent_share);

  for (const auto& uid : std::vector<std::string>{"bench-warm"}) {
    grpc::ClientContext ctx;
    v1::DeletePodRequest d;
    d.set_uid(uid);
    d.set_grace_seconds(1);
    v1::DeletePodResponse resp;
    (void)stub->DeletePod(&ctx, d, &resp);
  }
  for (int i = 0; i < pods; ++i) {
    grpc::ClientContext ctx;
    v1::DeletePodRequest d;
    d.set_uid("bench-" + std::to_string(i));
    d.set_grace_seconds(1);
    v1::DeletePodResponse resp;
    (void)stub->DeletePod(&ctx, d, &resp);
  }
  ::kill(agent_pid, SIGTERM);
  ::waitpid(agent_pid, nullptr, 0);
  (*link)->Stop();
  registry->reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
