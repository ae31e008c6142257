// The device plugin under real kubelet restarts, against the kubelet's device manager of the
// simulated VMs (sim/kubelet/device_manager.h), one instance per kubelet process: every restart
// removes every socket in the folder (the plugin's included) and then listens on kubelet.sock
// again. Each kubelet instance must see exactly one Register, and the ListAndWatch
// stream it opens must deliver the devices and never be ended by the plugin. Many rounds with
// varied timing, because the failure this guards against is a race between the plugin's reaction
// to its own socket's removal and to kubelet.sock's creation.
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/kubelet/device_manager.h"
#include "src/deviceplugin/deviceplugin.h"
#include "test/testenv/eventually.h"
#include "test/unit/deviceplugin/fake_node.h"

namespace hyperslice::deviceplugin {
namespace {

using namespace std::chrono_literals;
using sim::kubelet::DeviceManager;
using testing::FakeNode;
using testing::SteadyClock;

constexpr char kTpu[] = "google.com/tpu";

// Waits for events, never for time: this bound only ends a test that would otherwise hang.
constexpr auto kEventually = 20s;

// Rounds per run (about 4 s here, under TSan too); HS_DP_RESTART_ROUNDS overrides, e.g. thousands
// when hunting a race by hand.
int Rounds() {
  if (const char* env = ::getenv("HS_DP_RESTART_ROUNDS")) return std::max(1, std::atoi(env));
  return 150;
}

// What one kubelet instance has seen: its report, and google.com/tpu as it holds it (healthy =
// the Healthy devices the current client listed last, 0 once disconnected).
struct Seen {
  sim::kubelet::DeviceManagerReport r;
  int healthy = 0;
  bool connected = false;
};

Seen SeenBy(const DeviceManager& kubelet) {
  Seen s{kubelet.report()};
  auto resources = kubelet.Resources();
  if (auto it = resources.find(kTpu); it != resources.end()) {
    s.healthy = it->second.allocatable;
    s.connected = it->second.connected;
  }
  return s;
}

std::string Describe(const Seen& s) {
  const auto& r = s.r;
  std::string out = "registrations=" + std::to_string(r.registrations) +
                    " replaced=" + std::to_string(r.replaced_clients) +
                    " unexpected_ends=" + std::to_string(r.unexpected_ends) +
                    " lists=" + std::to_string(r.lists) + " healthy=" + std::to_string(s.healthy) +
                    " connected=" + std::to_string(s.connected);
  for (const auto& e : r.errors) out += "\n  " + e;
  return out;
}

// What every kubelet instance must have seen by the time it stops.
void ExpectOneCleanRegistration(const Seen& s, int round) {
  const auto& r = s.r;
  EXPECT_EQ(r.registrations, 1) << "round " << round << ": " << Describe(s);
  EXPECT_EQ(r.replaced_clients, 0) << "round " << round << ": " << Describe(s);
  EXPECT_EQ(r.unexpected_ends, 0) << "round " << round << ": " << Describe(s);
  EXPECT_TRUE(s.connected) << "round " << round << ": " << Describe(s);
  EXPECT_EQ(s.healthy, 8) << "round " << round << ": " << Describe(s);
  // What kubelet's own plugin client sends (client.go); not checked by kubelet's server.
  EXPECT_EQ(r.authority, "localhost") << "round " << round;
}

class KubeletRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 8; ++i) node_.AddAccelChip(i, i < 4 ? 0 : 1);
  }

  std::unique_ptr<DevicePlugin> StartPlugin() {
    Options o;
    o.root = node_.root();
    o.plugin_dir = node_.plugin_dir();
    // An hour: every reaction in these tests comes from inotify, not the periodic backstop.
    o.rescan_interval = std::chrono::hours(1);
    auto plugin = DevicePlugin::Start(o);
    EXPECT_TRUE(plugin.ok()) << plugin.error().message;
    return plugin.ok() ? std::move(plugin).value() : nullptr;
  }

  std::string PluginSocket() const { return node_.plugin_dir() + "/hyperslice-tpu.sock"; }

  // A kubelet start: a new device manager (the previous one has stopped). `cleanup` false leaves
  // the folder as it is; `listen_delay` separates the cleanup from the listen.
  bool StartKubelet(bool cleanup = true, std::chrono::microseconds listen_delay = {}) {
    auto m = DeviceManager::Start(
        {.plugin_dir = node_.plugin_dir(), .cleanup = cleanup, .listen_delay = listen_delay});
    if (!m.ok()) {
      ADD_FAILURE() << m.error().ToString();
      return false;
    }
    kubelet_ = std::move(*m);
    return true;
  }
  // The kubelet process ends (a crash leaves kubelet.sock behind); what it had seen, final.
  Seen StopKubelet(bool remove_socket) {
    if (remove_socket) {
      kubelet_->Stop();
    } else {
      kubelet_->Crash();
    }
    return SeenBy(*kubelet_);
  }
  // Waits until the current client's latest list has `devices` Healthy devices.
  bool WaitHealthy(int devices) {
    return testenv::Eventually(
        [&] {
          Seen s = SeenBy(*kubelet_);
          return s.connected && s.healthy == devices;
        },
        kEventually, 1ms);
  }
  Seen Snapshot() const { return SeenBy(*kubelet_); }

  FakeNode node_;
  std::unique_ptr<DeviceManager> kubelet_;
};

TEST_F(KubeletRestartTest, EveryRestartGetsExactlyOneRegistrationAndAnUnbrokenStream) {
  const int rounds = Rounds();
  ASSERT_TRUE(StartKubelet());
  auto plugin = StartPlugin();
  ASSERT_NE(plugin, nullptr);
  ASSERT_TRUE(WaitHealthy(8)) << Describe(Snapshot());

  std::mt19937 rng(20240613);  // fixed: a failure names its round, and the round reproduces
  std::vector<double> to_healthy_ms;
  auto start = SteadyClock::now();
  for (int round = 1; round <= rounds && !HasFailure(); ++round) {
    // The running kubelet dies: a crash leaves kubelet.sock behind, a clean stop removes it.
    bool crash = rng() % 2 == 0;
    ExpectOneCleanRegistration(StopKubelet(/*remove_socket=*/!crash), round - 1);
    // The next one cleans the folder and listens, sometimes at once, sometimes a little later, so
    // the plugin sees the events in every order and split across its reads.
    auto delay = std::chrono::microseconds(rng() % 3 == 0 ? 0 : rng() % 3000);
    auto t0 = SteadyClock::now();
    ASSERT_TRUE(StartKubelet(/*cleanup=*/true, delay)) << "round " << round;
    ASSERT_TRUE(WaitHealthy(8)) << "round " << round << " (crash=" << crash
                                << ", delay=" << delay.count() << " us): " << Describe(Snapshot());
    to_healthy_ms.push_back(
        std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count());
  }
  ExpectOneCleanRegistration(StopKubelet(/*remove_socket=*/true), rounds);
  PluginStatus status = plugin->CurrentStatus();
  EXPECT_EQ(status.registrations, rounds + 1);
  plugin->Stop();

  if (!to_healthy_ms.empty()) {
    std::sort(to_healthy_ms.begin(), to_healthy_ms.end());
    double p50 = to_healthy_ms[to_healthy_ms.size() / 2];
    double p99 = to_healthy_ms[std::min(to_healthy_ms.size() - 1, to_healthy_ms.size() * 99 / 100)];
    std::printf(
        "kubelet restarts: %zu rounds in %.1f s; kubelet start -> devices Healthy p50 %.1f ms, "
        "p99 %.1f ms\n",
        to_healthy_ms.size(), std::chrono::duration<double>(SteadyClock::now() - start).count(),
        p50, p99);
    RecordProperty("restart_to_healthy_p50_us", static_cast<int>(p50 * 1000));
    RecordProperty("restart_to_healthy_p99_us", static_cast<int>(p99 * 1000));
  }
}

// Kubelets that do not clean the folder (the plugin's socket survives the restart): the new
// instance still gets exactly one registration, served by the server that is already running.
TEST_F(KubeletRestartTest, RestartWithoutCleanupRegistersOnceOnTheRunningServer) {
  ASSERT_TRUE(StartKubelet());
  auto plugin = StartPlugin();
  ASSERT_NE(plugin, nullptr);
  ASSERT_TRUE(WaitHealthy(8)) << Describe(Snapshot());
  int generation = plugin->CurrentStatus().serve_generation;
  for (int round = 1; round <= 10 && !HasFailure(); ++round) {
    ExpectOneCleanRegistration(StopKubelet(/*remove_socket=*/round % 2 == 0), round - 1);
    ASSERT_TRUE(StartKubelet(/*cleanup=*/false));
    ASSERT_TRUE(WaitHealthy(8)) << "round " << round << ": " << Describe(Snapshot());
  }
  ExpectOneCleanRegistration(StopKubelet(true), 10);
  EXPECT_EQ(plugin->CurrentStatus().serve_generation, generation) << "no reason to re-serve";
}

// The plugin's socket removed while the kubelet keeps running (by hand, or a tool cleaning the
// folder): the path is served again, and the kubelet's stream — on the old server — goes on.
TEST_F(KubeletRestartTest, OwnSocketRemovedUnderARunningKubeletKeepsItsStream) {
  ASSERT_TRUE(StartKubelet());
  auto plugin = StartPlugin();
  ASSERT_NE(plugin, nullptr);
  ASSERT_TRUE(WaitHealthy(8)) << Describe(Snapshot());
  int generation = plugin->CurrentStatus().serve_generation;

  std::filesystem::remove(PluginSocket());
  // Served again: a new server generation on the path.
  testenv::Eventually([&] { return plugin->CurrentStatus().serve_generation != generation; },
                      kEventually, 5ms);
  ASSERT_GT(plugin->CurrentStatus().serve_generation, generation);
  ASSERT_TRUE(std::filesystem::exists(PluginSocket()));
  testing::Watch fresh(PluginSocket());
  EXPECT_TRUE(fresh.WaitFor([](const auto& r) { return r.devices_size() == 8; }, kEventually));

  // The kubelet's stream is alive: a health change still reaches it.
  std::filesystem::remove(node_.AccelPath(6));
  ASSERT_TRUE(WaitHealthy(7)) << Describe(Snapshot());
  FakeNode::Write(node_.AccelPath(6), "");
  ASSERT_TRUE(WaitHealthy(8)) << Describe(Snapshot());

  // And the next kubelet restart registers once, on the new server.
  ExpectOneCleanRegistration(StopKubelet(false), 0);
  ASSERT_TRUE(StartKubelet());
  ASSERT_TRUE(WaitHealthy(8)) << Describe(Snapshot());
  ExpectOneCleanRegistration(StopKubelet(true), 1);
}

}  // namespace
}  // namespace hyperslice::deviceplugin
