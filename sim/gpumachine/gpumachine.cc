#include "sim/gpumachine/gpumachine.h"

#include <yaml-cpp/yaml.h>

#include <stdlib.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "sim/gpumachine/port_map.h"
#include "src/base/base64.h"
#include "src/base/command.h"
#include "src/base/files.h"
#include "src/base/log.h"
#include "src/base/strings.h"

namespace hyperslice::sim::gpumachine {

namespace {

Error Unusable(std::string message) {
  return Error::Make(Error::Code::kInvalidArgument, std::move(message), "PayloadUnusable");
}

// The body of the heredoc `cat > <path> <<'<DELIM>'` ... `<DELIM>`, as the shell writes the file;
// nullopt when the script writes no such file.
std::optional<std::string> Heredoc(std::string_view script, std::string_view path) {
  std::string head = "cat > " + std::string(path) + " <<'";
  size_t at = 0;
  while ((at = script.find(head, at)) != std::string_view::npos) {
    if (at != 0 && script[at - 1] != '\n') {
      at += head.size();
      continue;
    }
    size_t delim_start = at + head.size();
    size_t quote = script.find('\'', delim_start);
    size_t eol = script.find('\n', delim_start);
    if (quote == std::string_view::npos || eol == std::string_view::npos || quote > eol)
      return std::nullopt;
    std::string delim(script.substr(delim_start, quote - delim_start));
    size_t body = eol + 1;
    std::string end = "\n" + delim + "\n";
    size_t stop = script.find(end, body - 1);
    if (stop == std::string_view::npos) return std::nullopt;
    return std::string(script.substr(body, stop + 1 - body));
  }
  return std::nullopt;
}

std::map<std::string, std::string> EnvFile(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t nl = text.find('\n', i);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(i, nl - i);
    size_t eq = line.find('=');
    if (eq != std::string::npos && !line.empty() && line[0] != '#')
      out[line.substr(0, eq)] = line.substr(eq + 1);
    i = nl + 1;
  }
  return out;
}

// NODE_LABELS, REGISTER_WITH_TAINTS: comma-separated, nothing when unset; an empty piece is kept
// (and refused as malformed).
std::vector<std::string> CommaList(const std::string& s) {
  return s.empty() ? std::vector<std::string>{} : Split(s, ',');
}

// "key=value:Effect" (value optional), as --register-with-taints takes them.
Result<kubelet::NodeTaintSpec> ParseTaint(const std::string& t) {
  size_t colon = t.rfind(':');
  if (colon == std::string::npos) return Unusable("taint without effect");
  kubelet::NodeTaintSpec out;
  out.effect = t.substr(colon + 1);
  std::string kv = t.substr(0, colon);
  size_t eq = kv.find('=');
  out.key = kv.substr(0, eq);
  if (eq != std::string::npos) out.value = kv.substr(eq + 1);
  if (out.key.empty() || out.effect.empty()) return Unusable("malformed taint");
  return out;
}

}  // namespace

Result<JoinConfig> ReadJoinScript(std::string_view script, const std::string& instance_id) {
  if (script.rfind("#!", 0) != 0) return Unusable("user data is not a script");
  auto kubeconfig = Heredoc(script, "/etc/kubernetes/bootstrap-kubelet.conf");
  if (!kubeconfig) return Unusable("the script writes no bootstrap kubeconfig");
  auto env_text = Heredoc(script, "/etc/hyperslice/kubelet.env");
  if (!env_text) return Unusable("the script writes no kubelet environment");
  JoinConfig c;
  c.kind = "script";
  try {
    // kubelet --bootstrap-kubeconfig reads the current context's cluster and user.
    YAML::Node kc = YAML::Load(*kubeconfig);
    std::string context_name = kc["current-context"].as<std::string>("");
    std::string cluster_name, user_name;
    for (const auto& ctx : kc["contexts"]) {
      if (ctx["name"].as<std::string>("") != context_name) continue;
      cluster_name = ctx["context"]["cluster"].as<std::string>("");
      user_name = ctx["context"]["user"].as<std::string>("");
    }
    for (const auto& cl : kc["clusters"]) {
      if (cl["name"].as<std::string>("") != cluster_name) continue;
      c.server = cl["cluster"]["server"].as<std::string>("");
      auto ca = Base64Decode(cl["cluster"]["certificate-authority-data"].as<std::string>(""),
                             "certificate-authority-data");
      if (ca.ok()) c.ca_pem = *ca;
    }
    for (const auto& u : kc["users"]) {
      if (u["name"].as<std::string>("") == user_name)
        c.token = u["user"]["token"].as<std::string>("");
    }
  } catch (const YAML::Exception& e) {
    return Unusable(std::string("the bootstrap kubeconfig does not parse: ") + e.what());
  }
  if (c.server.empty() || c.ca_pem.empty() || c.token.empty())
    return Unusable("the bootstrap kubeconfig lacks a server, CA or token");
  auto env = EnvFile(*env_text);
  c.node_name = env["NODE_NAME"];
  // The script appends INSTANCE_ID from `cloud-init query v1.instance_id`; this machine's answer
  // is its provider instance id.
  if (script.find("cloud-init query v1.instance_id") == std::string_view::npos)
    return Unusable("the script does not say how to learn the instance id");
  c.provider_id = env["PROVIDER_ID_PREFIX"] + instance_id;
  if (c.node_name.empty() || env["PROVIDER_ID_PREFIX"].empty())
    return Unusable("the kubelet environment lacks NODE_NAME or PROVIDER_ID_PREFIX");
  for (const auto& l : CommaList(env["NODE_LABELS"])) {
    size_t eq = l.find('=');
    if (eq == std::string::npos) return Unusable("malformed node label");
    c.labels[l.substr(0, eq)] = l.substr(eq + 1);
  }
  for (const auto& t : CommaList(env["REGISTER_WITH_TAINTS"])) {
    auto taint = ParseTaint(t);
    if (!taint.ok()) return taint.error();
    c.taints.push_back(*taint);
  }
  if (auto key = Heredoc(script, "/etc/hyperslice/tailscale-authkey")) {
    c.tailnet_auth_key = key->substr(0, key->find('\n'));
    size_t at = script.find("--login-server=");
    if (at != std::string_view::npos) {
      size_t end = script.find_first_of(" \n", at);
      at += std::string_view("--login-server=").size();
      c.tailnet_login_server = std::string(script.substr(at, end - at));
    }
  }
  return c;
}

Result<JoinConfig> ReadTalosConfig(std::string_view yaml, const std::string& provider,
                                   const std::string& instance_id) {
  JoinConfig c;
  c.kind = "talos";
  try {
    for (const YAML::Node& doc : YAML::LoadAll(std::string(yaml))) {
      if (!doc.IsMap()) continue;
      std::string kind = doc["kind"].as<std::string>("");
      if (kind.empty() && doc["version"].as<std::string>("") == "v1alpha1") {
        YAML::Node cluster = doc["cluster"];
        c.token = cluster["token"].as<std::string>("");
        c.server = cluster["controlPlane"]["endpoint"].as<std::string>("");
        auto ca = Base64Decode(cluster["ca"]["crt"].as<std::string>(""), "cluster.ca.crt");
        if (ca.ok()) c.ca_pem = *ca;
        for (const auto& l : doc["machine"]["nodeLabels"])
          c.labels[l.first.as<std::string>()] = l.second.as<std::string>("");
        for (const auto& t : doc["machine"]["nodeTaints"]) {
          // Talos: key: value:Effect.
          auto taint = ParseTaint(t.first.as<std::string>() + "=" + t.second.as<std::string>(""));
          if (!taint.ok()) return taint.error();
          c.taints.push_back(*taint);
        }
      } else if (kind == "HostnameConfig") {
        c.node_name = doc["hostname"].as<std::string>("");
      } else if (kind == "ExtensionServiceConfig" &&
                 doc["name"].as<std::string>("") == "tailscale") {
        for (const auto& e : doc["environment"]) {
          std::string kv = e.as<std::string>("");
          if (kv.rfind("TS_AUTHKEY=", 0) == 0) c.tailnet_auth_key = kv.substr(11);
        }
      }
    }
  } catch (const YAML::Exception& e) {
    return Unusable(std::string("the Talos machine config does not parse: ") + e.what());
  }
  if (c.server.empty() || c.ca_pem.empty() || c.token.empty())
    return Unusable("the Talos machine config lacks cluster.token, cluster.ca or the endpoint");
  if (c.node_name.empty()) return Unusable("the Talos machine config names no hostname");
  c.provider_id = provider + "://" + instance_id;
  return c;
}

Result<std::string> UnpackScriptStub(std::string_view stub) {
  std::string pattern = (std::filesystem::temp_directory_path() / "hs-stub-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Error::Make(Error::Code::kInternal, "sim gpumachine: mkdtemp failed");
  }
  std::filesystem::path dir(pattern);
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};
  auto write = [](const std::filesystem::path& path, std::string_view text, bool exec) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (exec) {
      std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                                   std::filesystem::perm_options::replace);
    }
    return f.good();
  };
  std::filesystem::create_directory(dir / "bin");
  std::filesystem::create_directory(dir / "tmp");
  // The shim stands in for bash: it keeps the script the stub hands it.
  if (!write(dir / "bin" / "bash", "#!/bin/sh\ncat \"$1\" > \"$HS_UNPACKED\"\n", true) ||
      !write(dir / "stub.sh", stub, false)) {
    return Error::Make(Error::Code::kInternal, "sim gpumachine: cannot write the stub");
  }
  std::string unpacked = (dir / "unpacked").string();
  auto r = RunCommand({"/usr/bin/env", "-i", "PATH=" + (dir / "bin").string() + ":/usr/bin:/bin",
                       "TMPDIR=" + (dir / "tmp").string(), "HS_UNPACKED=" + unpacked, "/bin/sh",
                       (dir / "stub.sh").string()});
  if (r.exit_code != 0) {
    return Unusable("the startup script failed (exit " + std::to_string(r.exit_code) +
                    "): " + r.errors.substr(0, 200));
  }
  auto text = ReadFile(unpacked);
  if (!text.ok()) return Unusable("the startup script ran no script");
  return text;
}

Result<JoinConfig> ReadPayload(const boost::json::object& payload, const std::string& provider,
                               const std::string& instance_id) {
  std::string text;
  std::vector<const char*> fields = {"user_data", "startup_script"};
  if (const auto* vm = payload.if_contains("vm"); vm != nullptr && vm->is_bool()) {
    // Vast: the onstart script; only a VM runs systemd and a kubelet.
    if (!vm->get_bool()) return Unusable("a container instance cannot run a kubelet");
    fields = {"onstart"};
  }
  for (const char* field : fields) {
    const auto* v = payload.if_contains(field);
    if (v != nullptr && v->is_string() && !v->as_string().empty()) {
      text = std::string(v->as_string());
      break;
    }
  }
  if (text.empty()) return Unusable("the machine was given nothing to boot from");
  if (text.rfind("#!/bin/sh\n", 0) == 0 &&
      text.find("/etc/kubernetes/bootstrap-kubelet.conf") == std::string::npos) {
    // Not the join script itself: a stub that unpacks and runs one (Vast's onstart).
    HS_ASSIGN_OR_RETURN(text, UnpackScriptStub(text));
  }
  if (text.rfind("#!", 0) == 0) return ReadJoinScript(text, instance_id);
  if (text.find("version: v1alpha1") != std::string::npos)
    return ReadTalosConfig(text, provider, instance_id);
  return Unusable("the payload is neither a script nor a Talos machine config");
}

std::optional<RunnerAgentContainer> ReadRunnerAgentContainer(const boost::json::object& payload) {
  RunnerAgentContainer c;
  if (const auto* image = payload.if_contains("image"); image != nullptr && image->is_string()) {
    c.image = std::string(image->as_string());
  }
  if (const auto* env = payload.if_contains("env"); env != nullptr && env->is_object()) {
    for (const auto& [k, v] : env->as_object()) {
      // Vast's docker options ride in env as keys ("-p 7443:7443"): options, not variables.
      if (v.is_string() && !k.starts_with("-")) c.env[std::string(k)] = std::string(v.as_string());
    }
  }
  if (const auto* args = payload.if_contains("args"); args != nullptr) {
    if (args->is_string()) {
      std::istringstream words{std::string(args->as_string())};
      for (std::string w; words >> w;) c.args.push_back(w);
    } else if (args->is_array()) {
      for (const auto& a : args->as_array()) {
        if (a.is_string()) c.args.emplace_back(a.as_string());
      }
    }
  }
  if (c.image.empty() || c.args.empty() || c.args.front() != "runner-agent" ||
      !c.env.contains("HYPERSLICE_LINK_ENDPOINT")) {
    return std::nullopt;
  }
  return c;
}

namespace {

// The env a provider gives its containers about their public address and published ports.
struct ProviderEnv {
  const char* provider;     // market provider name
  const char* public_ip;    // the machine's public address
  const char* port_prefix;  // + container port: the public port mapped to it
};
constexpr ProviderEnv kProviderEnv[] = {
    {"runpod", "RUNPOD_PUBLIC_IP", "RUNPOD_TCP_PORT_"},
    {"vastai", "PUBLIC_IPADDR", "VAST_TCP_PORT_"},
};

// A runner-agent container's network in the simulator: its own address and its published ports
// relayed from the machine's public address, both on loopback (127.A.B.201 public, .202 the
// container's; A.B random so parallel test processes do not meet).
struct ContainerNet {
  std::string public_ip, address;
  std::map<int, std::string> published;
  std::vector<std::unique_ptr<PortMap>> maps;
};

Result<ContainerNet> MapPorts(const market::Instance& i) {
  std::seed_seq seq(i.id.begin(), i.id.end());
  std::mt19937 rng(seq);
  rng.discard(static_cast<unsigned long long>(::getpid()) % 1000);
  std::uniform_int_distribution<int> a(16, 250), b(0, 255);
  for (int attempt = 0; attempt < 32; ++attempt) {
    std::string prefix = "127." + std::to_string(a(rng)) + "." + std::to_string(b(rng)) + ".";
    ContainerNet net{.public_ip = prefix + "201", .address = prefix + "202"};
    bool taken = false;
    for (const auto& [port, public_port] : i.tcp_ports) {
      auto map = PortMap::Start(net.public_ip, public_port, net.address, port);
      if (!map.ok() && map.error().reason == "AddressInUse") {
        taken = true;
        break;
      }
      if (!map.ok()) return map.error();
      net.maps.push_back(std::move(*map));
      net.published[port] = net.public_ip + ":" + std::to_string(public_port);
    }
    if (!taken) return net;
  }
  return Error::Make(Error::Code::kUnavailable, "no free loopback address for the machine");
}

}  // namespace

struct Fleet::Impl {
  explicit Impl(Options o) : o_(std::move(o)) {}

  void Run() {
    while (true) {
      market::Instance i;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        i = std::move(queue_.front());
        queue_.pop_front();
      }
      Handle(i);
    }
  }

  void Notify(const market::Instance& i) {
    std::lock_guard lock(mu_);
    queue_.push_back(i);
    cv_.notify_all();
  }

  void Handle(const market::Instance& i) {
    std::unique_ptr<kubelet::Agent> gone;
    std::function<void()> stop_container;
    std::vector<std::unique_ptr<PortMap>> maps;
    {
      std::lock_guard lock(mu_);
      Entry& e = machines_[i.id];
      e.m.instance_id = i.id;
      e.m.state = i.state;
      if (i.state == market::State::kStopping || i.state == market::State::kTerminated) {
        gone = std::move(e.agent);
        stop_container = std::exchange(e.stop_container, nullptr);
        for (auto& map : e.maps) e.m.published_connections += map->connections();
        maps.swap(e.maps);  // closed below, outside the lock: its ports go with the machine
        e.m.joined = false;
      } else if (i.state != market::State::kRunning || e.booted) {
        return;
      }
    }
    if (stop_container) {
      stop_container();  // the container is gone with its machine
      log::Info("sim gpumachine: machine stopped", {{"instance", i.id}});
      return;
    }
    if (gone) {
      gone->Vanish();  // the machine is off: no more Lease, status or pods
      {
        std::lock_guard lock(mu_);
        machines_[i.id].m.agent = gone->state();  // kept for whoever asks what it last did
      }
      log::Info("sim gpumachine: machine stopped", {{"instance", i.id}});
      return;
    }
    if (i.state != market::State::kRunning) return;
    Boot(i);
  }

  void Boot(const market::Instance& i) {
    if (auto container = ReadRunnerAgentContainer(i.payload)) return StartContainer(i, *container);
    std::string provider = o_.market->options().provider;
    auto cfg = ReadPayload(i.payload, provider, i.id);
    auto record = [&](const std::string& reason, const std::string& message) {
      std::lock_guard lock(mu_);
      Entry& e = machines_[i.id];
      e.booted = true;
      e.m.reason = reason;
      e.m.message = message;
      if (cfg.ok()) e.m.kind = cfg->kind;
      log::Warn("sim gpumachine: machine not joining",
                {{"instance", i.id}, {"reason", reason}, {"message", message}});
    };
    if (!cfg.ok()) return record(cfg.error().reason, cfg.error().message);
    if (!cfg->tailnet_auth_key.empty()) {
      if (!o_.tailnet) return record("TailnetUnavailable", "the payload joins a tailnet");
      if (Status st = o_.tailnet(i, *cfg); !st.ok())
        return record("TailnetJoinFailed", st.error().message);
    }
    kubelet::AgentOptions ao;
    kubelet::BootstrapJoin b;
    b.server = cfg->server;
    b.ca_pem = cfg->ca_pem;
    b.token = cfg->token;
    b.provider_id = cfg->provider_id;
    b.labels = cfg->labels;
    b.taints = cfg->taints;
    if (i.listing.gpu_count > 0) b.devices["nvidia.com/gpu"] = i.listing.gpu_count;
    ao.bootstrap = std::move(b);
    ao.instance = cfg->node_name;
    // No node.kubernetes.io/instance-type from the machine itself (a kubelet without a cloud
    // provider sets none); the claim controller labels it from the offer.
    ao.run_pods = o_.run_pods;
    ao.lease_renew_interval = o_.lease_renew_interval;
    ao.node_status_update_interval = o_.node_status_update_interval;
    ao.retry_interval = o_.retry_interval;
    ao.cpu = std::to_string(i.listing.vcpus);
    ao.memory = std::to_string(static_cast<int64_t>(i.listing.memory_gb)) + "Gi";
    auto agent = kubelet::Agent::Start(std::move(ao));
    if (!agent.ok()) return record("AgentFailed", agent.error().message);
    log::Info("sim gpumachine: machine booted",
              {{"instance", i.id}, {"payload", cfg->kind}, {"node", cfg->node_name}});
    std::lock_guard lock(mu_);
    Entry& e = machines_[i.id];
    e.booted = true;
    e.m.kind = cfg->kind;
    e.m.joined = true;
    e.agent = std::move(*agent);
  }

  void StartContainer(const market::Instance& i, const RunnerAgentContainer& c) {
    auto record = [&](const std::string& reason, const std::string& message) {
      std::lock_guard lock(mu_);
      Entry& e = machines_[i.id];
      e.booted = true;
      e.m.kind = "runner-agent";
      e.m.reason = reason;
      e.m.message = message;
      log::Warn("sim gpumachine: machine not joining",
                {{"instance", i.id}, {"reason", reason}, {"message", message}});
    };
    if (!o_.runner_agent) {
      return record("RunnerAgentUnavailable", "the machine runs a runner-agent container");
    }
    auto net = MapPorts(i);
    if (!net.ok()) return record("PortMappingFailed", net.error().message);
    RunnerAgentContainer container = c;
    container.address = net->address;
    container.published = net->published;
    for (const auto& pe : kProviderEnv) {
      if (o_.market->options().provider != pe.provider) continue;
      container.env[pe.public_ip] = net->public_ip;
      for (const auto& [port, public_port] : i.tcp_ports) {
        container.env[pe.port_prefix + std::to_string(port)] = std::to_string(public_port);
      }
    }
    auto stop = o_.runner_agent(i, container);
    if (!stop.ok()) return record("RunnerAgentFailed", stop.error().message);
    log::Info("sim gpumachine: runner-agent container started",
              {{"instance", i.id}, {"address", net->address}, {"public_ip", net->public_ip}});
    std::lock_guard lock(mu_);
    Entry& e = machines_[i.id];
    e.booted = true;
    e.m.kind = "runner-agent";
    e.m.joined = true;
    e.m.published = net->published;
    e.maps = std::move(net->maps);
    e.stop_container = std::move(*stop);
  }

  void Stop() {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    o_.market->Unsubscribe(subscription_);
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
    std::map<std::string, Entry> machines;
    {
      std::lock_guard lock(mu_);
      machines.swap(machines_);
    }
    for (auto& [id, e] : machines) {
      if (e.agent) e.agent->Vanish();
      if (e.stop_container) e.stop_container();
    }
  }

  struct Entry {
    Machine m;
    bool booted = false;  // its payload was read (a machine boots once)
    std::unique_ptr<kubelet::Agent> agent;
    std::function<void()> stop_container;  // a runner-agent container's (Options::runner_agent)
    std::vector<std::unique_ptr<PortMap>> maps;  // its published ports, gone with the machine
  };

  Machine Snapshot(const Entry& e) const {
    Machine m = e.m;
    if (e.agent) m.agent = e.agent->state();
    for (const auto& map : e.maps) m.published_connections += map->connections();
    return m;
  }

  Options o_;
  uint64_t subscription_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, stopped_ = false;
  std::deque<market::Instance> queue_;
  std::map<std::string, Entry> machines_;
};

Fleet::Fleet(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Fleet::~Fleet() { Stop(); }

Result<std::unique_ptr<Fleet>> Fleet::Start(Options options) {
  if (options.market == nullptr)
    return Error::Make(Error::Code::kInvalidArgument, "sim gpumachine: a market is required");
  auto impl = std::make_unique<Impl>(std::move(options));
  Impl* raw = impl.get();
  raw->thread_ = std::thread([raw] { raw->Run(); });
  raw->subscription_ =
      raw->o_.market->Subscribe([raw](const market::Instance& i) { raw->Notify(i); });
  return std::unique_ptr<Fleet>(new Fleet(std::move(impl)));
}

std::vector<Machine> Fleet::Machines() const {
  std::lock_guard lock(impl_->mu_);
  std::vector<Machine> out;
  for (const auto& [id, e] : impl_->machines_) out.push_back(impl_->Snapshot(e));
  return out;
}

std::optional<Machine> Fleet::Get(const std::string& instance_id) const {
  std::lock_guard lock(impl_->mu_);
  auto it = impl_->machines_.find(instance_id);
  if (it == impl_->machines_.end()) return std::nullopt;
  return impl_->Snapshot(it->second);
}

void Fleet::Stop() {
  if (impl_) impl_->Stop();
}

}  // namespace hyperslice::sim::gpumachine
