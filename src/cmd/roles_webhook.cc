// `hyperslice webhook`: the admission webhook (src/webhook) with its flags, TLS
// wiring (mounted certificate files, e.g. from cert-manager, or --self-signed:
// its own CA kept in a Secret and written into the webhook configurations'
// caBundle, renewed while it runs: src/webhook/self_signed.h), and graceful
// shutdown on SIGTERM/SIGINT.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>

#include "src/base/log.h"
#include "src/cmd/flags.h"
#include "src/cmd/roles.h"
#include "src/kube/client.h"
#include "src/kube/config.h"
#include "src/runners/policy/policy.h"
#include "src/webhook/flags.h"
#include "src/webhook/self_signed.h"
#include "src/webhook/webhook.h"

namespace hyperslice::cmd {
namespace {

webhook::Flags& WebhookFlags() {
  static webhook::Flags flags;
  return flags;
}

}  // namespace

// The flags (ours and gke-tpu-env-injector's) live in src/webhook/flags.h, where they are tested.
void SetupWebhook(CLI::App& app) { webhook::AddFlags(app, WebhookFlags()); }

int RunWebhook(CLI::App& app) {
  webhook::Flags& f = WebhookFlags();
  std::vector<std::string> warnings;
  if (Status st = webhook::FinishFlags(app, f, &warnings); !st.ok()) {
    log::Error("bad flag", {{"error", st.error().message}});
    return 2;
  }
  for (const std::string& w : warnings) log::Warn("flag", {{"warning", w}});
  // --verbose / GTEI_VERBOSE (seed 001): debug level, which logs one line per admission.
  if (f.verbose) log::SetLevel(log::Level::kDebug);
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
  o.extra_sans = f.ExtraSans();
  o.mutating_config = f.mutating_config;
  o.validating_config = f.validating_config;
  o.cert_file = f.tls_cert_file;
  o.key_file = f.tls_key_file;
  for (auto [flag, text, out] :
       {std::tuple("--self-signed-ca-lifetime", &f.ca_lifetime, &o.ca_lifetime),
        std::tuple("--self-signed-cert-lifetime", &f.cert_lifetime, &o.serving_lifetime),
        std::tuple("--self-signed-check-interval", &f.check_interval, &o.check_interval),
        std::tuple("--self-signed-propagation-delay", &f.propagation_delay,
                   &o.propagation_delay)}) {
    auto d = DurationFlag(flag, *text);
    if (!d.ok()) {
      log::Error("bad flag", {{"error", d.error().message}});
      return 2;
    }
    *out = std::chrono::duration_cast<std::chrono::seconds>(*d);
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
  if (!f.sealed_insecure_registries.empty()) {
    runners::registry::RegistryOptions ro;
    ro.insecure_registries = f.sealed_insecure_registries;
    options.admission.signatures = runners::policy::NewRegistrySignatureSource(ro);
  }
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
