// `hyperslice webhook`: the admission webhook (src/webhook) with its flags, TLS
// wiring (mounted certificate files, e.g. from cert-manager, or --self-signed:
// its own CA kept in a Secret and written into the webhook configurations'
// caBundle), and graceful shutdown on SIGTERM/SIGINT.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/json.hpp>

#include "src/base/log.h"
#include "src/cmd/roles.h"
#include "src/kube/client.h"
#include "src/kube/config.h"
#include "src/net/pki.h"
#include "src/webhook/webhook.h"

namespace hyperslice::cmd {
namespace {

namespace json = boost::json;

struct WebhookFlags {
  std::string tls_cert_file = "/etc/tls/tls.crt";
  std::string tls_key_file = "/etc/tls/tls.key";
  std::string bind_address = "127.0.0.1";
  int port = 8443;
  std::string kubeconfig;
  std::string owner_unreadable = "deny";
  std::string cluster_domain = "cluster.local";
  std::string owner_cache = "informer";
  int io_threads = 2;
  int blocking_threads = 4;
  int shutdown_grace_seconds = 10;
  // --self-signed
  bool self_signed = false;
  std::string namespace_ = "tpu-node-group";
  std::string service_name = "hyperslice-webhook";
  std::string ca_secret = "hyperslice-webhook-tls";
  std::string mutating_config = "hyperslice-tpu-env";
  std::string validating_config = "hyperslice-tpunodegroups";
  // Extra subjectAltNames (IPs or DNS names) for a webhook reached by URL, e.g. on loopback.
  std::vector<std::string> extra_sans;
};

WebhookFlags& Flags() {
  static WebhookFlags flags;
  return flags;
}

Status WriteFileAtomically(const std::string& path, const std::string& content) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << content;
    if (!out) return Error::Make(Error::Code::kInternal, "cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Error::Make(Error::Code::kInternal, "cannot rename " + tmp + ": " + ec.message());
  return OkStatus();
}

std::string DataField(const kube::Object& secret, const char* key) {
  const json::value* data = secret.if_contains("data");
  if (data == nullptr || !data->is_object()) return "";
  const json::value* v = data->get_object().if_contains(key);
  if (v == nullptr || !v->is_string()) return "";
  // base64 decode
  std::string out;
  int bits = 0;
  uint32_t acc = 0;
  for (char c : v->get_string()) {
    int x = c >= 'A' && c <= 'Z'   ? c - 'A'
            : c >= 'a' && c <= 'z' ? c - 'a' + 26
            : c >= '0' && c <= '9' ? c - '0' + 52
            : c == '+'             ? 62
            : c == '/'             ? 63
                                   : -1;
    if (x < 0) continue;
    acc = (acc << 6) | static_cast<uint32_t>(x);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

std::string Base64(const std::string& in) {
  static constexpr char kA[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t n = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8) |
                 static_cast<uint8_t>(in[i + 2]);
    out += {kA[(n >> 18) & 63], kA[(n >> 12) & 63], kA[(n >> 6) & 63], kA[n & 63]};
  }
  if (size_t rest = in.size() - i; rest > 0) {
    uint32_t n = static_cast<uint8_t>(in[i]) << 16;
    if (rest == 2) n |= static_cast<uint8_t>(in[i + 1]) << 8;
    out += {kA[(n >> 18) & 63], kA[(n >> 12) & 63], rest == 2 ? kA[(n >> 6) & 63] : '=', '='};
  }
  return out;
}

// The CA and serving key pair shared by every replica, kept in a Secret so
// replicas agree and a restart keeps the caBundle valid. Returns {ca cert,
// serving cert, serving key}.
struct SelfSignedPki {
  std::string ca_pem, cert_pem, key_pem;
};
Result<SelfSignedPki> LoadOrMintPki(kube::Client& client, const WebhookFlags& f) {
  const kube::Resource& secrets = kube::resources::Secrets();
  for (int attempt = 0; attempt < 3; ++attempt) {
    Result<kube::Object> existing = client.Get(secrets, f.namespace_, f.ca_secret);
    if (existing.ok()) {
      SelfSignedPki pki{DataField(*existing, "ca.crt"), DataField(*existing, "tls.crt"),
                        DataField(*existing, "tls.key")};
      if (pki.ca_pem.empty() || pki.cert_pem.empty() || pki.key_pem.empty()) {
        return Error::Make(Error::Code::kInvalidArgument,
                           "Secret " + f.namespace_ + "/" + f.ca_secret +
                               " lacks ca.crt, tls.crt or tls.key; delete it "
                               "to mint a new CA");
      }
      return pki;
    }
    if (existing.error().code != Error::Code::kNotFound) return existing.error();
    HS_ASSIGN_OR_RETURN(net::pki::KeyPair ca, net::pki::MakeCa("hyperslice-webhook-ca"));
    net::pki::CertRequest req;
    std::string svc = f.service_name + "." + f.namespace_ + ".svc";
    req.common_name = svc;
    req.dns_names = {f.service_name, f.service_name + "." + f.namespace_, svc,
                     svc + "." + f.cluster_domain};
    for (const std::string& san : f.extra_sans) {
      boost::system::error_code ec;
      boost::asio::ip::make_address(san, ec);
      (ec ? req.dns_names : req.ip_addresses).push_back(san);
    }
    req.server = true;
    HS_ASSIGN_OR_RETURN(net::pki::KeyPair serving, net::pki::Issue(ca, req));
    kube::Object secret{
        {"apiVersion", "v1"},
        {"kind", "Secret"},
        {"metadata",
         json::object{{"name", f.ca_secret},
                      {"namespace", f.namespace_},
                      {"labels", json::object{{"app.kubernetes.io/name", "hyperslice"},
                                              {"app.kubernetes.io/component", "webhook"}}}}},
        {"type", "kubernetes.io/tls"},
        {"data", json::object{{"ca.crt", Base64(ca.cert_pem)},
                              {"tls.crt", Base64(serving.cert_pem)},
                              {"tls.key", Base64(serving.key_pem)}}}};
    Result<kube::Object> created = client.Create(secrets, f.namespace_, secret);
    if (created.ok()) {
      log::Info("webhook CA minted", {{"secret", f.namespace_ + "/" + f.ca_secret}});
      return SelfSignedPki{ca.cert_pem, serving.cert_pem, serving.key_pem};
    }
    if (created.error().code != Error::Code::kAlreadyExists) return created.error();
    // Another replica won the race: read its CA.
  }
  return Error::Make(Error::Code::kConflict, "could not settle the webhook CA Secret");
}

// Sets clientConfig.caBundle of every webhook in a
// Mutating/ValidatingWebhookConfiguration.
Status PatchCaBundle(kube::Client& client, const kube::Resource& r, const std::string& name,
                     const std::string& ca_pem) {
  std::string bundle = Base64(ca_pem);
  for (int attempt = 0; attempt < 5; ++attempt) {
    HS_ASSIGN_OR_RETURN(kube::Object cfg, client.Get(r, "", name));
    json::array patch;
    patch.push_back(json::object{{"op", "test"},
                                 {"path", "/metadata/resourceVersion"},
                                 {"value", cfg["metadata"].as_object()["resourceVersion"]}});
    const json::value* hooks = cfg.if_contains("webhooks");
    size_t n = hooks != nullptr && hooks->is_array() ? hooks->get_array().size() : 0;
    for (size_t i = 0; i < n; ++i) {
      patch.push_back(
          json::object{{"op", "add"},
                       {"path", "/webhooks/" + std::to_string(i) + "/clientConfig/caBundle"},
                       {"value", bundle}});
    }
    Result<kube::Object> res =
        client.Patch(r, "", name, kube::PatchType::kJson, json::serialize(patch));
    if (res.ok()) return OkStatus();
    if (res.error().code != Error::Code::kConflict &&
        res.error().code != Error::Code::kInvalidArgument) {
      return res.error();
    }
  }
  return Error::Make(Error::Code::kConflict, "caBundle of " + name + " kept changing under us");
}

const kube::Resource& MutatingConfigs() {
  static const kube::Resource r{"admissionregistration.k8s.io", "v1",
                                "mutatingwebhookconfigurations", "MutatingWebhookConfiguration",
                                false};
  return r;
}
const kube::Resource& ValidatingConfigs() {
  static const kube::Resource r{"admissionregistration.k8s.io", "v1",
                                "validatingwebhookconfigurations", "ValidatingWebhookConfiguration",
                                false};
  return r;
}

}  // namespace

void SetupWebhook(CLI::App& app) {
  WebhookFlags& f = Flags();
  app.add_option("--tls-cert-file", f.tls_cert_file,
                 "PEM certificate chain for HTTPS (re-read when it changes)")
      ->envname("GTEI_TLS_CERT_FILE")
      ->capture_default_str();
  app.add_option("--tls-key-file", f.tls_key_file, "PEM private key matching --tls-cert-file")
      ->envname("GTEI_TLS_KEY_FILE")
      ->capture_default_str();
  app.add_option("--bind-address", f.bind_address, "address to listen on (0.0.0.0 in a pod)")
      ->capture_default_str();
  app.add_option("--port", f.port, "HTTPS port")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  app.add_option("--kubeconfig", f.kubeconfig,
                 "kubeconfig to reach the apiserver (default: $KUBECONFIG, "
                 "in-cluster, ~/.kube/config)");
  app.add_option("--owner-unreadable", f.owner_unreadable,
                 "when an opted-in Pod's StatefulSet/Job/TPUNodeGroup cannot "
                 "be read: deny (the "
                 "controller retries the create) or allow (admit unchanged, "
                 "with a warning)")
      ->check(CLI::IsMember({"deny", "allow"}))
      ->capture_default_str();
  app.add_option("--cluster-domain", f.cluster_domain,
                 "cluster DNS domain for fully-qualified worker hostnames")
      ->capture_default_str();
  app.add_option("--owner-cache", f.owner_cache,
                 "informer: watch StatefulSets/Jobs/TPUNodeGroups and read "
                 "them from memory; "
                 "none: GET them on every admission")
      ->check(CLI::IsMember({"informer", "none"}))
      ->capture_default_str();
  app.add_option("--io-threads", f.io_threads, "TLS/HTTP threads")->capture_default_str();
  app.add_option("--blocking-threads", f.blocking_threads,
                 "threads for admissions that must read the apiserver")
      ->capture_default_str();
  app.add_option("--shutdown-grace", f.shutdown_grace_seconds,
                 "seconds to finish in-flight admissions on SIGTERM")
      ->capture_default_str();
  app.add_flag("--self-signed", f.self_signed,
               "mint a CA and serving certificate (kept in --ca-secret), write them to "
               "--tls-cert-file/--tls-key-file and set the caBundle of the webhook "
               "configurations");
  app.add_option("--namespace", f.namespace_, "namespace of the webhook's Service and CA Secret")
      ->envname("POD_NAMESPACE")
      ->capture_default_str();
  app.add_option("--service-name", f.service_name, "the webhook's Service (certificate DNS names)")
      ->capture_default_str();
  app.add_option("--ca-secret", f.ca_secret, "Secret holding the self-signed CA and serving pair")
      ->capture_default_str();
  app.add_option("--self-signed-extra-sans", f.extra_sans,
                 "more IP addresses or DNS names for the self-signed serving certificate (for a "
                 "webhook registered by URL, e.g. 127.0.0.1)")
      ->delimiter(',');
  app.add_option("--mutating-webhook-configuration", f.mutating_config,
                 "MutatingWebhookConfiguration whose caBundle --self-signed sets")
      ->capture_default_str();
  app.add_option("--validating-webhook-configuration", f.validating_config,
                 "ValidatingWebhookConfiguration whose caBundle --self-signed sets")
      ->capture_default_str();
}

int RunWebhook(CLI::App&) {
  WebhookFlags& f = Flags();
  Result<webhook::OwnerUnreadable> policy = webhook::ParseOwnerUnreadable(f.owner_unreadable);
  if (!policy.ok()) {
    log::Error("bad flag", {{"error", policy.error().message}});
    return 2;
  }

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  Result<kube::Config> config = kube::DefaultConfig(f.kubeconfig);
  if (!config.ok()) {
    log::Error("no apiserver configuration", {{"error", config.error().message}});
    return 1;
  }
  config->user_agent = "hyperslice-webhook";
  Result<std::shared_ptr<kube::Client>> client = kube::Client::Create(*config);
  if (!client.ok()) {
    log::Error("kube client", {{"error", client.error().message}});
    return 1;
  }

  if (f.self_signed) {
    Result<SelfSignedPki> pki = LoadOrMintPki(**client, f);
    if (!pki.ok()) {
      log::Error("self-signed certificate", {{"error", pki.error().message}});
      return 1;
    }
    Status written = WriteFileAtomically(f.tls_cert_file, pki->cert_pem);
    if (written.ok()) written = WriteFileAtomically(f.tls_key_file, pki->key_pem);
    if (!written.ok()) {
      log::Error("self-signed certificate", {{"error", written.error().message}});
      return 1;
    }
    for (const auto& [res, name] : {std::pair(&MutatingConfigs(), f.mutating_config),
                                    std::pair(&ValidatingConfigs(), f.validating_config)}) {
      Status s = PatchCaBundle(**client, *res, name, pki->ca_pem);
      if (!s.ok()) {
        log::Error("caBundle", {{"configuration", name}, {"error", s.error().message}});
        return 1;
      }
      log::Info("caBundle set", {{"configuration", name}});
    }
  }

  webhook::ServerOptions options;
  options.address = f.bind_address;
  options.port = static_cast<uint16_t>(f.port);
  options.io_threads = f.io_threads;
  options.blocking_threads = f.blocking_threads;
  options.tls_cert_file = f.tls_cert_file;
  options.tls_key_file = f.tls_key_file;
  options.admission.owner_unreadable = *policy;
  options.admission.cluster_domain = f.cluster_domain;
  options.source = f.owner_cache == "informer"
                       ? webhook::NewInformerObjectSource(*client, std::chrono::seconds(30))
                       : webhook::NewApiObjectSource(*client);
  Result<std::unique_ptr<webhook::Server>> server = webhook::Server::Start(std::move(options));
  if (!server.ok()) {
    log::Error("webhook could not start", {{"error", server.error().message}});
    return 1;
  }

  int sig = 0;
  sigwait(&stop_signals, &sig);
  log::Info("webhook stopping", {{"signal", static_cast<int64_t>(sig)}});
  (*server)->Stop(std::chrono::seconds(f.shutdown_grace_seconds));
  return 0;
}

}  // namespace hyperslice::cmd
