// One simulated VM: startup script + kubeadm join + kubelet, minus containers. The steps read in
// the order a real VM takes them: metadata → discovery → TLS bootstrap → registration →
// heartbeats. See agent.h for the contract.
#include "sim/kubelet/agent.h"

#include <algorithm>
#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <thread>

#include <yaml-cpp/yaml.h>
#include <boost/json.hpp>

#include "sim/kubelet/internal/crypto.h"
#include "sim/kubelet/pod_runtime.h"
#include "src/base/base64.h"
#include "src/base/json.h"
#include "src/base/log.h"
#include "src/kube/client.h"
#include "src/kube/node_conditions.h"
#include "src/kube/object_helpers.h"
#include "src/net/http.h"
#include "src/tpu/api.h"
#include "src/tpu/topology.h"

namespace hyperslice::sim::kubelet {

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kWaitingForJoinValues:
      return "WaitingForJoinValues";
    case Phase::kDiscovery:
      return "Discovery";
    case Phase::kTlsBootstrap:
      return "TLSBootstrap";
    case Phase::kRegistering:
      return "Registering";
    case Phase::kRunning:
      return "Running";
    case Phase::kHeartbeatStopped:
      return "HeartbeatStopped";
    case Phase::kJoinRefused:
      return "JoinRefused";
    case Phase::kStopped:
      return "Stopped";
  }
  return "Unknown";
}

namespace {

namespace json = boost::json;
using jsonfield::ObjectField;
using jsonfield::StringValue;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kSignerKubeletClient[] = "kubernetes.io/kube-apiserver-client-kubelet";
constexpr char kNodeLeaseNamespace[] = "kube-node-lease";
constexpr char kKubeletVersion[] = "v1.36.3";

// Reasons a join is refused: the cluster cannot be trusted or the join values are unusable.
// Retrying with the same values cannot help, so the agent waits for its metadata to change.
bool Refusal(const std::string& reason) {
  return reason == "CACertHashMismatch" || reason == "JWSInvalid" || reason == "InvalidToken" ||
         reason == "InvalidClusterInfo" || reason == "ClusterInfoChanged";
}

Error Fail(Error::Code code, std::string reason, std::string message) {
  return Error::Make(code, std::move(message), std::move(reason));
}

// "10.128.0.2" → "https://10.128.0.2:6443"; keeps a given scheme and port.
std::string DiscoveryUrl(const std::string& address) {
  std::string s = address;
  if (s.find("://") == std::string::npos) s = "https://" + s;
  std::string host = s.substr(s.find("://") + 3);
  bool has_port = host.rfind(']') != std::string::npos
                      ? host.find(':', host.rfind(']')) != std::string::npos
                      : host.find(':') != std::string::npos;
  if (!has_port) s += ":6443";
  return s;
}

// "k=v,k2=v2" → labels (kubelet --node-labels).
Result<std::map<std::string, std::string>> ParseLabels(const std::string& s) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t comma = s.find(',', i);
    if (comma == std::string::npos) comma = s.size();
    std::string kv = s.substr(i, comma - i);
    i = comma + 1;
    if (kv.empty()) continue;
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return Fail(Error::Code::kInvalidArgument, "InvalidLabels",
                  "kube-labels entry '" + kv + "' is not key=value");
    out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

struct JoinValues {
  std::string token, ca_hash, control_plane, labels, ip;
};

class AgentImpl final : public Agent {
 public:
  explicit AgentImpl(AgentOptions options) : options_(std::move(options)) {
    st_.node_name = options_.instance;
    st_.provider_id = options_.bootstrap
                          ? options_.bootstrap->provider_id
                          : tpu::ProviderId(options_.project, options_.zone, options_.instance);
  }
  ~AgentImpl() override {
    Vanish();
    if (own_root_) {
      std::error_code ec;
      std::filesystem::remove_all(vm_root_, ec);
    }
  }

  Status Init() {
    if (options_.bootstrap) {
      const BootstrapJoin& b = *options_.bootstrap;
      if (options_.instance.empty() || b.server.empty() || b.token.empty() || b.provider_id.empty())
        return Error::Make(Error::Code::kInvalidArgument,
                           "sim kubelet: instance, server, token and provider_id are required");
      HS_RETURN_IF_ERROR(MakeVmRoot());
      Boot();
      return OkStatus();
    }
    if (options_.project.empty() || options_.zone.empty() || options_.instance.empty() ||
        options_.metadata_host.empty())
      return Error::Make(Error::Code::kInvalidArgument,
                         "sim kubelet: project, zone, instance and metadata_host are required");
    HS_ASSIGN_OR_RETURN(metadata_,
                        net::HttpClient::Create({.base_url = "http://" + options_.metadata_host,
                                                 .connect_timeout = std::chrono::seconds(5),
                                                 .user_agent = "hyperslice-sim-kubelet"}));
    if (auto mt = tpu::LookupMachineType(options_.machine_type); mt.ok())
      chips_ = mt->chips_per_host;
    HS_RETURN_IF_ERROR(MakeVmRoot());
    Boot();
    return OkStatus();
  }

  AgentState state() const override {
    std::lock_guard lock(mu_);
    return st_;
  }
  const AgentOptions& options() const override { return options_; }

  void StopHeartbeating() override {
    std::lock_guard lock(mu_);
    heartbeating_ = false;
    cv_.notify_all();
  }

  void Vanish() override {
    std::lock_guard life(lifecycle_mu_);
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      if (watch_ != nullptr) watch_->Cancel();
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(mu_);
    st_.phase = Phase::kStopped;
  }

  void Restore() override {
    std::lock_guard life(lifecycle_mu_);
    {
      std::lock_guard lock(mu_);
      heartbeating_ = true;
      cv_.notify_all();
      if (!stop_) return;
    }
    if (thread_.joinable()) thread_.join();
    Boot();
  }

 private:
  // The VM's "/": with run_pods, the TPU chips as the accel driver shows them (/dev/accel<N>, and
  // /sys/class/accel/accel<N>/device -> its PCI function with vendor 0x1ae0 and a NUMA node: the
  // first half of the chips on node 0, the rest on node 1).
  Status MakeVmRoot() {
    namespace fs = std::filesystem;
    vm_root_ = options_.vm_root;
    if (vm_root_.empty()) {
      char tmpl[] = "/tmp/hsvm-XXXXXX";
      if (::mkdtemp(tmpl) == nullptr)
        return Error::Make(Error::Code::kInternal, "sim kubelet: cannot make the VM's folder");
      vm_root_ = tmpl;
      own_root_ = true;
    }
    std::error_code ec;
    fs::create_directories(fs::path(vm_root_) / "dev", ec);
    if (ec)
      return Error::Make(Error::Code::kInternal, "sim kubelet: " + vm_root_ + ": " + ec.message());
    if (!options_.run_pods) return OkStatus();
    for (int n = 0; n < chips_; ++n) {
      std::string bdf = "0000:00:" + std::to_string(4 + n) + ".0";
      fs::path pci = fs::path(vm_root_) / "sys/bus/pci/devices" / bdf;
      fs::create_directories(pci, ec);
      std::ofstream(pci / "vendor") << "0x1ae0\n";
      std::ofstream(pci / "numa_node") << (n < (chips_ + 1) / 2 ? 0 : 1) << "\n";
      fs::path cls = fs::path(vm_root_) / "sys/class/accel" / ("accel" + std::to_string(n));
      fs::create_directories(cls, ec);
      if (!fs::exists(cls / "device")) fs::create_directory_symlink(pci, cls / "device", ec);
      std::ofstream(fs::path(vm_root_) / "dev" / ("accel" + std::to_string(n)));
    }
    return OkStatus();
  }

  void Boot() {
    {
      std::lock_guard lock(mu_);
      stop_ = false;
      heartbeating_ = true;
      st_.phase = !disk_.cert_pem.empty() ? Phase::kRegistering
                  : options_.bootstrap    ? Phase::kTlsBootstrap
                                          : Phase::kWaitingForJoinValues;
    }
    thread_ = std::thread([this] { Run(); });
  }

  bool Stopping() const {
    std::lock_guard lock(mu_);
    return stop_;
  }

  // Waits `d` unless stopped (false) or woken by a heartbeat change.
  bool Wait(milliseconds d) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, d, [&] { return stop_; });
    return !stop_;
  }

  void SetPhase(Phase p, std::string message = {}) {
    std::lock_guard lock(mu_);
    st_.phase = p;
    st_.message = std::move(message);
    if (p == Phase::kRunning) st_.reason.clear();
  }

  void Record(const Error& e, Phase p) {
    std::lock_guard lock(mu_);
    st_.phase = p;
    st_.reason = e.reason;
    st_.message = e.message;
  }

  void Run() {
    log::Info("sim kubelet: VM booted", {{"instance", options_.instance}, {"zone", options_.zone}});
    milliseconds backoff = options_.retry_interval;
    while (!Stopping()) {
      bool joined;
      {
        std::lock_guard lock(mu_);
        joined = !disk_.cert_pem.empty();
      }
      if (!joined && options_.bootstrap) {
        // kubelet --bootstrap-kubeconfig: straight to the TLS bootstrap, retried with backoff
        // (a rejected token stays rejected: the machine never joins, as a real one would not).
        {
          std::lock_guard lock(mu_);
          ++st_.join_attempts;
        }
        const BootstrapJoin& b = *options_.bootstrap;
        Status boot = TlsBootstrap(b.server, b.ca_pem, b.token, b.labels, "");
        if (!boot.ok()) {
          if (boot.error().code == Error::Code::kCancelled) break;
          log::Warn("sim kubelet: TLS bootstrap failed", {{"instance", options_.instance},
                                                          {"reason", boot.error().reason},
                                                          {"error", boot.error().message}});
          Record(boot.error(), Phase::kTlsBootstrap);
          if (!Wait(backoff)) break;
          backoff = std::min(backoff * 2, options_.retry_interval * 10);
          continue;
        }
      } else if (!joined) {
        auto values = WaitForJoinValues();
        if (!values.ok()) {
          if (values.error().code == Error::Code::kCancelled) break;
          Record(values.error(), Phase::kWaitingForJoinValues);
          if (!Wait(backoff)) break;
          backoff = std::min(backoff * 2, options_.retry_interval * 10);
          continue;
        }
        {
          std::lock_guard lock(mu_);
          ++st_.join_attempts;
        }
        Status joined_now = Join(*values);
        if (!joined_now.ok()) {
          const Error& e = joined_now.error();
          if (e.code == Error::Code::kCancelled) break;
          bool refused = Refusal(e.reason);
          log::Warn(refused ? "sim kubelet: join refused" : "sim kubelet: join failed",
                    {{"instance", options_.instance}, {"reason", e.reason}, {"error", e.message}});
          if (refused) {
            // Nothing to retry with until the join values change.
            refused_etag_ = etag_;
            Record(e, Phase::kJoinRefused);
            continue;
          }
          Record(e, e.reason == "NodeExists" ? Phase::kWaitingForJoinValues : Phase::kDiscovery);
          if (!Wait(backoff)) break;
          backoff = std::min(backoff * 2, options_.retry_interval * 10);
          continue;
        }
      }
      Status registered = Register();
      if (!registered.ok()) {
        if (registered.error().code == Error::Code::kCancelled) break;
        log::Warn("sim kubelet: registering the node failed",
                  {{"instance", options_.instance}, {"error", registered.error().message}});
        Record(registered.error(), Phase::kRegistering);
        if (!Wait(backoff)) break;
        backoff = std::min(backoff * 2, options_.retry_interval * 10);
        continue;
      }
      backoff = options_.retry_interval;
      Heartbeat();
    }
    if (runtime_) runtime_->Stop();
    runtime_.reset();
    std::lock_guard lock(mu_);
    st_.phase = Phase::kStopped;
  }

  // ---- 1. metadata ----------------------------------------------------------------------------

  // Long-polls the VM's metadata until it holds the join values (and, after a refusal, until they
  // changed). kCancelled when the agent stops.
  Result<JoinValues> WaitForJoinValues() {
    // After a refusal the phase stays kJoinRefused (with its reason) until the values change.
    if (refused_etag_.empty())
      SetPhase(Phase::kWaitingForJoinValues, "waiting for kubeadm join values in metadata");
    while (!Stopping()) {
      std::string target = "/computeMetadata/v1/instance/?recursive=true";
      auto wait = std::max<int64_t>(1, options_.metadata_wait.count());
      if (!etag_.empty())
        target +=
            "&wait_for_change=true&last_etag=" + etag_ + "&timeout_sec=" + std::to_string(wait);
      auto resp = metadata_->Do({.method = "GET",
                                 .target = target,
                                 .headers = {{"Metadata-Flavor", "Google"}},
                                 .timeout = std::chrono::seconds(wait + 10)});
      if (Stopping()) break;
      if (!resp.ok() || resp->status != 200) {
        // Not there (yet or any more), or the metadata server is unreachable: plain retries.
        etag_.clear();
        if (!Wait(options_.retry_interval)) break;
        continue;
      }
      etag_ = resp->Header("etag");
      boost::system::error_code ec;
      json::value v = json::parse(resp->body, ec);
      if (ec || !v.is_object()) {
        etag_.clear();
        if (!Wait(options_.retry_interval)) break;
        continue;
      }
      JoinValues jv;
      if (const auto* attrs = ObjectField(v.as_object(), "attributes")) {
        jv.token = StringValue(*attrs, tpu::kMetaJoinToken);
        jv.ca_hash = StringValue(*attrs, tpu::kMetaCaHash);
        jv.control_plane = StringValue(*attrs, tpu::kMetaControlPlane);
        jv.labels = StringValue(*attrs, tpu::kMetaKubeLabels);
      }
      if (auto* nics = v.as_object().if_contains("networkInterfaces");
          nics && nics->is_array() && !nics->as_array().empty() &&
          nics->as_array()[0].is_object()) {
        jv.ip = StringValue(nics->as_array()[0].as_object(), "ip");
      }
      bool complete = !jv.token.empty() && !jv.ca_hash.empty() && !jv.control_plane.empty();
      if (complete && (refused_etag_.empty() || etag_ != refused_etag_)) {
        refused_etag_.clear();
        return jv;
      }
    }
    return Error::Make(Error::Code::kCancelled, "stopped");
  }

  // ---- 2. discovery + 3. TLS bootstrap ----------------------------------------------------------

  Status Join(const JoinValues& v) {
    static const std::regex kToken("^([a-z0-9]{6})\\.([a-z0-9]{16})$");
    std::smatch m;
    if (!std::regex_match(v.token, m, kToken))
      return Fail(Error::Code::kInvalidArgument, "InvalidToken",
                  "kubeadm-join-token is not a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16})");
    const std::string token_id = m[1], token_secret = m[2];
    auto labels = ParseLabels(v.labels);
    if (!labels.ok()) return labels.error();

    SetPhase(Phase::kDiscovery, "token discovery of the cluster CA");
    std::string endpoint = options_.discovery_endpoint.empty() ? DiscoveryUrl(v.control_plane)
                                                               : options_.discovery_endpoint;
    // (a) cluster-info without trusting the server yet.
    kube::Config insecure;
    insecure.server = endpoint;
    insecure.tls.insecure_skip_verify = true;
    insecure.user_agent = "kubeadm/sim";
    HS_ASSIGN_OR_RETURN(auto anon, kube::Client::Create(insecure));
    auto cm = anon->Get(kube::resources::ConfigMaps(), "kube-public", "cluster-info");
    if (!cm.ok())
      return Fail(
          Error::Code::kUnavailable, "ClusterInfoUnavailable",
          "reading kube-public/cluster-info from " + endpoint + " failed: " + cm.error().message);
    const json::object* data = ObjectField(*cm, "data");
    std::string kubeconfig = data ? StringValue(*data, "kubeconfig") : "";
    std::string jws = data ? StringValue(*data, "jws-kubeconfig-" + token_id) : "";
    if (kubeconfig.empty())
      return Fail(Error::Code::kInvalidArgument, "InvalidClusterInfo",
                  "kube-public/cluster-info has no kubeconfig");
    if (jws.empty())
      return Fail(Error::Code::kUnavailable, "JWSMissing",
                  "kube-public/cluster-info is not signed for token id " + token_id +
                      " (yet): the token does not exist or the bootstrap signer has not run");
    // (b) the signature proves the server knows the token secret.
    HS_RETURN_IF_ERROR(internal::VerifyDetachedJws(jws, kubeconfig, token_id, token_secret));
    // (c) the CA it names must be the pinned one.
    std::string server, ca_pem;
    try {
      YAML::Node kc = YAML::Load(kubeconfig);
      YAML::Node cluster = kc["clusters"][0]["cluster"];
      server = cluster["server"].as<std::string>("");
      auto decoded = Base64Decode(cluster["certificate-authority-data"].as<std::string>(""));
      if (decoded.ok()) ca_pem = *decoded;
    } catch (const YAML::Exception& e) {
      return Fail(Error::Code::kInvalidArgument, "InvalidClusterInfo",
                  std::string("cluster-info kubeconfig does not parse: ") + e.what());
    }
    if (server.empty() || ca_pem.empty())
      return Fail(Error::Code::kInvalidArgument, "InvalidClusterInfo",
                  "cluster-info kubeconfig lacks a server or certificate-authority-data");
    auto actual = internal::CaCertHash(ca_pem);
    if (!actual.ok())
      return Fail(Error::Code::kInvalidArgument, "InvalidClusterInfo",
                  "cluster-info CA does not parse: " + actual.error().message);
    bool pinned = false;
    for (size_t i = 0; i <= v.ca_hash.size();) {
      size_t comma = v.ca_hash.find(',', i);
      if (comma == std::string::npos) comma = v.ca_hash.size();
      std::string pin = v.ca_hash.substr(i, comma - i);
      std::transform(pin.begin(), pin.end(), pin.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      pinned = pinned || pin == *actual;
      i = comma + 1;
    }
    if (!pinned)
      return Fail(Error::Code::kInvalidArgument, "CACertHashMismatch",
                  "the cluster CA's public key hash " + *actual +
                      " matches no kubeadm-ca-hash pin; refusing to join");
    // (d) read it again over TLS verified with that CA; it must be the same document.
    kube::Config verified = insecure;
    verified.tls.insecure_skip_verify = false;
    verified.tls.ca_pem = ca_pem;
    HS_ASSIGN_OR_RETURN(auto secure, kube::Client::Create(verified));
    auto cm2 = secure->Get(kube::resources::ConfigMaps(), "kube-public", "cluster-info");
    if (!cm2.ok())
      return Fail(Error::Code::kUnavailable, "ClusterInfoUnavailable",
                  "reading cluster-info over verified TLS failed: " + cm2.error().message);
    const json::object* data2 = ObjectField(*cm2, "data");
    if (data2 == nullptr || StringValue(*data2, "kubeconfig") != kubeconfig)
      return Fail(Error::Code::kInvalidArgument, "ClusterInfoChanged",
                  "cluster-info read over verified TLS differs from the signed one");

    return TlsBootstrap(server, ca_pem, v.token, *labels, v.ip);
  }

  // kubelet TLS bootstrap with a bootstrap token: a CSR for system:node:<instance>, watched until
  // kube-controller-manager signs it; the signed certificate and key go to the VM's "disk".
  Status TlsBootstrap(const std::string& server, const std::string& ca_pem,
                      const std::string& token, const std::map<std::string, std::string>& labels,
                      const std::string& ip) {
    // The bootstrap token identity from here on.
    kube::Config boot;
    boot.server = server;
    boot.tls.ca_pem = ca_pem;
    boot.bearer_token = token;
    boot.user_agent = "kubelet/sim (bootstrap)";
    HS_ASSIGN_OR_RETURN(auto client, kube::Client::Create(boot));
    // kubeadm join: a Ready Node of this name means another machine holds it.
    auto existing = client->Get(kube::resources::Nodes(), "", options_.instance);
    if (existing.ok() && NodeReady(*existing))
      return Fail(Error::Code::kAlreadyExists, "NodeExists",
                  "a Node named " + options_.instance + " exists and is Ready");
    if (!existing.ok() && existing.error().code != Error::Code::kNotFound)
      return Fail(existing.error().code, "BootstrapTokenRejected",
                  "checking for an existing Node with the bootstrap token failed: " +
                      existing.error().message);

    SetPhase(Phase::kTlsBootstrap, "waiting for the node client certificate");
    HS_ASSIGN_OR_RETURN(auto kc,
                        internal::MakeCsr("system:node:" + options_.instance, "system:nodes"));
    json::object csr{
        {"apiVersion", "certificates.k8s.io/v1"},
        {"kind", "CertificateSigningRequest"},
        {"metadata", json::object{{"generateName", "csr-"}}},
        {"spec", json::object{{"request", Base64Encode(kc.csr_pem)},
                              {"signerName", kSignerKubeletClient},
                              {"usages", json::array{"digital signature", "client auth"}}}}};
    auto created = client->Create(kube::resources::CertificateSigningRequests(), "", csr);
    if (!created.ok())
      return Fail(created.error().code, "CSRCreateFailed",
                  "creating the CSR failed: " + created.error().message);
    const json::object* meta = ObjectField(*created, "metadata");
    std::string csr_name = meta ? StringValue(*meta, "name") : "";
    {
      std::lock_guard lock(mu_);
      st_.csr_name = csr_name;
    }
    log::Info("sim kubelet: CSR submitted", {{"instance", options_.instance}, {"csr", csr_name}});
    HS_ASSIGN_OR_RETURN(
        std::string cert_pem,
        WaitForCertificate(*client, csr_name,
                           meta ? StringValue(*meta, "resourceVersion") : std::string()));
    HS_ASSIGN_OR_RETURN(auto facts, internal::InspectCertificate(cert_pem, kc.key_pem));
    if (!facts.matches_key || facts.common_name != "system:node:" + options_.instance ||
        facts.organization != "system:nodes")
      return Fail(Error::Code::kInternal, "CertificateMismatch",
                  "the signed certificate is not for this node's key and name");
    std::lock_guard lock(mu_);
    disk_.cert_pem = cert_pem;
    disk_.key_pem = kc.key_pem;
    disk_.ca_pem = ca_pem;
    disk_.server = server;
    disk_.labels = labels;
    disk_.ip = ip;
    st_.has_credentials = true;
    log::Info("sim kubelet: node client certificate issued",
              {{"instance", options_.instance}, {"csr", csr_name}});
    return OkStatus();
  }

  // Watches the CSR until it is signed (certificate PEM), denied or failed.
  Result<std::string> WaitForCertificate(kube::Client& client, const std::string& name,
                                         std::string rv) {
    while (!Stopping()) {
      kube::ListOptions lo;
      lo.field_selector = "metadata.name=" + name;
      lo.resource_version = rv;
      lo.timeout_seconds = 60;
      auto watch = client.Watch(kube::resources::CertificateSigningRequests(), "", lo);
      if (!watch.ok()) {
        rv.clear();
        if (!Wait(options_.retry_interval)) break;
        continue;
      }
      {
        std::lock_guard lock(mu_);
        if (stop_) break;
        watch_ = watch->get();
      }
      Result<std::string> found = Error::Make(Error::Code::kUnavailable, "");
      bool done = false;
      while (!done) {
        auto ev = (*watch)->Next();
        if (!ev.ok() || !ev->has_value()) break;
        const kube::WatchEvent& e = **ev;
        if (e.type == kube::WatchEvent::Type::kError) {
          rv.clear();
          break;
        }
        if (e.type == kube::WatchEvent::Type::kBookmark) continue;
        if (const auto* m = ObjectField(e.object, "metadata"))
          rv = StringValue(*m, "resourceVersion");
        if (e.type == kube::WatchEvent::Type::kDeleted) {
          found = Fail(Error::Code::kNotFound, "CSRDeleted", "CSR " + name + " was deleted");
          done = true;
          break;
        }
        const json::object* status = ObjectField(e.object, "status");
        if (status == nullptr) continue;
        if (auto* conds = status->if_contains("conditions"); conds && conds->is_array()) {
          for (const auto& c : conds->as_array()) {
            if (!c.is_object()) continue;
            std::string type = StringValue(c.as_object(), "type");
            if (type == "Denied" || type == "Failed") {
              std::string why = "CSR " + name;
              why += " " + type + ": ";
              why += StringValue(c.as_object(), "message");
              found = Fail(Error::Code::kForbidden, "CSRDenied", std::move(why));
              done = true;
            }
          }
        }
        std::string cert = StringValue(*status, "certificate");
        if (!done && !cert.empty()) {
          auto pem = Base64Decode(cert);
          found = pem.ok() ? Result<std::string>(*pem) : Result<std::string>(pem.error());
          done = true;
        }
      }
      {
        std::lock_guard lock(mu_);
        watch_ = nullptr;
      }
      if (done) return found;
    }
    return Error::Make(Error::Code::kCancelled, "stopped");
  }

  // ---- 4. the kubelet with its node credentials
  // --------------------------------------------------

  Status Register() {
    SetPhase(Phase::kRegistering, "registering the Node");
    kube::Config cfg;
    {
      std::lock_guard lock(mu_);
      cfg.server = disk_.server;
      cfg.tls.ca_pem = disk_.ca_pem;
      cfg.tls.client_cert_pem = disk_.cert_pem;
      cfg.tls.client_key_pem = disk_.key_pem;
    }
    cfg.user_agent =
        "kubelet/" + std::string(kKubeletVersion) + " (linux/" + options_.arch + ") sim";
    HS_ASSIGN_OR_RETURN(node_client_, kube::Client::Create(cfg));
    if (!runtime_) {
      HS_ASSIGN_OR_RETURN(
          runtime_,
          PodRuntime::Start({.node_name = options_.instance,
                             .vm_root = vm_root_,
                             .node_client = node_client_,
                             .run_pods = options_.run_pods,
                             .on_resources_changed =
                                 [this] {
                                   std::lock_guard lock(mu_);
                                   status_dirty_ = true;
                                   cv_.notify_all();
                                 },
                             .static_devices = options_.bootstrap ? options_.bootstrap->devices
                                                                  : std::map<std::string, int>{}}));
      std::lock_guard lock(mu_);
      st_.address = runtime_->endpoint().ip;
      st_.kubelet_port = runtime_->endpoint().port;
      st_.vm_root = vm_root_;
    }

    json::object labels{{"kubernetes.io/hostname", options_.instance},
                        {"kubernetes.io/os", "linux"},
                        {"kubernetes.io/arch", options_.arch},
                        {"beta.kubernetes.io/os", "linux"},
                        {"beta.kubernetes.io/arch", options_.arch}};
    if (!options_.bootstrap) {
      labels["topology.kubernetes.io/zone"] = options_.zone;
      if (auto region = tpu::RegionOfZone(options_.zone); region.ok())
        labels["topology.kubernetes.io/region"] = *region;
    }
    if (!options_.machine_type.empty())
      labels["node.kubernetes.io/instance-type"] = options_.machine_type;
    for (const auto& [k, v] : disk_.labels) labels[k] = v;
    json::object node{
        {"apiVersion", "v1"},
        {"kind", "Node"},
        {"metadata",
         json::object{
             {"name", options_.instance},
             {"labels", labels},
             {"annotations",
              json::object{{"volumes.kubernetes.io/controller-managed-attach-detach", "true"},
                           {"node.alpha.kubernetes.io/ttl", "0"}}}}},
        {"spec", json::object{{"providerID", st_.provider_id}}}};
    if (options_.bootstrap && !options_.bootstrap->taints.empty()) {
      // --register-with-taints: on the Node as created, so nothing schedules before they are.
      json::array taints;
      for (const auto& t : options_.bootstrap->taints)
        taints.push_back(json::object{{"key", t.key}, {"value", t.value}, {"effect", t.effect}});
      node["spec"].as_object()["taints"] = std::move(taints);
    }
    auto created = node_client_->Create(kube::resources::Nodes(), "", node);
    kube::Object current;
    if (created.ok()) {
      current = *created;
      log::Info("sim kubelet: node registered",
                {{"node", options_.instance}, {"providerID", st_.provider_id}});
    } else if (created.error().code == Error::Code::kAlreadyExists) {
      // Rebooted, or re-created under the same name: take the Node over as the kubelet does,
      // refreshing its default labels.
      json::object patch{{"metadata", json::object{{"labels", labels}}}};
      auto patched = node_client_->Patch(kube::resources::Nodes(), "", options_.instance,
                                         kube::PatchType::kStrategicMerge, json::serialize(patch));
      if (!patched.ok()) return patched.error();
      current = *patched;
    } else {
      return created.error();
    }
    if (const auto* m = ObjectField(current, "metadata")) node_uid_ = StringValue(*m, "uid");
    lease_.reset();
    HS_RETURN_IF_ERROR(SyncStatus(true));
    HS_RETURN_IF_ERROR(RenewLease());
    SetPhase(Phase::kRunning);
    return OkStatus();
  }

  void Heartbeat() {
    auto next_lease = SteadyClock::now() + options_.lease_renew_interval;
    auto next_status = SteadyClock::now() + options_.node_status_update_interval;
    bool was_silent = false;
    while (true) {
      {
        std::unique_lock lock(mu_);
        if (stop_) return;
        if (!heartbeating_) {
          if (!was_silent)
            log::Info("sim kubelet: heartbeats stopped", {{"node", options_.instance}});
          was_silent = true;
          st_.phase = Phase::kHeartbeatStopped;
          st_.message = "heartbeats stopped (failure injected)";
          cv_.wait(lock, [&] { return stop_ || heartbeating_; });
          continue;
        }
        if (was_silent) {
          // Back: report at once, as a kubelet does after a pause.
          was_silent = false;
          next_lease = next_status = SteadyClock::now();
          st_.phase = Phase::kRunning;
          st_.message.clear();
          log::Info("sim kubelet: heartbeats resumed", {{"node", options_.instance}});
        }
      }
      {
        std::lock_guard lock(mu_);
        if (status_dirty_) {
          status_dirty_ = false;
          next_status = SteadyClock::now();
        }
      }
      auto now = SteadyClock::now();
      if (now >= next_lease) {
        if (auto s = RenewLease(); !s.ok())
          log::Warn("sim kubelet: lease renewal failed",
                    {{"node", options_.instance}, {"error", s.error().message}});
        next_lease = now + options_.lease_renew_interval;
      }
      if (now >= next_status) {
        if (auto s = SyncStatus(false); !s.ok())
          log::Warn("sim kubelet: node status update failed",
                    {{"node", options_.instance}, {"error", s.error().message}});
        next_status = now + options_.node_status_update_interval;
      }
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, std::min(next_lease, next_status),
                     [&] { return stop_ || !heartbeating_ || status_dirty_; });
    }
  }

  static bool NodeReady(const kube::Object& node) {
    const json::object* status = ObjectField(node, "status");
    if (status == nullptr) return false;
    auto* conds = status->if_contains("conditions");
    if (conds == nullptr || !conds->is_array()) return false;
    for (const auto& c : conds->as_array()) {
      if (c.is_object() && StringValue(c.as_object(), "type") == "Ready")
        return StringValue(c.as_object(), "status") == "True";
    }
    return false;
  }

  // Capacity (allocatable = false) or allocatable: with run_pods the extended resources are what
  // the device plugins list (all devices / healthy ones), as the kubelet's device manager reports.
  json::object Resources(bool allocatable) {
    json::object r{{"cpu", options_.cpu},
                   {"memory", options_.memory},
                   {"pods", options_.pods},
                   {"ephemeral-storage", "100Gi"}};
    if (!options_.run_pods) {
      if (chips_ > 0) r[tpu::kTpuResourceName] = std::to_string(chips_);
      if (options_.bootstrap) {
        for (const auto& [name, n] : options_.bootstrap->devices) r[name] = std::to_string(n);
      }
      return r;
    }
    if (!runtime_) return r;
    for (const auto& [name, d] : runtime_->Resources()) {
      r[name] = std::to_string(allocatable ? d.allocatable : d.capacity);
      if (name == tpu::kTpuResourceName) {
        std::lock_guard lock(mu_);
        st_.tpu_capacity = d.capacity;
        st_.tpu_allocatable = d.allocatable;
      }
    }
    std::lock_guard lock(mu_);
    st_.plugin_registrations = runtime_->plugin_registrations();
    return r;
  }

  // Compares the Node's status with what this kubelet would report and patches the status
  // subresource when they differ or the Ready heartbeat is older than the report interval.
  Status SyncStatus(bool force) {
    auto node = node_client_->Get(kube::resources::Nodes(), "", options_.instance);
    if (!node.ok()) return node.error();
    static const std::vector<kube::NodeCondition> kConds = {
        {"MemoryPressure", "False", "KubeletHasSufficientMemory",
         "kubelet has sufficient memory available"},
        {"DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
        {"PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
        {"Ready", "True", "KubeletReady", "kubelet is posting ready status"},
    };
    const json::object* status = ObjectField(*node, "status");
    auto now = std::chrono::system_clock::now();
    kube::NodeConditionsUpdate update =
        kube::KubeletNodeConditions(*node, kConds, now, options_.node_status_report_interval);
    bool changed = force || update.changed;
    json::array& conds = update.conditions;
    json::object want = Resources(false);
    json::object want_allocatable = Resources(true);
    if (options_.run_pods && status != nullptr) {
      // An extended resource the Node had and no plugin has registered for since this boot: the
      // kubelet keeps it with nothing allocatable until its plugin registers again.
      if (const json::object* had = ObjectField(*status, "capacity")) {
        for (const auto& [name, v] : *had) {
          if (name.find('/') == std::string::npos || want.contains(name)) continue;
          want[name] = v;
          want_allocatable[name] = "0";
        }
      }
    }
    if (status == nullptr || !ObjectField(*status, "capacity") ||
        *ObjectField(*status, "capacity") != want || !ObjectField(*status, "allocatable") ||
        *ObjectField(*status, "allocatable") != want_allocatable)
      changed = true;
    if (!changed) return OkStatus();
    // The VM's loopback address, not its GCE networkIP: the apiserver dials the InternalIP for
    // logs, and a private address must never be a destination from this machine.
    json::array addresses{
        json::object{{"type", "InternalIP"}, {"address", runtime_->endpoint().ip}},
        json::object{{"type", "Hostname"}, {"address", options_.instance}}};
    json::object patch{
        {"status",
         json::object{
             {"capacity", want},
             {"allocatable", want_allocatable},
             {"conditions", conds},
             {"addresses", addresses},
             {"daemonEndpoints",
              json::object{{"kubeletEndpoint", json::object{{"Port", runtime_->endpoint().port}}}}},
             {"nodeInfo",
              json::object{{"machineID", st_.provider_id},
                           {"systemUUID", options_.instance},
                           {"bootID", options_.instance},
                           {"kernelVersion", "6.8.0-sim"},
                           {"osImage", options_.bootstrap ? options_.bootstrap->os_image
                                                          : "Simulated TPU VM (hyperslice sim)"},
                           {"containerRuntimeVersion", "sim://0"},
                           {"kubeletVersion", kKubeletVersion},
                           {"kubeProxyVersion", ""},
                           {"operatingSystem", "linux"},
                           {"architecture", options_.arch}}}}}};
    kube::PatchOptions po;
    po.subresource = "status";
    auto patched =
        node_client_->Patch(kube::resources::Nodes(), "", options_.instance,
                            kube::PatchType::kStrategicMerge, json::serialize(patch), po);
    if (!patched.ok()) return patched.error();
    std::lock_guard lock(mu_);
    ++st_.status_updates;
    return OkStatus();
  }

  // Creates or renews the node's Lease (kube-node-lease/<node>), as the kubelet's lease
  // controller does: update with the last seen object, re-read on conflict.
  Status RenewLease() {
    std::string now = kube::FormatMicroTime(std::chrono::system_clock::now());
    const auto& leases = kube::resources::Leases();
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (!lease_) {
        auto got = node_client_->Get(leases, kNodeLeaseNamespace, options_.instance);
        if (got.ok()) {
          lease_ = *got;
        } else if (got.error().code == Error::Code::kNotFound) {
          json::object meta{{"name", options_.instance}, {"namespace", kNodeLeaseNamespace}};
          if (!node_uid_.empty())
            meta["ownerReferences"] = json::array{json::object{{"apiVersion", "v1"},
                                                               {"kind", "Node"},
                                                               {"name", options_.instance},
                                                               {"uid", node_uid_}}};
          json::object lease{
              {"apiVersion", "coordination.k8s.io/v1"},
              {"kind", "Lease"},
              {"metadata", meta},
              {"spec", json::object{{"holderIdentity", options_.instance},
                                    {"leaseDurationSeconds", options_.lease_duration_seconds},
                                    {"renewTime", now}}}};
          auto created = node_client_->Create(leases, kNodeLeaseNamespace, lease);
          if (created.ok()) {
            lease_ = *created;
            Renewed();
            return OkStatus();
          }
          if (created.error().code != Error::Code::kAlreadyExists) return created.error();
          continue;
        } else {
          return got.error();
        }
      }
      kube::Object updated = *lease_;
      updated["spec"].as_object()["renewTime"] = now;
      updated["spec"].as_object()["holderIdentity"] = options_.instance;
      updated["spec"].as_object()["leaseDurationSeconds"] = options_.lease_duration_seconds;
      auto put = node_client_->Update(leases, kNodeLeaseNamespace, updated);
      if (put.ok()) {
        lease_ = *put;
        Renewed();
        return OkStatus();
      }
      lease_.reset();
      if (put.error().code != Error::Code::kConflict && put.error().code != Error::Code::kNotFound)
        return put.error();
    }
    return Error::Make(Error::Code::kConflict, "lease renewal kept conflicting");
  }

  void Renewed() {
    std::lock_guard lock(mu_);
    ++st_.lease_renewals;
  }

  const AgentOptions options_;
  std::shared_ptr<net::HttpClient> metadata_;
  int chips_ = 0;

  std::mutex lifecycle_mu_;  // serialises Vanish/Restore
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, heartbeating_ = true;
  AgentState st_;
  kube::WatchStream* watch_ = nullptr;  // the CSR watch in progress, for Vanish to cancel
  bool status_dirty_ = false;           // devices changed: report node status now
  std::thread thread_;

  // The VM's "disk": what survives a reboot (Vanish + Restore). Written by the agent thread
  // under mu_; read by it without the lock.
  struct Disk {
    std::string cert_pem, key_pem, ca_pem, server, ip;
    std::map<std::string, std::string> labels;
  } disk_;

  // Agent thread only.
  std::string etag_, refused_etag_;
  std::shared_ptr<kube::Client> node_client_;
  std::string node_uid_;
  std::optional<kube::Object> lease_;
  std::unique_ptr<PodRuntime> runtime_;  // from the first registration of a boot to its end

  std::string vm_root_;  // the VM's "/" (set by Init)
  bool own_root_ = false;
};

}  // namespace

Result<std::unique_ptr<Agent>> Agent::Start(AgentOptions options) {
  auto agent = std::make_unique<AgentImpl>(std::move(options));
  HS_RETURN_IF_ERROR(agent->Init());
  return std::unique_ptr<Agent>(std::move(agent));
}

}  // namespace hyperslice::sim::kubelet
