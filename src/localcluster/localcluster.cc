#include "src/localcluster/localcluster.h"

#include "src/base/base64.h"
#include "src/base/command.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "src/base/log.h"
#include "src/base/strings.h"
#include "src/localcluster/internal/process.h"
#include "src/net/http.h"
#include "src/net/pki.h"

#ifndef HS_SOURCE_DIR
#error "HS_SOURCE_DIR must name the repository root (set by src/localcluster/CMakeLists.txt)"
#endif

namespace hyperslice::localcluster {
namespace {

namespace fs = std::filesystem;
using internal::Process;
using internal::ProcessSpec;
using Clock = std::chrono::steady_clock;

constexpr auto kEtcdReadyTimeout = std::chrono::seconds(60);
constexpr auto kApiserverReadyTimeout = std::chrono::seconds(120);
constexpr auto kControllerManagerReadyTimeout = std::chrono::seconds(90);
constexpr auto kStopGrace = std::chrono::seconds(10);
constexpr int kStartAttempts = 3;

Error Err(Error::Code code, std::string msg) { return Error::Make(code, std::move(msg)); }

Status WriteFile(const fs::path& path, const std::string& content, fs::perms perms) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  out.close();
  if (!out) return Err(Error::Code::kInternal, "writing " + path.string() + " failed");
  std::error_code ec;
  fs::permissions(path, perms, ec);
  if (ec) return Err(Error::Code::kInternal, "chmod " + path.string() + ": " + ec.message());
  return OkStatus();
}

// Binds port 0 on loopback to learn a free port. Another process may take it before our child
// binds it; Start() retries the whole bring-up when a child reports "address already in use".

bool Executable(const fs::path& p) { return access(p.c_str(), X_OK) == 0; }

// Options.bin_dir, else $HYPERSLICE_CONTROLPLANE_BIN, else scripts/build-controlplane.sh's output.
Result<std::string> FindBinDir(const Options& options) {
  if (!options.bin_dir.empty()) return options.bin_dir;
  if (const char* env = std::getenv("HYPERSLICE_CONTROLPLANE_BIN"); env && *env)
    return std::string(env);
  std::string script = std::string(HS_SOURCE_DIR) + "/scripts/build-controlplane.sh";
  if (!Executable(script))
    return Err(Error::Code::kNotFound,
               "no control-plane binaries: set HYPERSLICE_CONTROLPLANE_BIN or provide " + script);
  log::Info("localcluster: locating control-plane binaries", {{"script", script}});
  std::string cmd = "'" + script + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return Err(Error::Code::kInternal, "running " + script + " failed");
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  int rc = pclose(pipe);
  out = TrimSpace(out);
  if (auto nl = out.rfind('\n'); nl != std::string::npos) out = out.substr(nl + 1);
  if (rc != 0 || out.empty())
    return Err(Error::Code::kInternal,
               script + " failed (status " + std::to_string(rc) + "); see its stderr above");
  return out;
}

std::string Kubeconfig(const std::string& server, const std::string& ca_pem,
                       const std::string& user, const net::pki::KeyPair& cred) {
  std::string s;
  s += "apiVersion: v1\nkind: Config\n";
  s += "clusters:\n- name: hyperslice-local\n  cluster:\n";
  s += "    server: " + server + "\n";
  s += "    certificate-authority-data: " + Base64Encode(ca_pem) + "\n";
  s += "users:\n- name: " + user + "\n  user:\n";
  s += "    client-certificate-data: " + Base64Encode(cred.cert_pem) + "\n";
  s += "    client-key-data: " + Base64Encode(cred.key_pem) + "\n";
  s += "contexts:\n- name: hyperslice-local\n  context:\n    cluster: hyperslice-local\n";
  s += "    user: " + user + "\n";
  s += "current-context: hyperslice-local\n";
  return s;
}

// Temp work dirs of owners that were killed (their destructor never ran) are removed by the next
// LocalCluster started in the same temp folder. A dir without owner.pid may be one another process
// is creating right now, so it is left alone.
void SweepStaleWorkDirs(const fs::path& tmp) {
  if (std::getenv("HYPERSLICE_KEEP_TESTENV") != nullptr) return;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(tmp, ec)) {
    if (entry.path().filename().string().rfind("hyperslice-cluster-", 0) != 0) continue;
    std::ifstream in(entry.path() / "owner.pid");
    long pid = 0;
    if (!(in >> pid) || pid <= 0) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    fs::remove_all(entry.path(), rm);
    log::Info("localcluster: removed the work dir of a dead owner",
              {{"work_dir", entry.path().string()}, {"owner_pid", boost::json::value(pid)}});
  }
}

bool AddressInUse(const std::string& log_tail) {
  return log_tail.find("address already in use") != std::string::npos;
}

class LocalClusterImpl final : public LocalCluster {
 public:
  explicit LocalClusterImpl(Options options) : options_(std::move(options)) {}

  ~LocalClusterImpl() override {
    StopAll();
    if (remove_work_dir_) {
      if (std::getenv("HYPERSLICE_KEEP_TESTENV") != nullptr) {
        log::Info("localcluster: keeping work dir", {{"work_dir", work_dir_}});
      } else {
        std::error_code ec;
        fs::remove_all(work_dir_, ec);
      }
    }
  }

  Status Init() {
    auto started = Clock::now();
    HS_ASSIGN_OR_RETURN(bin_dir_, FindBinDir(options_));
    HS_RETURN_IF_ERROR(FindBinaries());
    HS_RETURN_IF_ERROR(PrepareWorkDir());
    HS_RETURN_IF_ERROR(WritePki());
    HS_RETURN_IF_ERROR(WriteAuditPolicy());
    Status last;
    for (int attempt = 1; attempt <= kStartAttempts; ++attempt) {
      last = StartProcesses();
      if (last.ok()) break;
      StopAll();
      if (!AddressInUse(last.error().message) || attempt == kStartAttempts) return last;
      log::Warn("localcluster: a port was taken meanwhile; starting again",
                {{"attempt", boost::json::value(attempt)}});
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    log::Info("localcluster: ready",
              {{"server", server_url_},
               {"work_dir", work_dir_},
               {"controller_manager", boost::json::value(options_.controller_manager)},
               {"scheduler", boost::json::value(options_.scheduler)},
               {"startup_ms", boost::json::value(ms.count())}});
    return OkStatus();
  }

  const std::string& server_url() const override { return server_url_; }
  const std::string& kubeconfig_path() const override { return kubeconfig_path_; }
  const std::string& ca_cert_path() const override { return ca_cert_path_; }
  const std::string& ca_key_path() const override { return ca_key_path_; }
  const std::string& work_dir() const override { return work_dir_; }
  const std::string& etcd_url() const override { return etcd_url_; }
  const std::string& audit_log_path() const override { return audit_log_path_; }

  kube::Config AdminConfig() const override {
    kube::Config c;
    c.server = server_url_;
    c.tls.ca_pem = ca_.cert_pem;
    c.tls.client_cert_pem = admin_.cert_pem;
    c.tls.client_key_pem = admin_.key_pem;
    return c;
  }

  Status RestartApiserver() override {
    HS_RETURN_IF_ERROR(StopApiserver());
    return StartApiserver();
  }

  Status StopApiserver() override {
    apiserver_.Stop(kStopGrace);
    return OkStatus();
  }

  Status StartApiserver() override {
    if (apiserver_.Running()) return OkStatus();
    auto started = Clock::now();
    HS_RETURN_IF_ERROR(apiserver_.Start(ApiserverSpec()));
    HS_RETURN_IF_ERROR(WaitApiserverReady());
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    log::Info("localcluster: kube-apiserver ready",
              {{"server", server_url_}, {"startup_ms", boost::json::value(ms.count())}});
    return OkStatus();
  }

  Status CompactEtcd() override {
    HS_ASSIGN_OR_RETURN(auto client, net::HttpClient::Create({.base_url = etcd_url_}));
    // Any range answers with the store's current revision in its header.
    HS_ASSIGN_OR_RETURN(auto range,
                        EtcdPost(*client, "/v3/kv/range", R"({"key":"AA==","limit":1})"));
    const boost::json::value* rev = nullptr;
    if (range.is_object()) {
      if (auto* header = range.as_object().if_contains("header"); header && header->is_object())
        rev = header->as_object().if_contains("revision");
    }
    if (rev == nullptr || !rev->is_string())
      return Err(Error::Code::kInternal,
                 "etcd range answered without header.revision: " + boost::json::serialize(range));
    boost::json::object body{{"revision", rev->as_string()}, {"physical", true}};
    auto compacted = EtcdPost(*client, "/v3/kv/compaction", boost::json::serialize(body));
    // kube-apiserver compacts etcd on its own every few minutes; losing that race is success.
    if (!compacted.ok() &&
        compacted.error().message.find("required revision has been compacted") == std::string::npos)
      return Unexpected(compacted.error());
    log::Info("localcluster: etcd compacted", {{"revision", std::string_view(rev->as_string())}});
    return OkStatus();
  }

  std::vector<int> Pids() const override {
    std::vector<int> pids;
    for (const Process* p : {&etcd_, &apiserver_, &controller_manager_, &scheduler_}) {
      if (p->pid() > 0) pids.push_back(p->pid());
    }
    return pids;
  }

 private:
  Status FindBinaries() {
    fs::path dir(bin_dir_);
    apiserver_bin_ = (dir / "kube-apiserver").string();
    controller_manager_bin_ = (dir / "kube-controller-manager").string();
    scheduler_bin_ = (dir / "kube-scheduler").string();
    etcd_bin_ = (dir / "etcd").string();
    if (!Executable(apiserver_bin_))
      return Err(Error::Code::kNotFound, "no kube-apiserver in " + bin_dir_);
    if (options_.controller_manager && !Executable(controller_manager_bin_))
      return Err(Error::Code::kNotFound, "no kube-controller-manager in " + bin_dir_);
    if (options_.scheduler && !Executable(scheduler_bin_))
      return Err(Error::Code::kNotFound, "no kube-scheduler in " + bin_dir_);
    if (!Executable(etcd_bin_)) return Err(Error::Code::kNotFound, "no etcd in " + bin_dir_);
    return OkStatus();
  }

  Status PrepareWorkDir() {
    if (options_.work_dir.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/hyperslice-cluster-XXXXXX";
      SweepStaleWorkDirs(fs::path(tmpl).parent_path());
      if (mkdtemp(tmpl.data()) == nullptr)
        return Err(Error::Code::kInternal, "mkdtemp " + tmpl + ": " + std::strerror(errno));
      work_dir_ = tmpl;
      remove_work_dir_ = true;
      HS_RETURN_IF_ERROR(WriteFile(fs::path(work_dir_) / "owner.pid", std::to_string(getpid()),
                                   fs::perms::owner_read | fs::perms::owner_write));
    } else {
      work_dir_ = fs::absolute(options_.work_dir).string();
    }
    std::error_code ec;
    fs::create_directories(fs::path(work_dir_) / "pki", ec);
    if (ec) return Err(Error::Code::kInternal, "creating " + work_dir_ + ": " + ec.message());
    // A fresh cluster every start: old etcd data would not match the new certificates and keys.
    fs::remove_all(fs::path(work_dir_) / "etcd-data", ec);
    return OkStatus();
  }

  // Metadata for every request, from every stage but RequestReceived (so each request is one
  // ResponseComplete event, or ResponseStarted + ResponseComplete for watches and streams).
  Status WriteAuditPolicy() {
    if (!options_.audit_log) return OkStatus();
    fs::path dir = fs::path(work_dir_) / "audit";
    std::error_code ec;
    fs::remove_all(dir, ec);  // each start is a fresh cluster, with a fresh log
    fs::create_directories(dir, ec);
    if (ec) return Err(Error::Code::kInternal, "creating " + dir.string() + ": " + ec.message());
    audit_policy_path_ = (dir / "policy.yaml").string();
    audit_log_path_ = (dir / "audit.log").string();
    return WriteFile(audit_policy_path_,
                     "apiVersion: audit.k8s.io/v1\n"
                     "kind: Policy\n"
                     "omitStages: [RequestReceived]\n"
                     "rules:\n"
                     "- level: Metadata\n",
                     fs::perms::owner_read | fs::perms::owner_write);
  }

  Status WritePki() {
    using net::pki::CertRequest;
    fs::path pki = fs::path(work_dir_) / "pki";
    HS_ASSIGN_OR_RETURN(ca_, net::pki::MakeCa("hyperslice-local-ca"));
    HS_ASSIGN_OR_RETURN(
        auto serving,
        net::pki::Issue(ca_,
                        CertRequest{.common_name = "kube-apiserver",
                                    .dns_names = {"localhost", "kubernetes", "kubernetes.default",
                                                  "kubernetes.default.svc",
                                                  "kubernetes.default.svc.cluster.local"},
                                    .ip_addresses = {"127.0.0.1", "10.0.0.1"},
                                    .server = true}));
    HS_ASSIGN_OR_RETURN(admin_,
                        net::pki::Issue(ca_, CertRequest{.common_name = "kubernetes-admin",
                                                         .organizations = {"system:masters"},
                                                         .client = true}));
    HS_ASSIGN_OR_RETURN(
        controller_manager_cred_,
        net::pki::Issue(
            ca_, CertRequest{.common_name = "system:kube-controller-manager", .client = true}));
    // The apiserver's bootstrap RBAC binds the system:kube-scheduler role to this user.
    HS_ASSIGN_OR_RETURN(
        scheduler_cred_,
        net::pki::Issue(ca_, CertRequest{.common_name = "system:kube-scheduler", .client = true}));
    // What the apiserver presents to kubelets (logs, exec): signed by the cluster CA, which is
    // also the client CA kubelets trust (--client-ca-file, the client-ca-file of
    // kube-system/extension-apiserver-authentication). kubeadm issues the same certificate.
    HS_ASSIGN_OR_RETURN(
        auto kubelet_client,
        net::pki::Issue(ca_, CertRequest{.common_name = "kube-apiserver-kubelet-client",
                                         .organizations = {"system:masters"},
                                         .client = true}));
    HS_ASSIGN_OR_RETURN(auto sa, net::pki::MakeRsaKey());

    const auto key_perms = fs::perms::owner_read | fs::perms::owner_write;
    const auto cert_perms = key_perms | fs::perms::group_read | fs::perms::others_read;
    ca_cert_path_ = (pki / "ca.crt").string();
    ca_key_path_ = (pki / "ca.key").string();
    HS_RETURN_IF_ERROR(WriteFile(ca_cert_path_, ca_.cert_pem, cert_perms));
    HS_RETURN_IF_ERROR(WriteFile(ca_key_path_, ca_.key_pem, key_perms));
    HS_RETURN_IF_ERROR(WriteFile(pki / "apiserver.crt", serving.cert_pem, cert_perms));
    HS_RETURN_IF_ERROR(WriteFile(pki / "apiserver.key", serving.key_pem, key_perms));
    HS_RETURN_IF_ERROR(WriteFile(pki / "admin.crt", admin_.cert_pem, cert_perms));
    HS_RETURN_IF_ERROR(WriteFile(pki / "admin.key", admin_.key_pem, key_perms));
    HS_RETURN_IF_ERROR(
        WriteFile(pki / "apiserver-kubelet-client.crt", kubelet_client.cert_pem, cert_perms));
    HS_RETURN_IF_ERROR(
        WriteFile(pki / "apiserver-kubelet-client.key", kubelet_client.key_pem, key_perms));
    HS_RETURN_IF_ERROR(WriteFile(pki / "sa.key", sa.key_pem, key_perms));
    HS_RETURN_IF_ERROR(WriteFile(pki / "sa.pub", sa.cert_pem, cert_perms));
    return OkStatus();
  }

  // Picks ports, writes kubeconfigs, starts etcd, kube-apiserver and (optionally)
  // kube-controller-manager, each waited on until it serves.
  Status StartProcesses() {
    HS_ASSIGN_OR_RETURN(int etcd_client_port, FreeLoopbackPort());
    HS_ASSIGN_OR_RETURN(int etcd_peer_port, FreeLoopbackPort());
    HS_ASSIGN_OR_RETURN(apiserver_port_, FreeLoopbackPort());
    etcd_url_ = "http://127.0.0.1:" + std::to_string(etcd_client_port);
    std::string peer_url = "http://127.0.0.1:" + std::to_string(etcd_peer_port);
    server_url_ = "https://127.0.0.1:" + std::to_string(apiserver_port_);

    kubeconfig_path_ = (fs::path(work_dir_) / "admin.kubeconfig").string();
    const auto perms = fs::perms::owner_read | fs::perms::owner_write;
    HS_RETURN_IF_ERROR(WriteFile(kubeconfig_path_,
                                 Kubeconfig(server_url_, ca_.cert_pem, "kubernetes-admin", admin_),
                                 perms));

    std::error_code ec;
    fs::remove_all(fs::path(work_dir_) / "etcd-data", ec);
    ProcessSpec etcd{
        .path = etcd_bin_,
        .args = {"--name=default", "--data-dir=" + (fs::path(work_dir_) / "etcd-data").string(),
                 "--listen-client-urls=" + etcd_url_, "--advertise-client-urls=" + etcd_url_,
                 "--listen-peer-urls=" + peer_url, "--initial-advertise-peer-urls=" + peer_url,
                 "--initial-cluster=default=" + peer_url, "--initial-cluster-state=new",
                 // Test data: durability across power loss is not wanted, speed is.
                 "--unsafe-no-fsync=true"},
        .log_path = (fs::path(work_dir_) / "etcd.log").string()};
    HS_RETURN_IF_ERROR(etcd_.Start(etcd));
    HS_RETURN_IF_ERROR(WaitEtcdReady());

    HS_RETURN_IF_ERROR(apiserver_.Start(ApiserverSpec()));
    HS_RETURN_IF_ERROR(WaitApiserverReady());
    if (options_.kubeadm_bootstrap) HS_RETURN_IF_ERROR(WriteKubeadmBootstrap());

    if (options_.controller_manager) {
      HS_RETURN_IF_ERROR(StartControllerManager());
    }
    if (options_.scheduler) HS_RETURN_IF_ERROR(StartScheduler());
    return OkStatus();
  }

  ProcessSpec ApiserverSpec() const {
    fs::path pki = fs::path(work_dir_) / "pki";
    std::vector<std::string> args = {
        "--etcd-servers=" + etcd_url_,
        "--secure-port=" + std::to_string(apiserver_port_),
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        "--cert-dir=" + (fs::path(work_dir_) / "apiserver-certs").string(),
        "--client-ca-file=" + ca_cert_path_,
        "--tls-cert-file=" + (pki / "apiserver.crt").string(),
        "--tls-private-key-file=" + (pki / "apiserver.key").string(),
        "--authorization-mode=Node,RBAC",
        "--enable-bootstrap-token-auth=true",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--service-account-key-file=" + (pki / "sa.pub").string(),
        "--service-account-signing-key-file=" + (pki / "sa.key").string(),
        "--service-cluster-ip-range=10.0.0.0/24",
        "--allow-privileged=true",
        std::string("--watch-cache=") + (options_.watch_cache ? "true" : "false"),
        // 127.0.0.1 is not a valid Endpoints address, so the default reconciler would fail and
        // log every 10 s; nothing in this cluster reaches the apiserver through the Service.
        "--endpoint-reconciler-type=none",
        // Logs and exec reach a kubelet at its Node's InternalIP. The default order tries the
        // Hostname first, which would send a DNS query for a simulated VM's name off this machine;
        // simulated VMs report a loopback InternalIP.
        "--kubelet-preferred-address-types=InternalIP",
        // Its identity toward kubelets (and control nodes' kubelet API, which require it).
        "--kubelet-client-certificate=" + (pki / "apiserver-kubelet-client.crt").string(),
        "--kubelet-client-key=" + (pki / "apiserver-kubelet-client.key").string(),
    };
    // Without kube-controller-manager nobody creates the "default" ServiceAccount of a namespace,
    // and the ServiceAccount admission plugin would reject every pod (envtest does the same).
    if (!options_.controller_manager) args.push_back("--disable-admission-plugins=ServiceAccount");
    if (options_.kubeadm_bootstrap) {
      // As kubeadm configures it: kubelets may only touch their own Node and Lease; discovery
      // reads cluster-info anonymously.
      args.push_back("--enable-admission-plugins=NodeRestriction");
      args.push_back("--anonymous-auth=true");
    }
    if (options_.audit_log) {
      args.push_back("--audit-policy-file=" + audit_policy_path_);
      args.push_back("--audit-log-path=" + audit_log_path_);
      args.push_back("--audit-log-format=json");
      args.push_back("--audit-log-mode=blocking");
    }
    args.insert(args.end(), options_.extra_apiserver_flags.begin(),
                options_.extra_apiserver_flags.end());
    return ProcessSpec{.path = apiserver_bin_,
                       .args = std::move(args),
                       .log_path = (fs::path(work_dir_) / "kube-apiserver.log").string()};
  }

  Status StartControllerManager() {
    HS_ASSIGN_OR_RETURN(int port, FreeLoopbackPort());
    fs::path pki = fs::path(work_dir_) / "pki";
    std::string kubeconfig = (fs::path(work_dir_) / "kube-controller-manager.kubeconfig").string();
    HS_RETURN_IF_ERROR(
        WriteFile(kubeconfig,
                  Kubeconfig(server_url_, ca_.cert_pem, "system:kube-controller-manager",
                             controller_manager_cred_),
                  fs::perms::owner_read | fs::perms::owner_write));
    ProcessSpec spec{
        .path = controller_manager_bin_,
        .args = {"--kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig,
                 "--authorization-kubeconfig=" + kubeconfig,
                 "--controllers=*,bootstrapsigner,tokencleaner",
                 "--cluster-signing-cert-file=" + ca_cert_path_,
                 "--cluster-signing-key-file=" + ca_key_path_, "--root-ca-file=" + ca_cert_path_,
                 "--service-account-private-key-file=" + (pki / "sa.key").string(),
                 "--use-service-account-credentials=true", "--leader-elect=false",
                 "--bind-address=127.0.0.1", "--secure-port=" + std::to_string(port),
                 "--cert-dir=" + (fs::path(work_dir_) / "controller-manager-certs").string()},
        .log_path = (fs::path(work_dir_) / "kube-controller-manager.log").string()};
    spec.args.insert(spec.args.end(), options_.extra_controller_manager_flags.begin(),
                     options_.extra_controller_manager_flags.end());
    HS_RETURN_IF_ERROR(controller_manager_.Start(spec));
    // Its /healthz is always allowed without credentials; it serves a self-signed certificate.
    HS_ASSIGN_OR_RETURN(auto client, net::HttpClient::Create(
                                         {.base_url = "https://127.0.0.1:" + std::to_string(port),
                                          .tls = {.insecure_skip_verify = true}}));
    return WaitHttpOk(controller_manager_, *client, "/healthz", kControllerManagerReadyTimeout);
  }

  Status StartScheduler() {
    HS_ASSIGN_OR_RETURN(int port, FreeLoopbackPort());
    std::string kubeconfig = (fs::path(work_dir_) / "kube-scheduler.kubeconfig").string();
    HS_RETURN_IF_ERROR(WriteFile(
        kubeconfig, Kubeconfig(server_url_, ca_.cert_pem, "system:kube-scheduler", scheduler_cred_),
        fs::perms::owner_read | fs::perms::owner_write));
    ProcessSpec spec{
        .path = scheduler_bin_,
        .args = {"--kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig,
                 "--authorization-kubeconfig=" + kubeconfig, "--leader-elect=false",
                 "--bind-address=127.0.0.1", "--secure-port=" + std::to_string(port),
                 "--cert-dir=" + (fs::path(work_dir_) / "scheduler-certs").string()},
        .log_path = (fs::path(work_dir_) / "kube-scheduler.log").string()};
    HS_RETURN_IF_ERROR(scheduler_.Start(spec));
    HS_ASSIGN_OR_RETURN(auto client, net::HttpClient::Create(
                                         {.base_url = "https://127.0.0.1:" + std::to_string(port),
                                          .tls = {.insecure_skip_verify = true}}));
    return WaitHttpOk(scheduler_, *client, "/healthz", kControllerManagerReadyTimeout);
  }

  // The objects `kubeadm init` creates for joining nodes (see Options::kubeadm_bootstrap).
  // Creates are idempotent (409 AlreadyExists is success). kube-public is created by the
  // apiserver shortly after it is ready, so a 404 namespace is retried for a while.
  Status WriteKubeadmBootstrap() {
    using boost::json::array;
    using boost::json::object;
    net::TlsConfig tls{.ca_pem = ca_.cert_pem,
                       .client_cert_pem = admin_.cert_pem,
                       .client_key_pem = admin_.key_pem};
    HS_ASSIGN_OR_RETURN(auto client,
                        net::HttpClient::Create({.base_url = server_url_, .tls = tls}));
    const std::string kTokenGroup = "system:bootstrappers:kubeadm:default-node-token";
    auto binding = [](const std::string& name, const std::string& role_kind,
                      const std::string& role, const std::string& subject_kind,
                      const std::string& subject, const std::string& ns) {
      object meta{{"name", name}};
      if (!ns.empty()) meta["namespace"] = ns;
      return object{
          {"apiVersion", "rbac.authorization.k8s.io/v1"},
          {"kind", ns.empty() ? "ClusterRoleBinding" : "RoleBinding"},
          {"metadata", meta},
          {"roleRef",
           object{{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", role_kind}, {"name", role}}},
          {"subjects", array{object{{"apiGroup", "rbac.authorization.k8s.io"},
                                    {"kind", subject_kind},
                                    {"name", subject}}}}};
    };
    const std::string crb = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
    const std::string cr = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
    const std::string pub = "/api/v1/namespaces/kube-public";
    const std::string pub_rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-public";
    std::string kubeconfig;
    kubeconfig += "apiVersion: v1\nclusters:\n- cluster:\n";
    kubeconfig += "    certificate-authority-data: " + Base64Encode(ca_.cert_pem) + "\n";
    kubeconfig += "    server: " + server_url_ + "\n";
    kubeconfig += "  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\n";
    kubeconfig += "preferences: {}\nusers: null\n";
    std::vector<std::pair<std::string, object>> objects = {
        {crb, binding("kubeadm:kubelet-bootstrap", "ClusterRole", "system:node-bootstrapper",
                      "Group", kTokenGroup, "")},
        {crb, binding("kubeadm:node-autoapprove-bootstrap", "ClusterRole",
                      "system:certificates.k8s.io:certificatesigningrequests:nodeclient", "Group",
                      kTokenGroup, "")},
        {crb, binding("kubeadm:node-autoapprove-certificate-rotation", "ClusterRole",
                      "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
                      "Group", "system:nodes", "")},
        {cr, object{{"apiVersion", "rbac.authorization.k8s.io/v1"},
                    {"kind", "ClusterRole"},
                    {"metadata", object{{"name", "kubeadm:get-nodes"}}},
                    {"rules", array{object{{"apiGroups", array{""}},
                                           {"resources", array{"nodes"}},
                                           {"verbs", array{"get"}}}}}}},
        {crb, binding("kubeadm:get-nodes", "ClusterRole", "kubeadm:get-nodes", "Group", kTokenGroup,
                      "")},
        {pub + "/configmaps",
         object{{"apiVersion", "v1"},
                {"kind", "ConfigMap"},
                {"metadata", object{{"name", "cluster-info"}, {"namespace", "kube-public"}}},
                {"data", object{{"kubeconfig", kubeconfig}}}}},
        {pub_rbac + "/roles",
         object{{"apiVersion", "rbac.authorization.k8s.io/v1"},
                {"kind", "Role"},
                {"metadata", object{{"name", "kubeadm:bootstrap-signer-clusterinfo"},
                                    {"namespace", "kube-public"}}},
                {"rules", array{object{{"apiGroups", array{""}},
                                       {"resources", array{"configmaps"}},
                                       {"resourceNames", array{"cluster-info"}},
                                       {"verbs", array{"get"}}}}}}},
        {pub_rbac + "/rolebindings", binding("kubeadm:bootstrap-signer-clusterinfo", "Role",
                                             "kubeadm:bootstrap-signer-clusterinfo", "User",
                                             "system:anonymous", "kube-public")},
    };
    auto deadline = Clock::now() + std::chrono::seconds(30);
    for (const auto& [path, obj] : objects) {
      while (true) {
        HS_ASSIGN_OR_RETURN(auto resp,
                            client->Do({.method = "POST",
                                        .target = path,
                                        .headers = {{"Content-Type", "application/json"}},
                                        .body = boost::json::serialize(obj)}));
        if (resp.status == 201 || resp.status == 200 || resp.status == 409) break;
        // kube-public appears shortly after the apiserver is ready.
        if (resp.status == 404 && Clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          continue;
        }
        return Err(Error::Code::kUnavailable, "localcluster: creating " + path + " answered HTTP " +
                                                  std::to_string(resp.status) + ": " +
                                                  resp.body.substr(0, 1000));
      }
    }
    log::Info("localcluster: kubeadm bootstrap objects written",
              {{"objects", boost::json::value(objects.size())}});
    return OkStatus();
  }

  Status WaitEtcdReady() {
    HS_ASSIGN_OR_RETURN(auto client, net::HttpClient::Create({.base_url = etcd_url_}));
    return WaitHttpOk(etcd_, *client, "/health", kEtcdReadyTimeout);
  }

  Status WaitApiserverReady() {
    net::TlsConfig tls{.ca_pem = ca_.cert_pem,
                       .client_cert_pem = admin_.cert_pem,
                       .client_key_pem = admin_.key_pem};
    HS_ASSIGN_OR_RETURN(auto client,
                        net::HttpClient::Create({.base_url = server_url_, .tls = tls}));
    return WaitHttpOk(apiserver_, *client, "/readyz", kApiserverReadyTimeout);
  }

  // Polls `path` until it answers 200, failing early (with the log's tail) if the process exits.
  static Status WaitHttpOk(Process& process, net::HttpClient& client, const std::string& path,
                           std::chrono::seconds timeout) {
    auto deadline = Clock::now() + timeout;
    std::string last;
    while (true) {
      if (!process.Running()) {
        return Err(Error::Code::kUnavailable,
                   process.spec().path + " exited (" + process.ExitDescription() +
                       ") before serving " + path + "; last lines of " + process.spec().log_path +
                       ":\n" + process.LogTail());
      }
      auto resp = client.Do({.method = "GET", .target = path, .timeout = std::chrono::seconds(5)});
      if (resp.ok() && resp->status == 200) return OkStatus();
      last = resp.ok() ? "HTTP " + std::to_string(resp->status) + ": " + resp->body.substr(0, 2000)
                       : resp.error().ToString();
      if (Clock::now() > deadline) {
        std::string tail = process.LogTail();
        process.Stop(std::chrono::seconds(2));
        std::string msg = process.spec().path;
        msg += " did not serve " + path + " within " + std::to_string(timeout.count());
        msg += "s (last answer: " + last + "); last lines of " + process.spec().log_path;
        msg += ":\n" + tail;
        return Err(Error::Code::kTimeout, std::move(msg));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  Result<boost::json::value> EtcdPost(net::HttpClient& client, const std::string& path,
                                      const std::string& body) {
    HS_ASSIGN_OR_RETURN(auto resp, client.Do({.method = "POST",
                                              .target = path,
                                              .headers = {{"Content-Type", "application/json"}},
                                              .body = body}));
    if (resp.status != 200)
      return Err(Error::Code::kUnavailable, "etcd " + path + " answered HTTP " +
                                                std::to_string(resp.status) + ": " + resp.body);
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(resp.body, ec);
    if (ec) return Err(Error::Code::kInternal, "etcd " + path + " answered non-JSON: " + resp.body);
    return v;
  }

  void StopAll() {
    scheduler_.Stop(kStopGrace);
    controller_manager_.Stop(kStopGrace);
    apiserver_.Stop(kStopGrace);
    etcd_.Stop(kStopGrace);
  }

  Options options_;
  std::string bin_dir_, apiserver_bin_, controller_manager_bin_, scheduler_bin_, etcd_bin_;
  std::string work_dir_;
  bool remove_work_dir_ = false;
  std::string server_url_, kubeconfig_path_, ca_cert_path_, ca_key_path_, etcd_url_;
  std::string audit_policy_path_, audit_log_path_;
  int apiserver_port_ = 0;
  net::pki::KeyPair ca_, admin_, controller_manager_cred_, scheduler_cred_;
  // Declared in start order; StopAll() stops them in reverse.
  Process etcd_, apiserver_, controller_manager_, scheduler_;
};

}  // namespace

Result<std::unique_ptr<LocalCluster>> LocalCluster::Start(Options options) {
  auto cluster = std::make_unique<LocalClusterImpl>(std::move(options));
  HS_RETURN_IF_ERROR(cluster->Init());
  return std::unique_ptr<LocalCluster>(std::move(cluster));
}

}  // namespace hyperslice::localcluster
