// `hyperslice dev --example runners`: linked runners (issue 20, item 5) on one machine. It runs
//   1. the local control plane (etcd, kube-apiserver, kube-controller-manager — CSR signing, the
//      Job controller —, kube-scheduler) and the runners CRDs (deploy/crds);
//   2. the operator's runners part in process, composed as `hyperslice operator --runners` composes
//      it (operator_runners.h): the runners CA Secret, the control-node controllers, the link
//      server and the kubelet API, on 127.0.0.1;
//   3. a docker-registry on loopback with an example image built from the tests' tiny static
//      program (src/localregistry: cc, umoci, skopeo), referenced by digest;
// then applies deploy/examples/runners.yaml — a ControlNode, two Runners "in two regions"
// (europe-west4 on 127.0.0.2, us-central1 on 127.0.0.3) and a Job — with its variables filled in
// (addresses, the kubelet API port, the image's digest), starts one `hyperslice runner-agent`
// child process per Runner (this binary, /proc/self/exe) with the one-time join token the operator
// minted for it, prints each step (linked, the Node's summed capacity, the pod running on a
// runner and its output) and what to run with kubectl, and stays up until SIGINT/SIGTERM.
//
// Teardown, in this order so that nothing of a container is left: the Job and every pod on the
// control node are deleted and dev waits until they are gone (the agents remove containers,
// mounts and network namespaces as a kubelet would), then the agents are stopped, any container
// still under their runtime roots is force-deleted (it should be none; it is said when it is
// not), then the operator, the registry and the control plane stop and the temporary folder
// (agents' state, registry storage) is removed.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/command.h"
#include "src/base/envsubst.h"
#include "src/base/files.h"
#include "src/base/json.h"
#include "src/base/log.h"
#include "src/cmd/dev_support.h"
#include "src/cmd/operator_runners.h"
#include "src/cmd/roles_dev_runners.h"
#include "src/kube/client.h"
#include "src/kube/manager.h"
#include "src/kube/object_helpers.h"
#include "src/kube/quantity.h"
#include "src/kube/store.h"
#include "src/localcluster/localcluster.h"
#include "src/localregistry/localregistry.h"
#include "src/runners/controlnode/api.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX leaves it undeclared

namespace hyperslice::cmd {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
namespace cn = runners::controlnode;
using dev::Say;
using jsonfield::ObjectAt;
using jsonfield::ObjectField;
using jsonfield::StringField;
using kube::MetaString;
using Steady = std::chrono::steady_clock;

constexpr char kOperatorNamespace[] = "tpu-node-group";
constexpr char kExample[] = "runners.yaml";

// One `hyperslice runner-agent` child on its own loopback address, in its own process group (a
// terminal's Ctrl-C reaches dev only, which removes the pods before it stops the agents) with a
// clean signal mask.
struct AgentProcess {
  std::string runner, region, ip, address, state_dir, log_file;
  pid_t pid = -1;

  Status Start(const std::string& binary, const std::string& token_file, int link_port,
               const std::string& ca_file, const std::string& registry) {
    std::vector<std::string> args = {binary,
                                     "runner-agent",
                                     "--name",
                                     runner,
                                     "--state-dir",
                                     state_dir,
                                     "--listen",
                                     address,
                                     "--link-endpoint",
                                     "127.0.0.1:" + std::to_string(link_port),
                                     "--join-token-file",
                                     token_file,
                                     "--link-ca-file",
                                     ca_file,
                                     "--insecure-registry",
                                     registry,
                                     "--capacity",
                                     "cpu=4",
                                     "--capacity",
                                     "memory=8Gi",
                                     "--region",
                                     region,
                                     "--zone",
                                     region + "-a"};
    auto started = StartBackground(args, log_file);
    if (!started.ok()) {
      pid = -1;
      return Error::Make(started.error().code,
                         "the runner agent " + runner + ": " + started.error().message);
    }
    pid = *started;
    return OkStatus();
  }
  bool Exited() {
    if (pid <= 0) return true;
    if (::waitpid(pid, nullptr, WNOHANG) == pid) pid = -1;
    return pid <= 0;
  }
  // SIGTERM, up to `grace`, then SIGKILL.
  void Stop(std::chrono::milliseconds grace) {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);
    const auto deadline = Steady::now() + grace;
    while (!Exited() && Steady::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
  std::string runtime_root() const { return state_dir + "/runtime"; }
};

// The ids of the runc containers under an agent's runtime root.
std::vector<std::string> Containers(const std::string& root) {
  std::vector<std::string> ids;
  auto r = RunCommand({"runc", "--root", root, "list", "--format", "json"});
  if (r.exit_code != 0) return ids;
  boost::system::error_code ec;
  auto v = json::parse(r.output, ec);
  if (ec || !v.is_array()) return ids;
  for (const auto& c : v.as_array()) {
    if (c.is_object()) ids.emplace_back(StringField(c.as_object(), "id"));
  }
  return ids;
}

// Mount points at or below `dir`, deepest first.
std::vector<std::string> MountsUnder(const std::string& dir) {
  std::vector<std::string> found;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    fields >> id >> parent >> dev >> root >> point;
    if (point == dir || point.rfind(dir + "/", 0) == 0) found.push_back(point);
  }
  std::sort(found.begin(), found.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return found;
}

// Everything the story runs, stopped by the destructor in the order the file's comment gives.
struct RunnersDevStack {
  std::string tmp_dir;  // agents' state, tokens, the registry, the operator's serving certificate
  std::unique_ptr<localcluster::LocalCluster> cluster;
  std::shared_ptr<kube::Client> client;
  std::unique_ptr<localregistry::Registry> registry;
  std::unique_ptr<kube::Manager> manager;
  std::unique_ptr<cn::RunnerServers> servers;
  std::thread manager_thread;
  std::vector<AgentProcess> agents;
  std::string control_node, job_ns, job_name;

  ~RunnersDevStack() {
    // 1. The pods, while the operator and the agents still run: their containers, mounts and
    //    network namespaces go with them.
    if (client && manager && !control_node.empty()) {
      Say("hyperslice dev: deleting the Job and the pods on %s (the agents remove their "
          "containers)...\n",
          control_node.c_str());
      // The Job orphans its pods, which are deleted here with a 1 s grace: the example's
      // program is its container's PID 1 and ignores SIGTERM, so the agent kills it after the
      // grace.
      if (!job_name.empty()) {
        (void)client->Delete(kube::resources::Jobs(), job_ns, job_name,
                             {"Orphan", std::nullopt, std::nullopt, std::nullopt});
      }
      kube::ListOptions on_node;
      on_node.field_selector = "spec.nodeName=" + control_node;
      const auto deadline = Steady::now() + std::chrono::seconds(60);
      while (true) {
        auto pods = client->List(kube::resources::Pods(), "", on_node);
        if (pods.ok() && pods->items.empty()) break;
        if (Steady::now() > deadline) {
          Say("hyperslice dev: pods still on %s after 60 s; removing their containers "
              "directly\n",
              control_node.c_str());
          break;
        }
        for (const auto& p : pods.ok() ? pods->items : std::vector<json::object>{}) {
          if (kube::IsDeleting(p)) continue;
          (void)client->Delete(
              kube::resources::Pods(), std::string(kube::MetaString(p, "namespace")),
              std::string(kube::MetaString(p, "name")), {"", 1, std::nullopt, std::nullopt});
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
    }
    // 2. The agents; then whatever a failed deletion left under their runtime roots.
    for (auto& a : agents) a.Stop(std::chrono::seconds(10));
    for (auto& a : agents) {
      for (const auto& id : Containers(a.runtime_root())) {
        Say("hyperslice dev: container %s was left on %s: force-deleting it\n", id.c_str(),
            a.runner.c_str());
        (void)RunCommand({"runc", "--root", a.runtime_root(), "delete", "--force", id});
      }
      std::error_code ec;
      for (const auto& pod : fs::directory_iterator(a.state_dir + "/pods", ec)) {
        // The agent's pod network namespace is hs-<uid>; gone unless a deletion failed.
        const std::string netns = "hs-" + pod.path().filename().string();
        if (fs::exists("/run/netns/" + netns)) (void)RunCommand({"ip", "netns", "delete", netns});
      }
    }
    // 3. The operator, the registry, the control plane.
    if (servers) servers->Stop();
    if (manager) manager->Stop();
    if (manager_thread.joinable()) manager_thread.join();
    servers.reset();
    manager.reset();
    registry.reset();
    client.reset();
    cluster.reset();
    // 4. The temporary folder; a mount left below it is detached first, so that removing the
    //    folder never walks into what it mounts.
    if (!tmp_dir.empty()) {
      for (const auto& m : MountsUnder(tmp_dir)) ::umount2(m.c_str(), MNT_DETACH);
      std::error_code ec;
      fs::remove_all(tmp_dir, ec);
    }
  }
};

// Polls `done` every 250 ms until it is true (true), the deadline passes or a stop signal comes
// (false; *signal says which).
template <class Done>
bool WaitFor(Done done, Steady::time_point deadline, const sigset_t& signals, int* signal) {
  while (!done()) {
    if (Steady::now() > deadline) return false;
    *signal = dev::WaitForSignal(signals, std::chrono::milliseconds(250));
    if (*signal != 0) {
      Say("hyperslice dev: stopping (signal %d)\n", *signal);
      return false;
    }
  }
  return true;
}

int64_t Milli(const std::string& q) {
  auto v = kube::Quantity::Parse(q);
  return v.ok() ? v->MilliValue() : -1;
}

}  // namespace

int RunDevRunners(const dev::StoryOptions& f) {
  // What this machine lacks, before anything starts.
  if (std::string missing = localregistry::RunnerToolsMissing(); !missing.empty()) {
    std::fprintf(stderr,
                 "hyperslice dev --example runners cannot run here: %s.\n"
                 "It runs real containers: it needs root, runc, umoci, skopeo, docker-registry, a "
                 "C compiler (cc) and iproute2 (ip); scripts/deps.sh installs them.\n",
                 missing.c_str());
    return 2;
  }
  auto text = ReadFile(f.deploy_dir + "/examples/" + kExample);
  if (!text.ok()) {
    std::fprintf(stderr, "hyperslice dev: %s\n", text.error().ToString().c_str());
    return 2;
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    std::fprintf(stderr, "hyperslice dev: cannot find this binary: %s\n", ec.message().c_str());
    return 1;
  }

  // Declared before the stack, which logs as it stops.
  std::optional<dev::LogFile> log_file;
  if (!f.log_to_stderr) log_file.emplace(f.work_dir);
  RunnersDevStack stack;
  std::string tmpl = "/tmp/hyperslice-dev-runners-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "hyperslice dev: mkdtemp: %s\n", std::strerror(errno));
    return 1;
  }
  stack.tmp_dir = tmpl;
  const auto started = Steady::now();
  const auto deadline = started + std::chrono::seconds(f.timeout_s);
  auto elapsed = [&] { return std::chrono::duration<double>(Steady::now() - started).count(); };

  // The registry and the example image are built while the control plane starts.
  std::string image;
  auto registry_ready = std::async(std::launch::async, [&]() -> Status {
    HS_ASSIGN_OR_RETURN(stack.registry, localregistry::Registry::Start(stack.tmp_dir));
    HS_ASSIGN_OR_RETURN(image,
                        stack.registry->PushTestImage("hyperslice/runners-example", "v1", "dev"));
    return OkStatus();
  });
  stack.cluster = dev::StartControlPlane(f.work_dir, f.bin_dir);
  Status pushed = registry_ready.get();
  if (!stack.cluster) return 1;
  const auto& c = *stack.cluster;
  Say("hyperslice dev: control plane ready at %s\n  export KUBECONFIG=%s\n", c.server_url().c_str(),
      c.kubeconfig_path().c_str());
  if (!pushed.ok()) {
    std::fprintf(stderr, "hyperslice dev: the local registry or the example image: %s\n",
                 pushed.error().ToString().c_str());
    return 1;
  }
  Say("hyperslice dev: docker-registry at %s; example image %s (the tests' hstest program, built "
      "with umoci, pushed with skopeo)\n",
      stack.registry->host().c_str(), image.c_str());

  auto client = kube::Client::Create(c.AdminConfig());
  if (!client.ok()) {
    std::fprintf(stderr, "hyperslice dev: %s\n", client.error().ToString().c_str());
    return 1;
  }
  stack.client = *client;
  int crds = 0;
  if (Status s = dev::ApplyCrds(*stack.client, f.deploy_dir, "runners.hyperslice.dev", &crds);
      !s.ok()) {
    std::fprintf(stderr, "hyperslice dev: applying the CRDs: %s\n", s.error().ToString().c_str());
    return 1;
  }
  Say("hyperslice dev: applied %d runners.hyperslice.dev CRDs from %s/crds\n", crds,
      f.deploy_dir.c_str());
  json::object ns_obj = {{"apiVersion", "v1"},
                         {"kind", "Namespace"},
                         {"metadata", json::object{{"name", kOperatorNamespace}}}};
  if (Status s = dev::ServerSideApply(*stack.client, kube::resources::Namespaces(), ns_obj);
      !s.ok()) {
    std::fprintf(stderr, "hyperslice dev: namespace %s: %s\n", kOperatorNamespace,
                 s.error().ToString().c_str());
    return 1;
  }

  // The operator's runners part, in process, as `hyperslice operator --runners` composes it.
  {
    kube::ManagerOptions mo;
    mo.client = stack.client;
    mo.health_probe_port = 0;
    mo.graceful_shutdown_timeout = std::chrono::milliseconds(5000);
    auto manager = kube::Manager::Create(mo);
    if (!manager.ok()) {
      std::fprintf(stderr, "hyperslice dev: %s\n", manager.error().ToString().c_str());
      return 1;
    }
    stack.manager = std::move(manager).value();
    RunnersPartOptions o;
    o.client = stack.client;
    o.ns = kOperatorNamespace;
    o.link_address = "127.0.0.1:0";
    o.kubelet_address = "127.0.0.1:0";
    o.state_dir = stack.tmp_dir + "/operator";
    o.probe_interval = std::chrono::milliseconds(1000);
    o.unhealthy_after = std::chrono::milliseconds(10000);
    auto part = StartRunnersPart(*stack.manager, std::move(o));
    if (!part.ok()) {
      std::fprintf(stderr, "hyperslice dev: the operator's runners part: %s\n",
                   part.error().ToString().c_str());
      return 1;
    }
    stack.servers = std::move(part->servers);
    std::ofstream(stack.tmp_dir + "/runners-ca.crt") << part->ca.ca.cert_pem;
    stack.manager_thread = std::thread([&stack] { (void)stack.manager->Run(); });
    Say("hyperslice dev: operator's runners part running: link server on 127.0.0.1:%u, kubelet "
        "API on 127.0.0.1:%u (runners CA in Secret %s/hyperslice-runners-ca)\n",
        static_cast<unsigned>(stack.servers->link_port()),
        static_cast<unsigned>(stack.servers->kubelet_port()), kOperatorNamespace);
  }

  // The example, its variables filled in.
  stack.agents = {{.runner = "runner-eu", .region = "europe-west4", .ip = "127.0.0.2"},
                  {.runner = "runner-us", .region = "us-central1", .ip = "127.0.0.3"}};
  std::map<std::string, std::string> vars = {
      {"CONTROL_NODE_ADDRESS", "127.0.0.1"},
      {"KUBELET_PORT", std::to_string(stack.servers->kubelet_port())},
      {"IMAGE", image}};
  for (auto& a : stack.agents) {
    auto port = FreeLoopbackPort(a.ip);
    if (!port.ok()) {
      std::fprintf(stderr, "hyperslice dev: no free port on %s: %s\n", a.ip.c_str(),
                   port.error().message.c_str());
      return 1;
    }
    a.address = a.ip + ":" + std::to_string(*port);
    a.state_dir = stack.tmp_dir + "/" + a.runner;
    a.log_file = f.work_dir + "/" + a.runner + ".log";
    vars[a.runner == "runner-eu" ? "RUNNER_EU_ADDRESS" : "RUNNER_US_ADDRESS"] = a.address;
  }
  auto yaml = Envsubst(*text, vars);
  auto docs = yaml.ok() ? dev::YamlDocuments(*yaml, kExample)
                        : Result<std::vector<json::object>>(yaml.error());
  if (!docs.ok()) {
    std::fprintf(stderr, "hyperslice dev: deploy/examples/%s: %s\n", kExample,
                 docs.error().ToString().c_str());
    return 1;
  }
  std::vector<json::object> runners;
  json::object job;
  for (const auto& doc : *docs) {
    const std::string kind(StringField(doc, "kind"));
    const std::string name(MetaString(doc, "name"));
    if (kind == "Job") {
      job = doc;
      continue;
    }
    const kube::Resource* r = kind == "ControlNode" ? &cn::ControlNodes()
                              : kind == "Runner"    ? &cn::Runners()
                                                    : nullptr;
    if (r == nullptr) continue;
    if (Status s = dev::ServerSideApply(*stack.client, *r, doc); !s.ok()) {
      std::fprintf(stderr, "hyperslice dev: applying %s %s: %s\n", kind.c_str(), name.c_str(),
                   s.error().ToString().c_str());
      return 1;
    }
    if (kind == "ControlNode") stack.control_node = name;
    if (kind == "Runner") runners.push_back(doc);
  }
  if (stack.control_node.empty() || runners.size() != stack.agents.size() || job.empty()) {
    std::fprintf(stderr,
                 "hyperslice dev: deploy/examples/%s must hold a ControlNode, the Runners "
                 "runner-eu and runner-us, and a Job\n",
                 kExample);
    return 1;
  }
  Say("hyperslice dev: applied ControlNode %s and Runners runner-eu (europe-west4, agent on %s) "
      "and runner-us (us-central1, agent on %s) from deploy/examples/%s\n",
      stack.control_node.c_str(), stack.agents[0].address.c_str(), stack.agents[1].address.c_str(),
      kExample);

  // One agent per Runner, with the join token the operator minted for it.
  int sig = 0;
  for (auto& a : stack.agents) {
    std::string token;
    bool got = WaitFor(
        [&] {
          auto s = stack.client->Get(kube::resources::Secrets(), kOperatorNamespace,
                                     "runner-join-" + a.runner);
          if (!s.ok()) return false;
          auto d = Base64Decode(StringField(ObjectField(*s, "data"), "token"));
          token = d.ok() ? *d : "";
          return !token.empty();
        },
        deadline, f.stop_signals, &sig);
    if (!got) {
      if (sig != 0) return 0;
      std::fprintf(stderr, "hyperslice dev: no join token Secret %s/runner-join-%s\n",
                   kOperatorNamespace, a.runner.c_str());
      return 1;
    }
    fs::create_directories(a.state_dir, ec);
    const std::string token_file = stack.tmp_dir + "/" + a.runner + ".token";
    {
      std::ofstream(token_file) << token << "\n";
      fs::permissions(token_file, fs::perms::owner_read | fs::perms::owner_write,
                      fs::perm_options::replace, ec);
    }
    if (Status s = a.Start(self.string(), token_file, stack.servers->link_port(),
                           stack.tmp_dir + "/runners-ca.crt", stack.registry->host());
        !s.ok()) {
      std::fprintf(stderr, "hyperslice dev: %s\n", s.error().ToString().c_str());
      return 1;
    }
    Say("hyperslice dev: runner-agent %s started on %s (pid %d, state in %s, log %s) with its "
        "one-time join token\n",
        a.runner.c_str(), a.address.c_str(), static_cast<int>(a.pid), a.state_dir.c_str(),
        a.log_file.c_str());
  }

  // Both linked, and the control node's Node carries their summed capacity.
  std::map<std::string, bool> linked;
  int64_t cpu = 0;
  bool ok = WaitFor(
      [&] {
        for (auto& a : stack.agents) {
          if (a.Exited()) return true;  // said below
          auto r = stack.client->Get(cn::Runners(), "", a.runner);
          const json::object* status = r.ok() ? ObjectField(*r, "status") : nullptr;
          if (StringField(status, "phase") == "Linked" && !linked[a.runner]) {
            linked[a.runner] = true;
            Say("  [%6.1fs] Runner %s Linked (region %s, identity serial %s)\n", elapsed(),
                a.runner.c_str(), std::string(StringField(status, "region")).c_str(),
                std::string(StringField(ObjectField(status, "identity"), "serial")).c_str());
          }
        }
        auto n = stack.client->Get(kube::resources::Nodes(), "", stack.control_node);
        cpu = n.ok() ? Milli(std::string(StringField(ObjectAt(*n, "status.capacity"), "cpu"))) : 0;
        return linked.size() == stack.agents.size() && cpu == 8000;
      },
      deadline, f.stop_signals, &sig);
  for (auto& a : stack.agents) {
    if (a.Exited()) {
      std::fprintf(stderr, "hyperslice dev: runner-agent %s exited; see %s\n", a.runner.c_str(),
                   a.log_file.c_str());
      return 1;
    }
  }
  if (!ok) {
    if (sig != 0) return 0;
    std::fprintf(stderr,
                 "hyperslice dev: the runners did not link within %d s (Node cpu capacity %lld "
                 "m); logs in %s\n",
                 f.timeout_s, static_cast<long long>(cpu), f.work_dir.c_str());
    return 1;
  }
  Say("  [%6.1fs] Node %s: capacity cpu 8 = 4 + 4 (the two runners'); the runners are not "
      "Nodes\n",
      elapsed(), stack.control_node.c_str());

  // The Job (once the namespace's default ServiceAccount exists, or pods are refused).
  stack.job_ns = MetaString(job, "namespace");
  stack.job_name = MetaString(job, "name");
  ok = WaitFor(
      [&] {
        auto sa = stack.client->Raw(
            "GET", "/api/v1/namespaces/" + stack.job_ns + "/serviceaccounts/default");
        return sa.ok() && sa->status == 200;
      },
      deadline, f.stop_signals, &sig);
  if (!ok) return sig != 0 ? 0 : 1;
  if (Status s = dev::ServerSideApply(*stack.client, kube::resources::Jobs(), job); !s.ok()) {
    std::fprintf(stderr, "hyperslice dev: applying the Job: %s\n", s.error().ToString().c_str());
    return 1;
  }
  Say("  [%6.1fs] Job %s/%s applied (image by digest)\n", elapsed(), stack.job_ns.c_str(),
      stack.job_name.c_str());
  std::string pod, runner, logs;
  ok = WaitFor(
      [&] {
        kube::ListOptions lo;
        lo.label_selector = "job-name=" + stack.job_name;
        auto pods = stack.client->List(kube::resources::Pods(), stack.job_ns, lo);
        for (const auto& p : pods.ok() ? pods->items : std::vector<json::object>{}) {
          if (StringField(ObjectField(p, "status"), "phase") != "Running") continue;
          pod = MetaString(p, "name");
          runner =
              StringField(ObjectAt(p, "metadata.annotations"), "runners.hyperslice.dev/runner");
          auto l = stack.client->Raw(
              "GET", "/api/v1/namespaces/" + stack.job_ns + "/pods/" + pod + "/log");
          logs = l.ok() && l->status == 200 ? l->body : "";
          return logs.find("GREETING=") != std::string::npos;
        }
        return false;
      },
      deadline, f.stop_signals, &sig);
  if (!ok) {
    if (sig != 0) return 0;
    std::fprintf(stderr, "hyperslice dev: the Job's pod did not run within %d s; logs in %s\n",
                 f.timeout_s, f.work_dir.c_str());
    return 1;
  }
  std::string region;
  for (const auto& a : stack.agents) {
    if (a.runner == runner) region = a.region;
  }
  Say("  [%6.1fs] pod %s/%s Running on Node %s, as a runc container on runner %s (%s)\n", elapsed(),
      stack.job_ns.c_str(), pod.c_str(), stack.control_node.c_str(), runner.c_str(),
      region.c_str());
  Say("  its output (kubectl logs, through the apiserver and the control node's kubelet API):\n");
  std::istringstream lines(logs);
  for (std::string line; std::getline(lines, line);) Say("    %s\n", line.c_str());

  std::string table = dev::KubectlGet(c.kubeconfig_path(), "nodes,controlnodes,runners,pods");
  if (!table.empty())
    Say("$ kubectl get nodes,controlnodes,runners,pods -A -o wide\n%s\n", table.c_str());
  Say("Try:\n"
      "  export KUBECONFIG=%s\n"
      "  kubectl get nodes -o wide                 # the control node only, cpu 8\n"
      "  kubectl get controlnodes,runners\n"
      "  kubectl logs job/%s\n"
      "  kubectl exec job/%s -- /hstest print:inside exit:3   # exits 3\n"
      "Agents' logs: %s/runner-eu.log, %s/runner-us.log; operator: %s/hyperslice.log\n",
      c.kubeconfig_path().c_str(), stack.job_name.c_str(), stack.job_name.c_str(),
      f.work_dir.c_str(), f.work_dir.c_str(), f.work_dir.c_str());
  if (f.exit_when_ready) {
    Say("hyperslice dev: stopping (--exit-when-ready)\n");
    return 0;
  }
  Say("Press Ctrl-C to stop.\n");
  sigwait(&f.stop_signals, &sig);
  Say("hyperslice dev: stopping (signal %d)\n", sig);
  return 0;
}

}  // namespace hyperslice::cmd
