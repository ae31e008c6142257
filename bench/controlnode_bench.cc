// Control node figures (issue 20), on a real kube-apiserver + etcd, with in-process test doubles
// of runner agents (test/integration/runners_controlnode/agent_double.h; they answer RunPod at
// once, so what is measured is the control node's share: watch, placement, input resolution,
// RunPod round trip, annotation and status writes):
//  1. pods/second started across 10 runners: 300 pods created already bound to the control
//     node's Node (4 creating threads), time from the first create until every pod is Running
//     in the API;
//  2. RSS with 1,000 pods over 100 runners: the bench process's VmRSS after the 100 doubles are
//     up (before the control node starts) and once 1,000 pods are Running; the difference is the
//     control node (links, pod informer, controllers) plus the doubles' pod records.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "src/kube/client.h"
#include "src/kube/manager.h"
#include "src/localcluster/localcluster.h"
#include "src/runners/controlnode/api.h"
#include "src/runners/controlnode/controlnode.h"
#include "test/integration/runners_controlnode/agent_double.h"
#include "test/testenv/crds.h"
#include "test/testenv/testenv.h"

namespace json = boost::json;
namespace cn = hyperslice::runners::controlnode;
using hyperslice::testing::AgentDouble;
using namespace std::chrono_literals;

namespace {

long RssKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

constexpr char kDigest[] =
    "registry.local/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

int Running(hyperslice::kube::Client& c, const std::string& ns) {
  auto list = c.ListAll(hyperslice::kube::resources::Pods(), ns,
                        {.field_selector = "status.phase=Running"});
  return list.ok() ? static_cast<int>(list->items.size()) : 0;
}

// Runs `pods` pods over `runners` runners on control node `name`; returns seconds to all Running.
double Run(const std::shared_ptr<hyperslice::kube::Client>& client, const std::string& name,
           std::vector<std::unique_ptr<AgentDouble>>& agents, int runners, int pods,
           const std::string& ns, long* rss_before, long* rss_after) {
  for (int i = 0; i < runners; ++i) {
    AgentDouble::Options o;
    o.runner = name + "-r" + std::to_string(i);
    o.capacity = {{"cpu", "64"}, {"memory", "256Gi"}, {"pods", "200"}};
    o.zone = "us-east1-b";
    agents.push_back(std::make_unique<AgentDouble>(o));
    agents.back()->Start();
  }
  if (rss_before) *rss_before = RssKb();
  json::object cno{{"apiVersion", "runners.hyperslice.dev/v1alpha1"},
                   {"kind", "ControlNode"},
                   {"metadata", json::object{{"name", name}}},
                   {"spec", json::object{{"address", "127.0.0.1"}}}};
  (void)client->Create(cn::ControlNodes(), "", cno);
  for (int i = 0; i < runners; ++i) {
    json::object r{
        {"apiVersion", "runners.hyperslice.dev/v1alpha1"},
        {"kind", "Runner"},
        {"metadata", json::object{{"name", name + "-r" + std::to_string(i)}}},
        {"spec",
         json::object{
             {"controlNode", name},
             {"host", json::object{{"address", agents[agents.size() - runners + i]->address()}}}}}};
    (void)client->Create(cn::Runners(), "", r);
  }
  // Wait for every runner to be linked (capacity on the Node).
  std::string want = std::to_string(64 * runners);
  for (int i = 0; i < 600; ++i) {
    auto n = client->Get(hyperslice::kube::resources::Nodes(), "", name);
    if (n.ok()) {
      const auto* st = n->if_contains("status");
      if (st && st->is_object() && st->as_object().if_contains("capacity") &&
          st->as_object().at("capacity").as_object().if_contains("cpu") &&
          st->as_object().at("capacity").at("cpu").as_string() == want)
        break;
    }
    std::this_thread::sleep_for(100ms);
  }
  auto start = std::chrono::steady_clock::now();
  std::atomic<int> next{0};
  std::vector<std::thread> creators;
  for (int t = 0; t < 4; ++t) {
    creators.emplace_back([&] {
      for (int i = next++; i < pods; i = next++) {
        json::object pod{
            {"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", json::object{{"name", name + "-p" + std::to_string(i)}}},
            {"spec",
             json::object{{"nodeName", name},
                          {"restartPolicy", "Never"},
                          {"containers",
                           json::array{json::object{
                               {"name", "main"},
                               {"image", kDigest},
                               {"env", json::array{json::object{{"name", "A"}, {"value", "b"}}}},
                               {"resources",
                                json::object{{"requests", json::object{{"cpu", "100m"}}}}}}}}}}};
        (void)client->Create(hyperslice::kube::resources::Pods(), ns, pod);
      }
    });
  }
  for (auto& t : creators) t.join();
  double created = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  while (Running(*client, ns) < pods) std::this_thread::sleep_for(50ms);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("  %d pods over %d runners: created in %.2f s, all Running after %.2f s\n", pods,
              runners, created, secs);
  if (rss_after) *rss_after = RssKb();
  return secs;
}

}  // namespace

int main() {
  hyperslice::localcluster::Options lo;
  hyperslice::testenv::ConfigureCluster(lo);
  auto client = hyperslice::testenv::AdminClient();
  if (!client) {
    std::fprintf(stderr, "no control plane (set HYPERSLICE_CONTROLPLANE_BIN)\n");
    return 1;
  }
  auto crds = hyperslice::testenv::InstallCrds(
      {HS_DEPLOY_DIR "/crds/runners.hyperslice.dev_controlnodes.yaml",
       HS_DEPLOY_DIR "/crds/runners.hyperslice.dev_runners.yaml"},
      {cn::ControlNodes(), cn::Runners()});
  if (!crds.ok()) {
    std::fprintf(stderr, "CRDs: %s\n", crds.error().message.c_str());
    return 1;
  }
  std::string ns1 = hyperslice::testenv::TestNamespace();
  hyperslice::kube::ManagerOptions mo;
  mo.client = client;
  auto mgr = hyperslice::kube::Manager::Create(mo);
  cn::OperatorOptions oo;
  oo.client = client;
  oo.ns = ns1;
  oo.agent_credentials =
      [](const std::string&) -> hyperslice::Result<std::shared_ptr<grpc::ChannelCredentials>> {
    return grpc::InsecureChannelCredentials();
  };
  oo.verify_runner_name = false;
  oo.workers = 8;
  auto set = cn::RegisterOperator(**mgr, oo);
  if (!set.ok()) return 1;
  std::vector<std::unique_ptr<AgentDouble>> agents;
  long before_doubles = RssKb();
  std::thread run([&] { (void)(*mgr)->Run(); });

  std::printf(
      "control node bench (real kube-apiserver + etcd on loopback; in-process agent "
      "doubles; 8 pod workers)\n");
  double s = Run(client, "bench-10", agents, 10, 300, ns1, nullptr, nullptr);
  std::printf("pods started per second across 10 runners: %.1f (create to Running in the API)\n",
              300 / s);

  // 1,000 pods over 100 runners, in their own namespace.
  auto ns_obj = json::object{{"apiVersion", "v1"},
                             {"kind", "Namespace"},
                             {"metadata", json::object{{"name", "bench-rss"}}}};
  (void)client->Create(hyperslice::kube::resources::Namespaces(), "", ns_obj);
  long rss_before = 0, rss_after = 0;
  Run(client, "bench-100", agents, 100, 1000, "bench-rss", &rss_before, &rss_after);
  std::printf(
      "RSS (VmRSS of the bench process): %ld MiB before the agent doubles, %ld MiB with "
      "110 doubles and 300 pods, %ld MiB with 1,000 more pods over 100 runners running: "
      "+%ld MiB for the control node's 100 links, 1,000-pod informer and the doubles' "
      "records\n",
      before_doubles / 1024, rss_before / 1024, rss_after / 1024, (rss_after - rss_before) / 1024);
  (*mgr)->Stop();
  run.join();
  for (auto& a : agents) a->Kill();
  return 0;
}
