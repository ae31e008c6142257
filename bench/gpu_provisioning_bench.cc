// The GPU provisioning path at scale (issue 17, "Ephemeral GPUs 2/4", Benchmarks): `hyperslice
// operator --gpu` as a child process (as deployed) against the real control plane with
// kube-scheduler (test/testenv), the Lambda and Paperspace simulators in this process over their
// real wire APIs, and stand-in machines registering a Node (providerID, Ready, nvidia.com/gpu) for
// every instance that turns running (test/e2e/gpu_chaos/harness.h, StandInNodes).
//
// Figures (printed with how they were measured):
//   pending pod -> create   per pod, from (a) the moment before this process sends the pod's
//                          create and (b) the moment this process's pod informer first sees the
//                          scheduler's PodScheduled=False/Unschedulable, to the simulator's
//                          Instance.created (its clock is this process's steady clock) of the
//                          instance made for the claim the pod was nominated to (the operator's
//                          `Nominated` Event names it); p50/p99 over --rounds rounds of 1 pod and
//                          one round of --burst pods (default 100), default batch window 200 ms /
//                          2 s. Each round ends with its pods and claims deleted and the machines
//                          returned.
//   N claims               N pods (nvidia.com/gpu: 1, half pinned to Lambda, half to Paperspace
//                          by tgp.io/provider) -> N claims launched, registered, Ready, pods bound;
//                          then pods and claims deleted until every machine is terminated.
//   operator peak RSS      VmHWM of /proc/<pid>/status (RssAnon/RssFile at all Ready)
//   operator CPU           utime+stime of /proc/<pid>/stat over the whole lifecycle, per claim
//   provider calls         the simulators' per-method counters, launch -> Ready and delete ->
//                          gone, per claim (offer refreshes, credential checks and the garbage
//                          collector's lists run on timers and are included)
//
// Run: build/bench/gpu_provisioning_bench [--claims N=200] [--rounds R=20] [--burst B=100]
//                                          [--phase latency|scale|both] [--workers 4]
//                                          [--operator <another hyperslice binary>]
// The control plane binaries come from HYPERSLICE_CONTROLPLANE_BIN (as for the e2e tests).
// Figures measured and what bounds them: src/gpu/README.md, "Benchmarks".
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#if defined(HS_HYPERSLICE_BIN) && defined(HS_DEPLOY_DIR)

#include "bench/figures.h"
#include "sim/lambda/simulator.h"
#include "sim/paperspace/simulator.h"
#include "src/base/log.h"
#include "src/kube/informer.h"
#include "test/e2e/gpu_chaos/harness.h"
#include "test/testenv/child_process.h"
#include "test/testenv/crds.h"
#include "test/testenv/testenv.h"
#include "test/testenv/tgp.h"

namespace hyperslice::gpu::bench {
namespace {

namespace bj = boost::json;
namespace market = sim::market;
using namespace std::chrono_literals;
using chaos::StandInNodes;
using testenv::Eventually;
using SteadyTime = std::chrono::steady_clock::time_point;

constexpr char kNs[] = "gpu-bench";
constexpr char kClass[] = "bench-class";

using hyperslice::bench::ApiserverRequests;  // every client: this process creates pods, plays
                                             // kubelet and lists; kube-scheduler binds; the rest is
                                             // the operator's
using hyperslice::bench::Counts;
using hyperslice::bench::Delta;
using hyperslice::bench::Mib;
using hyperslice::bench::ProcStats;
using hyperslice::bench::ReadProc;
using hyperslice::bench::Seconds;
using hyperslice::bench::Sum;

void PrintCalls(const char* title, const Counts& d, int n) {
  hyperslice::bench::PrintCalls(title, d, n, "claim", 60);
}

// Nearest-rank percentile of `v` (sorted here), in ms.
double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

using testenv::Str;

bool Live(const market::Instance& i) {
  return i.state != market::State::kTerminated && i.state != market::State::kStopping;
}

class Bench {
 public:
  Bench(std::string workers, std::string binary)
      : workers_(std::move(workers)), binary_(std::move(binary)) {}

  ~Bench() {
    if (op_) (void)op_->Stop(SIGTERM);
    if (pods_) pods_->Stop();
    if (claims_) claims_->Stop();
    if (nodes_) nodes_->Stop();
    if (lambda_) lambda_->Stop();
    if (paperspace_) paperspace_->Stop();
  }

  Status SetUp() {
    localcluster::Options o;
    o.scheduler = true;  // its PodScheduled=False/Unschedulable starts provisioning
    testenv::ConfigureCluster(o);
    client_ = testenv::AdminClient();
    if (!client_) return Error::Make(Error::Code::kInternal, "no control plane");
    HS_RETURN_IF_ERROR(chaos::InstallOperatorCrds());

    // Room for every launch; short lifecycles (the operator, not the market, is measured).
    market::ServerOptions lo;
    lo.market.listings = {sim::lambda::Rtx4090Listing("us-west-1", 690000, 100000)};
    lo.market.seed = 11;
    lo.market.boot_delay = lo.market.running_delay = lo.market.terminate_delay = 50ms;
    HS_ASSIGN_OR_RETURN(lambda_, sim::lambda::Start(lo));
    market::ServerOptions po;
    po.market.listings = sim::paperspace::DefaultListings();
    for (auto& l : po.market.listings) l.capacity = 100000;
    po.market.seed = 13;
    po.market.boot_delay = po.market.running_delay = po.market.terminate_delay = 50ms;
    HS_ASSIGN_OR_RETURN(paperspace_, sim::paperspace::Start(po));
    nodes_ = std::make_unique<StandInNodes>(client_);
    nodes_->Watch(kLambda, lambda_->market());
    nodes_->Watch(kPaperspace, paperspace_->market());

    HS_RETURN_IF_ERROR(
        testenv::PutSecret(*client_, "tgp-system", "bench-keys", {{"key", "sim-key"}}));
    (void)client_->Create(
        kube::resources::Namespaces(), "",
        bj::object{{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", kNs}}}});
    auto created = client_->Create(GPUNodeClasses(), "", chaos::SimClass(kClass, "bench-keys"));
    if (!created.ok()) return created.error();
    created = client_->Create(GPUNodePools(), kNs, chaos::SimPool(kNs, "bench-pool", kClass));
    if (!created.ok()) return created.error();

    // This process's view of the pods: when the scheduler first marks each one Unschedulable.
    kube::InformerOptions io;
    io.ns = kNs;
    pods_ = std::make_unique<kube::SharedInformer>(client_, kube::resources::Pods(), io);
    auto seen = [this](const kube::ObjectPtr& pod) {
      if (!pod || !Unschedulable(*pod)) return;
      auto now = std::chrono::steady_clock::now();
      std::lock_guard lock(mu_);
      unschedulable_at_.emplace(std::string(kube::MetaString(*pod, "name")), now);
    };
    pods_->AddEventHandler(
        {.on_add = seen,
         .on_update = [seen](const kube::ObjectPtr&, const kube::ObjectPtr& cur) { seen(cur); },
         .on_delete = nullptr});
    pods_->Start();
    // And when each claim first appears (the provisioner's create, seen through a watch).
    claims_ = std::make_unique<kube::SharedInformer>(client_, GPUNodeClaims());
    claims_->AddEventHandler({.on_add =
                                  [this](const kube::ObjectPtr& claim) {
                                    if (!claim) return;
                                    auto now = std::chrono::steady_clock::now();
                                    std::lock_guard lock(mu_);
                                    claim_seen_at_.emplace(
                                        std::string(kube::MetaString(*claim, "name")), now);
                                  },
                              .on_update = nullptr,
                              .on_delete = nullptr});
    claims_->Start();

    dir_ = std::filesystem::temp_directory_path() / ("hs-gpu-bench-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    op_ = std::make_unique<testenv::ChildProcess>(
        chaos::GpuOperatorArgs(
            binary_, dir_, lambda_->api_endpoint(), paperspace_->api_endpoint(),
            {"--health-probe-port=-1", "--cluster-id=gpu-bench", "--workers=" + workers_,
             // Lambda's documented client limits (1 request/s, 1 launch per 12 s) would make
             // this a benchmark of Lambda's rate limit; the simulators' own limits are off.
             "--gpu-provider-qps=lambdalabs=200", "--gpu-provider-qps=paperspace=200"}),
        // Defaults otherwise: offers every 60 s, batch 200 ms / 2 s, gc every 1 m.
        (dir_ / "operator.log").string());
    Status started = chaos::StartGpuOperator(*op_, *client_, kClass, 120s);
    if (!started.ok()) {
      return Error::Make(Error::Code::kInternal,
                         "operator not ready: " + started.error().ToString());
    }
    return OkStatus();
  }

  // ---- pending pod -> create request ----
  int Latency(int rounds, int burst) {
    Latencies one, many;
    for (int r = 0; r < rounds; ++r) {
      if (!LatencyRound(1, "one-" + std::to_string(r) + "-", &one)) return 1;
    }
    if (burst > 0 && !LatencyRound(burst, "burst-", &many)) return 1;
    auto line = [](const std::string& what, const std::vector<double>& v) {
      std::printf("  %-56s n=%-4zu p50 %6.0f ms  p99 %6.0f ms  min %6.0f  max %6.0f\n",
                  what.c_str(), v.size(), Percentile(v, 50), Percentile(v, 99), Percentile(v, 0),
                  Percentile(v, 100));
    };
    std::printf("pending pod -> provider create request (default batch 200 ms idle / 2 s max):\n");
    for (auto [label, l] : {std::pair<std::string, Latencies*>{"1 pending pod", &one},
                            {std::to_string(burst) + " pending pods", &many}}) {
      if (l->from_created.empty()) continue;
      line(label + ", from pod create", l->from_created);
      line(label + ", from Unschedulable", l->from_unsched);
      line(label + ":   Unschedulable -> claim created (batch, plan)", l->to_claim);
      line(label + ":   claim created -> provider create (launch)", l->launch);
    }
    return 0;
  }

  // ---- N claims ----
  int Scale(int n) {
    ProcStats idle = ReadProc(op_->pid());
    ProcStats peak = idle;
    auto sample = [&] {
      ProcStats s = ReadProc(op_->pid());
      if (s.hwm_kib > 0) peak = s;
    };
    Counts l0 = lambda_->market().Counters(), p0 = paperspace_->market().Counters();
    Counts a0 = ApiserverRequests(*client_);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) {
      names.push_back("scale-" + std::to_string(i));
      if (!CreatePod(names.back(), i % 2 == 0 ? kLambda : kPaperspace)) return 1;
    }
    double create_s = Seconds(t0);
    int ready = 0, bound = 0;
    auto last_progress = t0;
    bool all = Eventually(
        [&] {
          sample();
          auto claims = client_->List(GPUNodeClaims(), "");
          auto pods = client_->List(kube::resources::Pods(), kNs);
          if (!claims.ok() || !pods.ok()) return false;
          ready = 0;
          for (const auto& c : claims->items) ready += kube::IsConditionTrue(c, "Ready");
          bound = 0;
          for (const auto& p : pods->items) bound += !Str(p, "spec", "nodeName").empty();
          if (Seconds(last_progress) > 10) {
            std::fprintf(stderr, "  %.0f s: %zu claims, %d Ready, %d of %d pods bound\n",
                         Seconds(t0), claims->items.size(), ready, bound, n);
            last_progress = std::chrono::steady_clock::now();
          }
          return ready >= n && bound >= n;
        },
        std::chrono::minutes(30), 500ms);
    double ready_s = Seconds(t0);
    ProcStats at_ready = ReadProc(op_->pid());
    Counts l1 = lambda_->market().Counters(), p1 = paperspace_->market().Counters();
    Counts a1 = ApiserverRequests(*client_);
    if (!all) {
      std::fprintf(stderr, "only %d claims Ready, %d of %d pods bound after 30 min\n%s\n", ready,
                   bound, n, op_->Tail().c_str());
      return 1;
    }
    int claims_n = static_cast<int>(client_->List(GPUNodeClaims(), "")->items.size());
    std::printf(
        "%d pods (nvidia.com/gpu: 1; half on lambdalabs, half on paperspace) -> %d claims "
        "-> %d Ready, pods bound; operator --workers %s\n",
        n, claims_n, ready, workers_.c_str());
    std::printf("created the pods in %.1f s; all claims Ready and pods bound after %.1f s\n",
                create_s, ready_s);
    std::printf(
        "operator RSS at all Ready: %.1f MiB = %.1f MiB anonymous (heap: caches, queues, "
        "buffers) + %.1f MiB file-backed (the binary and its shared libraries)\n",
        Mib(at_ready.rss_kib), Mib(at_ready.anon_kib), Mib(at_ready.file_kib));
    Counts up;
    for (const auto& [k, v] : Delta(l0, l1)) up["lambdalabs " + k] = v;
    for (const auto& [k, v] : Delta(p0, p1)) up["paperspace " + k] = v;
    PrintCalls("provider calls, pods created -> all Ready", up, claims_n);
    PrintCalls("kube-apiserver requests (all clients), pods created -> all Ready", Delta(a0, a1),
               claims_n);

    // Teardown: pods first (nothing to plan for), then the claims (their finalizer returns the
    // machines and deletes the Nodes).
    auto t2 = std::chrono::steady_clock::now();
    DeletePods();
    auto claims = client_->List(GPUNodeClaims(), "");
    if (claims.ok()) {
      for (const auto& c : claims->items) {
        (void)client_->Delete(GPUNodeClaims(), "", Str(c, "metadata", "name"));
      }
    }
    bool gone = Eventually(
        [&] {
          sample();
          auto l = client_->List(GPUNodeClaims(), "");
          return l.ok() && l->items.empty() && LiveInstances() == 0;
        },
        std::chrono::minutes(30), 500ms);
    double gone_s = Seconds(t2);
    sample();
    ProcStats end = ReadProc(op_->pid());
    Counts l2 = lambda_->market().Counters(), p2 = paperspace_->market().Counters();
    std::printf("all claims deleted and machines terminated after %.1f s%s\n", gone_s,
                gone ? "" : " (TIMED OUT)");
    Counts down;
    for (const auto& [k, v] : Delta(l1, l2)) down["lambdalabs " + k] = v;
    for (const auto& [k, v] : Delta(p1, p2)) down["paperspace " + k] = v;
    PrintCalls("provider calls, delete -> all gone", down, claims_n);
    PrintCalls("kube-apiserver requests (all clients), all Ready -> all gone",
               Delta(a1, ApiserverRequests(*client_)), claims_n);
    std::printf("provider calls per claim lifecycle: %.2f\n",
                static_cast<double>(Sum(up) + Sum(down)) / claims_n);
    std::printf(
        "operator process: peak RSS (VmHWM) %.1f MiB (idle before the first pod %.1f MiB); "
        "CPU (utime+stime) %.2f s to all Ready, %.2f s for the whole lifecycle = %.2f ms "
        "per claim lifecycle\n",
        Mib(peak.hwm_kib), Mib(idle.hwm_kib), at_ready.cpu_s - idle.cpu_s, end.cpu_s - idle.cpu_s,
        1000.0 * (end.cpu_s - idle.cpu_s) / claims_n);
    struct rusage self {};
    getrusage(RUSAGE_SELF, &self);
    std::printf(
        "this process (simulators, stand-in kubelets, lists): CPU %.2f s, peak RSS %.1f "
        "MiB\n",
        static_cast<double>(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
            static_cast<double>(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6,
        static_cast<double>(self.ru_maxrss) / 1024.0);
    return gone ? 0 : 1;
  }

  void PrintLoad() {
    double load[3] = {0, 0, 0};
    if (getloadavg(load, 3) == 3) {
      std::printf("machine load average (1/5/15 min): %.2f %.2f %.2f on %ld cores\n", load[0],
                  load[1], load[2], sysconf(_SC_NPROCESSORS_ONLN));
    }
  }

 private:
  static bool Unschedulable(const kube::Object& pod) {
    const bj::object* status = jsonfield::ObjectField(pod, "status");
    const bj::array* conds = status ? jsonfield::ArrayField(*status, "conditions") : nullptr;
    if (conds == nullptr) return false;
    for (const bj::value& c : *conds) {
      const bj::object* co = c.if_object();
      if (co && jsonfield::StringField(*co, "type") == "PodScheduled" &&
          jsonfield::StringField(*co, "reason") == "Unschedulable") {
        return true;
      }
    }
    return false;
  }

  bool CreatePod(const std::string& name, const std::string& provider) {
    bj::object pod{
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", bj::object{{"name", name}, {"namespace", kNs}}},
        {"spec",
         bj::object{
             {"nodeSelector", bj::object{{kLabelProvider, provider}}},
             {"terminationGracePeriodSeconds", 0},
             {"containers",
              bj::array{bj::object{
                  {"name", "cuda"},
                  {"image", "nvidia/cuda:12.4.0-base-ubuntu22.04"},
                  {"resources", bj::object{{"limits", bj::object{{kResourceGpu, "1"}}}}}}}}}}};
    {
      std::lock_guard lock(mu_);
      created_at_[name] = std::chrono::steady_clock::now();
    }
    auto created = client_->Create(kube::resources::Pods(), kNs, pod);
    if (!created.ok()) {
      std::fprintf(stderr, "create pod %s: %s\n", name.c_str(), created.error().ToString().c_str());
    }
    return created.ok();
  }

  void DeletePods() {
    auto pods = client_->List(kube::resources::Pods(), kNs);
    if (!pods.ok()) return;
    kube::DeleteOptions d;
    d.grace_period_seconds = 0;
    for (const auto& p : pods->items) {
      (void)client_->Delete(kube::resources::Pods(), kNs, Str(p, "metadata", "name"), d);
    }
  }

  // What a failed wait leaves to read: pods, claims, Nodes, Events.
  std::string Diagnose() {
    std::string out;
    auto pods = client_->List(kube::resources::Pods(), kNs);
    if (pods.ok()) {
      for (const auto& p : pods->items) {
        out += "pod " + Str(p, "metadata", "name") + " node=" + Str(p, "spec", "nodeName") +
               " status=" + (p.contains("status") ? bj::serialize(p.at("status")) : "") + "\n";
      }
    }
    auto claims = client_->List(GPUNodeClaims(), "");
    if (claims.ok()) {
      for (auto c : claims->items) {
        c["metadata"].as_object().erase("managedFields");
        out += "claim " + bj::serialize(c) + "\n";
      }
    }
    auto nodes = client_->List(kube::resources::Nodes(), "");
    if (nodes.ok()) {
      for (auto n : nodes->items) {
        n["metadata"].as_object().erase("managedFields");
        out += "node " + Str(n, "metadata", "name") + " " + bj::serialize(n["spec"]) + "\n";
      }
    }
    auto events = client_->ListAll(kube::resources::Events(), kNs, {});
    if (events.ok()) {
      for (const auto& e : events->items) {
        out += "event " + Str(e, "involvedObject", "name") + " " + Str(e, "", "reason") + ": " +
               Str(e, "", "message") + "\n";
      }
    }
    return out;
  }

  int LiveInstances() {
    int n = 0;
    for (auto* sim : {lambda_.get(), paperspace_.get()}) {
      for (const auto& i : sim->market().List("")) n += Live(i);
    }
    return n;
  }

  // Pod name -> the claim it was nominated to, from the operator's Nominated Events.
  std::map<std::string, std::string> Nominations() {
    std::map<std::string, std::string> out;
    auto l = client_->ListAll(kube::resources::Events(), kNs, {});
    if (!l.ok()) return out;
    const std::string marker = "GPUNodeClaim ";
    for (const auto& e : l->items) {
      if (Str(e, "", "reason") != "Nominated") continue;
      std::string msg = Str(e, "", "message");
      size_t p = msg.find(marker);
      if (p == std::string::npos) continue;
      p += marker.size();
      out[Str(e, "involvedObject", "name")] = msg.substr(p, msg.find(' ', p) - p);
    }
    return out;
  }

  // Claim name -> when the first create for it reached a simulator.
  std::map<std::string, SteadyTime> CreatesByClaim() {
    std::map<std::string, SteadyTime> out;
    for (auto* sim : {lambda_.get(), paperspace_.get()}) {
      for (const auto& i : sim->market().List("")) {
        auto [it, inserted] = out.emplace(i.name, i.created);
        if (!inserted) it->second = std::min(it->second, i.created);
      }
    }
    return out;
  }

  // Milliseconds per pod: pod create -> provider create, Unschedulable -> provider create, and
  // the two parts of the latter: Unschedulable -> claim seen, claim seen -> provider create.
  struct Latencies {
    std::vector<double> from_created, from_unsched, to_claim, launch;
  };

  bool LatencyRound(int pods, const std::string& prefix, Latencies* out) {
    std::vector<std::string> names;
    for (int i = 0; i < pods; ++i) {
      names.push_back(prefix + std::to_string(i));
      if (!CreatePod(names.back(), kLambda)) return false;
    }
    std::map<std::string, std::string> nominated;
    std::map<std::string, SteadyTime> creates;
    bool all = Eventually(
        [&] {
          nominated = Nominations();
          creates = CreatesByClaim();
          for (const auto& n : names) {
            auto c = nominated.find(n);
            if (c == nominated.end() || !creates.count(c->second)) return false;
          }
          return true;
        },
        120s, 200ms);
    if (!all) {
      std::fprintf(stderr, "round %s: not every pod got a create within 120 s\n%s\n%s\n",
                   prefix.c_str(), Diagnose().c_str(), op_->Tail().c_str());
      return false;
    }
    {
      std::lock_guard lock(mu_);
      auto ms = [](SteadyTime from, SteadyTime to) {
        return std::chrono::duration<double, std::milli>(to - from).count();
      };
      for (const auto& n : names) {
        SteadyTime created = creates[nominated[n]];
        out->from_created.push_back(ms(created_at_[n], created));
        auto u = unschedulable_at_.find(n);
        if (u != unschedulable_at_.end()) out->from_unsched.push_back(ms(u->second, created));
        auto c = claim_seen_at_.find(nominated[n]);
        if (c != claim_seen_at_.end()) {
          out->launch.push_back(ms(c->second, created));
          if (u != unschedulable_at_.end()) out->to_claim.push_back(ms(u->second, c->second));
        }
      }
    }
    // The round's pods, claims and machines go before the next round starts.
    DeletePods();
    std::set<std::string> claims;
    for (const auto& n : names) claims.insert(nominated[n]);
    for (const auto& c : claims) (void)client_->Delete(GPUNodeClaims(), "", c);
    bool gone = Eventually(
        [&] {
          auto l = client_->List(GPUNodeClaims(), "");
          auto p = client_->List(kube::resources::Pods(), kNs);
          return l.ok() && l->items.empty() && p.ok() && p->items.empty() && LiveInstances() == 0;
        },
        120s, 100ms);
    if (!gone) std::fprintf(stderr, "round %s: claims not gone within 120 s\n", prefix.c_str());
    // A stand-in registers its Node on its own thread and may do so after a claim deleted this
    // early was terminated (a real machine would be gone): no Node outlives its round.
    auto nodes = client_->List(kube::resources::Nodes(), "");
    if (nodes.ok()) {
      for (const auto& n : nodes->items) {
        (void)client_->Delete(kube::resources::Nodes(), "", Str(n, "metadata", "name"));
      }
    }
    return gone;
  }

  std::string workers_, binary_;
  std::shared_ptr<kube::Client> client_;
  std::unique_ptr<market::MarketSimulator> lambda_, paperspace_;
  std::unique_ptr<StandInNodes> nodes_;
  std::unique_ptr<kube::SharedInformer> pods_, claims_;
  std::filesystem::path dir_;
  std::unique_ptr<testenv::ChildProcess> op_;
  std::mutex mu_;
  std::map<std::string, SteadyTime> created_at_, unschedulable_at_, claim_seen_at_;
};

}  // namespace
}  // namespace hyperslice::gpu::bench

int main(int argc, char** argv) {
  int claims = 200, rounds = 20, burst = 100;
  std::string phase = "both", workers = "4", binary = HS_HYPERSLICE_BIN;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--claims") {
      claims = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--rounds") {
      rounds = std::max(0, std::atoi(next().c_str()));
    } else if (a == "--burst") {
      burst = std::max(0, std::atoi(next().c_str()));
    } else if (a == "--phase") {
      phase = next();
    } else if (a == "--workers") {
      workers = next();
    } else if (a == "--operator") {
      binary = next();  // another build of hyperslice, for before/after comparisons
    } else {
      std::fprintf(stderr,
                   "usage: %s [--claims N=200] [--rounds R=20] [--burst B=100] "
                   "[--phase latency|scale|both] [--workers 4] [--operator path]\n",
                   argv[0]);
      return 2;
    }
  }
  hyperslice::log::SetLevel(hyperslice::log::Level::kWarn);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // figures survive an interrupted run
  hyperslice::gpu::bench::Bench b(workers, binary);
  if (auto st = b.SetUp(); !st.ok()) {
    std::fprintf(stderr, "set-up: %s\n", st.error().ToString().c_str());
    return 1;
  }
  b.PrintLoad();
  int rc = 0;
  if (phase == "latency" || phase == "both") rc |= b.Latency(rounds, burst);
  if (rc == 0 && (phase == "scale" || phase == "both")) rc |= b.Scale(claims);
  b.PrintLoad();
  return rc;
}
#else
int main() {
  std::puts("gpu_provisioning_bench needs the hyperslice binary target (HS_HYPERSLICE_BIN)");
  return 0;
}
#endif
