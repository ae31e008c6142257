// `hyperslice dev`: the local default (issue 5). On one machine it runs what a real deployment
// spreads over a cluster and a cloud:
//   1. the local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
//      with what `kubeadm init` leaves for nodes to join (bootstrap tokens, cluster-info, CSR
//      approval);
//   2. the GCE simulator with the example's project, zone us-central1-c and the reservation
//      my-tpu-reservation of the example's machine type;
//   3. the simulated TPU VMs (one agent per RUNNING instance, joining as kubeadm + kubelet would,
//      and running the pods bound to it: the operator's device-plugin DaemonSet in process on a
//      fake TPU device tree, workload pods with their chips allocated; sim/kubelet/pod_runtime.h);
//   4. the TPU operator in-process, talking to both through the real clients;
//   5. the admission webhook in-process (TLS from its own CA), registered with the apiserver by
//      deploy/webhook/base/webhooks.yaml's two configurations, unchanged but for clientConfig
//      (a URL instead of the in-cluster Service), so the same rules and selectors apply;
// then applies the CRDs (deploy/crds) and seed 000's example TPUNodeGroup (deploy/examples, the
// seed's text with its variables substituted), prints progress until the group is Ready, applies
// the example's workload (the seed's Service + StatefulSet, deploy/examples/tpu-workload.yaml, when
// the example's .env names it in WORKLOAD; --no-workload skips it), prints its pods with their
// node, chips and injected variables, prints `kubectl get tpunodegroups,nodes,pods` and the
// kubeconfig path, and runs until SIGINT/SIGTERM, then stops everything in reverse order.
//
// `--example gpu` (roles_dev_gpu.cc) and `--example runners` (roles_dev_runners.cc) run other
// stories on the same control plane.
//
// Logs of the operator and the simulators go to <work-dir>/hyperslice.log (JSON lines), so the
// terminal shows progress only.
//
// This file includes sim/: the `sim` and `dev` roles of the composition root are the one place in
// src/ that knows the simulators (docs/architecture.md, "Rules that keep this order true").
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include "sim/gce/simulator.h"
#include "src/base/envsubst.h"
#include "src/base/files.h"
#include "src/base/json.h"
#include "src/base/log.h"
#include "src/base/result.h"
#include "src/cmd/dev_support.h"
#include "src/cmd/roles.h"
#include "src/cmd/roles_dev_gpu.h"
#include "src/cmd/roles_dev_runners.h"
#include "src/gce/auth.h"
#include "src/gce/compute.h"
#include "src/kube/client.h"
#include "src/kube/manager.h"
#include "src/kube/object_helpers.h"
#include "src/kube/store.h"
#include "src/kube/yaml.h"
#include "src/localcluster/localcluster.h"
#include "src/net/pki.h"
#include "src/tpu/api.h"
#include "src/tpu/operator.h"
#include "src/webhook/webhook.h"
#ifdef HS_HAVE_SIM_KUBELET
#include "sim/kubelet/fleet.h"
#endif

namespace hyperslice::cmd {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;
using namespace dev;  // NOLINT(google-build-using-namespace): the dev helpers, one story each
using jsonfield::ArrayField;
using jsonfield::IntField;
using jsonfield::ObjectAt;
using jsonfield::ObjectField;
using jsonfield::StringField;
using jsonfield::StringValue;
using kube::MetaString;

constexpr char kOperatorNamespace[] = "tpu-node-group";

struct DevFlags {
  std::string work_dir;
  std::string bin_dir;
  std::string deploy_dir;
  std::string example = "tpu7x-2x2x2";
  int sim_latency_ms = 1000;
  int ready_timeout_s = 600;
  bool exit_after_ready = false;
  bool exit_when_ready = false;
  bool log_to_stderr = false;
  bool no_workload = false;
};

DevFlags& Flags() {
  static DevFlags flags;
  return flags;
}

// One line of progress: the group's conditions and nodeSummary.
std::string Progress(const json::object& group) {
  std::string out;
  const json::object* status = ObjectField(group, "status");
  if (status == nullptr) return "no status yet";
  if (const json::array* conds = ArrayField(*status, "conditions")) {
    for (const auto& c : *conds) {
      if (!c.is_object()) continue;
      const auto& o = c.as_object();
      out += StringValue(o, "type") + "=" + StringValue(o, "status");
      std::string reason = StringValue(o, "reason");
      if (!reason.empty()) out += "(" + reason + ")";
      out += " ";
    }
  }
  if (const json::object* sum = ObjectField(*status, "nodeSummary")) {
    out += "nodes:";
    for (const char* k : {"desired", "running", "joined", "ready", "failed"}) {
      std::optional<int64_t> n = IntField(*sum, k);
      out += std::string(" ") + k + "=" + (n ? std::to_string(*n) : "");
    }
  }
  return out.empty() ? "no status yet" : out;
}

// The admission webhook in process (TLS from its own CA), registered with the apiserver by
// deploy/webhook/base/webhooks.yaml's configurations: unchanged but for clientConfig, a URL to this
// server instead of the in-cluster Service, so the same rules, selectors and failure policies
// apply.
Result<std::unique_ptr<webhook::Server>> StartWebhook(const std::shared_ptr<kube::Client>& client,
                                                      const std::string& deploy_dir,
                                                      const std::string& work_dir) {
  fs::path dir = fs::path(work_dir) / "webhook";
  std::error_code ec;
  fs::create_directories(dir, ec);
  HS_ASSIGN_OR_RETURN(auto ca, net::pki::MakeCa("hyperslice-dev-webhook-ca"));
  HS_ASSIGN_OR_RETURN(auto pair, net::pki::Issue(ca, {.common_name = "hyperslice-webhook",
                                                      .ip_addresses = {"127.0.0.1"},
                                                      .server = true}));
  std::ofstream(dir / "tls.crt") << pair.cert_pem;
  std::ofstream(dir / "tls.key") << pair.key_pem;
  webhook::ServerOptions o;
  o.tls_cert_file = (dir / "tls.crt").string();
  o.tls_key_file = (dir / "tls.key").string();
  o.source = webhook::NewInformerObjectSource(client, std::chrono::seconds(20));
  HS_ASSIGN_OR_RETURN(auto server, webhook::Server::Start(std::move(o)));
  HS_RETURN_IF_ERROR(webhook::RegisterConfigurations(
      *client, deploy_dir + "/webhook/base/webhooks.yaml",
      "https://127.0.0.1:" + std::to_string(server->port()), ca.cert_pem));
  return server;
}

// What a workload container sees, as `kubectl logs` shows it (a simulated container prints its
// environment): KEY=VALUE lines.
std::map<std::string, std::string> ContainerEnv(kube::Client& client, const std::string& ns,
                                                const std::string& pod,
                                                const std::string& container) {
  auto logs = client.Raw(
      "GET", "/api/v1/namespaces/" + ns + "/pods/" + pod + "/log?container=" + container);
  if (!logs.ok() || logs->status != 200) return {};
  return ParseEnvFile(logs->body);  // KEY=VALUE lines, as an .env file
}

// Applies the example's workload (Service + StatefulSet, variables substituted), waits up to
// `timeout` for its pods to run and prints each with its node, chips and TPU variables. False
// when the pods did not all run.
bool RunWorkload(kube::Client& client, const std::string& file,
                 const std::map<std::string, std::string>& vars, std::chrono::seconds timeout,
                 const std::function<double()>& elapsed) {
  auto text = ReadFile(file);
  if (!text.ok()) {
    Say("hyperslice dev: workload: %s\n", text.error().ToString().c_str());
    return false;
  }
  auto yaml = Envsubst(*text, vars);
  if (!yaml.ok()) {
    Say("hyperslice dev: workload: %s\n", yaml.error().ToString().c_str());
    return false;
  }
  auto docs = YamlDocuments(*yaml, file);
  if (!docs.ok()) {
    Say("hyperslice dev: workload: %s\n", docs.error().ToString().c_str());
    return false;
  }
  static const kube::Resource kServices{"", "v1", "services", "Service", true};
  std::string ns, selector;
  int replicas = 0;
  std::string container;
  for (const auto& doc : *docs) {
    std::string kind = StringValue(doc, "kind");
    const kube::Resource* r = kind == "Service"       ? &kServices
                              : kind == "StatefulSet" ? &kube::resources::StatefulSets()
                                                      : nullptr;
    if (r == nullptr) continue;
    const std::string name(MetaString(doc, "name"));
    if (Status st = ServerSideApply(client, *r, doc); !st.ok()) {
      Say("hyperslice dev: workload: applying %s %s: %s\n", kind.c_str(), name.c_str(),
          st.error().ToString().c_str());
      return false;
    }
    Say("hyperslice dev: applied %s %s/%s\n", kind.c_str(),
        std::string(MetaString(doc, "namespace")).c_str(), name.c_str());
    if (kind == "StatefulSet") {
      ns = MetaString(doc, "namespace");
      replicas = static_cast<int>(IntField(ObjectField(doc, "spec"), "replicas").value_or(0));
      if (const json::object* labels = ObjectAt(doc, "spec.selector.matchLabels")) {
        for (const auto& [k, v] : *labels) {
          if (v.is_string()) {
            selector +=
                (selector.empty() ? "" : ",") + std::string(k) + "=" + std::string(v.as_string());
          }
        }
      }
      const json::array* cs = ArrayField(ObjectAt(doc, "spec.template.spec"), "containers");
      if (cs != nullptr && !cs->empty() && (*cs)[0].is_object()) {
        container = StringValue((*cs)[0].as_object(), "name");
      }
    }
  }
  if (replicas <= 0 || selector.empty()) return true;
  Say("Waiting for the workload's %d pods to run...\n", replicas);
  const auto deadline = Clock::now() + timeout;
  std::vector<json::object> pods;
  while (true) {
    kube::ListOptions lo;
    lo.label_selector = selector;
    auto list = client.List(kube::resources::Pods(), ns, lo);
    pods.clear();
    int running = 0;
    if (list.ok()) {
      for (auto& p : list->items) {
        running += StringField(ObjectField(p, "status"), "phase") == "Running" ? 1 : 0;
        pods.push_back(p);
      }
    }
    if (running >= replicas) break;
    if (Clock::now() > deadline) {
      Say("hyperslice dev: the workload's pods did not all run within %lld s:\n",
          static_cast<long long>(timeout.count()));
      for (const auto& p : pods)
        Say("  %s %s\n", std::string(MetaString(p, "name")).c_str(),
            std::string(StringField(ObjectField(p, "status"), "phase")).c_str());
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  std::sort(pods.begin(), pods.end(), [](const json::object& a, const json::object& b) {
    return MetaString(a, "name") < MetaString(b, "name");
  });
  Say("  [%6.1fs] workload running:\n", elapsed());
  for (const auto& p : pods) {
    std::string name(MetaString(p, "name"));
    auto env = ContainerEnv(client, ns, name, container);
    Say("  pod %s on node %s (chips %s)\n", name.c_str(),
        std::string(StringField(ObjectField(p, "spec"), "nodeName")).c_str(),
        env.count("TPU_VISIBLE_CHIPS") ? env["TPU_VISIBLE_CHIPS"].c_str() : "?");
    for (const auto& [k, v] : env)
      if (k.rfind("TPU_", 0) == 0) Say("      %s=%s\n", k.c_str(), v.c_str());
  }
  Say("  (each simulated container prints its environment: kubectl logs -n %s <pod>)\n",
      ns.c_str());
  return true;
}

// Everything `hyperslice dev` runs, stopped in reverse order of start by the destructor.
struct DevStack {
  std::unique_ptr<localcluster::LocalCluster> cluster;
  std::unique_ptr<sim::gce::Simulator> simulator;
#ifdef HS_HAVE_SIM_KUBELET
  std::unique_ptr<sim::kubelet::Fleet> fleet;
#endif
  std::unique_ptr<webhook::Server> webhook;
  std::unique_ptr<kube::Manager> manager;
  std::thread manager_thread;
  std::mutex mu;
  Status manager_status = OkStatus();
  bool manager_done = false;

  ~DevStack() { Stop(); }
  void Stop() {
    if (manager) manager->Stop();
    if (manager_thread.joinable()) manager_thread.join();
    manager.reset();
    if (webhook) webhook->Stop(std::chrono::milliseconds(1000));
    webhook.reset();
#ifdef HS_HAVE_SIM_KUBELET
    if (fleet) fleet->Stop();
    fleet.reset();
#endif
    if (simulator) simulator->Stop();
    simulator.reset();
    cluster.reset();  // kube-controller-manager, kube-apiserver, etcd
  }
};

}  // namespace

void SetupDev(CLI::App& app) {
  DevFlags& f = Flags();
  app.add_option(
      "--work-dir", f.work_dir,
      "folder for certificates, etcd data and logs (default: "
      "${XDG_CACHE_HOME:-~/.cache}/hyperslice/dev); wiped of old cluster state on start");
  app.add_option("--bin-dir", f.bin_dir,
                 "folder with kube-apiserver, kube-controller-manager and etcd (default: "
                 "$HYPERSLICE_CONTROLPLANE_BIN, else built by scripts/build-controlplane.sh)");
  app.add_option("--deploy-dir", f.deploy_dir,
                 "folder with crds/ and examples/ (default: $HYPERSLICE_DEPLOY_DIR, else the "
                 "source tree's deploy/)");
  app.add_option("--example", f.example,
                 "which example to run: a TPUNodeGroup (tpu7x-2x2x2, v6e-2x2), or gpu — seed "
                 "002's GPUNodeClass and GPUNodePool with the four marketplace simulators and a "
                 "GPU Job, from rented machine to its return and the money spent; or runners — "
                 "a control node linking two runner agents in two regions and a Job running on "
                 "one of them as a real container (root, runc, umoci, skopeo, docker-registry)")
      ->check(CLI::IsMember({"tpu7x-2x2x2", "v6e-2x2", "gpu", "runners", "none"}))
      ->capture_default_str();
  app.add_option("--sim-latency-ms", f.sim_latency_ms,
                 "simulated GCE operation and VM boot latency, in milliseconds")
      ->check(CLI::Range(0, 600000))
      ->capture_default_str();
  app.add_option("--ready-timeout", f.ready_timeout_s,
                 "with --exit-when-ready: seconds to wait for the example to be Ready (runners: "
                 "always, until the example Job's pod runs)")
      ->capture_default_str();
  app.add_flag("--exit-after-ready", f.exit_after_ready,
               "start the control plane only, print how to connect, stop and exit 0 (for tests)");
  app.add_flag("--exit-when-ready", f.exit_when_ready,
               "run everything, wait until the example TPUNodeGroup is Ready, print the summary, "
               "stop and exit 0 (non-zero if it is not Ready within --ready-timeout)");
  app.add_flag("--no-workload", f.no_workload,
               "do not apply the example's workload (seed 000's Service + StatefulSet) once the "
               "group is Ready");
  app.add_flag("--log-to-stderr", f.log_to_stderr,
               "operator and simulator logs on stderr instead of <work-dir>/hyperslice.log");
}

int RunDev(CLI::App&) {
  const DevFlags& f = Flags();
  // Block the stop signals before any thread exists, so every thread inherits the mask and
  // sigwait()/sigtimedwait() here are the only places they are received. Children get a clean
  // mask at exec.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  const auto started_at = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - started_at).count(); };

  // The example first: a typo in it should not cost a control-plane start.
  const std::string deploy_dir = f.deploy_dir.empty() ? DefaultDeployDir() : f.deploy_dir;
  const StoryOptions story{.work_dir = f.work_dir.empty() ? DefaultWorkDir() : f.work_dir,
                           .bin_dir = f.bin_dir,
                           .deploy_dir = deploy_dir,
                           .timeout_s = f.ready_timeout_s,
                           .exit_when_ready = f.exit_when_ready,
                           .log_to_stderr = f.log_to_stderr,
                           .stop_signals = stop_signals};
  if (f.example == "gpu" && !f.exit_after_ready) {
    return RunDevGpu(DevGpuOptions{story, f.sim_latency_ms});
  }
  if (f.example == "runners" && !f.exit_after_ready) return RunDevRunners(story);
  std::map<std::string, std::string> vars;
  std::vector<json::object> example_docs;
  if (f.example != "none" && !f.exit_after_ready) {
    auto env = ReadEnvFile(deploy_dir + "/examples/" + f.example + ".env");
    auto text = ReadFile(deploy_dir + "/examples/tpunodegroup.yaml");
    if (!env.ok() || !text.ok()) {
      std::fprintf(stderr, "hyperslice dev: cannot read the example from %s/examples: %s\n",
                   deploy_dir.c_str(), (!env.ok() ? env.error() : text.error()).ToString().c_str());
      return 2;
    }
    vars = *env;
    auto yaml = Envsubst(*text, vars);
    if (!yaml.ok()) {
      std::fprintf(stderr, "hyperslice dev: %s\n", yaml.error().ToString().c_str());
      return 2;
    }
    auto docs = YamlDocuments(*yaml, "the example");
    if (!docs.ok() || docs->size() != 1) {
      std::fprintf(stderr, "hyperslice dev: the example is not one YAML object: %s\n",
                   docs.ok() ? "wrong count" : docs.error().ToString().c_str());
      return 2;
    }
    example_docs = *docs;
  }

  std::optional<LogFile> log_file;  // declared before the stack, which logs as it stops
  DevStack stack;
  stack.cluster =
      dev::StartControlPlane(f.work_dir.empty() ? DefaultWorkDir() : f.work_dir, f.bin_dir);
  if (!stack.cluster) return 1;
  const auto& c = *stack.cluster;
  Say("hyperslice dev: control plane ready at %s (logs in %s)\n"
      "Point kubectl at it:\n"
      "  export KUBECONFIG=%s\n"
      "  kubectl get ns\n",
      c.server_url().c_str(), c.work_dir().c_str(), c.kubeconfig_path().c_str());
  if (f.exit_after_ready) return 0;  // the stack stops on the way out

  // From here on, components log JSON lines; keep them off the terminal.
  if (!f.log_to_stderr) log_file.emplace(c.work_dir());

  // GCE simulator: the example's project, zone and reservation.
  const std::string project = vars.count("PROJECT") ? vars["PROJECT"] : "my-gcp-project";
  const std::string zone = vars.count("ZONE") ? vars["ZONE"] : "us-central1-c";
  const std::string token = RandomToken();
  sim::gce::Options sim_options;
  sim_options.projects = {project};
  sim_options.regions = {zone.substr(0, zone.rfind('-'))};
  if (!example_docs.empty()) {
    sim::gce::Reservation reservation;
    reservation.project = project;
    reservation.zone = zone;
    reservation.name = vars["RESERVATION_NAME"];
    reservation.machine_type = vars["MACHINE_TYPE"];
    reservation.count = std::stoll(vars["NODE_COUNT"]);
    sim_options.reservations = {reservation};
  }
  sim_options.operation_latency = std::chrono::milliseconds(f.sim_latency_ms);
  sim_options.instance_boot_latency = std::chrono::milliseconds(f.sim_latency_ms);
  sim_options.static_tokens = {token};
  auto simulator = sim::gce::Simulator::Start(sim_options);
  if (!simulator.ok()) {
    std::fprintf(stderr,
                 "hyperslice dev: the GCE simulator did not start: %s\n"
                 "(it reads compute.proto from $HYPERSLICE_GCE_PROTO_DIR; scripts/gce-schema.sh "
                 "installs it, scripts/dev.sh does both)\n",
                 simulator.error().ToString().c_str());
    return 1;
  }
  stack.simulator = std::move(simulator).value();
  Say("hyperslice dev: GCE simulator at %s (project %s, zone %s",
      stack.simulator->api_endpoint().c_str(), project.c_str(), zone.c_str());
  if (!example_docs.empty()) {
    Say(", reservation %s: %s x %s", vars["RESERVATION_NAME"].c_str(), vars["NODE_COUNT"].c_str(),
        vars["MACHINE_TYPE"].c_str());
  }
  Say(", latency %d ms)\n", f.sim_latency_ms);

  std::vector<std::string> missing;
#ifdef HS_HAVE_SIM_KUBELET
  {
    sim::kubelet::FleetOptions fleet_options;
    fleet_options.simulator = stack.simulator.get();
    fleet_options.apiserver_url = c.server_url();
    fleet_options.agent.run_pods = true;
    auto fleet = sim::kubelet::Fleet::Start(fleet_options);
    if (!fleet.ok()) {
      std::fprintf(stderr, "hyperslice dev: the simulated TPU VMs did not start: %s\n",
                   fleet.error().ToString().c_str());
      return 1;
    }
    stack.fleet = std::move(fleet).value();
    Say("hyperslice dev: simulated TPU VMs join as kubeadm + kubelet would, once RUNNING, and "
        "run the pods bound to them\n");
  }
#else
  missing.push_back("the simulated TPU VMs (sim/kubelet is not in this build): no VM will join");
#endif

  auto client = kube::Client::Create(c.AdminConfig());
  if (!client.ok()) {
    std::fprintf(stderr, "hyperslice dev: %s\n", client.error().ToString().c_str());
    return 1;
  }
  int crds = 0;
  if (Status s = ApplyCrds(**client, deploy_dir, "tpu.google.com", &crds); !s.ok()) {
    std::fprintf(stderr, "hyperslice dev: applying the CRDs: %s\n", s.error().ToString().c_str());
    return 1;
  }
  Say("hyperslice dev: applied %d CRDs from %s/crds\n", crds, deploy_dir.c_str());
  json::object ns_obj = {{"apiVersion", "v1"},
                         {"kind", "Namespace"},
                         {"metadata", json::object{{"name", kOperatorNamespace}}}};
  if (Status s = ServerSideApply(**client, kube::resources::Namespaces(), ns_obj); !s.ok()) {
    std::fprintf(stderr, "hyperslice dev: namespace %s: %s\n", kOperatorNamespace,
                 s.error().ToString().c_str());
    return 1;
  }

  if (auto hook = StartWebhook(*client, deploy_dir, c.work_dir()); !hook.ok()) {
    missing.push_back("the admission webhook (" + hook.error().ToString() + ")");
  } else {
    stack.webhook = std::move(hook).value();
    Say("hyperslice dev: admission webhook at https://127.0.0.1:%u (deploy/webhook's "
        "configurations)\n",
        static_cast<unsigned>(stack.webhook->port()));
  }

  // The operator, in-process: a Manager without leader election (one process) on the admin client,
  // GCE through the real client at the simulator.
  {
    gce::ComputeOptions compute_options;
    compute_options.endpoint = stack.simulator->api_endpoint();
    compute_options.tokens = gce::StaticTokenSource(token);
    auto compute = gce::Compute::Create(compute_options);
    kube::ManagerOptions manager_options;
    manager_options.client = *client;
    manager_options.health_probe_port = 0;
    manager_options.graceful_shutdown_timeout = std::chrono::milliseconds(5000);
    auto manager = kube::Manager::Create(manager_options);
    Status registered = OkStatus();
    if (!compute.ok()) {
      registered = compute.error();
    } else if (!manager.ok()) {
      registered = manager.error();
    } else {
      tpu::OperatorOptions operator_options;
      operator_options.client = *client;
      operator_options.compute = std::move(compute).value();
      operator_options.device_plugin_namespace = kOperatorNamespace;
      registered = tpu::RegisterOperator(**manager, operator_options);
    }
    if (!registered.ok()) {
      missing.push_back("the TPU operator (" + registered.error().ToString() + ")");
    } else {
      stack.manager = std::move(manager).value();
      stack.manager_thread = std::thread([&stack] {
        Status s = stack.manager->Run();
        std::lock_guard<std::mutex> lock(stack.mu);
        stack.manager_status = s;
        stack.manager_done = true;
      });
      Say("hyperslice dev: TPU operator running (health and metrics on http://127.0.0.1:%u)\n",
          static_cast<unsigned>(stack.manager->health_port()));
    }
  }
  for (const auto& m : missing) Say("hyperslice dev: NOT RUNNING: %s\n", m.c_str());

  if (example_docs.empty()) {
    Say("hyperslice dev: no example applied (--example none).\nPress Ctrl-C to stop.\n");
    if (f.exit_when_ready) return missing.empty() ? 0 : 1;
    int sig = 0;
    sigwait(&stop_signals, &sig);
    Say("hyperslice dev: stopping (signal %d)\n", sig);
    return 0;
  }

  const json::object& group = example_docs.front();
  const std::string group_ns(MetaString(group, "namespace"));
  const std::string group_name(MetaString(group, "name"));
  if (Status s = ServerSideApply(**client, tpu::TPUNodeGroups(), group); !s.ok()) {
    std::fprintf(stderr, "hyperslice dev: applying the example TPUNodeGroup: %s\n",
                 s.error().ToString().c_str());
    return 1;
  }
  Say("hyperslice dev: applied TPUNodeGroup %s/%s (example %s: %s x %s, topology %s; "
      "deploy/examples/tpunodegroup.yaml with deploy/examples/%s.env)\n",
      group_ns.c_str(), group_name.c_str(), f.example.c_str(), vars["NODE_COUNT"].c_str(),
      vars["MACHINE_TYPE"].c_str(), vars["TOPOLOGY"].c_str(), f.example.c_str());
  if (!missing.empty() && f.exit_when_ready) {
    Say("hyperslice dev: cannot become Ready with parts missing; stopping\n");
    return 1;
  }
  Say("Waiting for %s to become Ready. Press Ctrl-C to stop.\n", group_name.c_str());

  // Progress until Ready (or a signal, or the timeout with --exit-when-ready).
  const auto deadline = Clock::now() + std::chrono::seconds(f.ready_timeout_s);
  std::string last;
  bool ready = false;
  int sig = 0;
  while (!ready) {
    auto got = (*client)->Get(tpu::TPUNodeGroups(), group_ns, group_name);
    if (got.ok()) {
      std::string line = Progress(*got);
      if (line != last) {
        Say("  [%6.1fs] %s\n", elapsed(), line.c_str());
        last = line;
      }
      ready = kube::IsConditionTrue(*got, "Ready");
    }
    if (ready) break;
    {
      std::lock_guard<std::mutex> lock(stack.mu);
      if (stack.manager_done) {
        std::fprintf(
            stderr, "hyperslice dev: the operator stopped: %s\n",
            stack.manager_status.ok() ? "ok" : stack.manager_status.error().ToString().c_str());
        return 1;
      }
    }
    if (f.exit_when_ready && Clock::now() > deadline) {
      std::fprintf(stderr, "hyperslice dev: %s not Ready within %d s (last: %s); logs in %s\n",
                   group_name.c_str(), f.ready_timeout_s, last.c_str(), c.work_dir().c_str());
      return 1;
    }
    sig = WaitForSignal(stop_signals, std::chrono::milliseconds(250));
    if (sig != 0) {
      Say("hyperslice dev: stopping (signal %d)\n", sig);
      return 0;
    }
  }

  Say("hyperslice dev: TPUNodeGroup %s/%s is Ready after %.1f s\n\n", group_ns.c_str(),
      group_name.c_str(), elapsed());
  bool workload_ok = true;
  if (!f.no_workload && vars.count("WORKLOAD") != 0 && !vars["WORKLOAD"].empty()) {
    workload_ok = RunWorkload(**client, deploy_dir + "/examples/" + vars["WORKLOAD"], vars,
                              std::chrono::seconds(120), elapsed);
  }
  std::string table = KubectlGet(c.kubeconfig_path(), "tpunodegroups,nodes,pods");
  if (table.empty()) {
    Say("(kubectl not found: install it to see `kubectl get tpunodegroups,nodes,pods`)\n");
  } else {
    Say("$ kubectl get tpunodegroups,nodes,pods -A -o wide\n%s\n", table.c_str());
  }
  Say("Kubeconfig: %s\n  export KUBECONFIG=%s\n", c.kubeconfig_path().c_str(),
      c.kubeconfig_path().c_str());
  if (f.exit_when_ready) {
    Say("hyperslice dev: stopping (--exit-when-ready)\n");
    return workload_ok ? 0 : 1;
  }
  Say("Press Ctrl-C to stop.\n");
  sigwait(&stop_signals, &sig);
  Say("hyperslice dev: stopping (signal %d)\n", sig);
  return 0;
}

}  // namespace hyperslice::cmd
