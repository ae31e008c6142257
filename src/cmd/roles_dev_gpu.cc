// `hyperslice dev --example gpu`: the ephemeral-GPU story of seeds 002/003 on one machine
// (issue "Ephemeral GPUs 4/4", item 3). It runs
//   1. the local control plane (etcd, kube-apiserver, kube-controller-manager — CSR signing, the
//      Job controller —, kube-scheduler) with what `kubeadm init` leaves for nodes to join;
//   2. the four marketplace simulators (RunPod, Lambda, Paperspace, Vast.ai) on their real wire
//      APIs, selling their default markets — Lambda's plus RTX 4090s, which seed 002's pool asks
//      for and Lambda does not sell today;
//   3. simulated rented machines (sim/gpumachine): each instance that reaches Running boots from
//      the payload its provider received — the operator's cloud-init join script with a
//      per-machine bootstrap token — TLS-bootstraps, registers its Node and runs the pods bound to
//      it;
//   4. the GPU operator in-process (gpu::RegisterOperator: class, provisioner, claim lifecycle,
//      disruption, cost), talking to the simulators through the real provider clients;
// then applies seed 002's GPUNodeClass and GPUNodePool unchanged (deploy/examples) with the
// credentials Secret they name, submits a GPU Job (deploy/examples/gpu-job.yaml: its container
// runs `sleep 20`, which the simulated machines finish after 20 s), and prints each step with
// its time: the pod pending, the claim and the offer chosen, the machine launched, booting and
// joining, the pod running, the Job complete, the machine returned after the pool's
// consolidateAfter, and the money spent — the operator's figure (the pool's status.spend) next
// to the simulators' own ledgers.
//
// The tailnet, when the mesh is built (scripts/build-mesh.sh: HYPERSLICE_MESH_BIN) and dev runs
// as root: a real headscale on loopback (src/localmesh), seed 002's class with two additions
// (tailscaleConfig loginServer = that headscale, apiKeySecretRef = a Secret with its API key),
// per-machine single-use keys from the operator, and each machine joining with a real userspace
// tailscaled in a network namespace of its own (sim/gpumachine/mesh_machines.h); the claim
// records its tailnet IP and the machine's headscale node is deleted when it is returned.
// Otherwise the machines reach the apiserver over loopback and the story says why.
//
// This file includes sim/: the `sim` and `dev` roles of the composition root are the one place in
// src/ that knows the simulators (docs/architecture.md, "Rules that keep this order true").
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "src/base/files.h"
#include "src/base/json.h"
#include "src/base/log.h"
#include "src/cmd/dev_support.h"
#include "src/cmd/roles_dev_gpu.h"
#include "src/gpu/api.h"
#include "src/gpu/claim_controller.h"
#include "src/gpu/operator.h"
#include "src/gpu/provider.h"
#include "src/gpu/providers.h"
#include "src/kube/client.h"
#include "src/kube/manager.h"
#include "src/kube/object_helpers.h"
#include "src/kube/store.h"
#include "src/localcluster/localcluster.h"
#ifdef HS_HAVE_SIM_GPUMACHINE
#include "sim/gpumachine/gpumachine.h"
#include "sim/gpumachine/mesh_machines.h"
#include "sim/lambda/simulator.h"
#include "sim/paperspace/simulator.h"
#include "sim/runpod/simulator.h"
#include "sim/vast/simulator.h"
#include "src/localmesh/localmesh.h"
#endif

namespace hyperslice::cmd {

#ifndef HS_HAVE_SIM_GPUMACHINE
int RunDevGpu(const DevGpuOptions&) {
  std::fprintf(stderr,
               "hyperslice dev --example gpu: this build has no simulated GPU machines "
               "(sim/gpumachine)\n");
  return 2;
}
#else
namespace {

namespace json = boost::json;
namespace market = sim::market;
using dev::Say;
using jsonfield::ArrayField;
using jsonfield::IntField;
using jsonfield::ObjectAt;
using jsonfield::ObjectField;
using jsonfield::StringField;
using kube::MetaString;
using Steady = std::chrono::steady_clock;

constexpr char kCredentialsNamespace[] = "tgp-system";
constexpr char kCredentialsSecret[] = "tgp-operator-secret";  // seed 002's credentialsRef
constexpr char kSimKey[] = "sim-key";                         // every simulator's default account
constexpr char kSimSshKey[] = "sim-ssh-key";                  // Lambda's simulated account has it

struct Marketplace {
  const char* provider;  // GPUNodeClass providers[].name
  std::unique_ptr<market::MarketSimulator> sim;
  std::unique_ptr<sim::gpumachine::Fleet> fleet;
};

// Everything the demo runs, stopped in reverse order of start by the destructor.
struct GpuDevStack {
  std::unique_ptr<localcluster::LocalCluster> cluster;
  // The tailnet (optional): headscale, the machines' LAN and their tailscaleds.
  std::unique_ptr<localmesh::Headscale> headscale;
  std::unique_ptr<localmesh::MeshLan> lan;
  std::unique_ptr<sim::gpumachine::MeshMachines> tailnet;
  std::vector<Marketplace> markets;
  std::unique_ptr<kube::Manager> manager;
  std::thread manager_thread;

  ~GpuDevStack() {
    if (manager) manager->Stop();
    if (manager_thread.joinable()) manager_thread.join();
    manager.reset();
    for (auto& m : markets) {
      if (m.fleet) m.fleet->Stop();
      if (m.sim) m.sim->Stop();
    }
    markets.clear();
    tailnet.reset();  // tailscaleds and their namespaces
    lan.reset();
    headscale.reset();
    cluster.reset();
  }
};

// The pool's persisted spend (machines returned) in USD.
double PoolSpend(const json::object& pool) {
  double usd = 0;
  const json::array* spend = ArrayField(ObjectField(pool, "status"), "spend");
  for (const auto& e : spend ? *spend : json::array{}) {
    if (!e.is_object()) continue;
    if (auto v = gpu::ParseUsd(StringField(e.as_object(), "usd")); v.ok()) {
      usd += static_cast<double>(*v) / 1e6;
    }
  }
  return usd;
}

// Prints each fact once, with the time since the Job was submitted.
class Story {
 public:
  explicit Story(Steady::time_point t0) : t0_(t0) {}
  // The line is the parts (strings and string views) one after the other.
  template <class... Parts>
  void Tell(const std::string& key, const Parts&... parts) {
    if (!told_.insert(key).second) return;
    std::string line;
    (line.append(std::string_view(parts)), ...);
    Say("  [%6.1fs] %s\n", std::chrono::duration<double>(Steady::now() - t0_).count(),
        line.c_str());
  }
  bool Told(const std::string& key) const { return told_.count(key) != 0; }

 private:
  Steady::time_point t0_;
  std::set<std::string> told_;
};

}  // namespace

int RunDevGpu(const DevGpuOptions& f) {
  // Components log to <work-dir>/hyperslice.log from the start (before the stack, which logs as
  // it stops).
  std::optional<dev::LogFile> log_file;
  if (!f.log_to_stderr) log_file.emplace(f.work_dir);
  GpuDevStack stack;

  stack.cluster = dev::StartControlPlane(f.work_dir, f.bin_dir);
  if (!stack.cluster) return 1;
  const auto& c = *stack.cluster;
  Say("hyperslice dev: control plane ready at %s\n  export KUBECONFIG=%s\n", c.server_url().c_str(),
      c.kubeconfig_path().c_str());

  // The tailnet, when it can run here.
  std::string no_tailnet = localmesh::MeshUnavailableReason();
  if (no_tailnet.empty()) {
    auto hs = localmesh::Headscale::Start(localmesh::MeshBinDir(), c.work_dir() + "/headscale");
    auto lan = hs.ok() ? localmesh::MeshLan::Create()
                       : Result<std::unique_ptr<localmesh::MeshLan> >(hs.error());
    if (!lan.ok()) {
      no_tailnet = "the mesh did not start: " + lan.error().ToString();
    } else {
      stack.headscale = std::move(hs).value();
      stack.lan = std::move(lan).value();
      std::error_code ec;  // the machines' tailscaled state goes below it
      std::filesystem::create_directories(c.work_dir() + "/tailnet", ec);
      stack.tailnet = std::make_unique<sim::gpumachine::MeshMachines>(
          localmesh::MeshBinDir(), *stack.headscale, *stack.lan, c.work_dir() + "/tailnet");
      Say("hyperslice dev: headscale at %s; each machine joins with a real tailscaled in a "
          "network namespace of its own\n",
          stack.headscale->url().c_str());
    }
  }
  if (!no_tailnet.empty()) {
    Say("hyperslice dev: tailnet off (%s): machines reach the apiserver over loopback\n",
        no_tailnet.c_str());
  }

  // The four marketplaces and the machines they rent out.
  using StartFn = Result<std::unique_ptr<market::MarketSimulator> > (*)(market::ServerOptions);
  struct Spec {
    const char* provider;
    StartFn start;
    std::vector<market::Listing> listings;
  };
  std::vector<market::Listing> lambda = sim::lambda::DefaultListings();
  lambda.push_back(sim::lambda::Rtx4090Listing("us-west-1"));
  lambda.push_back(sim::lambda::Rtx4090Listing("us-east-1"));
  const std::vector<Spec> specs = {{gpu::kRunPod, &sim::runpod::Start, {}},
                                   {gpu::kLambda, &sim::lambda::Start, lambda},
                                   {gpu::kPaperspace, &sim::paperspace::Start, {}},
                                   {gpu::kVast, &sim::vast::Start, {}}};
  std::map<std::string, std::string> endpoints;
  const auto latency = std::chrono::milliseconds(f.sim_latency_ms);
  for (const Spec& s : specs) {
    market::ServerOptions so;
    so.market.listings = s.listings;
    so.market.boot_delay = latency;
    so.market.running_delay = latency;
    so.market.terminate_delay = latency / 2;
    auto sim = s.start(so);
    if (!sim.ok()) {
      std::fprintf(stderr, "hyperslice dev: the %s simulator did not start: %s\n", s.provider,
                   sim.error().ToString().c_str());
      return 1;
    }
    Marketplace m{s.provider, std::move(sim).value(), nullptr};
    sim::gpumachine::Options mo;
    mo.market = &m.sim->market();
    if (stack.tailnet) mo.tailnet = stack.tailnet->Seam();
    auto fleet = sim::gpumachine::Fleet::Start(mo);
    if (!fleet.ok()) {
      std::fprintf(stderr, "hyperslice dev: the simulated %s machines did not start: %s\n",
                   s.provider, fleet.error().ToString().c_str());
      return 1;
    }
    m.fleet = std::move(fleet).value();
    endpoints[s.provider] = m.sim->api_endpoint();
    Say("hyperslice dev: %s simulator at %s (%zu listings; machines boot from their payload)\n",
        s.provider, m.sim->api_endpoint().c_str(), m.sim->market().Listings().size());
    stack.markets.push_back(std::move(m));
  }

  auto client = kube::Client::Create(c.AdminConfig());
  if (!client.ok()) {
    std::fprintf(stderr, "hyperslice dev: %s\n", client.error().ToString().c_str());
    return 1;
  }
  int crds = 0;
  if (Status s = dev::ApplyCrds(**client, f.deploy_dir, "tgp.io", &crds); !s.ok()) {
    std::fprintf(stderr, "hyperslice dev: applying the CRDs: %s\n", s.error().ToString().c_str());
    return 1;
  }
  Say("hyperslice dev: applied %d tgp.io CRDs from %s/crds\n", crds, f.deploy_dir.c_str());
  // The credentials Secret seed 002's class names, with the simulators' account key.
  json::object ns{{"apiVersion", "v1"},
                  {"kind", "Namespace"},
                  {"metadata", json::object{{"name", kCredentialsNamespace}}}};
  json::object secret{
      {"apiVersion", "v1"},
      {"kind", "Secret"},
      {"metadata",
       json::object{{"name", kCredentialsSecret}, {"namespace", kCredentialsNamespace}}},
      {"stringData", json::object{{"RUNPOD_API_KEY", kSimKey}, {"LAMBDA_LABS_API_KEY", kSimKey}}}};
  json::object headscale_secret{
      {"apiVersion", "v1"},
      {"kind", "Secret"},
      {"metadata", json::object{{"name", "headscale-api"}, {"namespace", kCredentialsNamespace}}},
      {"stringData",
       json::object{{"api-key", stack.headscale ? stack.headscale->api_key() : std::string()}}}};
  for (auto [r, obj] : {std::pair{&kube::resources::Namespaces(), &ns},
                        std::pair{&kube::resources::Secrets(), &secret},
                        std::pair{&kube::resources::Secrets(), &headscale_secret}}) {
    if (Status s = dev::ServerSideApply(**client, *r, *obj); !s.ok()) {
      std::fprintf(stderr, "hyperslice dev: %s\n", s.error().ToString().c_str());
      return 1;
    }
  }

  // The GPU operator, in process, as `hyperslice operator --gpu` runs it.
  {
    auto ca = ReadFile(c.ca_cert_path());
    kube::ManagerOptions manager_options;
    manager_options.client = *client;
    manager_options.health_probe_port = 0;
    manager_options.graceful_shutdown_timeout = std::chrono::milliseconds(5000);
    auto manager = kube::Manager::Create(manager_options);
    if (!manager.ok() || !ca.ok()) {
      std::fprintf(stderr, "hyperslice dev: %s\n",
                   (!manager.ok() ? manager.error() : ca.error()).ToString().c_str());
      return 1;
    }
    gpu::OperatorOptions o;
    o.client = *client;
    o.default_endpoints = endpoints;
    o.control_plane_endpoint = c.server_url();
    o.cluster_ca_pem = *ca;
    o.default_ssh_key_names = {{gpu::kLambda, {kSimSshKey}}};
    o.offer_refresh_interval = std::chrono::seconds(10);
    o.gc_interval = std::chrono::seconds(10);
    o.tailnet = stack.tailnet != nullptr;
    if (Status s = gpu::RegisterOperator(**manager, o); !s.ok()) {
      std::fprintf(stderr, "hyperslice dev: the GPU operator: %s\n", s.error().ToString().c_str());
      return 1;
    }
    stack.manager = std::move(manager).value();
    stack.manager_thread = std::thread([&stack] { (void)stack.manager->Run(); });
    Say("hyperslice dev: GPU operator running (metrics on http://127.0.0.1:%u/metrics)\n",
        static_cast<unsigned>(stack.manager->health_port()));
  }

  // Seed 002's class and pool, unchanged.
  std::string pool_ns, pool_name, class_name;
  for (const char* file : {"gpunodeclass.yaml", "gpunodepool.yaml"}) {
    auto text = ReadFile(f.deploy_dir + "/examples/" + file);
    auto docs = text.ok() ? dev::YamlDocuments(*text, file)
                          : Result<std::vector<json::object> >(text.error());
    if (!docs.ok() || docs->size() != 1) {
      std::fprintf(stderr, "hyperslice dev: %s: %s\n", file,
                   docs.ok() ? "not one object" : docs.error().ToString().c_str());
      return 1;
    }
    json::object obj = docs->front();
    bool is_class = StringField(obj, "kind") == "GPUNodeClass";
    if (is_class && stack.headscale) {
      // The seed's class names no tailnet server: this one's, and the Secret with its API key.
      json::object& ts = obj["spec"].as_object()["tailscaleConfig"].as_object();
      ts["loginServer"] = stack.headscale->url();
      ts["apiKeySecretRef"] =
          json::object{{"namespace", kCredentialsNamespace}, {"name", "headscale-api"}};
    }
    if (Status s = dev::ServerSideApply(
            **client, is_class ? gpu::GPUNodeClasses() : gpu::GPUNodePools(), obj);
        !s.ok()) {
      std::fprintf(stderr, "hyperslice dev: applying %s: %s\n", file, s.error().ToString().c_str());
      return 1;
    }
    if (is_class) {
      class_name = MetaString(obj, "name");
    } else {
      pool_ns = MetaString(obj, "namespace");
      pool_name = MetaString(obj, "name");
    }
  }
  Say("hyperslice dev: applied seed 002's GPUNodeClass %s and GPUNodePool %s/%s "
      "(deploy/examples%s)\n",
      class_name.c_str(), pool_ns.c_str(), pool_name.c_str(),
      stack.headscale ? "; the class's tailscaleConfig given loginServer and apiKeySecretRef" : "");
  const auto deadline = Steady::now() + std::chrono::seconds(f.timeout_s);
  while (true) {
    auto cls = (*client)->Get(gpu::GPUNodeClasses(), "", class_name);
    if (cls.ok() && kube::IsConditionTrue(*cls, "Ready")) {
      Say("hyperslice dev: GPUNodeClass %s Ready: providers %s valid, hourly cost now $%s\n",
          class_name.c_str(),
          std::string(StringField(ObjectField(*cls, "status"), "providersReady")).c_str(),
          std::string(StringField(ObjectField(*cls, "status"), "hourlyCost")).c_str());
      break;
    }
    if (Steady::now() > deadline) {
      std::fprintf(stderr, "hyperslice dev: GPUNodeClass %s not Ready in time\n",
                   class_name.c_str());
      return 1;
    }
    if (int sig = dev::WaitForSignal(f.stop_signals, std::chrono::milliseconds(250)); sig != 0)
      return 0;
  }

  // The Job.
  auto job_text = ReadFile(f.deploy_dir + "/examples/gpu-job.yaml");
  auto job_docs = job_text.ok() ? dev::YamlDocuments(*job_text, "gpu-job.yaml")
                                : Result<std::vector<json::object> >(job_text.error());
  if (!job_docs.ok() || job_docs->size() != 1) {
    std::fprintf(stderr, "hyperslice dev: deploy/examples/gpu-job.yaml: %s\n",
                 job_docs.ok() ? "not one object" : job_docs.error().ToString().c_str());
    return 1;
  }
  const json::object& job = job_docs->front();
  const std::string job_ns(MetaString(job, "namespace"));
  const std::string job_name(MetaString(job, "name"));
  // kube-controller-manager creates the namespace's default ServiceAccount shortly after it
  // starts; pods are refused until then.
  while (true) {
    auto sa = (*client)->Raw("GET", "/api/v1/namespaces/" + job_ns + "/serviceaccounts/default");
    if (sa.ok() && sa->status == 200) break;
    if (Steady::now() > deadline) return 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (Status s = dev::ServerSideApply(**client, kube::resources::Jobs(), job); !s.ok()) {
    std::fprintf(stderr, "hyperslice dev: submitting the Job: %s\n", s.error().ToString().c_str());
    return 1;
  }
  const auto t0 = Steady::now();
  Story story(t0);
  story.Tell("job", "Job ", job_ns, "/", job_name,
             " submitted (deploy/examples/gpu-job.yaml: 1 × nvidia.com/gpu, "
             "tgp.io/gpu-type RTX4090; its container runs `sleep 20`)");
  std::string claim_name, instance, provider, node;
  // What the provider says of the machine (a machine runs before it can join).
  auto provider_view = [&] {
    for (auto& m : stack.markets) {
      if (instance.empty() || m.provider != provider) continue;
      if (auto got = m.sim->market().Get(instance)) {
        if (got->state == market::State::kRunning)
          story.Tell("up", provider, " reports machine ", instance, " running");
        if (got->state == market::State::kTerminated)
          story.Tell("terminated", provider, " reports machine ", instance, " terminated");
      }
    }
  };
  bool done = false;
  while (!done) {
    kube::ListOptions by_job;
    by_job.label_selector = "job-name=" + job_name;
    auto pods = (*client)->List(kube::resources::Pods(), job_ns, by_job);
    for (const auto& p : pods.ok() ? pods->items : std::vector<json::object>{}) {
      std::string_view pod = MetaString(p, "name");
      const json::object* status = ObjectField(p, "status");
      std::string_view phase = StringField(status, "phase");
      const json::array* conds = ArrayField(status, "conditions");
      for (const auto& cv : conds ? *conds : json::array{}) {
        const json::object& cond = cv.as_object();
        if (StringField(cond, "type") == "PodScheduled" &&
            StringField(cond, "reason") == "Unschedulable")
          story.Tell("pending", "pod ", pod, " Pending: ", StringField(cond, "message"));
      }
      if (phase == "Running") {
        story.Tell("running", "pod ", pod, " Running on Node ",
                   StringField(ObjectField(p, "spec"), "nodeName"));
      }
      if (phase == "Succeeded") story.Tell("succeeded", "pod ", pod, " Succeeded (exit code 0)");
    }
    auto claims = (*client)->List(gpu::GPUNodeClaims(), "");
    for (const auto& cl : claims.ok() ? claims->items : std::vector<json::object>{}) {
      std::string name(MetaString(cl, "name"));
      if (claim_name.empty()) claim_name = name;
      if (name != claim_name) continue;
      const json::object* annotations = ObjectAt(cl, "metadata.annotations");
      const json::object* status = ObjectField(cl, "status");
      story.Tell("claim", "GPUNodeClaim ", name,
                 " created by the provisioner: cheapest fitting offer ",
                 StringField(annotations, gpu::kAnnotationPlannedOffer), " at $",
                 StringField(annotations, gpu::kAnnotationPlannedPrice), "/h");
      instance = StringField(status, "instanceID");
      provider = StringField(status, "provider");
      if (!instance.empty())
        story.Tell("launched", "machine ", instance, " launched on ", provider, " (",
                   StringField(status, "gpuType"), " in ", StringField(status, "region"), ", $",
                   StringField(status, "price"), "/h); it boots from its ",
                   StringField(status, "joinMethod"), " payload");
      provider_view();
      if (kube::IsConditionTrue(cl, "Registered")) {
        node = StringField(status, "nodeName");
        story.Tell("registered", "Node ", node,
                   " registered (TLS bootstrap with the claim's bootstrap "
                   "token; its token Secret is deleted now)");
      }
      if (std::string_view ip = StringField(status, "tailnetIP"); !ip.empty())
        story.Tell("tailnet", "machine ", instance,
                   " joined the tailnet with its single-use key: ", ip, " (headscale node ",
                   StringField(status, "tailnetDeviceID"), ")");
      if (kube::IsConditionTrue(cl, "Ready"))
        story.Tell("ready", "GPUNodeClaim ", name, " Ready: nvidia.com/gpu allocatable");
      if (kube::IsDeleting(cl))
        story.Tell("deleting", "machine ", instance,
                   " empty for the pool's consolidateAfter: "
                   "returning it (drain, then delete at ",
                   provider, ")");
    }
    provider_view();
    auto j = (*client)->Get(kube::resources::Jobs(), job_ns, job_name);
    if (j.ok()) {
      if (IntField(ObjectField(*j, "status"), "succeeded").value_or(0) >= 1)
        story.Tell("complete", "Job ", job_name, " complete");
    }
    auto pool = (*client)->Get(gpu::GPUNodePools(), pool_ns, pool_name);
    // The end: the machine gone at the provider, no claim left, and the pool's status saying so
    // (no cost now, the spend recorded).
    if (story.Told("terminated") && claims.ok() && claims->items.empty() && pool.ok() &&
        PoolSpend(*pool) > 0 &&
        StringField(ObjectField(*pool, "status"), "hourlyCost") == gpu::FormatUsd(0)) {
      double ledger = 0;
      for (auto& m : stack.markets) ledger += m.sim->market().TotalSpend();
      char line[256];
      std::snprintf(line, sizeof line,
                    "machine returned; pool %s/%s costs $%s/h now and has spent $%.6f "
                    "(the simulators' ledgers: $%.6f)",
                    pool_ns.c_str(), pool_name.c_str(),
                    std::string(StringField(ObjectField(*pool, "status"), "hourlyCost")).c_str(),
                    PoolSpend(*pool), ledger);
      bool tailnet_clear = true;
      if (stack.headscale) {
        // The machine's tailnet device went with it (the operator deletes it at teardown).
        auto nodes = stack.headscale->Cli({"nodes", "list", "-o", "json"});
        boost::system::error_code ec;
        json::value listed = json::parse(nodes.output, ec);
        tailnet_clear =
            nodes.exit_code == 0 && !ec && (!listed.is_array() || listed.as_array().empty());
        if (tailnet_clear)
          story.Tell("tailnet-gone", "its headscale node is deleted: the tailnet has no nodes");
      }
      if (tailnet_clear) {
        story.Tell("spent", line);
        done = true;
        break;
      }
    }
    if (Steady::now() > deadline) {
      std::fprintf(stderr, "hyperslice dev: the GPU story did not finish within %d s; logs in %s\n",
                   f.timeout_s, c.work_dir().c_str());
      return 1;
    }
    if (int sig = dev::WaitForSignal(f.stop_signals, std::chrono::milliseconds(200)); sig != 0) {
      Say("hyperslice dev: stopping (signal %d)\n", sig);
      return 0;
    }
  }
  std::string table = dev::KubectlGet(c.kubeconfig_path(), "gpunodepools,gpunodeclaims,nodes,jobs");
  if (!table.empty())
    Say("$ kubectl get gpunodepools,gpunodeclaims,nodes,jobs -A -o wide\n%s\n", table.c_str());
  Say("Kubeconfig: %s\n", c.kubeconfig_path().c_str());
  if (f.exit_when_ready) {
    Say("hyperslice dev: stopping (--exit-when-ready)\n");
    return 0;
  }
  Say("Press Ctrl-C to stop.\n");
  int sig = 0;
  sigwait(&f.stop_signals, &sig);
  Say("hyperslice dev: stopping (signal %d)\n", sig);
  return 0;
}
#endif  // HS_HAVE_SIM_GPUMACHINE

}  // namespace hyperslice::cmd
