#include "src/kube/config.h"
#include "src/kube/object_helpers.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <utility>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <yaml-cpp/yaml.h>
#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/files.h"
#include "src/base/json.h"
#include "src/base/log.h"
#include "src/base/strings.h"

extern char** environ;  // NOLINT: POSIX

namespace hyperslice::kube {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

Error Invalid(std::string msg) {
  return Error::Make(Error::Code::kInvalidArgument, std::move(msg));
}

// --- small helpers --------------------------------------------------------------------------

Result<std::string> ReadFile(const std::string& path, const std::string& what) {
  auto text = hyperslice::ReadFile(path);
  if (!text.ok())
    return Invalid("cannot read " + what + " file " + path + ": " + std::strerror(errno));
  return text;
}

std::string Resolve(const std::string& base_dir, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute() || base_dir.empty()) return path;
  return (fs::path(base_dir) / path).lexically_normal().string();
}

std::string OpenSslError() {
  unsigned long e = ERR_get_error();  // NOLINT(google-runtime-int): OpenSSL's type
  ERR_clear_error();
  if (e == 0) return "no PEM data found";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// Checks that `pem` holds at least one certificate (all certificates when `all`).
Status CheckCertPem(const std::string& pem, const std::string& what) {
  ERR_clear_error();
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return Invalid(what + ": out of memory");
  int n = 0;
  while (X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    X509_free(x);
    ++n;
  }
  BIO_free(bio);
  if (n == 0) return Invalid(what + " holds no valid PEM certificate (" + OpenSslError() + ")");
  ERR_clear_error();  // the loop ends on "no start line"
  return OkStatus();
}

Status CheckKeyPem(const std::string& pem, const std::string& what) {
  ERR_clear_error();
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return Invalid(what + ": out of memory");
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (key == nullptr)
    return Invalid(what + " holds no valid PEM private key (" + OpenSslError() + ")");
  EVP_PKEY_free(key);
  return OkStatus();
}

// --- kubeconfig -----------------------------------------------------------------------------

struct Source {
  YAML::Node root;
  std::string base_dir;
  std::string name;  // file path or "<kubeconfig>" for text
};

std::string Str(const YAML::Node& n, const char* key) {
  YAML::Node v = n[key];
  if (!v || !v.IsScalar()) return "";
  return v.as<std::string>();
}

bool Bool(const YAML::Node& n, const char* key) {
  YAML::Node v = n[key];
  if (!v || !v.IsScalar()) return false;
  std::string s = v.as<std::string>();
  return s == "true" || s == "True" || s == "TRUE";
}

// Finds list entry `name` in `section` (clusters/users/contexts) across sources; first wins, as in
// client-go's merge of $KUBECONFIG files.
struct Found {
  YAML::Node node;
  const Source* source = nullptr;
};
Result<std::optional<Found>> FindNamed(const std::vector<Source>& sources, const char* section,
                                       const char* inner, const std::string& name) {
  for (const auto& src : sources) {
    YAML::Node list = src.root[section];
    if (!list) continue;
    if (!list.IsSequence()) return Invalid(src.name + ": \"" + section + "\" is not a list");
    for (const auto& entry : list) {
      if (!entry.IsMap())
        return Invalid(src.name + ": an entry of \"" + section + "\" is not a map");
      if (Str(entry, "name") == name) {
        YAML::Node body = entry[inner];
        if (!body || !body.IsMap()) {
          return Invalid(src.name + ": " + inner + " \"" + name + "\" has no \"" + inner +
                         "\" map");
        }
        return std::optional<Found>(Found{body, &src});
      }
    }
  }
  return std::optional<Found>();
}

// Either inline base64 data or a file; "" when neither is set.
Result<std::string> DataOrFile(const Found& f, const char* data_key, const char* file_key,
                               const std::string& what) {
  std::string data = Str(f.node, data_key);
  if (!data.empty())
    return Base64Decode(data, f.source->name + ": " + what + " (" + data_key + ")");
  std::string file = Str(f.node, file_key);
  if (!file.empty()) {
    return ReadFile(Resolve(f.source->base_dir, file), f.source->name + ": " + what);
  }
  return std::string();
}

Result<Config> ResolveConfig(const std::vector<Source>& sources, const std::string& context_arg) {
  std::string context = context_arg;
  if (context.empty()) {
    for (const auto& s : sources) {
      context = Str(s.root, "current-context");
      if (!context.empty()) break;
    }
  }
  const std::string where = sources.size() == 1 ? sources[0].name : "kubeconfig";
  if (context.empty()) {
    return Invalid(where + ": no current-context is set and no context was given");
  }
  HS_ASSIGN_OR_RETURN(auto ctx, FindNamed(sources, "contexts", "context", context));
  if (!ctx) return Invalid(where + ": context \"" + context + "\" not found");
  std::string cluster_name = Str(ctx->node, "cluster");
  std::string user_name = Str(ctx->node, "user");
  if (cluster_name.empty())
    return Invalid(where + ": context \"" + context + "\" names no cluster");

  Config cfg;
  cfg.context_name = context;
  cfg.default_namespace = Str(ctx->node, "namespace");

  HS_ASSIGN_OR_RETURN(auto cluster, FindNamed(sources, "clusters", "cluster", cluster_name));
  if (!cluster) {
    return Invalid(where + ": cluster \"" + cluster_name + "\" (of context \"" + context +
                   "\") not found");
  }
  cfg.server = Str(cluster->node, "server");
  if (cfg.server.empty()) {
    return Invalid(where + ": cluster \"" + cluster_name + "\" has no server");
  }
  cfg.tls.insecure_skip_verify = Bool(cluster->node, "insecure-skip-tls-verify");
  cfg.tls.server_name = Str(cluster->node, "tls-server-name");
  HS_ASSIGN_OR_RETURN(cfg.tls.ca_pem,
                      DataOrFile(*cluster, "certificate-authority-data", "certificate-authority",
                                 "cluster \"" + cluster_name + "\" certificate authority"));
  if (!cfg.tls.ca_pem.empty()) {
    HS_RETURN_IF_ERROR(CheckCertPem(
        cfg.tls.ca_pem, where + ": cluster \"" + cluster_name + "\" certificate authority"));
  }

  if (!user_name.empty()) {
    HS_ASSIGN_OR_RETURN(auto user, FindNamed(sources, "users", "user", user_name));
    if (!user) {
      return Invalid(where + ": user \"" + user_name + "\" (of context \"" + context +
                     "\") not found");
    }
    const std::string uw = where + ": user \"" + user_name + "\"";
    HS_ASSIGN_OR_RETURN(cfg.tls.client_cert_pem,
                        DataOrFile(*user, "client-certificate-data", "client-certificate",
                                   "user \"" + user_name + "\" client certificate"));
    HS_ASSIGN_OR_RETURN(cfg.tls.client_key_pem,
                        DataOrFile(*user, "client-key-data", "client-key",
                                   "user \"" + user_name + "\" client key"));
    if (cfg.tls.client_cert_pem.empty() != cfg.tls.client_key_pem.empty()) {
      return Invalid(uw + " has a client certificate without a key or a key without a certificate");
    }
    if (!cfg.tls.client_cert_pem.empty()) {
      HS_RETURN_IF_ERROR(CheckCertPem(cfg.tls.client_cert_pem, uw + " client certificate"));
      HS_RETURN_IF_ERROR(CheckKeyPem(cfg.tls.client_key_pem, uw + " client key"));
    }
    cfg.bearer_token = Str(user->node, "token");
    std::string token_file = Str(user->node, "tokenFile");
    if (!token_file.empty()) cfg.bearer_token_file = Resolve(user->source->base_dir, token_file);
    cfg.username = Str(user->node, "username");
    cfg.password = Str(user->node, "password");
    if (YAML::Node exec = user->node["exec"]; exec) {
      if (!exec.IsMap()) return Invalid(uw + ": exec is not a map");
      ExecPlugin p;
      p.api_version = Str(exec, "apiVersion");
      if (p.api_version != "client.authentication.k8s.io/v1" &&
          p.api_version != "client.authentication.k8s.io/v1beta1") {
        return Invalid(uw + ": exec apiVersion \"" + p.api_version +
                       "\" is not client.authentication.k8s.io/v1 or v1beta1");
      }
      p.command = Str(exec, "command");
      if (p.command.empty()) return Invalid(uw + ": exec has no command");
      // client-go: a relative command with a path separator is relative to the kubeconfig.
      if (p.command.find('/') != std::string::npos) {
        p.command = Resolve(user->source->base_dir, p.command);
      }
      if (YAML::Node args = exec["args"]; args) {
        if (!args.IsSequence()) return Invalid(uw + ": exec args is not a list");
        for (const auto& a : args) p.args.push_back(a.as<std::string>());
      }
      if (YAML::Node env = exec["env"]; env) {
        if (!env.IsSequence()) return Invalid(uw + ": exec env is not a list");
        for (const auto& e : env) {
          std::string name = Str(e, "name");
          if (name.empty()) return Invalid(uw + ": exec env entry without a name");
          p.env.emplace_back(name, Str(e, "value"));
        }
      }
      p.provide_cluster_info = Bool(exec, "provideClusterInfo");
      cfg.exec = std::move(p);
    }
  }
  return cfg;
}

Result<Source> ParseSource(const std::string& yaml, const std::string& base_dir,
                           const std::string& name) {
  Source s;
  s.base_dir = base_dir;
  s.name = name;
  try {
    s.root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return Invalid(name + ": malformed YAML: " + e.what());
  }
  if (!s.root || s.root.IsNull()) return Invalid(name + ": empty kubeconfig");
  if (!s.root.IsMap()) return Invalid(name + ": kubeconfig is not a YAML map");
  return s;
}

Result<Config> ResolveGuarded(const std::vector<Source>& sources, const std::string& context) {
  try {
    return ResolveConfig(sources, context);
  } catch (const YAML::Exception& e) {  // e.g. a map where a string was expected
    return Invalid((sources.size() == 1 ? sources[0].name : std::string("kubeconfig")) +
                   ": unexpected structure: " + e.what());
  }
}

Result<Source> LoadSource(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return Error::Make(Error::Code::kNotFound, "kubeconfig " + path + " does not exist");
  }
  HS_ASSIGN_OR_RETURN(std::string text, ReadFile(path, "kubeconfig"));
  return ParseSource(text, fs::absolute(path, ec).parent_path().string(), path);
}

// --- exec plugin ----------------------------------------------------------------------------

std::string ExecInfo(const ExecPlugin& plugin, const Config& cluster) {
  json::object spec;
  spec["interactive"] = false;
  if (plugin.provide_cluster_info) {
    json::object c;
    c["server"] = cluster.server;
    if (!cluster.tls.server_name.empty()) c["tls-server-name"] = cluster.tls.server_name;
    c["insecure-skip-tls-verify"] = cluster.tls.insecure_skip_verify;
    if (!cluster.tls.ca_pem.empty()) {
      c["certificate-authority-data"] = Base64Encode(cluster.tls.ca_pem);
    }
    spec["cluster"] = std::move(c);
  }
  json::object o;
  o["apiVersion"] = plugin.api_version;
  o["kind"] = "ExecCredential";
  o["spec"] = std::move(spec);
  return json::serialize(o);
}

struct ProcessOutput {
  int exit_status = -1;
  std::string out, err;
};

Result<ProcessOutput> RunProcess(const std::string& command, const std::vector<std::string>& args,
                                 const std::vector<std::string>& env,
                                 std::chrono::milliseconds timeout) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0)
    return Invalid("exec plugin: pipe: " + std::string(std::strerror(errno)));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Invalid("exec plugin: pipe: " + std::string(std::strerror(errno)));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(command.c_str()));  // NOLINT: POSIX signature
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));  // NOLINT
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));  // NOLINT
  envp.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, command.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return Invalid("exec plugin: cannot run " + command + ": " + std::strerror(rc));
  }
  ProcessOutput po;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  bool timed_out = false;
  constexpr size_t kMaxOutput = 4 << 20;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    int r = poll(fds, 2, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      timed_out = r == 0;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[8192];
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      std::string& dst = i == 0 ? po.out : po.err;
      if (dst.size() < kMaxOutput) dst.append(buf, static_cast<size_t>(n));
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Error::Make(Error::Code::kTimeout, "exec plugin " + command + " did not finish within " +
                                                  std::to_string(timeout.count() / 1000) + "s");
  }
  po.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return po;
}

}  // namespace

// --- public API -------------------------------------------------------------------------------

Result<Config> ParseKubeconfig(const std::string& yaml, const std::string& base_dir,
                               const std::string& context) {
  HS_ASSIGN_OR_RETURN(auto src, ParseSource(yaml, base_dir, "kubeconfig"));
  return ResolveGuarded({std::move(src)}, context);
}

Result<std::string> SoleClusterCa(const std::string& yaml) {
  HS_ASSIGN_OR_RETURN(auto src, ParseSource(yaml, "/", "kubeconfig"));
  YAML::Node list = src.root["clusters"];
  if (!list || !list.IsSequence() || list.size() != 1) {
    return Invalid("kubeconfig: not exactly one cluster");
  }
  YAML::Node body = list[0]["cluster"];
  if (!body || !body.IsMap()) return Invalid("kubeconfig: the cluster has no \"cluster\" map");
  const std::string data = Str(body, "certificate-authority-data");
  if (data.empty()) return Invalid("kubeconfig: the cluster has no certificate-authority-data");
  HS_ASSIGN_OR_RETURN(std::string pem,
                      Base64Decode(data, "kubeconfig: certificate-authority-data"));
  HS_RETURN_IF_ERROR(CheckCertPem(pem, "kubeconfig: cluster certificate authority"));
  return pem;
}

Result<Config> LoadKubeconfig(const std::string& path, const std::string& context) {
  HS_ASSIGN_OR_RETURN(auto src, LoadSource(path));
  return ResolveGuarded({std::move(src)}, context);
}

Result<Config> InClusterConfig(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return Error::Make(Error::Code::kNotFound,
                       "not running in a cluster: KUBERNETES_SERVICE_HOST and "
                       "KUBERNETES_SERVICE_PORT must be set");
  }
  Config cfg;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6
  cfg.server = "https://" + h + ":" + port;
  HS_ASSIGN_OR_RETURN(cfg.tls.ca_pem, ReadFile(sa_dir + "/ca.crt", "in-cluster CA"));
  HS_RETURN_IF_ERROR(CheckCertPem(cfg.tls.ca_pem, sa_dir + "/ca.crt"));
  // The token is read through the token file so that rotation is picked up.
  HS_ASSIGN_OR_RETURN(std::string token, ReadFile(sa_dir + "/token", "service account token"));
  (void)token;
  cfg.bearer_token_file = sa_dir + "/token";
  auto ns = ReadFile(sa_dir + "/namespace", "namespace");
  if (ns.ok()) {
    cfg.default_namespace = TrimSpace(*ns);
  }
  return cfg;
}

Result<Config> DefaultConfig(const std::string& explicit_path) {
  if (!explicit_path.empty()) return LoadKubeconfig(explicit_path);
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
    std::vector<Source> sources;
    for (const std::string& path : SplitNonEmpty(env, ':')) {
      auto src = LoadSource(path);
      if (!src.ok()) {
        if (src.error().code == Error::Code::kNotFound) continue;  // as client-go: skip missing
        return src.error();
      }
      sources.push_back(std::move(src).value());
    }
    if (sources.empty()) {
      return Error::Make(Error::Code::kNotFound,
                         "no file named in $KUBECONFIG (" + std::string(env) + ") exists");
    }
    return ResolveGuarded(sources, "");
  }
  if (std::getenv("KUBERNETES_SERVICE_HOST") != nullptr) return InClusterConfig();
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    std::string path = std::string(home) + "/.kube/config";
    std::error_code ec;
    if (fs::exists(path, ec)) return LoadKubeconfig(path);
  }
  return Error::Make(Error::Code::kNotFound,
                     "no Kubernetes configuration: no --kubeconfig, $KUBECONFIG unset, not in a "
                     "cluster, and ~/.kube/config does not exist");
}

Result<ExecCredential> RunExecPlugin(const ExecPlugin& plugin, const Config& cluster) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    std::string_view name = kv.substr(0, kv.find('='));
    // The plugin's own variables and KUBERNETES_EXEC_INFO replace inherited ones.
    bool replaced = name == "KUBERNETES_EXEC_INFO";
    for (const auto& [k, v] : plugin.env) replaced = replaced || name == k;
    if (!replaced) env.emplace_back(kv);
  }
  for (const auto& [k, v] : plugin.env) {
    std::string entry = k;
    entry += '=';
    entry += v;
    env.push_back(std::move(entry));
  }
  env.push_back("KUBERNETES_EXEC_INFO=" + ExecInfo(plugin, cluster));
  HS_ASSIGN_OR_RETURN(auto po,
                      RunProcess(plugin.command, plugin.args, env, std::chrono::seconds(60)));
  auto fail = [&](const std::string& what) {
    std::string err = TrimSpace(po.err.substr(0, 512));
    return Error::Make(Error::Code::kUnauthorized, "exec plugin " + plugin.command + " " + what +
                                                       (err.empty() ? std::string() : ": " + err));
  };
  if (po.exit_status != 0) return fail("exited with status " + std::to_string(po.exit_status));
  boost::system::error_code ec;
  json::value v = json::parse(po.out, ec);
  if (ec || !v.is_object()) return fail("printed no ExecCredential JSON on stdout");
  const auto& o = v.get_object();
  if (jsonfield::StringValue(o, "kind") != "ExecCredential")
    return fail("printed an object that is not an ExecCredential");
  if (jsonfield::StringValue(o, "apiVersion") != plugin.api_version) {
    return fail("answered with apiVersion \"" + jsonfield::StringValue(o, "apiVersion") +
                "\", expected \"" + plugin.api_version + "\"");
  }
  auto* status = o.if_contains("status");
  if (status == nullptr || !status->is_object())
    return fail("printed an ExecCredential without status");
  const auto& st = status->get_object();
  ExecCredential cred;
  cred.token = jsonfield::StringValue(st, "token");
  cred.client_certificate_data = jsonfield::StringValue(st, "clientCertificateData");
  cred.client_key_data = jsonfield::StringValue(st, "clientKeyData");
  if (cred.token.empty() && cred.client_certificate_data.empty()) {
    return fail("returned neither a token nor a client certificate");
  }
  if (cred.client_certificate_data.empty() != cred.client_key_data.empty()) {
    return fail("returned a client certificate without its key or a key without a certificate");
  }
  if (!cred.client_certificate_data.empty()) {
    HS_RETURN_IF_ERROR(
        CheckCertPem(cred.client_certificate_data, "exec plugin client certificate"));
    HS_RETURN_IF_ERROR(CheckKeyPem(cred.client_key_data, "exec plugin client key"));
  }
  if (std::string ts = jsonfield::StringValue(st, "expirationTimestamp"); !ts.empty()) {
    cred.expiration = ParseTime(ts);
    if (!cred.expiration) return fail("returned a malformed expirationTimestamp \"" + ts + "\"");
  }
  return cred;
}

// --- Credentials ------------------------------------------------------------------------------

Credentials::Credentials(Config config) : config_(std::move(config)) {}

bool Credentials::Refreshable() const {
  return config_.exec.has_value() || !config_.bearer_token_file.empty();
}

int Credentials::exec_runs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exec_runs_;
}

bool Credentials::ExecValidLocked() const {
  if (!exec_fetched_) return false;
  return !expiry_ || std::chrono::system_clock::now() < *expiry_;
}

Status Credentials::RefreshExecLocked() {
  ++exec_runs_;
  auto cred = RunExecPlugin(*config_.exec, config_);
  if (!cred.ok()) {
    log::Warn("exec credential plugin failed",
              {{"command", config_.exec->command}, {"error", cred.error().message}});
    return cred.error();
  }
  cached_ = cred->token.empty() ? std::string() : "Bearer " + cred->token;
  exec_cert_ = ClientCert{cred->client_certificate_data, cred->client_key_data};
  expiry_ = cred->expiration;
  exec_fetched_ = true;
  return OkStatus();
}

Result<std::string> Credentials::AuthorizationHeader() {
  std::lock_guard<std::mutex> lock(mu_);
  if (config_.exec) {
    if (!ExecValidLocked()) HS_RETURN_IF_ERROR(RefreshExecLocked());
    return cached_;
  }
  if (!config_.bearer_token_file.empty()) {
    auto now = std::chrono::steady_clock::now();
    // Re-read at most once a minute (client-go's cadence), or right after Invalidate().
    if (file_token_.empty() || now - file_checked_ > std::chrono::minutes(1)) {
      auto text = ReadFile(config_.bearer_token_file, "token");
      if (!text.ok()) {
        if (file_token_.empty())
          return Error::Make(Error::Code::kUnauthorized, text.error().message);
      } else {
        file_token_ = TrimSpace(*text);
      }
      file_checked_ = now;
    }
    if (!file_token_.empty()) return "Bearer " + file_token_;
  }
  if (!config_.bearer_token.empty()) return "Bearer " + config_.bearer_token;
  if (!config_.username.empty()) {
    return "Basic " + Base64Encode(config_.username + ":" + config_.password);
  }
  return std::string();
}

Result<Credentials::ClientCert> Credentials::ExecClientCertificate() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!config_.exec) return ClientCert{};
  if (!ExecValidLocked()) HS_RETURN_IF_ERROR(RefreshExecLocked());
  return exec_cert_;
}

void Credentials::Invalidate() {
  std::lock_guard<std::mutex> lock(mu_);
  exec_fetched_ = false;
  expiry_.reset();
  file_token_.clear();
  file_checked_ = {};
}

}  // namespace hyperslice::kube
