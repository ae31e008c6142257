// The command line of `hyperslice webhook`, kept here (not in src/cmd) so its parsing is unit
// tested. It accepts gke-tpu-env-injector's (seed 001, main.go/config.go and README) with the same
// meaning, so its Deployment's args and env work unchanged:
//
//   --tls-cert-file  GTEI_TLS_CERT_FILE  default /etc/tls/tls.crt
//   --tls-key-file   GTEI_TLS_KEY_FILE   default /etc/tls/tls.key
//   --verbose        GTEI_VERBOSE        debug logging, one line per admission (upstream: zerolog
//                                        debug level); the variable is read as Go's
//                                        strconv.ParseBool reads it (viper.GetBool)
//
// As with viper, a flag on the command line wins over its variable, an empty variable counts as
// unset. `--flag=` (nothing after `=`) is an empty value and never takes the next argument as its
// value (CLI11 2.1 would); an empty configuration name means "none", an empty value where one is
// needed is refused by FinishFlags with the flag's name. One CLI11 limitation remains: a bare word
// right after `--flag=` (not an option) is taken as its value.
#pragma once

#include <string>
#include <vector>

#include "src/base/result.h"

namespace CLI {
class App;
}

namespace hyperslice::webhook {

struct Flags {
  std::string tls_cert_file = "/etc/tls/tls.crt";
  std::string tls_key_file = "/etc/tls/tls.key";
  bool verbose = false;
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
  std::string mutating_config = "hyperslice-tpu-env";          // "" = none
  std::string validating_config = "hyperslice-tpunodegroups";  // "" = none
  // Extra subjectAltNames (IPs or DNS names) for a webhook reached by URL: each occurrence of the
  // flag, comma-separated.
  std::vector<std::string> extra_sans;
  std::string ca_lifetime = "3650d";
  std::string cert_lifetime = "90d";
  std::string check_interval = "5m";
  std::string propagation_delay = "1m";
  // Registries spoken over plain HTTP when reading sealed control nodes' image signatures.
  std::vector<std::string> sealed_insecure_registries;

  std::vector<std::string> ExtraSans() const;  // extra_sans split at commas, empties dropped
};

// Registers the flags on `app` (the `webhook` subcommand); parsing writes into `flags`.
void AddFlags(CLI::App& app, Flags& flags);

// After parsing: GTEI_VERBOSE (when --verbose is not on the command line) and the checks CLI11
// cannot make (empty values, ranges). `warnings` receives what is accepted but worth saying (an
// unreadable GTEI_VERBOSE counts as false, as upstream reads it).
Status FinishFlags(const CLI::App& app, Flags& flags, std::vector<std::string>* warnings);

}  // namespace hyperslice::webhook
