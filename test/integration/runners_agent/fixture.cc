#include "test/integration/runners_agent/fixture.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace hyperslice::runners::testing {
namespace fs = std::filesystem;
namespace {

std::unique_ptr<Env> Make(std::string* why) {
  auto env = std::make_unique<Env>();
  char tmpl[] = "/tmp/hs-runners-XXXXXX";
  env->dir = ::mkdtemp(tmpl);
  auto ca = link::MakeRunnersCa();
  auto cn = link::IssueControlNodeClientCert(*ca, "control-node-a");
  auto serving = link::IssueLinkServerCert(*ca, "127.0.0.1");
  if (!ca.ok() || !cn.ok() || !serving.ok()) {
    *why = "cannot make the runners CA";
    return nullptr;
  }
  env->ca = *ca;
  env->control_node = *cn;
  env->ca_file = env->dir + "/runners-ca.pem";
  std::ofstream(env->ca_file) << env->ca.cert_pem;
  link::LinkServer::Options lo;
  lo.ca = env->ca;
  lo.serving = *serving;
  lo.tokens = &env->tokens;
  auto server = link::LinkServer::Start(lo);
  if (!server.ok()) {
    *why = server.error().message;
    return nullptr;
  }
  env->link = std::move(*server);
  auto reg = testenv::LocalRegistry::Start();
  if (!reg.ok()) {
    *why = reg.error().message;
    return nullptr;
  }
  env->registry = std::move(*reg);
  auto image = env->registry->PushTestImage("hs/hstest");
  if (!image.ok()) {
    *why = image.error().message;
    return nullptr;
  }
  env->image = *image;
  return env;
}

}  // namespace

Env::~Env() {
  if (link) link->Stop();
  registry.reset();
  std::error_code ec;
  if (!dir.empty()) fs::remove_all(dir, ec);
}

Env* Shared(std::string* why) {
  // Destroyed at exit: the registry process ends with the test binary.
  static std::string reason = testenv::RunnerToolsMissing();
  static std::unique_ptr<Env> env = reason.empty() ? Make(&reason) : nullptr;
  *why = reason;
  return env.get();
}

AgentProcess::AgentProcess(Env& env, const std::string& name, std::vector<std::string> extra)
    : env_(env),
      extra_(std::move(extra)),
      process_(name, "127.0.0.1", env.dir, testenv::RunnerAgent::StopWith::kSigterm) {
  std::string token = "tok-" + name + "-" + std::to_string(::getpid());
  env.tokens.Add(name, token);
  process_.SetToken(token);
}

AgentProcess::~AgentProcess() {
  // A failed test may leave pods: remove them so no container, mount or namespace outlives us.
  if (process_.pid() > 0) {
    auto stub = Stub();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ListPodsResponse list;
    if (stub->ListPods(&ctx, v1::ListPodsRequest(), &list).ok()) {
      for (const auto& p : list.pods()) {
        grpc::ClientContext dctx;
        dctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        v1::DeletePodRequest del;
        del.set_uid(p.pod().uid());
        del.set_grace_seconds(1);
        v1::DeletePodResponse resp;
        (void)stub->DeletePod(&dctx, del, &resp);
      }
    }
  }
  Terminate();
}

::testing::AssertionResult AgentProcess::Start() {
  std::vector<std::string> flags = {"--insecure-registry",  env_.registry->host(),
                                    "--restart-backoff-ms", "200",
                                    "--capacity",           "cpu=4",
                                    "--capacity",           "memory=8Gi"};
  flags.insert(flags.end(), extra_.begin(), extra_.end());
  if (!process_.Start(env_.link->port(), env_.ca_file, flags)) {
    return ::testing::AssertionFailure() << "cannot start the agent";
  }
  auto stub = Stub();
  for (int i = 0; i < 150; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    v1::RunnerInfo info;
    if (stub->Info(&ctx, v1::InfoRequest(), &info).ok()) return ::testing::AssertionSuccess();
    if (process_.Exited())
      return ::testing::AssertionFailure() << "agent exited: " << process_.Log();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return ::testing::AssertionFailure() << "agent did not serve; log:\n" << process_.Log();
}

std::unique_ptr<v1::RunnerAgent::Stub> AgentProcess::Stub(const net::pki::KeyPair& client) const {
  return v1::RunnerAgent::NewStub(agent::DialAgent(process_.address(), env_.ca.cert_pem, client));
}

v1::RunPodRequest Pod(const std::string& uid, const std::string& image,
                      const std::vector<std::string>& args, const std::string& restart) {
  v1::RunPodRequest r;
  r.mutable_pod()->set_namespace_("default");
  r.mutable_pod()->set_name("pod-" + uid);
  r.mutable_pod()->set_uid(uid);
  r.set_restart_policy(restart);
  r.set_termination_grace_seconds(5);
  auto* c = r.add_containers();
  c->set_name("main");
  c->set_image(image);
  for (const auto& a : args) c->add_args(a);
  return r;
}

std::optional<v1::PodStatus> WaitFor(v1::RunnerAgent::Stub& stub, const std::string& uid,
                                     const std::function<bool(const v1::PodStatus&)>& pred,
                                     std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::optional<v1::PodStatus> last;
  while (std::chrono::steady_clock::now() < deadline) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ListPodsResponse resp;
    if (stub.ListPods(&ctx, v1::ListPodsRequest(), &resp).ok()) {
      for (const auto& p : resp.pods()) {
        if (p.pod().uid() != uid) continue;
        last = p;
        if (pred(p)) return p;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (last) ADD_FAILURE() << "last status: " << last->DebugString();
  return std::nullopt;
}

std::string Logs(v1::RunnerAgent::Stub& stub, const std::string& uid, const std::string& container,
                 bool timestamps) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::LogsRequest req;
  req.set_uid(uid);
  req.set_container(container);
  req.set_timestamps(timestamps);
  req.set_tail_lines(-1);
  auto reader = stub.Logs(&ctx, req);
  std::string out;
  v1::LogChunk chunk;
  while (reader->Read(&chunk)) out += chunk.data();
  reader->Finish();
  return out;
}

grpc::Status RunPod(v1::RunnerAgent::Stub& stub, const v1::RunPodRequest& r) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::PodStatus st;
  return stub.RunPod(&ctx, r, &st);
}
grpc::Status DeleteNow(v1::RunnerAgent::Stub& stub, const std::string& uid) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::DeletePodRequest req;
  req.set_uid(uid);
  req.set_grace_seconds(0);
  v1::DeletePodResponse resp;
  return stub.DeletePod(&ctx, req, &resp);
}
std::string RunWithIp(v1::RunnerAgent::Stub& stub, const v1::RunPodRequest& r) {
  EXPECT_TRUE(RunPod(stub, r).ok());
  auto st = WaitFor(stub, r.pod().uid(), [](const v1::PodStatus& p) {
    return p.phase() == "Running" && !p.pod_ip().empty();
  });
  return st ? st->pod_ip() : "";
}
ExecResult ExecIn(v1::RunnerAgent::Stub& stub, const std::string& uid,
                  const std::vector<std::string>& command, bool tty, const std::string& input,
                  std::pair<int, int> resize) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub.Exec(&ctx);
  v1::ExecInput start;
  start.mutable_start()->set_uid(uid);
  start.mutable_start()->set_container("main");
  start.mutable_start()->set_tty(tty);
  start.mutable_start()->set_stdin(!input.empty());
  for (const auto& a : command) start.mutable_start()->add_command(a);
  EXPECT_TRUE(stream->Write(start));
  if (resize.first > 0) {
    v1::ExecInput r;
    r.mutable_resize()->set_width(resize.first);
    r.mutable_resize()->set_height(resize.second);
    EXPECT_TRUE(stream->Write(r));
  }
  if (!input.empty()) {
    // runc applies the size on SIGWINCH: give it a moment before the command reads on.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    v1::ExecInput in;
    in.set_stdin(input);
    EXPECT_TRUE(stream->Write(in));
  }
  stream->WritesDone();
  ExecResult res;
  v1::ExecOutput o;
  while (stream->Read(&o)) {
    if (o.has_stdout()) {
      res.out += o.stdout();
      res.stdout_text += o.stdout();
    }
    if (o.has_stderr()) {
      res.out += o.stderr();
      res.stderr_text += o.stderr();
    }
    if (o.has_exit()) {
      res.code = o.exit().code();
      res.error = o.exit().error();
    }
  }
  stream->Finish();
  return res;
}

void ExpectTerminalExec(v1::RunnerAgent::Stub& stub, const std::string& uid,
                        const std::string& line) {
  auto plain = ExecIn(stub, uid, {"/hstest", "tty", "exit:3"}, /*tty=*/true);
  EXPECT_EQ(plain.error, "");
  EXPECT_EQ(plain.code, 3);
  EXPECT_NE(plain.out.find("tty=yes"), std::string::npos) << plain.out;
  auto typed = ExecIn(stub, uid, {"/hstest", "readline", "tty", "exit:5"}, /*tty=*/true,
                      line + "\r", {100, 40});
  EXPECT_EQ(typed.code, 5);
  EXPECT_NE(typed.out.find("line=" + line), std::string::npos) << typed.out;
  EXPECT_NE(typed.out.find("tty=yes rows=40 cols=100"), std::string::npos) << typed.out;
}

}  // namespace hyperslice::runners::testing
