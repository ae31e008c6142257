// GCE simulator throughput (issue 3: ≥ 5,000 GETs/s on loopback with call counting on, so the
// simulator never limits a scale test).
//
// Set-up: the simulator in-process with request validation and auth on (as tests run it), one
// instance template, a 16-VM MIG. Then C client threads, each with its own keep-alive
// net::HttpClient, issue authenticated GETs for a fixed time, cycling over
// instances.get / instanceGroupManagers.get / instanceTemplates.get / zoneOperations.get.
// Every request is counted by the simulator (GET /control/counters), and the figure is the
// number of 200 answers per second. Printed for 1 and 2 server threads × 1, 2, 4 client threads.
// Run: build-<you>/bench/gce_sim_bench [seconds-per-run, default 3]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "sim/gce/simulator.h"
#include "src/base/log.h"
#include "src/net/http.h"

namespace hyperslice::sim::gce {
namespace {

namespace json = boost::json;
constexpr char kToken[] = "bench-token";

std::shared_ptr<net::HttpClient> Client(const std::string& base) {
  net::HttpClient::Options o;
  o.base_url = base;
  auto c = net::HttpClient::Create(o);
  return c.ok() ? *c : nullptr;
}

net::Response Call(net::HttpClient& c, const std::string& method, const std::string& target,
                   const std::string& body = "") {
  net::Request r;
  r.method = method;
  r.target = target;
  r.body = body;
  r.headers = {{"Authorization", std::string("Bearer ") + kToken}};
  if (!body.empty()) r.headers.emplace_back("Content-Type", "application/json");
  auto res = c.Do(r);
  return res.ok() ? *res : net::Response{};
}

struct RunResult {
  double gets_per_sec = 0;
  int64_t errors = 0;
  int64_t counted = 0;
};

RunResult Run(int server_threads, int client_threads, double seconds) {
  Options o;
  o.static_tokens = {kToken};
  o.operation_latency = std::chrono::milliseconds(0);
  o.instance_boot_latency = std::chrono::milliseconds(0);
  o.api_threads = server_threads;
  auto sim = Simulator::Start(o);
  if (!sim.ok()) {
    std::fprintf(stderr, "simulator: %s\n", sim.error().ToString().c_str());
    std::exit(1);
  }
  std::string api = (*sim)->api_endpoint();
  std::string base = api.substr(0, api.find("/compute/"));
  auto setup = Client(base);
  const std::string p = "/compute/v1/projects/my-gcp-project/";
  Call(*setup, "POST", p + "global/instanceTemplates",
       R"({"name":"bench","properties":{"machineType":"e2-medium"}})");
  auto mig = Call(*setup, "POST", p + "zones/us-central1-c/instanceGroupManagers",
                  R"({"name":"bench","baseInstanceName":"bench","targetSize":16,)"
                  R"("instanceTemplate":"global/instanceTemplates/bench"})");
  std::string op_name;
  {
    boost::system::error_code ec;
    auto v = json::parse(mig.body, ec);
    if (!ec && v.is_object() && v.as_object().contains("name")) {
      op_name = std::string(v.at("name").as_string());
    }
  }
  std::vector<std::string> names;
  for (int i = 0; i < 200 && names.size() < 16; ++i) {
    names.clear();
    auto list = Call(*setup, "GET", p + "zones/us-central1-c/instances");
    boost::system::error_code ec;
    auto v = json::parse(list.body, ec);
    if (!ec && v.is_object() && v.as_object().contains("items")) {
      for (const auto& it : v.at("items").as_array()) {
        names.emplace_back(it.at("name").as_string());
      }
    }
    if (names.size() < 16) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (names.empty() || op_name.empty()) {
    std::fprintf(stderr, "set-up failed\n");
    std::exit(1);
  }
  std::vector<std::string> targets;
  for (const auto& n : names) targets.push_back(p + "zones/us-central1-c/instances/" + n);
  targets.push_back(p + "zones/us-central1-c/instanceGroupManagers/bench");
  targets.push_back(p + "global/instanceTemplates/bench");
  targets.push_back(p + "zones/us-central1-c/operations/" + op_name);

  auto ctl = Client((*sim)->control_endpoint());
  auto counters_before = ctl->Do(net::Request{"GET", "/control/counters"});

  std::atomic<bool> stop{false};
  std::atomic<int64_t> ok{0}, bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < client_threads; ++t) {
    threads.emplace_back([&, t] {
      auto c = Client(base);
      size_t i = static_cast<size_t>(t);
      int64_t mine_ok = 0, mine_bad = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        auto r = Call(*c, "GET", targets[i++ % targets.size()]);
        if (r.status == 200) {
          ++mine_ok;
        } else {
          ++mine_bad;
        }
      }
      ok += mine_ok;
      bad += mine_bad;
    });
  }
  auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : threads) th.join();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  RunResult res;
  res.gets_per_sec = static_cast<double>(ok.load()) / elapsed;
  res.errors = bad.load();
  auto counters = ctl->Do(net::Request{"GET", "/control/counters"});
  if (counters.ok() && counters_before.ok()) {
    auto a = json::parse(counters_before->body).as_object();
    auto b = json::parse(counters->body).as_object();
    for (const char* m : {"compute.instances.get", "compute.instanceGroupManagers.get",
                          "compute.instanceTemplates.get", "compute.zoneOperations.get"}) {
      int64_t before = a.contains(m) ? a.at(m).to_number<int64_t>() : 0;
      int64_t after = b.contains(m) ? b.at(m).to_number<int64_t>() : 0;
      res.counted += after - before;
    }
  }
  (*sim)->Stop();
  return res;
}

}  // namespace
}  // namespace hyperslice::sim::gce

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  hyperslice::log::SetSink([](std::string_view) {});
  unsigned cores = std::thread::hardware_concurrency();
  std::printf(
      "gce_sim_bench: authenticated GETs over loopback keep-alive, call counting on, "
      "%.1f s per run, %u cores\n",
      seconds, cores);
  std::printf("%-15s %-15s %12s %10s %14s\n", "server_threads", "client_threads", "GETs/s",
              "errors", "counted_calls");
  double best = 0;
  for (int server : {1, 2}) {
    for (int clients : {1, 2, 4}) {
      auto r = hyperslice::sim::gce::Run(server, clients, seconds);
      std::printf("%-15d %-15d %12.0f %10lld %14lld\n", server, clients, r.gets_per_sec,
                  static_cast<long long>(r.errors), static_cast<long long>(r.counted));
      std::fflush(stdout);
      best = std::max(best, r.gets_per_sec);
    }
  }
  std::printf("best: %.0f GETs/s (issue 3 bar: 5000)\n", best);
  return 0;
}
