// How to reach and authenticate to an apiserver: from a kubeconfig file, or in-cluster.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "src/base/result.h"
#include "src/net/http.h"

namespace hyperslice::kube {

// client.authentication.k8s.io exec credential plugin (kubeconfig users[].user.exec).
struct ExecPlugin {
  std::string api_version;  // client.authentication.k8s.io/v1 or v1beta1
  std::string command;
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  bool provide_cluster_info = false;
};

struct Config {
  std::string server;  // "https://127.0.0.1:6443"
  net::TlsConfig tls;  // CA, client cert/key, server name, insecure flag (PEM, files already read)
  std::string bearer_token;
  std::string bearer_token_file;  // re-read when it changes (projected service-account tokens)
  std::optional<ExecPlugin> exec;
  std::string username, password;  // basic auth (rare; kept for completeness)
  double qps = 0;                  // client-side limit; 0 = none
  int burst = 0;
  std::string user_agent = "hyperslice";
  std::string default_namespace;  // the context's namespace (in-cluster: the pod's), may be ""
  std::string context_name;       // the kubeconfig context used ("" in-cluster)
};

// Loads a kubeconfig file, honouring current-context or `context` when given. Relative file paths
// inside it resolve against the file's folder. Errors name the file and the missing piece.
Result<Config> LoadKubeconfig(const std::string& path, const std::string& context = "");
// Parses kubeconfig YAML text (base_dir resolves relative paths).
Result<Config> ParseKubeconfig(const std::string& yaml, const std::string& base_dir,
                               const std::string& context = "");
// The certificate authority (PEM) of a kubeconfig that holds exactly one cluster and may have no
// context: the form kubeadm publishes in kube-public/cluster-info (one cluster named "", no
// contexts, no current-context), which ParseKubeconfig refuses for want of a context. Only inline
// certificate-authority-data counts: a file path in published data names nothing on this host.
Result<std::string> SoleClusterCa(const std::string& yaml);
// In-cluster: KUBERNETES_SERVICE_HOST/PORT and /var/run/secrets/kubernetes.io/serviceaccount
// (root overridable for tests).
Result<Config> InClusterConfig(
    const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");
// The usual order: explicit path, then $KUBECONFIG, then in-cluster, then ~/.kube/config.
Result<Config> DefaultConfig(const std::string& explicit_path = "");

// Produces the Authorization header value for requests, caching exec-plugin and file tokens
// until they expire or change. Thread-safe.
class Credentials {
 public:
  explicit Credentials(Config config);
  // "" when the config has no token-style credential. Errors when an exec plugin fails.
  Result<std::string> AuthorizationHeader();
  // Drops a cached token (after a 401) so the next call fetches a fresh one.
  void Invalidate();

  // An exec plugin may return a client certificate instead of (or with) a token. Empty strings when
  // it did not (or there is no exec plugin). Runs the plugin if nothing valid is cached.
  struct ClientCert {
    std::string cert_pem, key_pem;
  };
  Result<ClientCert> ExecClientCertificate();
  // True when Invalidate() can yield a different credential (exec plugin or token file).
  bool Refreshable() const;
  // How many times the exec plugin ran (for tests and debugging).
  int exec_runs() const;

 private:
  Status RefreshExecLocked();
  bool ExecValidLocked() const;

  Config config_;
  mutable std::mutex mu_;
  std::string cached_;
  std::optional<std::chrono::system_clock::time_point> expiry_;
  std::string file_token_;
  std::chrono::steady_clock::time_point file_checked_{};
  bool exec_fetched_ = false;
  ClientCert exec_cert_;
  int exec_runs_ = 0;
};

// Runs an exec credential plugin once and returns its ExecCredential status (exposed for tests).
struct ExecCredential {
  std::string token;
  std::string client_certificate_data, client_key_data;  // PEM
  std::optional<std::chrono::system_clock::time_point> expiration;
};
Result<ExecCredential> RunExecPlugin(const ExecPlugin& plugin, const Config& cluster);

}  // namespace hyperslice::kube
