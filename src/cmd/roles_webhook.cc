// `hyperslice webhook`: the admission webhook (src/webhook) with its flags, TLS
// wiring (mounted certificate files, e.g. from cert-manager, or --self-signed:
// its own CA kept in a Secret and written into the webhook configurations'
// caBundle, renewed while it runs: src/webhook/self_signed.h), and graceful
// shutdown on SIGTERM/SIGINT.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "src/base/log.h"
#include "src/cmd/roles.h"
#include "src/kube/client.h"
#include "src/kube/config.h"
#include "src/webhook/self_signed.h"
#include "src/webhook/webhook.h"

namespace hyperslice::cmd {
namespace {

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
  std::string ca_lifetime = "3650d";
  std::string cert_lifetime = "90d";
  std::string check_interval = "5m";
  std::string propagation_delay = "1m";
};

WebhookFlags& Flags() {
  static WebhookFlags flags;
  return flags;
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
  app.add_option("--self-signed-ca-lifetime", f.ca_lifetime,
                 "lifetime of the self-signed CA; it is replaced (with an overlap in the caBundle) "
                 "when 1/3 of it remains (e.g. 3650d, 2160h, 30m, 45s)")
      ->capture_default_str();
  app.add_option("--self-signed-cert-lifetime", f.cert_lifetime,
                 "lifetime of the self-signed serving certificate; re-issued when 1/3 of it "
                 "remains; at most 1/3 of the CA lifetime")
      ->capture_default_str();
  app.add_option("--self-signed-check-interval", f.check_interval,
                 "how often each replica re-reads the CA Secret and renews what is due")
      ->capture_default_str();
  app.add_option("--self-signed-propagation-delay", f.propagation_delay,
                 "time a new CA spends in the caBundle before the serving certificate it signs is "
                 "used (lets the apiserver see the new bundle)")
      ->capture_default_str();
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

  webhook::SelfSignedOptions o;
  o.namespace_ = f.namespace_;
  o.secret = f.ca_secret;
  o.service_name = f.service_name;
  o.cluster_domain = f.cluster_domain;
  o.extra_sans = f.extra_sans;
  o.mutating_config = f.mutating_config;
  o.validating_config = f.validating_config;
  o.cert_file = f.tls_cert_file;
  o.key_file = f.tls_key_file;
  for (auto [text, out] :
       {std::pair(&f.ca_lifetime, &o.ca_lifetime), std::pair(&f.cert_lifetime, &o.serving_lifetime),
        std::pair(&f.check_interval, &o.check_interval),
        std::pair(&f.propagation_delay, &o.propagation_delay)}) {
    Result<std::chrono::seconds> d = webhook::ParseDuration(*text);
    if (!d.ok()) {
      log::Error("bad flag", {{"error", d.error().message}});
      return 2;
    }
    *out = *d;
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

  // Keeps the serving pair and the caBundles current while the server runs.
  std::unique_ptr<webhook::SelfSignedCertificates> self_signed;
  if (f.self_signed) {
    Result<std::unique_ptr<webhook::SelfSignedCertificates>> started =
        webhook::SelfSignedCertificates::Start(*client, std::move(o));
    if (!started.ok()) {
      log::Error("self-signed certificates", {{"error", started.error().message}});
      return 1;
    }
    self_signed = std::move(*started);
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
