// Informer ingest of N (default 10,000) kubelet-like Node objects on a real LocalCluster.
//
// How it measures:
//  * The Nodes are created by a child process (this binary re-run with --create), on 8 threads,
//    so none of the creation's memory is resident in the measuring process.
//  * Nodes look like a real kubelet's: ~15 labels, annotations, providerID, taints, capacity and
//    allocatable, 5 conditions, 3 addresses, nodeInfo, 30 container images with digests and
//    tags; the apiserver adds managedFields. Their JSON size is printed.
//  * RSS before = VmRSS of this process once its client has done one request (TLS and threads up),
//    after malloc_trim. Then a SharedInformer for Nodes (with a spec.providerID index,
//    managedFields dropped, objects packed — the defaults) is started; ingest time = Start() until
//    WaitForCacheSync() returns (paged list of 500 + watch established); objects/s = N / that.
//  * RSS after = VmRSS after sync (and again after malloc_trim, which returns freed transient
//  pages);
//    bytes per Node = (RSS after trim - RSS before) / N. Peak = getrusage ru_maxrss and VmHWM.
//  * The same figures for informers with a transform dropping status.images, with packing off
//    (plain Boost.JSON trees) and with managedFields kept, on the same cluster, to show what each
//    choice saves.
// Usage: informer_ingest_bench [N]   (env HYPERSLICE_CONTROLPLANE_BIN as for the tests)
#include <malloc.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/json/serialize.hpp>

#include "src/base/log.h"
#include "src/kube/client.h"
#include "src/kube/config.h"
#include "src/kube/informer.h"
#include "src/kube/internal/informer_object.h"
#include "src/localcluster/localcluster.h"

extern char** environ;

namespace hyperslice::kube {
namespace {

using Steady = std::chrono::steady_clock;

int64_t StatusKiB(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::atoll(line.c_str() + std::string(field).size() + 1);
  }
  return -1;
}

int64_t MaxRssKiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

// Resets VmHWM to the current RSS (Linux >= 4.0).
void ResetPeak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
}

std::string Hex(uint64_t seed, int len) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < len; ++i) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    s += digits[(seed >> 60) & 0xf];
  }
  return s;
}

Object MakeNode(int i) {
  char name[64];
  std::snprintf(name, sizeof(name), "gke-bench-pool-%08x-%05d", 0x5eed1234 + i / 1000, i);
  std::string zone = i % 2 == 0 ? "us-central2-b" : "us-central2-c";
  boost::json::object labels{{"beta.kubernetes.io/arch", "amd64"},
                             {"beta.kubernetes.io/instance-type", "ct6e-standard-4t"},
                             {"beta.kubernetes.io/os", "linux"},
                             {"cloud.google.com/gke-boot-disk", "hyperdisk-balanced"},
                             {"cloud.google.com/gke-container-runtime", "containerd"},
                             {"cloud.google.com/gke-nodepool", "tpu-v6e-pool"},
                             {"cloud.google.com/gke-os-distribution", "cos"},
                             {"cloud.google.com/gke-tpu-accelerator", "tpu-v6e-slice"},
                             {"cloud.google.com/gke-tpu-topology", "4x4"},
                             {"cloud.google.com/machine-family", "ct6e"},
                             {"failure-domain.beta.kubernetes.io/region", "us-central2"},
                             {"failure-domain.beta.kubernetes.io/zone", zone},
                             {"kubernetes.io/arch", "amd64"},
                             {"kubernetes.io/hostname", name},
                             {"kubernetes.io/os", "linux"},
                             {"node.kubernetes.io/instance-type", "ct6e-standard-4t"},
                             {"topology.kubernetes.io/region", "us-central2"},
                             {"topology.kubernetes.io/zone", zone}};
  boost::json::object annotations{
      {"container.googleapis.com/instance_id", std::to_string(4000000000000000000ULL + i)},
      {"csi.volume.kubernetes.io/nodeid",
       std::string(R"({"pd.csi.storage.gke.io":"projects/bench/zones/)") + zone + "/instances/" +
           name + "\"}"},
      {"node.alpha.kubernetes.io/ttl", "0"},
      {"node.gke.io/last-applied-node-labels", "cloud.google.com/gke-nodepool=tpu-v6e-pool"},
      {"volumes.kubernetes.io/controller-managed-attach-detach", "true"}};
  auto time = "2026-11-21T10:00:00Z";
  auto condition = [&](const char* type, const char* status, const char* reason,
                       const char* message) {
    return boost::json::object{{"type", type},
                               {"status", status},
                               {"lastHeartbeatTime", time},
                               {"lastTransitionTime", time},
                               {"reason", reason},
                               {"message", message}};
  };
  boost::json::array images;
  const char* repos[] = {"registry.example/gke/gke-metrics-agent",
                         "registry.example/gke/fluent-bit",
                         "registry.example/gke/kube-proxy-amd64",
                         "registry.example/gke/pause",
                         "registry.example/gke/tpu-device-plugin",
                         "us-docker.pkg.dev/bench/jax/trainer",
                         "registry.example/gke/netd",
                         "registry.example/gke/gcp-compute-persistent-disk-csi-driver",
                         "registry.example/gke/csi-node-driver-registrar",
                         "registry.example/gke/prometheus-to-sd"};
  for (int k = 0; k < 30; ++k) {
    std::string repo = repos[k % 10];
    std::string tag = "v1." + std::to_string(20 + k) + ".3-gke." + std::to_string(k);
    images.push_back(boost::json::object{
        {"names", boost::json::array{repo + "@sha256:" + Hex(k * 7919 + 1, 64), repo + ":" + tag}},
        {"sizeBytes", 10'000'000 + k * 1'234'567}});
  }
  boost::json::object capacity{{"cpu", "180"},          {"ephemeral-storage", "101203600Ki"},
                               {"google.com/tpu", "4"}, {"hugepages-1Gi", "0"},
                               {"hugepages-2Mi", "0"},  {"memory", "742187536Ki"},
                               {"pods", "110"}};
  boost::json::object allocatable = capacity;
  allocatable["cpu"] = "179500m";
  allocatable["memory"] = "725512208Ki";
  allocatable["ephemeral-storage"] = "47093746742";
  std::string ip = "10.128." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 2);
  return Object{
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata",
       boost::json::object{{"name", name}, {"labels", labels}, {"annotations", annotations}}},
      {"spec",
       boost::json::object{
           {"providerID", std::string("gce://bench-project/") + zone + "/" + name},
           {"podCIDR", "10.4." + std::to_string(i % 250) + ".0/24"},
           {"podCIDRs", boost::json::array{"10.4." + std::to_string(i % 250) + ".0/24"}},
           {"taints",
            boost::json::array{boost::json::object{
                {"key", "google.com/tpu"}, {"value", "present"}, {"effect", "NoSchedule"}}}}}},
      {"status",
       boost::json::object{
           {"capacity", capacity},
           {"allocatable", allocatable},
           {"conditions",
            boost::json::array{condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                                         "kubelet has sufficient memory available"),
                               condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                                         "kubelet has no disk pressure"),
                               condition("PIDPressure", "False", "KubeletHasSufficientPID",
                                         "kubelet has sufficient PID available"),
                               condition("Ready", "True", "KubeletReady",
                                         "kubelet is posting ready status. AppArmor enabled"),
                               condition("NetworkUnavailable", "False", "RouteCreated",
                                         "NodeController create implicit route")}},
           {"addresses",
            boost::json::array{boost::json::object{{"type", "InternalIP"}, {"address", ip}},
                               boost::json::object{{"type", "ExternalIP"},
                                                   {"address", "34.1." + std::to_string(i % 250) +
                                                                   "." + std::to_string(i / 250)}},
                               boost::json::object{{"type", "Hostname"}, {"address", name}}}},
           {"daemonEndpoints",
            boost::json::object{{"kubeletEndpoint", boost::json::object{{"Port", 10250}}}}},
           {"nodeInfo",
            boost::json::object{
                {"machineID", Hex(i * 31 + 7, 32)},
                {"systemUUID", Hex(i * 17 + 3, 8) + "-" + Hex(i, 4) + "-" + Hex(i + 1, 4) + "-" +
                                   Hex(i + 2, 4) + "-" + Hex(i + 3, 12)},
                {"bootID", Hex(i * 13 + 5, 8) + "-" + Hex(i + 9, 4) + "-" + Hex(i + 8, 4) + "-" +
                               Hex(i + 7, 4) + "-" + Hex(i + 6, 12)},
                {"kernelVersion", "6.6.56+"},
                {"osImage", "Container-Optimized OS from Google"},
                {"containerRuntimeVersion", "containerd://1.7.24"},
                {"kubeletVersion", "v1.36.3-gke.1"},
                {"kubeProxyVersion", "v1.36.3-gke.1"},
                {"operatingSystem", "linux"},
                {"architecture", "amd64"}}},
           {"images", images}}}};
}

// Child: creates nodes [0, n) on 8 threads; status is written through the status subresource when
// the create dropped it.
int CreateNodes(const std::string& kubeconfig, int n) {
  auto config = LoadKubeconfig(kubeconfig);
  if (!config.ok()) return std::fprintf(stderr, "%s\n", config.error().ToString().c_str()), 1;
  auto client = Client::Create(*config);
  if (!client.ok()) return std::fprintf(stderr, "%s\n", client.error().ToString().c_str()), 1;
  std::atomic<int> next{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < n; i = next++) {
        Object node = MakeNode(i);
        Result<Object> r = Error::Make(Error::Code::kUnknown, "");
        for (int attempt = 0; attempt < 20; ++attempt) {
          r = (*client)->Create(resources::Nodes(), "", node);
          if (r.ok() || !r.error().Retryable()) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        if (!r.ok()) {
          if (failed++ < 5) std::fprintf(stderr, "create: %s\n", r.error().ToString().c_str());
          continue;
        }
        const auto* status = r->if_contains("status");
        if (status == nullptr || !status->is_object() ||
            status->get_object().if_contains("images") == nullptr) {
          Object with_status = *r;
          with_status["status"] = node["status"];
          auto s = (*client)->Update(resources::Nodes(), "", with_status, "status");
          if (!s.ok() && failed++ < 5) {
            std::fprintf(stderr, "status: %s\n", s.error().ToString().c_str());
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return failed.load() == 0 ? 0 : 1;
}

struct Figures {
  double seconds = 0;
  int64_t rss_before_kib = 0, rss_after_kib = 0, rss_trimmed_kib = 0;
  size_t cached = 0;
};

Figures Ingest(std::shared_ptr<Client> client, InformerOptions opts) {
  Figures f;
  malloc_trim(0);
  f.rss_before_kib = StatusKiB("VmRSS:");
  auto start = Steady::now();
  {
    SharedInformer informer(client, resources::Nodes(), opts);
    (void)informer.AddIndex("providerID", FieldIndexFunc("spec.providerID"));
    informer.Start();
    if (!informer.WaitForCacheSync(std::chrono::minutes(10))) {
      std::fprintf(stderr, "informer did not sync\n");
      std::exit(1);
    }
    f.seconds = std::chrono::duration<double>(Steady::now() - start).count();
    f.cached = informer.store().Size();
    f.rss_after_kib = StatusKiB("VmRSS:");
    malloc_trim(0);
    f.rss_trimmed_kib = StatusKiB("VmRSS:");
    informer.Stop();
  }
  return f;
}

void Print(const char* what, const Figures& f, int n) {
  std::printf(
      "%-44s %6zu nodes in %6.2f s = %8.0f objects/s; RSS before %7.1f MiB, after sync %7.1f MiB "
      "(%7.1f MiB after malloc_trim) => %6.0f bytes of RSS per cached Node\n",
      what, f.cached, f.seconds, f.cached / f.seconds, f.rss_before_kib / 1024.0,
      f.rss_after_kib / 1024.0, f.rss_trimmed_kib / 1024.0,
      (f.rss_trimmed_kib - f.rss_before_kib) * 1024.0 / n);
}

int Main(int argc, char** argv) {
  if (argc >= 4 && std::string(argv[1]) == "--create")
    return CreateNodes(argv[2], std::atoi(argv[3]));
  int n = argc >= 2 ? std::atoi(argv[1]) : 10000;
  log::SetLevel(log::Level::kWarn);

  auto cluster = localcluster::LocalCluster::Start({});
  if (!cluster.ok()) return std::fprintf(stderr, "%s\n", cluster.error().ToString().c_str()), 1;
  std::printf("cluster up: %s\n", (*cluster)->server_url().c_str());

  auto t0 = Steady::now();
  std::string self = "/proc/self/exe", count = std::to_string(n);
  std::string kubeconfig = (*cluster)->kubeconfig_path();
  char* child_argv[] = {self.data(), const_cast<char*>("--create"), kubeconfig.data(), count.data(),
                        nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, child_argv, environ) != 0) {
    std::perror("posix_spawn");
    return 1;
  }
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    std::fprintf(stderr, "node creation failed\n");
    return 1;
  }
  double create_s = std::chrono::duration<double>(Steady::now() - t0).count();
  std::printf("created %d Nodes in %.1f s (%.0f/s, 8 threads, child process)\n", n, create_s,
              n / create_s);

  auto client = Client::Create((*cluster)->AdminConfig());
  if (!client.ok()) return std::fprintf(stderr, "%s\n", client.error().ToString().c_str()), 1;
  ListOptions one;
  one.limit = 1;
  auto sample = (*client)->List(resources::Nodes(), "", one);  // warms TLS, pools, threads
  if (!sample.ok() || sample->items.empty()) {
    std::fprintf(stderr, "list failed\n");
    return 1;
  }
  Object trimmed = sample->items.front();
  DropManagedFields(trimmed);
  const size_t json_full = boost::json::serialize(sample->items.front()).size();
  const size_t json_trimmed = boost::json::serialize(trimmed).size();
  const size_t packed_full = PackedSize(sample->items.front());
  const size_t packed_trimmed = PackedSize(trimmed);
  std::printf(
      "one Node as served: %zu bytes of JSON (%zu without managedFields); packed in memory: "
      "%zu bytes (%zu without managedFields)\n",
      json_full, json_trimmed, packed_full, packed_trimmed);
  sample = ObjectList{};
  trimmed = Object{};

  InformerOptions defaults;
  Figures packed = Ingest(*client, defaults);
  Print("informer (defaults: packed, no managedFields)", packed, n);
  std::printf(
      "peak RSS of this process through the default run: ru_maxrss %.1f MiB, VmHWM %.1f MiB\n",
      MaxRssKiB() / 1024.0, StatusKiB("VmHWM:") / 1024.0);
  // For comparison only; VmHWM is reset before each run (/proc/self/clear_refs).
  // A cache transform as a controller that never reads images would set (controller-runtime's
  // cache.TransformFunc practice): status.images is ~40% of a kubelet Node.
  InformerOptions no_images;
  no_images.transform = [](Object& node) {
    if (auto* status = node.if_contains("status"); status != nullptr && status->is_object()) {
      status->get_object().erase("images");
    }
  };
  ResetPeak();
  Figures slim = Ingest(*client, no_images);
  Print("informer (defaults + transform drops images)", slim, n);
  std::printf("  VmHWM during this run %.1f MiB\n", StatusKiB("VmHWM:") / 1024.0);
  InformerOptions unpacked;
  unpacked.pack_objects = false;
  ResetPeak();
  Figures plain = Ingest(*client, unpacked);
  Print("informer (plain Boost.JSON, no managedFields)", plain, n);
  std::printf("  VmHWM during this run %.1f MiB\n", StatusKiB("VmHWM:") / 1024.0);
  InformerOptions full;
  full.pack_objects = false;
  full.drop_managed_fields = false;
  ResetPeak();
  Figures everything = Ingest(*client, full);
  Print("informer (plain Boost.JSON, managedFields kept)", everything, n);
  std::printf("  VmHWM during this run %.1f MiB\n", StatusKiB("VmHWM:") / 1024.0);
  return 0;
}

}  // namespace
}  // namespace hyperslice::kube

int main(int argc, char** argv) { return hyperslice::kube::Main(argc, argv); }
