// `hyperslice runner-agent` with real runc, a real registry and real images: pods run, log,
// exec, exit with their codes, survive an agent kill -9 once, and leave nothing when deleted.
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "src/base/command.h"
#include "src/base/strings.h"
#include "test/integration/runners_agent/fixture.h"

namespace hyperslice::runners::testing {
namespace {
namespace fs = std::filesystem;

class AgentTest : public OneAgentSuite<AgentTest> {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    Env* env = Shared(&why);
    if (env == nullptr) return;
    std::string dev = env->dir + "/accel0";
    ::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3));  // /dev/null's numbers
    Launch(
        *env, "runner-a",
        {"--device", "google.com/tpu=" + dev + ":/dev/accel0", "--capacity", "google.com/tpu=1"});
  }
  grpc::Status Run(const v1::RunPodRequest& r, v1::PodStatus* out = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::PodStatus st;
    return stub_->RunPod(&ctx, r, out ? out : &st);
  }
  grpc::Status Delete(const std::string& uid) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::DeletePodRequest req;
    req.set_uid(uid);
    req.set_grace_seconds(2);
    v1::DeletePodResponse resp;
    return stub_->DeletePod(&ctx, req, &resp);
  }
  static int Containers(const std::string& uid) {
    int n = 0;
    for (const auto& id : RuntimeList(agent_->RuntimeRoot()))
      n += id.find(uid) != std::string::npos;
    return n;
  }
};

TEST_F(AgentTest, InfoReportsCapacityPolicyAndBootId) {
  grpc::ClientContext ctx;
  v1::RunnerInfo info;
  ASSERT_TRUE(stub_->Info(&ctx, v1::InfoRequest(), &info).ok());
  EXPECT_EQ(info.runner_name(), "runner-a");
  EXPECT_EQ(info.capacity().at("cpu"), "4");
  EXPECT_EQ(info.capacity().at("google.com/tpu"), "1");
  EXPECT_TRUE(info.healthy());
  EXPECT_TRUE(info.policy().require_digest());
  EXPECT_FALSE(info.policy().allow_host_network());
  EXPECT_FALSE(info.boot_id().empty());
}

TEST_F(AgentTest, PodRunsWithArgsEnvVolumesAndSucceeds) {
  auto pod = Pod("p-run", env_->image,
                 {"print:hello", "eprint:to-stderr", "env:GREETING", "env:POD_VAR", "args",
                  "cat:/etc/cfg/config.txt", "write:/etc/cfg/new", "write:/scratch/x",
                  "cat:/scratch/x", "cat:/marker", "write:/dev/accel0", "exit:0"});
  auto* c = pod.mutable_containers(0);
  auto* env = c->add_env();
  env->set_name("POD_VAR");
  env->set_value("from-pod");
  (*c->mutable_limits())["google.com/tpu"] = "1";
  (*c->mutable_limits())["memory"] = "64Mi";
  (*c->mutable_limits())["cpu"] = "500m";
  auto* files = pod.add_volumes();
  files->set_name("cfg");
  auto* f = files->mutable_files()->add_files();
  f->set_path("config.txt");
  f->set_content("config-content");
  f->set_mode(0644);
  pod.add_volumes()->set_name("scratch");
  pod.mutable_volumes(1)->mutable_empty_dir();
  auto* m = c->add_mounts();
  m->set_volume("cfg");
  m->set_container_path("/etc/cfg");
  m->set_read_only(true);
  m = c->add_mounts();
  m->set_volume("scratch");
  m->set_container_path("/scratch");
  ASSERT_TRUE(Run(pod).ok());
  auto done =
      WaitFor(*stub_, "p-run", [](const v1::PodStatus& p) { return p.phase() == "Succeeded"; });
  ASSERT_TRUE(done);
  const auto& cs = done->container_statuses(0);
  EXPECT_EQ(cs.terminated().exit_code(), 0);
  EXPECT_EQ(cs.image_id(), env_->image.substr(env_->image.find('@') + 1));
  std::string logs = Logs(*stub_, "p-run", "main");
  for (const char* want :
       {"hello\n", "to-stderr\n", "GREETING=hello\n", "POD_VAR=from-pod\n", "arg[0]=/hstest\n",
        "arg[1]=print:hello\n", "config-content\n", "write /etc/cfg/new: Read-only file system\n",
        "write /scratch/x: ok\n", "ok\n", "hstest\n", "write /dev/accel0: ok\n"}) {
    EXPECT_NE(logs.find(want), std::string::npos) << "missing " << want << " in:\n" << logs;
  }
  std::string stamped = Logs(*stub_, "p-run", "main", true);
  EXPECT_NE(stamped.find("Z hello\n"), std::string::npos) << stamped;
  ASSERT_TRUE(Delete("p-run").ok());
}

TEST_F(AgentTest, ExitCodeIsReportedAndPodFails) {
  ASSERT_TRUE(Run(Pod("p-fail", env_->image, {"print:bye", "exit:3"})).ok());
  auto done =
      WaitFor(*stub_, "p-fail", [](const v1::PodStatus& p) { return p.phase() == "Failed"; });
  ASSERT_TRUE(done);
  EXPECT_EQ(done->container_statuses(0).terminated().exit_code(), 3);
  EXPECT_EQ(done->container_statuses(0).terminated().reason(), "Error");
  ASSERT_TRUE(Delete("p-fail").ok());
}

TEST_F(AgentTest, ImageCommandDefaultsAndRestartOnFailure) {
  // No args: the image's cmd (print:default). Then OnFailure restarts a failing init container.
  auto pod = Pod("p-init", env_->image, {}, "OnFailure");
  auto* init = pod.add_init_containers();
  init->set_name("init");
  init->set_image(env_->image);
  init->add_args("print:init-ran");
  ASSERT_TRUE(Run(pod).ok());
  auto done =
      WaitFor(*stub_, "p-init", [](const v1::PodStatus& p) { return p.phase() == "Succeeded"; });
  ASSERT_TRUE(done);
  EXPECT_NE(Logs(*stub_, "p-init", "init").find("init-ran"), std::string::npos);
  EXPECT_EQ(Logs(*stub_, "p-init", "main"), "default\n");
  ASSERT_TRUE(Delete("p-init").ok());

  auto crash = Pod("p-crash", env_->image, {"exit:1"}, "OnFailure");
  ASSERT_TRUE(Run(crash).ok());
  auto restarted = WaitFor(*stub_, "p-crash", [](const v1::PodStatus& p) {
    return p.container_statuses(0).restart_count() >= 2;
  });
  ASSERT_TRUE(restarted);
  ASSERT_TRUE(Delete("p-crash").ok());
  EXPECT_EQ(Containers("p-crash"), 0);
}

TEST_F(AgentTest, ExecInRunningContainer) {
  ASSERT_TRUE(Run(Pod("p-exec", env_->image, {"print:up", "sleep:60"})).ok());
  ASSERT_TRUE(WaitFor(*stub_, "p-exec", [](const v1::PodStatus& p) {
    return p.phase() == "Running" && p.container_statuses(0).has_running();
  }));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub_->Exec(&ctx);
  v1::ExecInput start;
  start.mutable_start()->set_uid("p-exec");
  start.mutable_start()->set_container("main");
  for (const char* a :
       {"/hstest", "print:from-exec", "eprint:exec-err", "env:GREETING", "exit:4"}) {
    start.mutable_start()->add_command(a);
  }
  ASSERT_TRUE(stream->Write(start));
  stream->WritesDone();
  std::string out, err;
  int code = -100;
  v1::ExecOutput o;
  while (stream->Read(&o)) {
    if (o.has_stdout()) out += o.stdout();
    if (o.has_stderr()) err += o.stderr();
    if (o.has_exit()) code = o.exit().code();
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(code, 4);
  EXPECT_EQ(out, "from-exec\nGREETING=hello\n");
  EXPECT_EQ(err, "exec-err\n");
  ASSERT_TRUE(Delete("p-exec").ok());
}

TEST_F(AgentTest, DeletePodLeavesNothing) {
  ASSERT_TRUE(Run(Pod("p-del", env_->image, {"sleep:120"})).ok());
  ASSERT_TRUE(WaitFor(*stub_, "p-del", [](const v1::PodStatus& p) {
    return p.container_statuses(0).has_running();
  }));
  EXPECT_EQ(Containers("p-del"), 1);
  std::string pod_dir = agent_->state_dir() + "/pods/p-del";
  EXPECT_TRUE(fs::exists(pod_dir));
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(Delete("p-del").ok());
  // hstest ignores nothing: SIGTERM ends it before the grace.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(Containers("p-del"), 0);
  EXPECT_FALSE(fs::exists(pod_dir));
  EXPECT_FALSE(fs::exists("/var/run/netns/hs-p-del"));
  auto mounts = RunCommand({"cat", "/proc/self/mountinfo"}).output;
  EXPECT_EQ(mounts.find("p-del"), std::string::npos);
  // Idempotent.
  EXPECT_TRUE(Delete("p-del").ok());
}

TEST_F(AgentTest, BadInputIsRefusedWithAReason) {
  auto unknown_volume = Pod("p-bad1", env_->image, {});
  auto* m = unknown_volume.mutable_containers(0)->add_mounts();
  m->set_volume("nope");
  m->set_container_path("/x");
  grpc::Status st = Run(unknown_volume);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("unknown volume nope"), std::string::npos)
      << st.error_message();

  auto unsupported = Pod("p-bad2", env_->image, {});
  unsupported.add_volumes()->set_name("hostpath");
  st = Run(unsupported);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("does not support"), std::string::npos) << st.error_message();

  auto host_net = Pod("p-bad3", env_->image, {});
  host_net.set_host_network(true);
  st = Run(host_net);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("host networking is forbidden"), std::string::npos);

  auto tag = Pod("p-bad4", env_->registry->host() + "/hs/hstest:v1", {});
  st = Run(tag);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("requires images by digest"), std::string::npos)
      << st.error_message();

  auto no_registry = Pod("p-bad5", "busybox@sha256:" + std::string(64, 'a'), {});
  st = Run(no_registry);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  auto too_many = Pod("p-bad6", env_->image, {});
  (*too_many.mutable_containers(0)->mutable_limits())["nvidia.com/gpu"] = "1";
  st = Run(too_many);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  grpc::ClientContext ctx;
  v1::ListPodsResponse list;
  ASSERT_TRUE(stub_->ListPods(&ctx, v1::ListPodsRequest(), &list).ok());
  for (const auto& p : list.pods()) EXPECT_EQ(p.pod().uid().rfind("p-bad", 0), std::string::npos);
}

TEST_F(AgentTest, CorruptedLayerIsRefusedAsDigestMismatch) {
  auto image = env_->registry->PushTestImage("hs/corrupt", "v1", "corrupt-me");
  ASSERT_TRUE(image.ok()) << image.error().message;
  auto layers = env_->registry->LayerDigests(*image);
  ASSERT_TRUE(layers.ok());
  ASSERT_FALSE(layers->empty());
  std::string blob = env_->registry->BlobDataPath(layers->back());
  ASSERT_TRUE(fs::exists(blob)) << blob;
  {
    std::fstream f(blob, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x42');
  }
  ASSERT_TRUE(Run(Pod("p-corrupt", *image, {})).ok());
  auto st = WaitFor(*stub_, "p-corrupt", [](const v1::PodStatus& p) {
    return p.container_statuses(0).waiting().reason() == "ErrImagePull";
  });
  ASSERT_TRUE(st);
  EXPECT_NE(st->container_statuses(0).waiting().message().find("does not match its digest"),
            std::string::npos)
      << st->DebugString();
  EXPECT_EQ(st->phase(), "Pending");
  ASSERT_TRUE(Delete("p-corrupt").ok());
}

TEST_F(AgentTest, ContainersSurviveAgentKill9AndAreAdoptedOnce) {
  AgentProcess second(*env_, "runner-b");
  ASSERT_TRUE(second.Start());
  auto stub = second.Stub();
  auto pod = Pod("p-survive", env_->image, {"print:before", "sleep:6", "print:after", "exit:7"});
  {
    grpc::ClientContext ctx;
    v1::PodStatus st;
    ASSERT_TRUE(stub->RunPod(&ctx, pod, &st).ok());
  }
  ASSERT_TRUE(WaitFor(*stub, "p-survive", [](const v1::PodStatus& p) {
    return p.container_statuses(0).has_running();
  }));
  grpc::ClientContext ictx;
  v1::RunnerInfo before;
  ASSERT_TRUE(stub->Info(&ictx, v1::InfoRequest(), &before).ok());

  second.Kill9();
  auto ids = RuntimeList(second.RuntimeRoot());
  ASSERT_EQ(ids.size(), 1u);  // the container runs on without its agent
  ASSERT_TRUE(second.Start());
  stub = second.Stub();
  grpc::ClientContext ictx2;
  v1::RunnerInfo after;
  ASSERT_TRUE(stub->Info(&ictx2, v1::InfoRequest(), &after).ok());
  EXPECT_NE(before.boot_id(), after.boot_id());
  auto recovered = WaitFor(
      *stub, "p-survive",
      [](const v1::PodStatus& p) { return p.container_statuses(0).has_running(); },
      std::chrono::seconds(5));
  ASSERT_TRUE(recovered);
  EXPECT_EQ(recovered->container_statuses(0).restart_count(), 0);
  EXPECT_EQ(RuntimeList(second.RuntimeRoot()), ids);  // the same one, not a second

  auto done =
      WaitFor(*stub, "p-survive", [](const v1::PodStatus& p) { return p.phase() == "Failed"; });
  ASSERT_TRUE(done);
  EXPECT_EQ(done->container_statuses(0).terminated().exit_code(), 7);
  std::string logs = Logs(*stub, "p-survive", "main");
  EXPECT_EQ(logs, "before\nafter\n");
  grpc::ClientContext dctx;
  v1::DeletePodRequest del;
  del.set_uid("p-survive");
  v1::DeletePodResponse dresp;
  ASSERT_TRUE(stub->DeletePod(&dctx, del, &dresp).ok());
  EXPECT_TRUE(RuntimeList(second.RuntimeRoot()).empty());
}

// A container whose shim outlived the agent (kill -9, restart with the same state dir) is deleted
// with grace 0 as fast as a fresh one: SIGKILL at once (hstest, PID 1 of its namespace without a
// handler, ignores SIGTERM, so any wait for a grace would show), and nothing is left: runtime
// state, shim, pod directory, network namespace, mounts.
// A DeletePod that fails part-way (here `ip netns delete`, refused while a flag file exists, as
// a namespace still held by an exiting process refuses it) reports the error and keeps the pod,
// so that the control node's retry finishes the job; it used to forget the pod, and the retry
// answered OK with the namespace left behind.
TEST_F(AgentTest, AFailedDeleteKeepsThePodForTheRetry) {
  const std::string bin = env_->dir + "/flaky-ip";
  const std::string flag = env_->dir + "/refuse-netns-delete";
  fs::create_directories(bin);
  const std::string real_ip = TrimSpace(RunCommand({"sh", "-c", "command -v ip"}).output);
  ASSERT_FALSE(real_ip.empty());
  {
    std::ofstream w(bin + "/ip");
    w << "#!/bin/sh\nif [ \"$1 $2\" = \"netns delete\" ] && [ -e " << flag
      << " ]; then echo 'Cannot remove namespace file: Device or resource busy' >&2; exit 1; fi\n"
      << "exec " << real_ip << " \"$@\"\n";
  }
  fs::permissions(bin + "/ip", fs::perms::owner_all);
  const char* old_path = std::getenv("PATH");
  const std::string saved = old_path ? old_path : "";
  ::setenv("PATH", (bin + ":" + saved).c_str(), 1);
  AgentProcess flaky(*env_, "runner-flaky");
  auto started = flaky.Start();
  ::setenv("PATH", saved.c_str(), 1);
  ASSERT_TRUE(started);
  auto stub = flaky.Stub();
  {
    grpc::ClientContext ctx;
    v1::PodStatus st;
    ASSERT_TRUE(stub->RunPod(&ctx, Pod("p-retry", env_->image, {"sleep:120"}), &st).ok());
  }
  ASSERT_TRUE(WaitFor(*stub, "p-retry", [](const v1::PodStatus& p) {
    return p.container_statuses(0).has_running();
  }));
  auto del = [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::DeletePodRequest req;
    req.set_uid("p-retry");
    req.set_grace_seconds(0);
    v1::DeletePodResponse resp;
    return stub->DeletePod(&ctx, req, &resp);
  };
  auto listed = [&] {
    grpc::ClientContext ctx;
    v1::ListPodsResponse list;
    EXPECT_TRUE(stub->ListPods(&ctx, v1::ListPodsRequest(), &list).ok());
    for (const auto& p : list.pods()) {
      if (p.pod().uid() == "p-retry") return true;
    }
    return false;
  };
  { std::ofstream(flag) << "1"; }
  grpc::Status first = del();
  EXPECT_FALSE(first.ok()) << "the namespace could not go: the delete is not done";
  EXPECT_TRUE(fs::exists("/var/run/netns/hs-p-retry"));
  EXPECT_TRUE(listed()) << "still the agent's: the retry must find it";
  fs::remove(flag);
  grpc::Status second = del();
  EXPECT_TRUE(second.ok()) << second.error_message();
  EXPECT_FALSE(listed());
  EXPECT_FALSE(fs::exists("/var/run/netns/hs-p-retry"));
  EXPECT_FALSE(fs::exists(flaky.state_dir() + "/pods/p-retry"));
  EXPECT_EQ(RunCommand({"cat", "/proc/self/mountinfo"}).output.find("p-retry"), std::string::npos);
  if (fs::exists("/var/run/netns/hs-p-retry"))
    (void)RunCommand({real_ip, "netns", "delete", "hs-p-retry"});
}

TEST_F(AgentTest, DeletingAnAdoptedRunningContainerWithGraceZeroIsImmediate) {
  AgentProcess third(*env_, "runner-c");
  ASSERT_TRUE(third.Start());
  auto stub = third.Stub();
  auto run = [&](const std::string& uid) {
    grpc::ClientContext ctx;
    v1::PodStatus st;
    ASSERT_TRUE(stub->RunPod(&ctx, Pod(uid, env_->image, {"print:up", "sleep:300"}), &st).ok());
    ASSERT_TRUE(WaitFor(
        *stub, uid, [](const v1::PodStatus& p) { return p.container_statuses(0).has_running(); }));
  };
  auto timed_delete = [&](const std::string& uid) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(40));
    v1::DeletePodRequest req;
    req.set_uid(uid);
    req.set_grace_seconds(0);
    v1::DeletePodResponse resp;
    auto t0 = std::chrono::steady_clock::now();
    grpc::Status st = stub->DeletePod(&ctx, req, &resp);
    auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    EXPECT_TRUE(st.ok()) << st.error_message();
    return ms;
  };
  auto shim_pid = [&](const std::string& uid) {
    std::ifstream in(third.state_dir() + "/pods/" + uid + "/containers/main/shim.pid");
    pid_t pid = 0;
    in >> pid;
    return pid;
  };
  auto nothing_left = [&](const std::string& uid, pid_t shim) {
    for (const auto& id : RuntimeList(third.RuntimeRoot()))
      EXPECT_EQ(id.find(uid), std::string::npos) << id;
    EXPECT_FALSE(fs::exists(third.state_dir() + "/pods/" + uid));
    EXPECT_FALSE(fs::exists("/var/run/netns/hs-" + uid));
    EXPECT_EQ(RunCommand({"cat", "/proc/self/mountinfo"}).output.find(uid), std::string::npos);
    // The shim ends once it recorded the exit (it may still be a zombie of init for a moment).
    ASSERT_GT(shim, 0);
    bool gone = false;
    for (int i = 0; i < 50 && !gone; ++i) {
      std::ifstream stat("/proc/" + std::to_string(shim) + "/stat");
      std::string line;
      std::getline(stat, line);
      gone = !stat || line.find(") Z ") != std::string::npos;
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(gone) << "the shim " << shim << " of " << uid << " is still running";
  };

  run("p-fresh0");
  pid_t fresh_shim = shim_pid("p-fresh0");
  auto fresh_ms = timed_delete("p-fresh0");
  nothing_left("p-fresh0", fresh_shim);

  run("p-adopted0");
  pid_t adopted_shim = shim_pid("p-adopted0");
  third.Kill9();
  ASSERT_TRUE(third.Start());
  stub = third.Stub();
  ASSERT_TRUE(WaitFor(
      *stub, "p-adopted0",
      [](const v1::PodStatus& p) { return p.container_statuses(0).has_running(); },
      std::chrono::seconds(10)));
  // Adopted, not restarted: the same container runs on.
  auto state = RunCommand({"runc", "--root", third.RuntimeRoot(), "state", "hs-p-adopted0-main"});
  ASSERT_EQ(state.exit_code, 0) << state.errors;
  ASSERT_NE(state.output.find("\"running\""), std::string::npos) << state.output;
  auto adopted_ms = timed_delete("p-adopted0");
  nothing_left("p-adopted0", adopted_shim);

  std::cout << "DeletePod grace 0 of a running container: fresh " << fresh_ms << " ms, adopted "
            << adopted_ms << " ms\n";
  EXPECT_LT(fresh_ms, 5000);
  EXPECT_LT(adopted_ms, 5000);
}

}  // namespace
}  // namespace hyperslice::runners::testing
