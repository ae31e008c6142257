// The pods' network (--pod-cidr) and exec with a terminal. This binary runs in a network
// namespace of its own (test/testenv/own_netns.h): the registry, the link server, the agent and
// the bridge, veths and pod namespaces it makes live there, with addresses of 192.0.2.128/25
// only; nothing reaches the host's network.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "src/base/command.h"
#include "src/runners/agent/podnet.h"
#include "test/integration/runners_agent/fixture.h"
#include "test/integration/runners_agent/own_netns_test.h"
#include "test/testenv/own_netns.h"

namespace hyperslice::runners::testing {
namespace {
namespace fs = std::filesystem;

constexpr char kCidr[] = "192.0.2.128/25";

class PodNetworkTest : public OwnNetnsTest {
 protected:
  // The interfaces of this (the agent's) network namespace.
  static std::string Links() { return RunCommand({"ip", "-o", "link", "show"}).output; }
};

TEST_F(PodNetworkTest, PodsGetAddressesReachEachOtherKeepThemOnRestartAndReleaseThemOnDelete) {
  AgentProcess agent(*env_, "runner-net", {"--pod-cidr", kCidr, "--pod-bridge", "hsbr-test"});
  ASSERT_TRUE(agent.Start());
  auto stub = agent.Stub();
  std::string ip_a = RunWithIp(*stub, Pod("net-a", env_->image, {"serve:8080:from-a"}));
  std::string ip_b = RunWithIp(*stub, Pod("net-b", env_->image, {"serve:8080:from-b"}));
  // The bridge holds the first address; pods get the next free ones, distinct.
  EXPECT_EQ(ip_a, "192.0.2.130");
  EXPECT_EQ(ip_b, "192.0.2.131");
  EXPECT_NE(RunCommand({"ip", "-4", "addr", "show", "hsbr-test"}).output.find("192.0.2.129/25"),
            std::string::npos);
  // Each pod's eth0 has its address and a default route via the bridge.
  EXPECT_NE(RunCommand({"ip", "-n", "hs-net-a", "-4", "addr", "show", "eth0"}).output.find(ip_a),
            std::string::npos);
  EXPECT_NE(RunCommand({"ip", "-n", "hs-net-b", "route"}).output.find("default via 192.0.2.129"),
            std::string::npos);
  // Each reaches the other's server by its pod IP.
  auto ab = ExecIn(*stub, "net-a", {"/hstest", "connect:" + ip_b + ":8080"});
  EXPECT_EQ(ab.out, "connect " + ip_b + ":8080: from-b\n");
  EXPECT_EQ(ab.code, 0);
  auto ba = ExecIn(*stub, "net-b", {"/hstest", "connect:" + ip_a + ":8080"});
  EXPECT_EQ(ba.out, "connect " + ip_a + ":8080: from-a\n");
  // The two host ends are on the bridge.
  EXPECT_NE(Links().find("hsv"), std::string::npos);

  // An agent restart keeps both addresses and hands out neither again.
  agent.Kill9();
  ASSERT_TRUE(agent.Start());
  stub = agent.Stub();
  for (const auto& [uid, ip] : {std::pair{"net-a", ip_a}, std::pair{"net-b", ip_b}}) {
    auto st = WaitFor(*stub, uid, [](const v1::PodStatus& p) { return p.phase() == "Running"; });
    ASSERT_TRUE(st);
    EXPECT_EQ(st->pod_ip(), ip);
  }
  std::string ip_c = RunWithIp(*stub, Pod("net-c", env_->image, {"sleep:120"}));
  EXPECT_EQ(ip_c, "192.0.2.132");
  EXPECT_EQ(ExecIn(*stub, "net-c", {"/hstest", "connect:" + ip_a + ":8080"}).out,
            "connect " + ip_a + ":8080: from-a\n");

  // Delete releases the address (the lowest free one is handed out next) and leaves no veth
  // and no namespace.
  ASSERT_TRUE(DeleteNow(*stub, "net-a").ok());
  EXPECT_FALSE(fs::exists("/var/run/netns/hs-net-a"));
  std::string ip_d = RunWithIp(*stub, Pod("net-d", env_->image, {"sleep:120"}));
  EXPECT_EQ(ip_d, ip_a);
  for (const char* uid : {"net-b", "net-c", "net-d"}) ASSERT_TRUE(DeleteNow(*stub, uid).ok());
  EXPECT_EQ(Links().find("hsv"), std::string::npos) << Links();
  for (const char* uid : {"net-a", "net-b", "net-c", "net-d"}) {
    EXPECT_FALSE(fs::exists(std::string("/var/run/netns/hs-") + uid)) << uid;
  }
}

TEST_F(PodNetworkTest, WithoutPodCidrPodsHaveOnlyLoopbackAndNoAddress) {
  AgentProcess agent(*env_, "runner-lo");
  ASSERT_TRUE(agent.Start());
  auto stub = agent.Stub();
  ASSERT_TRUE(RunPod(*stub, Pod("lo-a", env_->image, {"sleep:120"})).ok());
  auto st = WaitFor(*stub, "lo-a", [](const v1::PodStatus& p) { return p.phase() == "Running"; });
  ASSERT_TRUE(st);
  EXPECT_EQ(st->pod_ip(), "");
  std::string links = RunCommand({"ip", "-n", "hs-lo-a", "-o", "link", "show"}).output;
  EXPECT_NE(links.find(": lo:"), std::string::npos) << links;
  EXPECT_EQ(links.find("eth0"), std::string::npos) << links;
  ASSERT_TRUE(DeleteNow(*stub, "lo-a").ok());
}

TEST_F(PodNetworkTest, ExecWithATerminal) {
  AgentProcess agent(*env_, "runner-tty");
  ASSERT_TRUE(agent.Start());
  auto stub = agent.Stub();
  ASSERT_TRUE(RunPod(*stub, Pod("tty-a", env_->image, {"sleep:120"})).ok());
  ASSERT_TRUE(
      WaitFor(*stub, "tty-a", [](const v1::PodStatus& p) { return p.phase() == "Running"; }));
  // Without input: the command sees a terminal (its size is runc's to copy a moment after the
  // start, as with any runtime: not checked here) and its exit code comes back; resized, then a
  // line typed (echoed by the terminal), read by the command.
  ExpectTerminalExec(*stub, "tty-a", "hello-tty");
  // Without a terminal the command sees none (and its stderr stays apart).
  auto piped = ExecIn(*stub, "tty-a", {"/hstest", "tty"});
  EXPECT_EQ(piped.out, "tty=no\n");
  ASSERT_TRUE(DeleteNow(*stub, "tty-a").ok());
}

// Runs `body` on a thread of its own that stays in this (the agent's) network namespace but
// whose /sys is a sysfs of the named namespace `other`: an agent started in a namespace of its
// own under a sysfs mounted from another. Only that thread moves (unshare(CLONE_NEWNS) implies
// CLONE_FS, which a thread may unshare; setns moves the calling thread); its mount namespace
// goes with it. Returns why it could not, or "".
std::string WithSysfsOf(const std::string& other, const std::function<void()>& body) {
  std::string error;
  std::thread thread([&] {
    int self = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    int decoy = ::open(("/var/run/netns/" + other).c_str(), O_RDONLY | O_CLOEXEC);
    if (self < 0 || decoy < 0 || ::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0 ||
        ::setns(decoy, CLONE_NEWNET) != 0 || ::mount("sysfs", "/sys", "sysfs", 0, nullptr) != 0 ||
        ::setns(self, CLONE_NEWNET) != 0) {
      error =
          std::string("cannot give a thread the sysfs of ") + other + ": " + std::strerror(errno);
    } else {
      body();
    }
    if (self >= 0) ::close(self);
    if (decoy >= 0) ::close(decoy);
  });
  thread.join();
  return error;
}

// Named network namespaces are files under /var/run/netns of the host's mount namespace: each
// goes when the test ends, whatever its outcome.
struct NamedNetns {
  explicit NamedNetns(std::string n) : name(std::move(n)) {
    RunCommand({"ip", "netns", "del", name});
    created = RunCommand({"ip", "netns", "add", name}).exit_code == 0;
  }
  ~NamedNetns() { RunCommand({"ip", "netns", "del", name}); }
  std::string name;
  bool created = false;
};

// The agent's links are asked of ip, never of /sys/class/net: under a sysfs of another namespace
// that holds links of the bridge's and the pod veth's names, Attach still creates both here
// (looked up in sysfs, they were taken as made and attaching the pod failed on "Cannot find
// device").
TEST(PodNetworkLinks, AttachCreatesItsLinksHereWhateverASysfsOfAnotherNamespaceLists) {
  if (!testenv::OwnNetworkNamespaceError().empty()) {
    GTEST_SKIP() << testenv::OwnNetworkNamespaceError();
  }
  const std::string bridge = "hsbr-sysfs";
  const std::string uid = "sysfs-a";
  const std::string veth = agent::PodNetwork::HostVeth(uid);
  NamedNetns decoy("hs-sysfs-decoy");
  NamedNetns pod("hs-sysfs-pod");
  ASSERT_TRUE(decoy.created && pod.created);
  for (const auto& name : {bridge, veth}) {
    auto r = RunCommand({"ip", "-n", decoy.name, "link", "add", name, "type", "bridge"});
    ASSERT_EQ(r.exit_code, 0) << r.errors;
  }
  std::error_code ec;
  fs::path dir = fs::temp_directory_path() / ("hs-podnet-sysfs-" + std::to_string(::getpid()));
  fs::create_directories(dir / "pods" / uid);
  std::string why = WithSysfsOf(decoy.name, [&] {
    // The premise: this thread's sysfs lists the other namespace's links, not this one's.
    ASSERT_TRUE(fs::exists("/sys/class/net/" + bridge));
    ASSERT_TRUE(fs::exists("/sys/class/net/" + veth));
    ASSERT_NE(RunCommand({"ip", "link", "show", veth}).exit_code, 0);
    auto net = agent::PodNetwork::Make(
        {.cidr = kCidr, .bridge = bridge, .pods_dir = (dir / "pods").string()});
    ASSERT_TRUE(net.ok()) << net.error().ToString();
    const std::string pod_dir = (dir / "pods" / uid).string();
    auto ip = (*net)->Attach(uid, pod.name, pod_dir);
    ASSERT_TRUE(ip.ok()) << ip.error().ToString();
    EXPECT_EQ(*ip, "192.0.2.130");
    // Again (a recovered pod): the links are there now, in this namespace.
    auto again = (*net)->Attach(uid, pod.name, pod_dir);
    ASSERT_TRUE(again.ok()) << again.error().ToString();
    EXPECT_EQ(*again, *ip);
  });
  if (!why.empty()) {
    fs::remove_all(dir, ec);
    GTEST_SKIP() << why;
  }
  std::string link = RunCommand({"ip", "-o", "link", "show", veth}).output;
  EXPECT_NE(link.find("master " + bridge), std::string::npos) << link;
  EXPECT_NE(RunCommand({"ip", "-n", pod.name, "-4", "addr", "show", "eth0"})
                .output.find("192.0.2.130/25"),
            std::string::npos);
  RunCommand({"ip", "link", "del", veth});
  RunCommand({"ip", "link", "del", bridge});
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace hyperslice::runners::testing
