// `hyperslice device-plugin` as the DaemonSet runs it: a child process with flags and environment,
// a test kubelet, a fake device tree; SIGTERM must leave no socket behind.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "test/unit/deviceplugin/fake_node.h"

namespace hyperslice::deviceplugin {
namespace {

using namespace std::chrono_literals;
using testing::FakeNode;
using testing::HealthById;
using testing::TestKubelet;
using testing::Watch;

constexpr auto kEventually = 20s;

class PluginProcess {
 public:
  PluginProcess(const FakeNode& node, std::vector<std::string> extra_args,
                std::vector<std::string> env = {}) {
    std::vector<std::string> args = {"hyperslice", "device-plugin", "--root",
                                     node.root(),  "--plugin-dir",  node.plugin_dir()};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    // Everything the child needs is built before fork: only execve runs in it.
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_storage = std::move(env);
    for (char** e = environ; *e != nullptr; ++e) env_storage.emplace_back(*e);
    std::vector<char*> envp;
    for (std::string& e : env_storage) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execve(HS_BINARY, argv.data(), envp.data());
      ::_exit(127);
    }
  }
  ~PluginProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Sends `sig` and returns the exit status (-1 when it did not exit normally).
  int SignalAndWait(int sig) {
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
};

TEST(DevicePluginRole, RegistersServesAndRemovesItsSocketOnSigterm) {
  FakeNode node;
  for (int i = 0; i < 4; ++i) node.AddAccelChip(i, 0);
  TestKubelet kubelet(node.kubelet_socket());
  ASSERT_TRUE(kubelet.Start());
  PluginProcess plugin(node, {"--socket-name", "tpu-test.sock"});

  auto regs = kubelet.WaitForRegistrations(1, kEventually);
  ASSERT_EQ(regs.size(), 1u) << "the binary never registered";
  EXPECT_EQ(regs[0].endpoint(), "tpu-test.sock");
  EXPECT_EQ(regs[0].resource_name(), "google.com/tpu");
  std::string socket = node.plugin_dir() + "/tpu-test.sock";
  {
    Watch watch(socket);
    auto list = watch.WaitFor([](const auto& r) { return r.devices_size() == 4; }, kEventually);
    ASSERT_TRUE(list);
    for (const auto& [id, health] : HealthById(list->response)) EXPECT_EQ(health, "Healthy") << id;
  }
  ASSERT_TRUE(std::filesystem::exists(socket));
  EXPECT_EQ(plugin.SignalAndWait(SIGTERM), 0);
  EXPECT_FALSE(std::filesystem::exists(socket)) << "SIGTERM left the socket behind";
}

TEST(DevicePluginRole, ExpectedChipCountComesFromTheEnvironment) {
  FakeNode node;
  for (int i = 0; i < 4; ++i) node.AddAccelChip(i, 0);
  TestKubelet kubelet(node.kubelet_socket());
  ASSERT_TRUE(kubelet.Start());
  PluginProcess plugin(node, {}, {"HYPERSLICE_EXPECTED_CHIPS=8"});
  ASSERT_EQ(kubelet.WaitForRegistrations(1, kEventually).size(), 1u);
  Watch watch(node.plugin_dir() + "/hyperslice-tpu.sock");
  auto list = watch.WaitFor([](const auto& r) { return r.devices_size() == 8; }, kEventually);
  ASSERT_TRUE(list) << "expected 4 chips + 4 Unhealthy placeholders";
  auto health = HealthById(list->response);
  EXPECT_EQ(health["missing-3"], "Unhealthy");
  EXPECT_EQ(health["accel3"], "Healthy");
  EXPECT_EQ(plugin.SignalAndWait(SIGINT), 0);
}

}  // namespace
}  // namespace hyperslice::deviceplugin
