#include "src/kube/config.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "src/net/pki.h"

namespace hyperslice::kube {
namespace {

namespace fs = std::filesystem;

std::string B64(const std::string& in) {
  const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += a[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += a[(v >> 18) & 63];
    out += a[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += a[(v >> 18) & 63];
    out += a[(v >> 12) & 63];
    out += a[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

class ConfigTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto ca = net::pki::MakeCa("test-ca");
    ASSERT_TRUE(ca.ok()) << ca.error().ToString();
    ca_ = new net::pki::KeyPair(*ca);
    net::pki::CertRequest req;
    req.common_name = "alice";
    req.client = true;
    auto cert = net::pki::Issue(*ca_, req);
    ASSERT_TRUE(cert.ok());
    client_ = new net::pki::KeyPair(*cert);
  }
  void SetUp() override {
    char tmpl[] = "/tmp/hs-kubecfg-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& content, bool exec = false) {
    std::string path = dir_ + "/" + name;
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << content;
    if (exec) chmod(path.c_str(), 0755);
    return path;
  }

  static std::string Kubeconfig(const std::string& cluster_extra, const std::string& user_body,
                                const std::string& current = "main") {
    return "apiVersion: v1\nkind: Config\ncurrent-context: " + current +
           "\nclusters:\n- name: c1\n  cluster:\n    server: https://127.0.0.1:6443\n" +
           cluster_extra + "contexts:\n- name: main\n  context:\n    cluster: c1\n    user: u1\n" +
           "    namespace: team-a\n- name: other\n  context:\n    cluster: c1\n    user: u2\n" +
           "users:\n- name: u1\n  user:\n" + user_body +
           "- name: u2\n  user:\n    token: other-token\n";
  }

  static net::pki::KeyPair* ca_;
  static net::pki::KeyPair* client_;
  std::string dir_;
};
net::pki::KeyPair* ConfigTest::ca_ = nullptr;
net::pki::KeyPair* ConfigTest::client_ = nullptr;

TEST_F(ConfigTest, InlineDataAndTokenAreDecoded) {
  auto cfg = ParseKubeconfig(
      Kubeconfig("    certificate-authority-data: " + B64(ca_->cert_pem) +
                     "\n    tls-server-name: apiserver.local\n",
                 "    client-certificate-data: " + B64(client_->cert_pem) +
                     "\n    client-key-data: " + B64(client_->key_pem) + "\n    token: abc\n"),
      dir_);
  ASSERT_TRUE(cfg.ok()) << cfg.error().ToString();
  EXPECT_EQ(cfg->server, "https://127.0.0.1:6443");
  EXPECT_EQ(cfg->tls.ca_pem, ca_->cert_pem);
  EXPECT_EQ(cfg->tls.client_cert_pem, client_->cert_pem);
  EXPECT_EQ(cfg->tls.client_key_pem, client_->key_pem);
  EXPECT_EQ(cfg->tls.server_name, "apiserver.local");
  EXPECT_FALSE(cfg->tls.insecure_skip_verify);
  EXPECT_EQ(cfg->bearer_token, "abc");
  EXPECT_EQ(cfg->default_namespace, "team-a");
  EXPECT_EQ(cfg->context_name, "main");
  Credentials creds(*cfg);
  EXPECT_EQ(*creds.AuthorizationHeader(), "Bearer abc");
}

TEST_F(ConfigTest, ExplicitContextOverridesCurrentContext) {
  auto cfg = ParseKubeconfig(Kubeconfig("", "    token: abc\n"), dir_, "other");
  ASSERT_TRUE(cfg.ok()) << cfg.error().ToString();
  EXPECT_EQ(cfg->bearer_token, "other-token");
  EXPECT_EQ(cfg->default_namespace, "");
}

TEST_F(ConfigTest, FilesResolveRelativeToTheKubeconfigFolder) {
  Write("pki/ca.crt", ca_->cert_pem);
  Write("pki/client.crt", client_->cert_pem);
  Write("pki/client.key", client_->key_pem);
  Write("token", "file-token\n");
  std::string path = Write(
      "cfg/../kubeconfig",
      Kubeconfig("    certificate-authority: pki/ca.crt\n    insecure-skip-tls-verify: true\n",
                 "    client-certificate: pki/client.crt\n    client-key: " + dir_ +
                     "/pki/client.key\n    tokenFile: token\n"));
  auto cfg = LoadKubeconfig(path);
  ASSERT_TRUE(cfg.ok()) << cfg.error().ToString();
  EXPECT_EQ(cfg->tls.ca_pem, ca_->cert_pem);
  EXPECT_EQ(cfg->tls.client_key_pem, client_->key_pem);
  EXPECT_TRUE(cfg->tls.insecure_skip_verify);
  EXPECT_EQ(cfg->bearer_token_file, dir_ + "/token");
  Credentials creds(*cfg);
  EXPECT_EQ(*creds.AuthorizationHeader(), "Bearer file-token");
  EXPECT_TRUE(creds.Refreshable());
  // Rotation: after Invalidate (what the client does on a 401) the file is read again.
  Write("token", "rotated\n");
  creds.Invalidate();
  EXPECT_EQ(*creds.AuthorizationHeader(), "Bearer rotated");
}

TEST_F(ConfigTest, MissingFileIsNotFoundAndNamesThePath) {
  auto cfg = LoadKubeconfig(dir_ + "/nope");
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.error().code, Error::Code::kNotFound);
  EXPECT_NE(cfg.error().message.find(dir_ + "/nope"), std::string::npos);
}

TEST_F(ConfigTest, MalformedYamlIsAClearError) {
  std::string path = Write("bad", "clusters: [\n  - name: x\n   bad: : indentation\n");
  auto cfg = LoadKubeconfig(path);
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.error().code, Error::Code::kInvalidArgument);
  EXPECT_NE(cfg.error().message.find("malformed YAML"), std::string::npos) << cfg.error().message;
  EXPECT_NE(cfg.error().message.find(path), std::string::npos) << cfg.error().message;

  for (std::string text : {"", "- a\n- b\n", "just a string", "clusters: 5\ncurrent-context: x\n",
                           "current-context: main\ncontexts:\n- name: main\n  context: [1]\n"}) {
    auto r = ParseKubeconfig(text, dir_);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().code, Error::Code::kInvalidArgument) << text;
  }
}

TEST_F(ConfigTest, MissingContextClusterUserAreNamed) {
  auto r = ParseKubeconfig(Kubeconfig("", "    token: a\n", "nowhere"), dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("context \"nowhere\" not found"), std::string::npos)
      << r.error().message;

  std::string no_cluster =
      "current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: gone\n    user: u\n";
  r = ParseKubeconfig(no_cluster, dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("cluster \"gone\""), std::string::npos) << r.error().message;

  std::string no_user = no_cluster + "clusters:\n- name: gone\n  cluster:\n    server: https://h\n";
  r = ParseKubeconfig(no_user, dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("user \"u\""), std::string::npos) << r.error().message;

  r = ParseKubeconfig("contexts: []\n", dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("current-context"), std::string::npos) << r.error().message;
}

TEST_F(ConfigTest, UnreadableCertFileIsNamed) {
  auto r = ParseKubeconfig(
      Kubeconfig("    certificate-authority: missing/ca.crt\n", "    token: a\n"), dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Error::Code::kInvalidArgument);
  EXPECT_NE(r.error().message.find(dir_ + "/missing/ca.crt"), std::string::npos)
      << r.error().message;
}

TEST_F(ConfigTest, BadPemIsRejectedAtLoad) {
  auto r = ParseKubeconfig(
      Kubeconfig("    certificate-authority-data: " + B64("not a certificate") + "\n",
                 "    token: a\n"),
      dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("certificate authority holds no valid PEM certificate"),
            std::string::npos)
      << r.error().message;

  r = ParseKubeconfig(Kubeconfig("", "    client-certificate-data: " + B64(client_->cert_pem) +
                                         "\n    client-key-data: " + B64("garbage") + "\n"),
                      dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("client key holds no valid PEM private key"), std::string::npos)
      << r.error().message;

  r = ParseKubeconfig(
      Kubeconfig("    certificate-authority-data: '!!!not base64'\n", "    token: a\n"), dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("base64"), std::string::npos) << r.error().message;

  r = ParseKubeconfig(
      Kubeconfig("", "    client-certificate-data: " + B64(client_->cert_pem) + "\n"), dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("without a key"), std::string::npos) << r.error().message;
}

// A plugin that records each run, checks its input, and prints a credential.
std::string PluginScript(const std::string& dir, const std::string& api_version,
                         const std::string& expiry) {
  return "#!/bin/sh\n"
         "echo run >> " +
         dir +
         "/runs\n"
         "printf '%s' \"$KUBERNETES_EXEC_INFO\" > " +
         dir +
         "/exec_info\n"
         "echo \"$1 $2 $PLUGIN_MODE\" > " +
         dir +
         "/args\n"
         "cat <<EOF\n"
         "{\"apiVersion\":\"" +
         api_version +
         "\",\"kind\":\"ExecCredential\",\"status\":{"
         "\"token\":\"tok-$(wc -l < " +
         dir + "/runs | tr -d ' ')\"" +
         (expiry.empty() ? "" : ",\"expirationTimestamp\":\"" + expiry + "\"") + "}}\nEOF\n";
}

std::string ExecUser(const std::string& api_version, const std::string& command) {
  return "    exec:\n      apiVersion: " + api_version + "\n      command: " + command +
         "\n      args: [\"--one\", \"two\"]\n      env:\n      - name: PLUGIN_MODE\n"
         "        value: test\n      provideClusterInfo: true\n      interactiveMode: Never\n";
}

TEST_F(ConfigTest, ExecPluginTokenIsCachedUntilExpiry) {
  setenv("PLUGIN_MODE", "inherited", 1);  // the kubeconfig's env entry must win
  for (std::string v :
       {"client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"}) {
    fs::remove(dir_ + "/runs");
    Write("plugin.sh", PluginScript(dir_, v, "2999-01-01T00:00:00Z"), true);
    auto cfg =
        ParseKubeconfig(Kubeconfig("    certificate-authority-data: " + B64(ca_->cert_pem) + "\n",
                                   ExecUser(v, "./plugin.sh")),
                        dir_);
    ASSERT_TRUE(cfg.ok()) << cfg.error().ToString();
    ASSERT_TRUE(cfg->exec.has_value());
    EXPECT_EQ(cfg->exec->command, dir_ + "/plugin.sh");
    Credentials creds(*cfg);
    auto h = creds.AuthorizationHeader();
    ASSERT_TRUE(h.ok()) << h.error().ToString();
    EXPECT_EQ(*h, "Bearer tok-1");
    EXPECT_EQ(*creds.AuthorizationHeader(), "Bearer tok-1");  // cached: not expired
    EXPECT_EQ(creds.exec_runs(), 1);
    creds.Invalidate();  // a 401 drops it
    EXPECT_EQ(*creds.AuthorizationHeader(), "Bearer tok-2");
    EXPECT_EQ(creds.exec_runs(), 2);

    std::ifstream info(dir_ + "/exec_info");
    std::string exec_info((std::istreambuf_iterator<char>(info)), {});
    EXPECT_NE(exec_info.find("\"apiVersion\":\"" + v + "\""), std::string::npos) << exec_info;
    EXPECT_NE(exec_info.find("\"kind\":\"ExecCredential\""), std::string::npos);
    EXPECT_NE(exec_info.find("\"server\":\"https://127.0.0.1:6443\""), std::string::npos);
    EXPECT_NE(exec_info.find("certificate-authority-data"), std::string::npos);
    std::ifstream args(dir_ + "/args");
    std::string a((std::istreambuf_iterator<char>(args)), {});
    EXPECT_EQ(a, "--one two test\n");
  }
  unsetenv("PLUGIN_MODE");
}

TEST_F(ConfigTest, ExpiredExecTokenIsFetchedAgain) {
  std::string v = "client.authentication.k8s.io/v1";
  Write("plugin.sh", PluginScript(dir_, v, "2001-01-01T00:00:00.5+01:00"), true);
  auto cfg = ParseKubeconfig(Kubeconfig("", ExecUser(v, dir_ + "/plugin.sh")), dir_);
  ASSERT_TRUE(cfg.ok()) << cfg.error().ToString();
  Credentials creds(*cfg);
  EXPECT_EQ(*creds.AuthorizationHeader(), "Bearer tok-1");
  EXPECT_EQ(*creds.AuthorizationHeader(), "Bearer tok-2");
  EXPECT_EQ(creds.exec_runs(), 2);
}

TEST_F(ConfigTest, FailingOrLyingExecPluginsGiveClearErrors) {
  std::string v = "client.authentication.k8s.io/v1";
  struct Case {
    std::string script, expect;
  };
  std::vector<Case> cases = {
      {"#!/bin/sh\necho 'login required' >&2\nexit 3\n", "exited with status 3: login required"},
      {"#!/bin/sh\necho not json\n", "no ExecCredential JSON"},
      {"#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":"
       "\"ExecCredential\",\"status\":{\"token\":\"x\"}}'\n",
       "expected \"client.authentication.k8s.io/v1\""},
      {"#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":"
       "\"ExecCredential\",\"status\":{}}'\n",
       "neither a token nor a client certificate"},
      {"#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":"
       "\"ExecCredential\",\"status\":{\"token\":\"x\",\"expirationTimestamp\":\"tomorrow\"}}'\n",
       "malformed expirationTimestamp"},
  };
  for (const auto& c : cases) {
    Write("plugin.sh", c.script, true);
    auto cfg = ParseKubeconfig(Kubeconfig("", ExecUser(v, dir_ + "/plugin.sh")), dir_);
    ASSERT_TRUE(cfg.ok());
    Credentials creds(*cfg);
    auto h = creds.AuthorizationHeader();
    ASSERT_FALSE(h.ok()) << c.script;
    EXPECT_EQ(h.error().code, Error::Code::kUnauthorized);
    EXPECT_NE(h.error().message.find(c.expect), std::string::npos) << h.error().message;
  }
  auto cfg = ParseKubeconfig(Kubeconfig("", ExecUser(v, dir_ + "/does-not-exist")), dir_);
  ASSERT_TRUE(cfg.ok());
  Credentials creds(*cfg);
  auto h = creds.AuthorizationHeader();
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.error().message.find("does-not-exist"), std::string::npos) << h.error().message;

  auto bad_version =
      ParseKubeconfig(Kubeconfig("", ExecUser("client.authentication.k8s.io/v1alpha1", "x")), dir_);
  ASSERT_FALSE(bad_version.ok());
  EXPECT_NE(bad_version.error().message.find("v1alpha1"), std::string::npos);
}

TEST_F(ConfigTest, ExecPluginClientCertificate) {
  std::string v = "client.authentication.k8s.io/v1";
  std::string cred =
      "{\"apiVersion\":\"" + v +
      "\",\"kind\":\"ExecCredential\",\"status\":{\"clientCertificateData\":" +
      boost::json::serialize(boost::json::string(client_->cert_pem)) +
      ",\"clientKeyData\":" + boost::json::serialize(boost::json::string(client_->key_pem)) + "}}";
  Write("cred.json", cred);
  Write("plugin.sh", "#!/bin/sh\ncat " + dir_ + "/cred.json\n", true);
  auto cfg = ParseKubeconfig(Kubeconfig("", ExecUser(v, dir_ + "/plugin.sh")), dir_);
  ASSERT_TRUE(cfg.ok());
  Credentials creds(*cfg);
  auto cert = creds.ExecClientCertificate();
  ASSERT_TRUE(cert.ok()) << cert.error().ToString();
  EXPECT_EQ(cert->cert_pem, client_->cert_pem);
  EXPECT_EQ(cert->key_pem, client_->key_pem);
  EXPECT_EQ(*creds.AuthorizationHeader(), "");
}

TEST_F(ConfigTest, InClusterConfigReadsTheServiceAccountFolder) {
  Write("sa/ca.crt", ca_->cert_pem);
  Write("sa/token", "sa-token\n");
  Write("sa/namespace", "kube-system");
  unsetenv("KUBERNETES_SERVICE_HOST");
  auto missing = InClusterConfig(dir_ + "/sa");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("KUBERNETES_SERVICE_HOST"), std::string::npos);
  setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto cfg = InClusterConfig(dir_ + "/sa");
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(cfg.ok()) << cfg.error().ToString();
  EXPECT_EQ(cfg->server, "https://10.0.0.1:443");
  EXPECT_EQ(cfg->tls.ca_pem, ca_->cert_pem);
  EXPECT_EQ(cfg->default_namespace, "kube-system");
  Credentials creds(*cfg);
  EXPECT_EQ(*creds.AuthorizationHeader(), "Bearer sa-token");
}

TEST_F(ConfigTest, KubeconfigEnvListMergesFirstWins) {
  std::string a = Write("a",
                        "current-context: main\ncontexts:\n- name: main\n  context:\n"
                        "    cluster: c1\n    user: u1\n");
  std::string b = Write("b", Kubeconfig("", "    token: from-b\n", "other"));
  setenv("KUBECONFIG", (dir_ + "/missing:" + a + ":" + b).c_str(), 1);
  auto cfg = DefaultConfig();
  unsetenv("KUBECONFIG");
  ASSERT_TRUE(cfg.ok()) << cfg.error().ToString();
  EXPECT_EQ(cfg->context_name, "main");  // a's current-context wins over b's
  EXPECT_EQ(cfg->bearer_token, "from-b");
  EXPECT_EQ(cfg->server, "https://127.0.0.1:6443");
}

TEST_F(ConfigTest, BasicAuthHeader) {
  auto cfg = ParseKubeconfig(Kubeconfig("", "    username: admin\n    password: s3cret\n"), dir_);
  ASSERT_TRUE(cfg.ok());
  Credentials creds(*cfg);
  EXPECT_EQ(*creds.AuthorizationHeader(), "Basic " + B64("admin:s3cret"));
  EXPECT_FALSE(creds.Refreshable());
}

}  // namespace
}  // namespace hyperslice::kube
