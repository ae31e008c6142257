// The device plugin over its real gRPC unix sockets, against a test kubelet (a Registration server
// written from the v1beta1 contract) and fake device trees in a temp dir.
#include "src/deviceplugin/deviceplugin.h"

#include <gtest/gtest.h>

#include "test/unit/deviceplugin/fake_node.h"

namespace hyperslice::deviceplugin {
namespace {

using namespace std::chrono_literals;
using testing::DialPlugin;
using testing::FakeNode;
using testing::HealthById;
using testing::SteadyClock;
using testing::TestKubelet;
using testing::Watch;

// Waits for events, never for time: these bounds only end a test that would otherwise hang.
constexpr auto kEventually = 10s;

class DevicePluginTest : public ::testing::Test {
 protected:
  // 8 chips: accel0-3 on NUMA node 0, accel4-7 on node 1.
  void AddEightAccelChips() {
    for (int i = 0; i < 8; ++i) node_.AddAccelChip(i, i < 4 ? 0 : 1);
  }

  Options MakeOptions() {
    Options o;
    o.root = node_.root();
    o.plugin_dir = node_.plugin_dir();
    // An hour: every change a test sees came through inotify, not the periodic backstop.
    o.rescan_interval = std::chrono::hours(1);
    return o;
  }

  std::unique_ptr<DevicePlugin> StartPlugin(Options o) {
    auto plugin = DevicePlugin::Start(std::move(o));
    EXPECT_TRUE(plugin.ok()) << plugin.error().message;
    return plugin.ok() ? std::move(plugin).value() : nullptr;
  }

  // Eight chips and the plugin serving them (plugin_), the test kubelet started first when
  // `kubelet`.
  void StartOnEightChips(bool kubelet) {
    AddEightAccelChips();
    if (kubelet) {
      ASSERT_TRUE(kubelet_.Start());
    }
    plugin_ = StartPlugin(MakeOptions());
    ASSERT_NE(plugin_, nullptr);
  }

  std::string PluginSocket() const { return node_.plugin_dir() + "/hyperslice-tpu.sock"; }

  static grpc::ClientContext* WithDeadline(grpc::ClientContext& ctx) {
    ctx.set_deadline(std::chrono::system_clock::now() + kEventually);
    return &ctx;
  }

  static v1beta1::AllocateRequest AllocateOf(const std::vector<std::string>& ids) {
    v1beta1::AllocateRequest req;
    auto* c = req.add_container_requests();
    for (const auto& id : ids) c->add_devices_ids(id);
    return req;
  }

  FakeNode node_;
  TestKubelet kubelet_{node_.kubelet_socket()};
  std::unique_ptr<DevicePlugin> plugin_;
};

TEST_F(DevicePluginTest, RegistersAfterServingAndListsHealthyChipsWithNuma) {
  ASSERT_NO_FATAL_FAILURE(StartOnEightChips(/*kubelet=*/true));

  auto regs = kubelet_.WaitForRegistrations(1, kEventually);
  ASSERT_EQ(regs.size(), 1u);
  EXPECT_EQ(regs[0].version(), "v1beta1");
  EXPECT_EQ(regs[0].resource_name(), "google.com/tpu");
  EXPECT_EQ(regs[0].endpoint(), "hyperslice-tpu.sock");
  EXPECT_TRUE(regs[0].options().get_preferred_allocation_available());
  EXPECT_FALSE(regs[0].options().pre_start_required());

  // As kubelet does after Register: dial the endpoint in the same folder.
  auto stub = DialPlugin(node_.plugin_dir() + "/" + regs[0].endpoint());
  grpc::ClientContext ctx;
  v1beta1::DevicePluginOptions opts;
  ASSERT_TRUE(stub->GetDevicePluginOptions(WithDeadline(ctx), v1beta1::Empty(), &opts).ok());
  EXPECT_TRUE(opts.get_preferred_allocation_available());

  Watch watch(PluginSocket());
  auto first = watch.WaitFor([](const auto& r) { return r.devices_size() > 0; }, kEventually);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->response.devices_size(), 8);
  for (int i = 0; i < 8; ++i) {
    const auto& d = first->response.devices(i);
    EXPECT_EQ(d.id(), "accel" + std::to_string(i));
    EXPECT_EQ(d.health(), "Healthy");
    ASSERT_EQ(d.topology().nodes_size(), 1) << d.id();
    EXPECT_EQ(d.topology().nodes(0).id(), i < 4 ? 0 : 1) << d.id();
  }
}

TEST_F(DevicePluginTest, RemovedDeviceNodeTurnsUnhealthyThroughInotifyAndHealthyWhenBack) {
  ASSERT_NO_FATAL_FAILURE(StartOnEightChips(/*kubelet=*/true));
  Watch watch(PluginSocket());
  ASSERT_TRUE(watch.WaitFor([](const auto& r) { return r.devices_size() == 8; }, kEventually));

  size_t before = watch.count();
  auto removed_at = SteadyClock::now();
  std::filesystem::remove(node_.AccelPath(2));
  auto unhealthy = watch.WaitFor(
      [](const auto& r) { return HealthById(r)["accel2"] == "Unhealthy"; }, kEventually, before);
  ASSERT_TRUE(unhealthy) << "no Unhealthy update for accel2";
  auto latency = std::chrono::duration_cast<std::chrono::microseconds>(unhealthy->at - removed_at);
  // The issue asks for 100 ms; the periodic re-scan is an hour away, so only inotify can deliver
  // this. The bound is loose because this machine is shared; bench/deviceplugin_bench measures.
  EXPECT_LT(latency, 1s);
  RecordProperty("remove_to_unhealthy_us", static_cast<int>(latency.count()));
  std::printf("remove -> Unhealthy on the stream: %.2f ms\n",
              static_cast<double>(latency.count()) / 1000.0);
  auto health = HealthById(unhealthy->response);
  EXPECT_EQ(health.size(), 8u) << "an unhealthy chip stays listed";
  EXPECT_EQ(health["accel1"], "Healthy");

  before = watch.count();
  FakeNode::Write(node_.AccelPath(2), "");
  auto healthy = watch.WaitFor([](const auto& r) { return HealthById(r)["accel2"] == "Healthy"; },
                               kEventually, before);
  ASSERT_TRUE(healthy) << "accel2 did not turn Healthy again";
  EXPECT_EQ(plugin_->CurrentStatus().healthy, 8);
}

TEST_F(DevicePluginTest, DeviceNodeThatCannotBeOpenedTurnsUnhealthy) {
  AddEightAccelChips();
  // accel5 is a symlink to a node in the same folder; deleting that target leaves the name in
  // place but opening it fails.
  std::string target = node_.root() + "/dev/.accel5-real";
  FakeNode::Write(target, "");
  std::filesystem::remove(node_.AccelPath(5));
  std::filesystem::create_symlink(target, node_.AccelPath(5));
  auto plugin = StartPlugin(MakeOptions());
  ASSERT_NE(plugin, nullptr);
  Watch watch(PluginSocket());
  auto first = watch.WaitFor([](const auto& r) { return r.devices_size() == 8; }, kEventually);
  ASSERT_TRUE(first);
  ASSERT_EQ(HealthById(first->response)["accel5"], "Healthy");
  size_t before = watch.count();
  std::filesystem::remove(target);
  EXPECT_TRUE(watch.WaitFor([](const auto& r) { return HealthById(r)["accel5"] == "Unhealthy"; },
                            kEventually, before));
  EXPECT_TRUE(std::filesystem::is_symlink(node_.AccelPath(5)));
}

TEST_F(DevicePluginTest, KubeletRestartCausesANewRegistrationAndThePluginKeepsServing) {
  ASSERT_NO_FATAL_FAILURE(StartOnEightChips(/*kubelet=*/true));
  ASSERT_EQ(kubelet_.WaitForRegistrations(1, kEventually).size(), 1u);

  kubelet_.Stop();                // removes kubelet.sock
  ASSERT_TRUE(kubelet_.Start());  // re-creates it
  auto regs = kubelet_.WaitForRegistrations(2, kEventually);
  ASSERT_EQ(regs.size(), 2u) << "no registration after kubelet.sock was re-created";
  EXPECT_EQ(regs[1].endpoint(), "hyperslice-tpu.sock");
  EXPECT_EQ(regs[1].resource_name(), "google.com/tpu");

  Watch watch(PluginSocket());
  auto list = watch.WaitFor([](const auto& r) { return r.devices_size() == 8; }, kEventually);
  ASSERT_TRUE(list) << "plugin does not serve after the kubelet restart";
  grpc::ClientContext ctx;
  v1beta1::AllocateResponse resp;
  EXPECT_TRUE(
      DialPlugin(PluginSocket())->Allocate(WithDeadline(ctx), AllocateOf({"accel0"}), &resp).ok());
  // One restart, one registration. Counted once the plugin has stopped, so nothing is in flight.
  plugin_->Stop();
  EXPECT_EQ(kubelet_.registrations(), 2u);
}

// Someone removes the plugin's socket while the kubelet runs: the path is served again (a new
// server generation) and the kubelet, whose connection is untouched, is not asked to register
// again (kubelet_restart_test.cc covers the stream staying up).
TEST_F(DevicePluginTest, RemovedPluginSocketIsServedAgainWithoutRegisteringAgain) {
  ASSERT_NO_FATAL_FAILURE(StartOnEightChips(/*kubelet=*/true));
  ASSERT_EQ(kubelet_.WaitForRegistrations(1, kEventually).size(), 1u);
  int generation = plugin_->CurrentStatus().serve_generation;

  std::filesystem::remove(PluginSocket());
  auto deadline = SteadyClock::now() + kEventually;
  while (plugin_->CurrentStatus().serve_generation == generation && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_GT(plugin_->CurrentStatus().serve_generation, generation);
  EXPECT_TRUE(std::filesystem::exists(PluginSocket()));
  Watch watch(PluginSocket());
  EXPECT_TRUE(watch.WaitFor([](const auto& r) { return r.devices_size() == 8; }, kEventually));
  plugin_->Stop();  // nothing in flight after this
  EXPECT_EQ(kubelet_.registrations(), 1u);
}

TEST_F(DevicePluginTest, RegistersOnceKubeletComesUpLater) {
  ASSERT_NO_FATAL_FAILURE(StartOnEightChips(/*kubelet=*/false));
  EXPECT_EQ(plugin_->CurrentStatus().registrations, 0);
  ASSERT_TRUE(kubelet_.Start());
  EXPECT_EQ(kubelet_.WaitForRegistrations(1, kEventually).size(), 1u);
}

TEST_F(DevicePluginTest, AllocateReturnsDeviceSpecsAndTpuEnv) {
  ASSERT_NO_FATAL_FAILURE(StartOnEightChips(/*kubelet=*/false));
  auto stub = DialPlugin(PluginSocket());

  v1beta1::AllocateRequest req = AllocateOf({"accel5", "accel4"});
  auto* second = req.add_container_requests();
  for (int i = 0; i < 8; ++i) second->add_devices_ids("accel" + std::to_string(i));
  grpc::ClientContext ctx;
  v1beta1::AllocateResponse resp;
  grpc::Status st = stub->Allocate(WithDeadline(ctx), req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.container_responses_size(), 2);

  const auto& two = resp.container_responses(0);
  ASSERT_EQ(two.devices_size(), 2);
  EXPECT_EQ(two.devices(0).container_path(), "/dev/accel5");
  EXPECT_EQ(two.devices(0).host_path(), "/dev/accel5");
  EXPECT_EQ(two.devices(0).permissions(), "rw");
  EXPECT_EQ(two.devices(1).host_path(), "/dev/accel4");
  EXPECT_EQ(two.envs().at("TPU_VISIBLE_CHIPS"), "4,5");
  EXPECT_EQ(two.envs().at("TPU_CHIPS_PER_PROCESS_BOUNDS"), "1,2,1");
  EXPECT_EQ(two.envs().at("TPU_PROCESS_BOUNDS"), "1,1,1");

  const auto& whole = resp.container_responses(1);
  EXPECT_EQ(whole.devices_size(), 8);
  EXPECT_EQ(whole.envs().at("TPU_VISIBLE_CHIPS"), "0,1,2,3,4,5,6,7");
  EXPECT_EQ(whole.envs().count("TPU_CHIPS_PER_PROCESS_BOUNDS"), 0u) << "whole host: libtpu knows";
}

TEST_F(DevicePluginTest, AllocateRefusesUnknownAndUnhealthyDevices) {
  ASSERT_NO_FATAL_FAILURE(StartOnEightChips(/*kubelet=*/false));
  auto stub = DialPlugin(PluginSocket());
  {
    grpc::ClientContext ctx;
    v1beta1::AllocateResponse resp;
    grpc::Status st = stub->Allocate(WithDeadline(ctx), AllocateOf({"accel1", "accel42"}), &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("accel42"), std::string::npos) << st.error_message();
  }
  Watch watch(PluginSocket());
  ASSERT_TRUE(watch.WaitFor([](const auto& r) { return r.devices_size() == 8; }, kEventually));
  size_t before = watch.count();
  std::filesystem::remove(node_.AccelPath(3));
  ASSERT_TRUE(watch.WaitFor([](const auto& r) { return HealthById(r)["accel3"] == "Unhealthy"; },
                            kEventually, before));
  grpc::ClientContext ctx;
  v1beta1::AllocateResponse resp;
  grpc::Status st = stub->Allocate(WithDeadline(ctx), AllocateOf({"accel3"}), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("Unhealthy"), std::string::npos) << st.error_message();
}

TEST_F(DevicePluginTest, PreferredAllocationPicksFourChipsOnOneNumaNode) {
  ASSERT_NO_FATAL_FAILURE(StartOnEightChips(/*kubelet=*/false));
  auto stub = DialPlugin(PluginSocket());
  v1beta1::PreferredAllocationRequest req;
  auto* c = req.add_container_requests();
  // Node 0 has 3 free chips (0, 2, 3), node 1 all four: four chips fit on node 1 only.
  for (const char* id : {"accel0", "accel2", "accel3", "accel4", "accel5", "accel6", "accel7"}) {
    c->add_available_deviceids(id);
  }
  c->set_allocation_size(4);
  auto* with_must = req.add_container_requests();
  for (int i = 0; i < 8; ++i) with_must->add_available_deviceids("accel" + std::to_string(i));
  with_must->add_must_include_deviceids("accel2");
  with_must->set_allocation_size(2);

  grpc::ClientContext ctx;
  v1beta1::PreferredAllocationResponse resp;
  grpc::Status st = stub->GetPreferredAllocation(WithDeadline(ctx), req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.container_responses_size(), 2);
  std::vector<std::string> four(resp.container_responses(0).deviceids().begin(),
                                resp.container_responses(0).deviceids().end());
  EXPECT_EQ(four, (std::vector<std::string>{"accel4", "accel5", "accel6", "accel7"}));
  std::vector<std::string> two(resp.container_responses(1).deviceids().begin(),
                               resp.container_responses(1).deviceids().end());
  ASSERT_EQ(two.size(), 2u);
  EXPECT_TRUE(two[0] == "accel2" || two[1] == "accel2");
  EXPECT_TRUE(two == (std::vector<std::string>{"accel1", "accel2"}) ||
              two == (std::vector<std::string>{"accel2", "accel3"}));
}

TEST_F(DevicePluginTest, VfioModeServesGroupsFoundThroughSysfs) {
  node_.AddVfioFunction("0000:00:04.0", 12, 0);
  node_.AddVfioFunction("0000:00:05.0", 13, 0);
  node_.AddVfioFunction("0000:00:06.0", 40, 1);
  node_.AddVfioFunction("0000:00:07.0", 41, 1);
  ASSERT_TRUE(kubelet_.Start());
  auto plugin = StartPlugin(MakeOptions());
  ASSERT_NE(plugin, nullptr);
  ASSERT_EQ(kubelet_.WaitForRegistrations(1, kEventually).size(), 1u);
  EXPECT_EQ(plugin->CurrentStatus().mode, Mode::kVfio);

  Watch watch(PluginSocket());
  auto list = watch.WaitFor([](const auto& r) { return r.devices_size() == 4; }, kEventually);
  ASSERT_TRUE(list);
  EXPECT_EQ(list->response.devices(2).id(), "vfio40");
  EXPECT_EQ(list->response.devices(2).topology().nodes(0).id(), 1);

  grpc::ClientContext ctx;
  v1beta1::AllocateResponse resp;
  grpc::Status st = DialPlugin(PluginSocket())
                        ->Allocate(WithDeadline(ctx), AllocateOf({"vfio41", "vfio40"}), &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const auto& c = resp.container_responses(0);
  std::vector<std::string> paths;
  for (const auto& d : c.devices()) {
    paths.push_back(d.host_path());
    EXPECT_EQ(d.permissions(), "mrw");
  }
  EXPECT_EQ(paths, (std::vector<std::string>{"/dev/vfio/41", "/dev/vfio/40", "/dev/vfio/vfio"}));
  EXPECT_EQ(c.envs().at("TPU_VISIBLE_CHIPS"), "2,3");

  // A group node disappearing is seen through the watch on /dev/vfio.
  size_t before = watch.count();
  std::filesystem::remove(node_.VfioPath(13));
  EXPECT_TRUE(watch.WaitFor([](const auto& r) { return HealthById(r)["vfio13"] == "Unhealthy"; },
                            kEventually, before));
}

TEST_F(DevicePluginTest, ExpectedChipShortfallIsListedAsUnhealthyPlaceholders) {
  for (int i = 0; i < 3; ++i) node_.AddAccelChip(i, 0);
  Options o = MakeOptions();
  o.expected_chips = 4;
  auto plugin = StartPlugin(o);
  ASSERT_NE(plugin, nullptr);
  Watch watch(PluginSocket());
  auto list = watch.WaitFor([](const auto& r) { return r.devices_size() == 4; }, kEventually);
  ASSERT_TRUE(list);
  auto health = HealthById(list->response);
  EXPECT_EQ(health["missing-0"], "Unhealthy");
  EXPECT_EQ(health["accel2"], "Healthy");
  EXPECT_EQ(plugin->CurrentStatus().missing, 1);

  grpc::ClientContext ctx;
  v1beta1::AllocateResponse resp;
  EXPECT_EQ(DialPlugin(PluginSocket())
                ->Allocate(WithDeadline(ctx), AllocateOf({"missing-0"}), &resp)
                .error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  // The fourth chip shows up: the placeholder goes away.
  size_t before = watch.count();
  node_.AddAccelChip(3, 0);
  auto full = watch.WaitFor(
      [](const auto& r) {
        auto h = HealthById(r);
        return h.size() == 4 && h.count("accel3") && h["accel3"] == "Healthy";
      },
      kEventually, before);
  EXPECT_TRUE(full);
  EXPECT_EQ(plugin->CurrentStatus().missing, 0);
}

TEST_F(DevicePluginTest, StopEndsStreamsAndRemovesTheSocket) {
  ASSERT_NO_FATAL_FAILURE(StartOnEightChips(/*kubelet=*/false));
  ASSERT_TRUE(std::filesystem::exists(PluginSocket()));
  Watch watch(PluginSocket());
  ASSERT_TRUE(watch.WaitFor([](const auto& r) { return r.devices_size() == 8; }, kEventually));
  plugin_->Stop();
  EXPECT_TRUE(watch.WaitEnded(kEventually));
  EXPECT_FALSE(std::filesystem::exists(PluginSocket()));
}

TEST_F(DevicePluginTest, StartFailsWhenThePluginFolderIsMissing) {
  Options o = MakeOptions();
  o.plugin_dir = node_.plugin_dir() + "/absent";
  auto plugin = DevicePlugin::Start(o);
  ASSERT_FALSE(plugin.ok());
  EXPECT_NE(plugin.error().message.find("absent"), std::string::npos);
}

}  // namespace
}  // namespace hyperslice::deviceplugin
