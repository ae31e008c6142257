// The device plugin under real kubelet restarts, against KubeletStandIn (kubelet_standin.h): every
// restart removes every socket in the folder (the plugin's included) and then listens on
// kubelet.sock again. Each kubelet instance must see exactly one Register, and the ListAndWatch
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

#include "src/deviceplugin/deviceplugin.h"
#include "test/unit/deviceplugin/fake_node.h"
#include "test/unit/deviceplugin/kubelet_standin.h"

namespace hyperslice::deviceplugin {
namespace {

using namespace std::chrono_literals;
using testing::FakeNode;
using testing::KubeletStandIn;
using testing::SteadyClock;

// Waits for events, never for time: this bound only ends a test that would otherwise hang.
constexpr auto kEventually = 20s;

// Rounds per run (about 4 s here, under TSan too); HS_DP_RESTART_ROUNDS overrides, e.g. thousands
// when hunting a race by hand.
int Rounds() {
  if (const char* env = ::getenv("HS_DP_RESTART_ROUNDS")) return std::max(1, std::atoi(env));
  return 150;
}

std::string Describe(const KubeletStandIn::Report& r) {
  std::string out = "registrations=" + std::to_string(r.registrations) +
                    " replaced=" + std::to_string(r.replaced_clients) +
                    " unexpected_ends=" + std::to_string(r.unexpected_ends) +
                    " lists=" + std::to_string(r.lists) + " healthy=" + std::to_string(r.healthy) +
                    " connected=" + std::to_string(r.connected);
  for (const auto& e : r.errors) out += "\n  " + e;
  return out;
}

// What every kubelet instance must have seen by the time it stops.
void ExpectOneCleanRegistration(const KubeletStandIn::Report& r, int round) {
  EXPECT_EQ(r.registrations, 1) << "round " << round << ": " << Describe(r);
  EXPECT_EQ(r.replaced_clients, 0) << "round " << round << ": " << Describe(r);
  EXPECT_EQ(r.unexpected_ends, 0) << "round " << round << ": " << Describe(r);
  EXPECT_TRUE(r.connected) << "round " << round << ": " << Describe(r);
  EXPECT_EQ(r.healthy, 8) << "round " << round << ": " << Describe(r);
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

  FakeNode node_;
  KubeletStandIn kubelet_{node_.plugin_dir(), "google.com/tpu"};
};

TEST_F(KubeletRestartTest, EveryRestartGetsExactlyOneRegistrationAndAnUnbrokenStream) {
  const int rounds = Rounds();
  ASSERT_TRUE(kubelet_.Start());
  auto plugin = StartPlugin();
  ASSERT_NE(plugin, nullptr);
  ASSERT_TRUE(kubelet_.WaitHealthy(8, kEventually)) << Describe(kubelet_.Snapshot());

  std::mt19937 rng(20240613);  // fixed: a failure names its round, and the round reproduces
  std::vector<double> to_healthy_ms;
  auto start = SteadyClock::now();
  for (int round = 1; round <= rounds && !HasFailure(); ++round) {
    // The running kubelet dies: a crash leaves kubelet.sock behind, a clean stop removes it.
    bool crash = rng() % 2 == 0;
    ExpectOneCleanRegistration(kubelet_.Stop(/*remove_socket=*/!crash), round - 1);
    // The next one cleans the folder and listens, sometimes at once, sometimes a little later, so
    // the plugin sees the events in every order and split across its reads.
    auto delay = std::chrono::microseconds(rng() % 3 == 0 ? 0 : rng() % 3000);
    auto t0 = SteadyClock::now();
    ASSERT_TRUE(kubelet_.Start(/*cleanup=*/true, delay)) << "round " << round;
    ASSERT_TRUE(kubelet_.WaitHealthy(8, kEventually))
        << "round " << round << " (crash=" << crash << ", delay=" << delay.count()
        << " us): " << Describe(kubelet_.Snapshot());
    to_healthy_ms.push_back(
        std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count());
  }
  ExpectOneCleanRegistration(kubelet_.Stop(/*remove_socket=*/true), rounds);
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
  ASSERT_TRUE(kubelet_.Start());
  auto plugin = StartPlugin();
  ASSERT_NE(plugin, nullptr);
  ASSERT_TRUE(kubelet_.WaitHealthy(8, kEventually)) << Describe(kubelet_.Snapshot());
  int generation = plugin->CurrentStatus().serve_generation;
  for (int round = 1; round <= 10 && !HasFailure(); ++round) {
    ExpectOneCleanRegistration(kubelet_.Stop(/*remove_socket=*/round % 2 == 0), round - 1);
    ASSERT_TRUE(kubelet_.Start(/*cleanup=*/false));
    ASSERT_TRUE(kubelet_.WaitHealthy(8, kEventually))
        << "round " << round << ": " << Describe(kubelet_.Snapshot());
  }
  ExpectOneCleanRegistration(kubelet_.Stop(true), 10);
  EXPECT_EQ(plugin->CurrentStatus().serve_generation, generation) << "no reason to re-serve";
}

// The plugin's socket removed while the kubelet keeps running (by hand, or a tool cleaning the
// folder): the path is served again, and the kubelet's stream — on the old server — goes on.
TEST_F(KubeletRestartTest, OwnSocketRemovedUnderARunningKubeletKeepsItsStream) {
  ASSERT_TRUE(kubelet_.Start());
  auto plugin = StartPlugin();
  ASSERT_NE(plugin, nullptr);
  ASSERT_TRUE(kubelet_.WaitHealthy(8, kEventually)) << Describe(kubelet_.Snapshot());
  int generation = plugin->CurrentStatus().serve_generation;

  std::filesystem::remove(PluginSocket());
  // Served again: a new server generation on the path.
  auto deadline = SteadyClock::now() + kEventually;
  while (plugin->CurrentStatus().serve_generation == generation && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_GT(plugin->CurrentStatus().serve_generation, generation);
  ASSERT_TRUE(std::filesystem::exists(PluginSocket()));
  testing::Watch fresh(PluginSocket());
  EXPECT_TRUE(fresh.WaitFor([](const auto& r) { return r.devices_size() == 8; }, kEventually));

  // The kubelet's stream is alive: a health change still reaches it.
  std::filesystem::remove(node_.AccelPath(6));
  ASSERT_TRUE(kubelet_.WaitHealthy(7, kEventually)) << Describe(kubelet_.Snapshot());
  FakeNode::Write(node_.AccelPath(6), "");
  ASSERT_TRUE(kubelet_.WaitHealthy(8, kEventually)) << Describe(kubelet_.Snapshot());

  // And the next kubelet restart registers once, on the new server.
  ExpectOneCleanRegistration(kubelet_.Stop(false), 0);
  ASSERT_TRUE(kubelet_.Start());
  ASSERT_TRUE(kubelet_.WaitHealthy(8, kEventually)) << Describe(kubelet_.Snapshot());
  ExpectOneCleanRegistration(kubelet_.Stop(true), 1);
}

}  // namespace
}  // namespace hyperslice::deviceplugin
