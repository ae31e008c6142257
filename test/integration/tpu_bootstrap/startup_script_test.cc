// The startup script's polling and config-writing functions, sourced by bash and run against the
// simulator's metadata server for one VM (GCE_METADATA_HOST, as on a real VM): they wait while
// the join values are absent, pick them up once Reconcile writes them, and write a kubeadm
// JoinConfiguration that yaml-cpp reads back with the right provider-id, endpoint, token and CA
// hash. The token never reaches the script's output.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include <yaml-cpp/yaml.h>

#include "test/integration/tpu_bootstrap/fixture.h"

extern char** environ;

namespace hyperslice::tpu::testing {
namespace {

namespace fs = std::filesystem;

// `bash -c <command>` with extra environment, stdout and stderr appended to `log`.
class Bash {
 public:
  Bash(const std::string& command, const std::vector<std::string>& env, const std::string& log) {
    std::vector<std::string> envs;
    for (char** e = environ; *e != nullptr; ++e) envs.emplace_back(*e);
    envs.insert(envs.end(), env.begin(), env.end());
    std::vector<char*> envp;
    envp.reserve(envs.size() + 1);
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string bash = "/bin/bash", dash_c = "-c", cmd = command;
    char* argv[] = {bash.data(), dash_c.data(), cmd.data(), nullptr};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (posix_spawn(&pid_, bash.c_str(), &fa, nullptr, argv, envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Bash() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool started() const { return pid_ > 0; }
  // True once it has exited (reaped); exit_code() is then valid.
  bool Exited() {
    if (exited_) return true;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return exited_;
  }
  int exit_code() const { return code_; }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int code_ = -1;
};

std::string ExtraArg(const YAML::Node& args, const std::string& name) {
  for (const auto& a : args) {
    if (a["name"].as<std::string>() == name) return a["value"].as<std::string>();
  }
  return {};
}

TEST_F(BootstrapTest, StartupScriptWaitsForJoinValuesThenWritesJoinConfiguration) {
  auto vms = MakeVms("script", 1);
  ASSERT_EQ(vms.size(), 1u);
  const auto& vm = vms[0];

  const fs::path dir = fs::temp_directory_path() / ("hs-script-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string script = (dir / "startup-script.sh").string();
  const std::string config = (dir / "run" / "kubeadm-join.yaml").string();
  const std::string log = (dir / "script.log").string();
  {
    // What the VM runs: the text the operator puts in the template's metadata.
    std::ofstream out(script);
    out << Metadata(vm)[kMetaStartupScript];
  }
  ASSERT_GT(fs::file_size(script), 1000u);

  Bash bash("source " + script +
                " && hs_fetch_identity && hs_poll_join_values && hs_write_join_config "
                "\"$HS_JOIN_CONFIG\"",
            {"GCE_METADATA_HOST=" + sim_->metadata_host(vm.project, vm.zone, vm.name),
             "HS_JOIN_CONFIG=" + config, "HS_POLL_INITIAL_DELAY_MS=50", "HS_POLL_MAX_DELAY_MS=200",
             "HS_POLL_ATTEMPTS=600"},
            log);
  ASSERT_TRUE(bash.started());

  // Nothing written yet: the script keeps polling (a few attempts seen, still running, no file).
  ASSERT_TRUE(Eventually([&] {
    return ReadWholeFile(log).find("(attempt 3/600)") != std::string::npos;
  })) << ReadWholeFile(log);
  EXPECT_FALSE(bash.Exited()) << ReadWholeFile(log);
  EXPECT_FALSE(fs::exists(config));

  auto boot = NewBootstrapper();
  auto report = boot.Reconcile(group_, vms, {});
  ASSERT_TRUE(report.ok()) << report.error().ToString();
  ASSERT_TRUE(Eventually([&] { return bash.Exited(); }, std::chrono::seconds(30)))
      << ReadWholeFile(log);
  ASSERT_EQ(bash.exit_code(), 0) << ReadWholeFile(log);

  const auto md = Metadata(vm);
  const std::string token = md.at(kMetaJoinToken);
  const std::string output = ReadWholeFile(log);
  EXPECT_TRUE(output.find(token) == std::string::npos) << "the script printed the token";
  EXPECT_TRUE(output.find(token.substr(7)) == std::string::npos) << "the script printed the secret";

  ASSERT_TRUE(fs::exists(config)) << output;
  EXPECT_EQ(fs::status(config).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  YAML::Node jc;
  try {
    jc = YAML::LoadFile(config);
  } catch (const YAML::Exception& e) {
    FAIL() << "JoinConfiguration is not YAML: " << e.what();
  }
  EXPECT_EQ(jc["apiVersion"].as<std::string>(), "kubeadm.k8s.io/v1beta4");
  EXPECT_EQ(jc["kind"].as<std::string>(), "JoinConfiguration");
  const auto bt = jc["discovery"]["bootstrapToken"];
  EXPECT_TRUE(bt["token"].as<std::string>() == token) << "token differs from the metadata's";
  EXPECT_EQ(bt["apiServerEndpoint"].as<std::string>(), std::string(kControlPlane) + ":6443");
  ASSERT_EQ(bt["caCertHashes"].size(), 1u);
  EXPECT_EQ(bt["caCertHashes"][0].as<std::string>(), ca_hash_);
  const auto reg = jc["nodeRegistration"];
  EXPECT_EQ(reg["name"].as<std::string>(), vm.name);
  EXPECT_EQ(ExtraArg(reg["kubeletExtraArgs"], "provider-id"),
            "gce://" + std::string(kProject) + "/" + kZone + "/" + vm.name);
  EXPECT_EQ(ExtraArg(reg["kubeletExtraArgs"], "node-labels"), kKubeLabels);
  ASSERT_EQ(reg["taints"].size(), 1u);
  EXPECT_EQ(reg["taints"][0]["key"].as<std::string>(), "google.com/tpu");

  std::error_code ec;
  fs::remove_all(dir, ec);
}

// The polling gives up after its bounded attempts
// when nothing is ever written (exit status non-zero, the reason logged).
TEST_F(BootstrapTest, StartupScriptPollingIsBounded) {
  auto vms = MakeVms("bounded", 1);
  ASSERT_EQ(vms.size(), 1u);
  const fs::path dir = fs::temp_directory_path() / ("hs-script-b-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string script = (dir / "startup-script.sh").string();
  {
    std::ofstream out(script);
    out << internal::StartupScript("1.31");
  }
  const std::string log = (dir / "script.log").string();
  Bash bash("source " + script + " && hs_poll_join_values",
            {"GCE_METADATA_HOST=" + sim_->metadata_host(vms[0].project, vms[0].zone, vms[0].name),
             "HS_POLL_INITIAL_DELAY_MS=10", "HS_POLL_MAX_DELAY_MS=20", "HS_POLL_ATTEMPTS=4"},
            log);
  ASSERT_TRUE(bash.started());
  ASSERT_TRUE(Eventually([&] { return bash.Exited(); }, std::chrono::seconds(30)));
  EXPECT_NE(bash.exit_code(), 0);
  EXPECT_NE(ReadWholeFile(log).find("giving up after 4 attempts"), std::string::npos)
      << ReadWholeFile(log);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace hyperslice::tpu::testing
