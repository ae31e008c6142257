// `hyperslice webhook`'s flags: ours and gke-tpu-env-injector's (seed 001).
#include "src/webhook/flags.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include <CLI/CLI.hpp>

#include "src/base/strings.h"

namespace hyperslice::webhook {
namespace {

constexpr char kVerboseEnv[] = "GTEI_VERBOSE";

// A value option whose `--name=` (empty) is the empty value instead of a request for the next
// argument: CLI11 2.1 treats an empty value after '=' as missing and takes the next argument,
// option or not, as the value. With 0..1 values it takes the next argument only when that is not an
// option, and an absent value is default_str(), set to "" here; the real default stays in the
// variable and is shown in the help text.
template <typename T>
CLI::Option* Value(CLI::App& app, const std::string& name, T& var, std::string help) {
  std::string shown;
  if constexpr (std::is_same_v<T, std::string>) {
    shown = var;
  } else if constexpr (std::is_integral_v<T>) {
    shown = std::to_string(var);
  }
  if (!shown.empty()) help += " (default: " + shown + ")";
  return app.add_option(name, var, std::move(help))->expected(0, 1)->default_str("");
}

// Go's strconv.ParseBool, which viper.GetBool applies to an environment variable.
std::optional<bool> ParseGoBool(std::string_view s) {
  for (std::string_view t : {"1", "t", "T", "TRUE", "true", "True"}) {
    if (s == t) return true;
  }
  for (std::string_view f : {"0", "f", "F", "FALSE", "false", "False"}) {
    if (s == f) return false;
  }
  return std::nullopt;
}

Status Invalid(std::string message) {
  return Error::Make(Error::Code::kInvalidArgument, std::move(message));
}

}  // namespace

std::vector<std::string> Flags::ExtraSans() const {
  std::vector<std::string> out;
  for (const std::string& text : extra_sans) {
    for (std::string& san : SplitNonEmpty(text, ',')) out.push_back(std::move(san));
  }
  return out;
}

void AddFlags(CLI::App& app, Flags& f) {
  // gke-tpu-env-injector's three (config.go), with its environment variables (viper, prefix GTEI).
  Value(app, "--tls-cert-file", f.tls_cert_file,
        "PEM certificate chain for HTTPS, re-read when it changes [env GTEI_TLS_CERT_FILE]")
      ->envname("GTEI_TLS_CERT_FILE");
  Value(app, "--tls-key-file", f.tls_key_file,
        "PEM private key matching --tls-cert-file [env GTEI_TLS_KEY_FILE]")
      ->envname("GTEI_TLS_KEY_FILE");
  // GTEI_VERBOSE is read by FinishFlags: CLI11 would refuse values viper reads as false.
  app.add_flag("--verbose", f.verbose,
               "debug logging: one line per admission (kind, name, operation, result) "
               "[env GTEI_VERBOSE]");

  Value(app, "--bind-address", f.bind_address, "address to listen on (0.0.0.0 in a pod)");
  Value(app, "--port", f.port, "HTTPS port");
  Value(app, "--kubeconfig", f.kubeconfig,
        "kubeconfig to reach the apiserver (default: $KUBECONFIG, in-cluster, ~/.kube/config)");
  Value(app, "--owner-unreadable", f.owner_unreadable,
        "when an opted-in Pod's StatefulSet/Job/TPUNodeGroup cannot be read: deny (the "
        "controller retries the create) or allow (admit unchanged, with a warning)");
  Value(app, "--cluster-domain", f.cluster_domain,
        "cluster DNS domain for fully-qualified worker hostnames");
  Value(app, "--owner-cache", f.owner_cache,
        "informer: watch StatefulSets/Jobs/TPUNodeGroups and read them from memory; none: GET "
        "them on every admission");
  Value(app, "--io-threads", f.io_threads, "TLS/HTTP threads");
  Value(app, "--blocking-threads", f.blocking_threads,
        "threads for admissions that must read the apiserver");
  Value(app, "--shutdown-grace", f.shutdown_grace_seconds,
        "seconds to finish in-flight admissions on SIGTERM");
  app.add_flag("--self-signed", f.self_signed,
               "mint a CA and serving certificate (kept in --ca-secret), write them to "
               "--tls-cert-file/--tls-key-file and set the caBundle of the webhook "
               "configurations");
  Value(app, "--namespace", f.namespace_,
        "namespace of the webhook's Service and CA Secret [env POD_NAMESPACE]")
      ->envname("POD_NAMESPACE");
  Value(app, "--service-name", f.service_name, "the webhook's Service (certificate DNS names)");
  Value(app, "--ca-secret", f.ca_secret, "Secret holding the self-signed CA and serving pair");
  Value(app, "--self-signed-extra-sans", f.extra_sans,
        "more IP addresses or DNS names, comma-separated, for the self-signed serving "
        "certificate (for a webhook registered by URL, e.g. 127.0.0.1); may be repeated")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  Value(app, "--self-signed-ca-lifetime", f.ca_lifetime,
        "lifetime of the self-signed CA; it is replaced (with an overlap in the caBundle) when "
        "1/3 of it remains (e.g. 3650d, 2160h, 30m, 45s)");
  Value(app, "--self-signed-cert-lifetime", f.cert_lifetime,
        "lifetime of the self-signed serving certificate; re-issued when 1/3 of it remains; at "
        "most 1/3 of the CA lifetime");
  Value(app, "--self-signed-check-interval", f.check_interval,
        "how often each replica re-reads the CA Secret and renews what is due");
  Value(app, "--self-signed-propagation-delay", f.propagation_delay,
        "time a new CA spends in the caBundle before the serving certificate it signs is used "
        "(lets the apiserver see the new bundle)");
  Value(app, "--sealed-insecure-registry", f.sealed_insecure_registries,
        "host:port of a registry read over plain HTTP for sealed control nodes' image "
        "signatures (loopback test registries); may be repeated")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  Value(app, "--mutating-webhook-configuration", f.mutating_config,
        "MutatingWebhookConfiguration whose caBundle --self-signed sets; empty: none");
  Value(app, "--validating-webhook-configuration", f.validating_config,
        "ValidatingWebhookConfigurations whose caBundle --self-signed sets, comma-separated; "
        "empty: none");
}

Status FinishFlags(const CLI::App& app, Flags& f, std::vector<std::string>* warnings) {
  if (app.count("--verbose") == 0) {
    const char* env = std::getenv(kVerboseEnv);
    if (env != nullptr && *env != '\0') {
      std::optional<bool> v = ParseGoBool(env);
      if (!v && warnings != nullptr) {
        warnings->push_back(std::string(kVerboseEnv) + "=\"" + env +
                            "\" is not a boolean (1, t, T, TRUE, true, True, 0, f, F, FALSE, "
                            "false, False); verbose logging stays off");
      }
      f.verbose = v.value_or(false);
    }
  }
  for (auto [name, value] :
       {std::pair{"--tls-cert-file", &f.tls_cert_file},
        std::pair{"--tls-key-file", &f.tls_key_file}, std::pair{"--bind-address", &f.bind_address},
        std::pair{"--cluster-domain", &f.cluster_domain}, std::pair{"--namespace", &f.namespace_},
        std::pair{"--service-name", &f.service_name}, std::pair{"--ca-secret", &f.ca_secret}}) {
    if (value->empty()) return Invalid(std::string(name) + " needs a value; got an empty one");
  }
  if (f.port < 1 || f.port > 65535) {
    return Invalid("--port must be from 1 to 65535; got " + std::to_string(f.port));
  }
  if (f.owner_unreadable != "deny" && f.owner_unreadable != "allow") {
    return Invalid("--owner-unreadable must be deny or allow; got \"" + f.owner_unreadable + "\"");
  }
  if (f.owner_cache != "informer" && f.owner_cache != "none") {
    return Invalid("--owner-cache must be informer or none; got \"" + f.owner_cache + "\"");
  }
  for (auto [name, value] : {std::pair{"--io-threads", f.io_threads},
                             std::pair{"--blocking-threads", f.blocking_threads}}) {
    if (value < 1)
      return Invalid(std::string(name) + " must be at least 1; got " + std::to_string(value));
  }
  if (f.shutdown_grace_seconds < 0) {
    return Invalid("--shutdown-grace must not be negative; got " +
                   std::to_string(f.shutdown_grace_seconds));
  }
  return OkStatus();
}

}  // namespace hyperslice::webhook
