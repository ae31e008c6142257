#include "src/runners/controlnode/servers.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/json.h"
#include "src/base/log.h"
#include "src/kube/client.h"
#include "src/kube/resource.h"
#include "src/net/server.h"
#include "src/runners/controlnode/kubelet_backend.h"
#include "src/runners/kbs/kbs.h"
#include "src/runners/kubeletapi/kubeletapi.h"
#include "src/runners/link/link.h"

namespace hyperslice::runners::controlnode {
namespace {

namespace json = boost::json;

constexpr char kControlNodesCn[] = "hyperslice-control-nodes";

std::string DataField(const kube::Object& o, const char* key) {
  const auto* data = jsonfield::ObjectField(o, "data");
  if (data == nullptr) return {};
  auto decoded = Base64Decode(jsonfield::StringField(*data, key), key);
  return decoded.ok() ? *decoded : std::string();
}

// host of "host:port" ("0.0.0.0" and "" mean every address: no name to certify).
std::string Host(const std::string& address) {
  auto host = link::HostOf(address);
  return host.ok() ? *host : std::string();
}

Result<uint16_t> Port(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    return Error::Make(Error::Code::kInvalidArgument, "address " + address + " needs host:port");
  }
  try {
    int p = std::stoi(address.substr(colon + 1));
    if (p < 0 || p > 65535) throw std::out_of_range("port");
    return static_cast<uint16_t>(p);
  } catch (const std::exception&) {
    return Error::Make(Error::Code::kInvalidArgument, "address " + address + ": bad port");
  }
}

bool IsIp(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789.:abcdefABCDEF") == std::string::npos &&
         (s.find('.') != std::string::npos || s.find(':') != std::string::npos);
}

Status WriteFile(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Error::Make(Error::Code::kInternal, "cannot write " + tmp);
    out << content;
  }
  ::chmod(tmp.c_str(), 0600);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Error::Make(Error::Code::kInternal, "rename " + tmp + ": " + ec.message());
  return OkStatus();
}

// A key-broker resource: a Secret of the operator's namespace the admin labelled as one (any
// other Secret there, e.g. the issuer's own key, is not found). Its value is data[value], its
// policy the two annotations.
Result<kbs::Secret> LookupKbsSecret(kube::Client& client, const std::string& ns,
                                    const std::string& name) {
  auto missing = [&name] {
    return Error::Make(Error::Code::kNotFound, "no key-broker resource " + name);
  };
  auto s = client.Get(kube::resources::Secrets(), ns, name);
  if (!s.ok()) return s.error().code == Error::Code::kNotFound ? missing() : s.error();
  const auto* labels = jsonfield::ObjectAt(*s, "metadata.labels");
  if (labels == nullptr || jsonfield::StringField(*labels, kKbsResourceLabel) != "true") {
    return missing();
  }
  const auto* ann = jsonfield::ObjectAt(*s, "metadata.annotations");
  kbs::Secret secret;
  secret.policy.name = name;
  secret.value = DataField(*s, "value");
  if (ann != nullptr) {
    secret.policy.audience = std::string(jsonfield::StringField(*ann, kKbsAudienceAnnotation));
    std::stringstream digests{std::string(jsonfield::StringField(*ann, kKbsImagesAnnotation))};
    for (std::string d; std::getline(digests, d, ',');) {
      d.erase(0, d.find_first_not_of(" \t\n"));
      d.erase(d.find_last_not_of(" \t\n") + 1);
      if (!d.empty()) secret.policy.image_digests.push_back(d);
    }
  }
  // Without an audience or a value nothing could be released correctly: as if absent.
  if (secret.policy.audience.empty() || secret.value.empty()) return missing();
  return secret;
}

class Servers final : public RunnerServers {
 public:
  Servers(ServersOptions options, RunnersCa ca, std::shared_ptr<ControlNodeSet> set)
      : options_(std::move(options)), ca_(std::move(ca)), set_(std::move(set)) {}
  ~Servers() override { Stop(); }

  Status Init() {
    std::error_code ec;
    std::filesystem::create_directories(options_.state_dir, ec);
    ::chmod(options_.state_dir.c_str(), 0700);
    cert_file_ = options_.state_dir + "/kubelet-serving.crt";
    key_file_ = options_.state_dir + "/kubelet-serving.key";

    // Link server: agents present one-time join tokens (the Runners' Secrets).
    net::pki::KeyPair link_serving;
    {
      std::string host = Host(options_.link_address);
      if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
      HS_ASSIGN_OR_RETURN(link_serving, link::IssueLinkServerCert(ca_.ca, host));
    }
    link::LinkServer::Options lo;
    lo.listen = options_.link_address;
    lo.ca = ca_.ca;
    lo.serving = link_serving;
    lo.tokens = set_->join_tokens().get();
    std::weak_ptr<ControlNodeSet> weak_set = set_;
    lo.on_linked = [weak_set](const link::LinkedRunner& r) {
      log::Info("runners: agent linked",
                {{"runner", r.runner_name}, {"agent_address", r.agent_address}});
      // A runner the operator placed is dialed where its agent says it listens.
      if (auto set = weak_set.lock()) {
        if (Status st = set->AgentLinked(r.runner_name, r.agent_address); !st.ok()) {
          log::Warn("runners: recording the agent's address failed",
                    {{"runner", r.runner_name}, {"error", st.error().message}});
        }
      }
    };
    lo.attestation_tokens = [set = set_](const link::AttestationTokenRequest& r) {
      return set->IssueAttestationToken(r);
    };
    HS_ASSIGN_OR_RETURN(link_, link::LinkServer::Start(std::move(lo)));

    // Kubelet API: a certificate from the runners CA until the CSR's is issued.
    net::pki::CertRequest fallback;
    fallback.common_name = "hyperslice-control-node-kubelet-api";
    fallback.server = true;
    fallback.validity = std::chrono::hours(24 * 30);
    AddNames(fallback);
    HS_ASSIGN_OR_RETURN(net::pki::KeyPair kp, net::pki::Issue(ca_.ca, fallback));
    HS_RETURN_IF_ERROR(WriteFile(key_file_, kp.key_pem));
    HS_RETURN_IF_ERROR(WriteFile(cert_file_, kp.cert_pem));

    HS_ASSIGN_OR_RETURN(std::string client_ca, ClusterClientCa());
    kubeletapi::ServerOptions ko;
    ko.address = Host(options_.kubelet_address);
    if (ko.address.empty()) ko.address = "0.0.0.0";
    HS_ASSIGN_OR_RETURN(ko.port, Port(options_.kubelet_address));
    ko.cert_file = cert_file_;
    ko.key_file = key_file_;
    ko.client_ca_pem = client_ca;
    ko.threads = 2;
    HS_ASSIGN_OR_RETURN(kubelet_, kubeletapi::Server::Start(
                                      std::move(ko), MakeKubeletBackend(options_.client, set_)));
    if (!options_.attestation_address.empty()) HS_RETURN_IF_ERROR(ServeAttestation());
    csr_thread_ = std::thread([this] { CsrLoop(); });
    return OkStatus();
  }

  uint16_t link_port() const override { return link_ ? static_cast<uint16_t>(link_->port()) : 0; }
  uint16_t kubelet_port() const override { return kubelet_ ? kubelet_->port() : 0; }
  uint16_t attestation_port() const override { return oidc_ ? oidc_->port() : 0; }
  bool serving_from_csr() const override { return from_csr_.load(); }

  void Stop() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    if (csr_thread_.joinable()) csr_thread_.join();
    if (oidc_) oidc_->Stop();
    if (kubelet_) kubelet_->Stop();
    if (link_) link_->Stop();
  }

 private:
  // The relying parties' view of the issuer: discovery and keys, nothing else.
  Status ServeAttestation() {
    if (!options_.token_issuer) {
      return Error::Make(Error::Code::kInvalidArgument, "attestation address without an issuer");
    }
    net::pki::CertRequest req;
    req.common_name = "hyperslice-attestation-issuer";
    req.server = true;
    req.validity = std::chrono::hours(24 * 365);
    AddNames(req);
    const std::string host = Host(options_.attestation_address);
    if (!host.empty() && host != "0.0.0.0" && IsIp(host)) req.ip_addresses.push_back(host);
    HS_ASSIGN_OR_RETURN(net::pki::KeyPair kp, net::pki::Issue(ca_.ca, req));
    const std::string cert = options_.state_dir + "/attestation-issuer.crt";
    const std::string key = options_.state_dir + "/attestation-issuer.key";
    HS_RETURN_IF_ERROR(WriteFile(key, kp.key_pem));
    HS_RETURN_IF_ERROR(WriteFile(cert, kp.cert_pem));
    net::HttpServer::Options ho;
    ho.address = host.empty() ? "0.0.0.0" : host;
    HS_ASSIGN_OR_RETURN(ho.port, Port(options_.attestation_address));
    ho.tls = net::ServerTlsFiles{cert, key};
    ho.max_body_bytes = 4096;  // a resource request is a P-256 public key in PEM
    ho.threads = 2;            // a key release reads its Secret from the apiserver
    std::shared_ptr<attest::TokenIssuer> issuer = options_.token_issuer;
    net::Handler kbs;
    if (!options_.kbs_namespace.empty()) {
      kbs = kbs::NewResourceHandler(
          [client = options_.client, ns = options_.kbs_namespace](const std::string& name) {
            return LookupKbsSecret(*client, ns, name);
          },
          [issuer] {
            return kbs::Verifier{issuer->Jwks(), issuer->issuer(),
                                 std::chrono::system_clock::now()};
          });
    }
    HS_ASSIGN_OR_RETURN(oidc_, net::HttpServer::Start(
                                   std::move(ho), [issuer, kbs](const net::ServerRequest& r,
                                                                std::shared_ptr<net::Responder> w) {
                                     if (kbs && r.path.rfind("/kbs/", 0) == 0) return kbs(r, w);
                                     if (r.method != "GET")
                                       return w->Send(405, R"({"error":"method not allowed"})");
                                     if (r.path == "/.well-known/openid-configuration") {
                                       return w->Send(200, issuer->OidcDiscovery());
                                     }
                                     if (r.path == "/jwks") return w->Send(200, issuer->Jwks());
                                     w->Send(404, R"({"error":"not found"})");
                                   }));
    log::Info("runners: attestation token issuer serving",
              {{"issuer", issuer->issuer()}, {"port", static_cast<int64_t>(oidc_->port())}});
    return OkStatus();
  }

  void AddNames(net::pki::CertRequest& req) {
    for (const auto& n : options_.serving_names) {
      (IsIp(n) ? req.ip_addresses : req.dns_names).push_back(n);
    }
    const std::string host = Host(options_.kubelet_address);
    if (!host.empty() && host != "0.0.0.0" && IsIp(host)) req.ip_addresses.push_back(host);
    if (req.ip_addresses.empty() && req.dns_names.empty()) req.ip_addresses.push_back("127.0.0.1");
  }

  // The CA the apiserver's kubelet client certificate verifies against, as a kubelet's
  // --client-ca-file: the cluster's client CA.
  Result<std::string> ClusterClientCa() {
    auto cm = options_.client->Get(kube::resources::ConfigMaps(), "kube-system",
                                   "extension-apiserver-authentication");
    if (!cm.ok()) {
      return Error::Make(cm.error().code,
                         "kube-system/extension-apiserver-authentication: " + cm.error().message);
    }
    const auto* data = jsonfield::ObjectField(*cm, "data");
    std::string ca(data != nullptr ? jsonfield::StringField(*data, "client-ca-file") : "");
    if (ca.empty()) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "extension-apiserver-authentication has no client-ca-file");
    }
    return ca;
  }

  bool SleepFor(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, d, [this] { return stopping_; });
    return !stopping_;
  }

  // Requests the serving certificate once a control node exists (its Node name is the CSR's
  // CN), and again before it expires.
  void CsrLoop() {
    std::string issued_for;
    auto renew_at = std::chrono::system_clock::time_point::max();
    while (SleepFor(std::chrono::milliseconds(issued_for.empty() ? 1000 : 30000))) {
      auto names = set_->NodeNames();
      if (names.empty()) continue;
      if (issued_for == names.front() && std::chrono::system_clock::now() < renew_at) continue;
      auto cert = RequestServingCert(names.front());
      if (!cert.ok()) {
        log::Warn("runners: kubelet serving certificate",
                  {{"node", names.front()}, {"error", cert.error().message}});
        continue;
      }
      auto info = net::pki::Inspect(cert->cert_pem);
      if (!WriteFile(key_file_, cert->key_pem).ok() ||
          !WriteFile(cert_file_, cert->cert_pem).ok()) {
        continue;
      }
      issued_for = names.front();
      renew_at = info.ok() ? info->not_before + (info->not_after - info->not_before) * 2 / 3
                           : std::chrono::system_clock::now() + std::chrono::hours(1);
      from_csr_ = true;
      log::Info("runners: kubelet serving certificate issued through a CSR",
                {{"node", issued_for}});
    }
  }

  Result<net::pki::KeyPair> RequestServingCert(const std::string& node) {
    net::pki::CertRequest subject;
    subject.common_name = "system:node:" + node;
    subject.organizations = {"system:nodes"};
    AddNames(subject);
    subject.dns_names.push_back(node);
    HS_ASSIGN_OR_RETURN(net::pki::CsrAndKey csr, net::pki::MakeCsr(subject));
    kube::Client& c = *options_.client;
    const std::string name = "hyperslice-kubelet-serving-" + node + "-" +
                             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count());
    json::object obj{
        {"apiVersion", "certificates.k8s.io/v1"},
        {"kind", "CertificateSigningRequest"},
        {"metadata", json::object{{"name", name}}},
        {"spec", json::object{{"request", Base64Encode(csr.csr_pem)},
                              {"signerName", "kubernetes.io/kubelet-serving"},
                              {"expirationSeconds", 30 * 24 * 3600},
                              {"usages", json::array{"digital signature", "server auth"}}}}};
    HS_ASSIGN_OR_RETURN(kube::Object created,
                        c.Create(kube::resources::CertificateSigningRequests(), "", obj));
    // Approve it, as a kubelet-serving approver would after checking the request is ours.
    json::object status{
        {"conditions", json::array{json::object{{"type", "Approved"},
                                                {"status", "True"},
                                                {"reason", "HypersliceControlNode"},
                                                {"message",
                                                 "control node kubelet API serving "
                                                 "certificate requested by the operator"}}}}};
    created["status"] = status;
    auto approved =
        c.Update(kube::resources::CertificateSigningRequests(), "", created, "approval");
    if (!approved.ok()) {
      (void)c.Delete(kube::resources::CertificateSigningRequests(), "", name, {});
      return approved.error();
    }
    const auto deadline = std::chrono::steady_clock::now() + options_.csr_timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto got = c.Get(kube::resources::CertificateSigningRequests(), "", name);
      if (got.ok()) {
        const auto* st = jsonfield::ObjectField(*got, "status");
        std::string cert(st != nullptr ? jsonfield::StringField(*st, "certificate") : "");
        if (!cert.empty()) {
          auto pem = Base64Decode(cert, "certificate");
          (void)c.Delete(kube::resources::CertificateSigningRequests(), "", name, {});
          if (!pem.ok()) return pem.error();
          return net::pki::KeyPair{*pem, csr.key_pem};
        }
        const auto* conds = st != nullptr ? jsonfield::ArrayField(*st, "conditions") : nullptr;
        for (const auto& v : conds != nullptr ? *conds : json::array{}) {
          if (!v.is_object()) continue;
          const auto type = jsonfield::StringField(v.as_object(), "type");
          if (type == "Failed" || type == "Denied") {
            (void)c.Delete(kube::resources::CertificateSigningRequests(), "", name, {});
            return Error::Make(Error::Code::kForbidden,
                               "CSR " + name + " " + std::string(type) + ": " +
                                   std::string(jsonfield::StringField(v.as_object(), "message")));
          }
        }
      }
      if (!SleepFor(std::chrono::milliseconds(500))) break;
    }
    (void)c.Delete(kube::resources::CertificateSigningRequests(), "", name, {});
    return Error::Make(Error::Code::kTimeout, "CSR " + name +
                                                  " was not signed (is kube-controller-manager's "
                                                  "kubelet-serving signer running?)");
  }

  ServersOptions options_;
  RunnersCa ca_;
  std::shared_ptr<ControlNodeSet> set_;
  std::string cert_file_, key_file_;
  std::unique_ptr<link::LinkServer> link_;
  std::unique_ptr<kubeletapi::Server> kubelet_;
  std::unique_ptr<net::HttpServer> oidc_;
  std::atomic<bool> from_csr_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread csr_thread_;
};

}  // namespace

Result<RunnersCa> EnsureRunnersCa(kube::Client& client, const std::string& ns,
                                  const std::string& name) {
  auto secret = client.Get(kube::resources::Secrets(), ns, name);
  if (!secret.ok() && secret.error().code != Error::Code::kNotFound) return secret.error();
  if (secret.ok()) {
    RunnersCa ca;
    ca.ca = {DataField(*secret, "ca.crt"), DataField(*secret, "ca.key")};
    ca.control_node = {DataField(*secret, "tls.crt"), DataField(*secret, "tls.key")};
    if (ca.ca.cert_pem.empty() || ca.ca.key_pem.empty() || ca.control_node.cert_pem.empty() ||
        ca.control_node.key_pem.empty()) {
      return Error::Make(
          Error::Code::kInvalidArgument,
          "runners CA Secret " + ns + "/" + name + " needs ca.crt, ca.key, tls.crt and tls.key");
    }
    return ca;
  }
  RunnersCa ca;
  HS_ASSIGN_OR_RETURN(ca.ca, link::MakeRunnersCa());
  HS_ASSIGN_OR_RETURN(ca.control_node, link::IssueControlNodeClientCert(ca.ca, kControlNodesCn));
  json::object obj{{"apiVersion", "v1"},
                   {"kind", "Secret"},
                   {"type", "Opaque"},
                   {"metadata", json::object{{"name", name}, {"namespace", ns}}},
                   {"data", json::object{{"ca.crt", Base64Encode(ca.ca.cert_pem)},
                                         {"ca.key", Base64Encode(ca.ca.key_pem)},
                                         {"tls.crt", Base64Encode(ca.control_node.cert_pem)},
                                         {"tls.key", Base64Encode(ca.control_node.key_pem)}}}};
  auto created = client.Create(kube::resources::Secrets(), ns, obj);
  if (!created.ok() && created.error().code == Error::Code::kAlreadyExists) {
    return EnsureRunnersCa(client, ns, name);  // another replica made it first
  }
  if (!created.ok()) return created.error();
  log::Info("runners: created the runners CA Secret", {{"namespace", ns}, {"name", name}});
  return ca;
}

Result<std::string> EnsureAttestationKey(kube::Client& client, const std::string& ns,
                                         const std::string& name) {
  auto secret = client.Get(kube::resources::Secrets(), ns, name);
  if (!secret.ok() && secret.error().code != Error::Code::kNotFound) return secret.error();
  if (secret.ok()) {
    std::string key = DataField(*secret, "key.pem");
    if (key.empty()) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "attestation key Secret " + ns + "/" + name + " has no key.pem");
    }
    return key;
  }
  // A P-256 key as the agents' identities have (MakeCsr makes one); the CSR is not used.
  HS_ASSIGN_OR_RETURN(net::pki::CsrAndKey fresh, net::pki::MakeCsr("hyperslice-attestation"));
  json::object obj{{"apiVersion", "v1"},
                   {"kind", "Secret"},
                   {"type", "Opaque"},
                   {"metadata", json::object{{"name", name}, {"namespace", ns}}},
                   {"data", json::object{{"key.pem", Base64Encode(fresh.key_pem)}}}};
  auto created = client.Create(kube::resources::Secrets(), ns, obj);
  if (!created.ok() && created.error().code == Error::Code::kAlreadyExists) {
    return EnsureAttestationKey(client, ns, name);  // another replica made it first
  }
  if (!created.ok()) return created.error();
  log::Info("runners: created the attestation key Secret", {{"namespace", ns}, {"name", name}});
  return fresh.key_pem;
}

Result<std::unique_ptr<RunnerServers>> RunnerServers::Start(ServersOptions options, RunnersCa ca,
                                                            std::shared_ptr<ControlNodeSet> set) {
  if (!options.client || !set || options.state_dir.empty()) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "runner servers need a client, the control node set and a state dir");
  }
  auto servers = std::make_unique<Servers>(std::move(options), std::move(ca), std::move(set));
  HS_RETURN_IF_ERROR(servers->Init());
  return std::unique_ptr<RunnerServers>(std::move(servers));
}

}  // namespace hyperslice::runners::controlnode
