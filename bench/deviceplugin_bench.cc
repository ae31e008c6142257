// Device plugin figures (issue 7), over the real unix sockets, with a fake 8-chip node in a temp
// dir:
//  - Allocate latency: one Allocate RPC (1 and 4 chips) from a client on the plugin's socket;
//    p50/p99 over every iteration, in microseconds.
//  - Health change to stream: time from unlinking (or re-creating) /dev/accel2 to the
//    ListAndWatch update that shows it Unhealthy (Healthy) arriving at a client; the periodic
//    re-scan is set to an hour, so inotify is what is measured. p50/p99 over 50 remove/restore
//    cycles (100 transitions), in milliseconds.
// Run: build-<you>/bench/deviceplugin_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>

#include "src/base/log.h"
#include "src/deviceplugin/deviceplugin.h"
#include "test/unit/deviceplugin/fake_node.h"

namespace hyperslice::deviceplugin {
namespace {

using testing::DialPlugin;
using testing::FakeNode;
using testing::HealthById;
using testing::SteadyClock;
using testing::Watch;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct Fixture {
  Fixture() {
    log::SetSink([](std::string_view) {});
    for (int i = 0; i < 8; ++i) node.AddAccelChip(i, i < 4 ? 0 : 1);
    Options o;
    o.root = node.root();
    o.plugin_dir = node.plugin_dir();
    o.rescan_interval = std::chrono::hours(1);
    auto started = DevicePlugin::Start(o);
    if (started.ok()) plugin = std::move(started).value();
    socket = node.plugin_dir() + "/" + o.socket_name;
  }
  ~Fixture() {
    plugin.reset();
    log::SetSink(nullptr);
  }
  FakeNode node;
  std::unique_ptr<DevicePlugin> plugin;
  std::string socket;
};

void BM_Allocate(benchmark::State& state) {
  Fixture f;
  if (!f.plugin) {
    state.SkipWithError("plugin did not start");
    return;
  }
  auto stub = DialPlugin(f.socket);
  v1beta1::AllocateRequest req;
  auto* c = req.add_container_requests();
  for (int i = 0; i < state.range(0); ++i) c->add_devices_ids("accel" + std::to_string(i));
  std::vector<double> us;
  for (auto _ : state) {
    grpc::ClientContext ctx;
    v1beta1::AllocateResponse resp;
    auto t0 = SteadyClock::now();
    grpc::Status st = stub->Allocate(&ctx, req, &resp);
    auto t1 = SteadyClock::now();
    if (!st.ok()) {
      state.SkipWithError(st.error_message().c_str());
      return;
    }
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  state.counters["p50_us"] = Percentile(us, 0.50);
  state.counters["p99_us"] = Percentile(us, 0.99);
  std::printf("Allocate(%lld chips) over unix socket: p50 %.1f us, p99 %.1f us (n=%zu)\n",
              static_cast<long long>(state.range(0)), Percentile(us, 0.5), Percentile(us, 0.99),
              us.size());
}
BENCHMARK(BM_Allocate)->Arg(1)->Arg(4)->Iterations(2000)->UseRealTime();

void BM_HealthChangeToStream(benchmark::State& state) {
  Fixture f;
  if (!f.plugin) {
    state.SkipWithError("plugin did not start");
    return;
  }
  Watch watch(f.socket);
  if (!watch.WaitFor([](const auto& r) { return r.devices_size() == 8; },
                     std::chrono::seconds(10))) {
    state.SkipWithError("no initial device list");
    return;
  }
  std::vector<double> to_unhealthy_ms, to_healthy_ms;
  for (auto _ : state) {
    for (bool remove : {true, false}) {
      size_t before = watch.count();
      auto t0 = SteadyClock::now();
      if (remove) {
        std::filesystem::remove(f.node.AccelPath(2));
      } else {
        FakeNode::Write(f.node.AccelPath(2), "");
      }
      const char* want = remove ? kUnhealthy : kHealthy;
      auto hit = watch.WaitFor([&](const auto& r) { return HealthById(r)["accel2"] == want; },
                               std::chrono::seconds(10), before);
      if (!hit) {
        state.SkipWithError("health change never reached the stream");
        return;
      }
      double ms = std::chrono::duration<double, std::milli>(hit->at - t0).count();
      (remove ? to_unhealthy_ms : to_healthy_ms).push_back(ms);
    }
  }
  std::vector<double> all = to_unhealthy_ms;
  all.insert(all.end(), to_healthy_ms.begin(), to_healthy_ms.end());
  state.counters["p50_ms"] = Percentile(all, 0.50);
  state.counters["p99_ms"] = Percentile(all, 0.99);
  std::printf(
      "health change -> ListAndWatch update (%zu cycles): remove->Unhealthy p50 %.2f ms p99 %.2f "
      "ms; restore->Healthy p50 %.2f ms p99 %.2f ms; all p50 %.2f ms p99 %.2f ms max %.2f ms\n",
      to_unhealthy_ms.size(), Percentile(to_unhealthy_ms, 0.5), Percentile(to_unhealthy_ms, 0.99),
      Percentile(to_healthy_ms, 0.5), Percentile(to_healthy_ms, 0.99), Percentile(all, 0.5),
      Percentile(all, 0.99), Percentile(all, 1.0));
}
BENCHMARK(BM_HealthChangeToStream)->Iterations(50)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace hyperslice::deviceplugin

BENCHMARK_MAIN();
