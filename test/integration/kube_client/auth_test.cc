// Credentials and bad input against the real apiserver: unreachable server, wrong CA, invalid and
// expired tokens, exec credential plugins (with a TokenRequest-issued service-account token), and
// the 401 → refresh → retry path.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "src/kube/client.h"
#include "src/net/pki.h"
#include "test/testenv/files.h"
#include "test/testenv/namespaced_test.h"
#include "test/testenv/testenv.h"

namespace hyperslice::kube {
namespace {

namespace json = boost::json;
namespace fs = std::filesystem;

const Resource& SelfSubjectReviews() {
  static const Resource r{"authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview",
                          false};
  return r;
}

// Who the apiserver thinks the client is.
Result<std::string> WhoAmI(Client& c) {
  HS_ASSIGN_OR_RETURN(auto review, c.Create(SelfSubjectReviews(), "", Object{}));
  return std::string(review.at("status").at("userInfo").at("username").as_string());
}

// Server and CA of the shared cluster, no identity.
Config Anonymous() {
  Config admin = testenv::Cluster().AdminConfig();
  Config c;
  c.server = admin.server;
  c.tls.ca_pem = admin.tls.ca_pem;
  c.tls.server_name = admin.tls.server_name;
  return c;
}

class AuthTest : public testenv::NamespacedTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(NamespacedTest::SetUp());
    char tmpl[] = "/tmp/hs-kube-auth-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A service account and a short-lived token for it from the TokenRequest API.
  std::string ServiceAccountToken(const std::string& sa) {
    Object obj{{"metadata", json::object{{"name", sa}}}};
    auto created =
        client_->Create(Resource{"", "v1", "serviceaccounts", "ServiceAccount", true}, ns_, obj);
    EXPECT_TRUE(created.ok()) << created.error().ToString();
    auto resp = client_->Raw(
        "POST", "/api/v1/namespaces/" + ns_ + "/serviceaccounts/" + sa + "/token",
        R"({"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":3600}})");
    EXPECT_TRUE(resp.ok());
    if (!resp.ok()) return "";
    EXPECT_EQ(resp->status, 201) << resp->body;
    return std::string(json::parse(resp->body).at("status").at("token").as_string());
  }

  // The anonymous config with the plugin WritePlugin wrote as its exec credential plugin.
  Config WithPlugin(const std::string& api_version) const {
    Config c = Anonymous();
    ExecPlugin p;
    p.api_version = api_version;
    p.command = dir_ + "/plugin.sh";
    c.exec = p;
    return c;
  }

  std::string WritePlugin(const std::string& body) {
    std::string path = dir_ + "/plugin.sh";
    std::ofstream(path) << body;
    chmod(path.c_str(), 0755);
    return path;
  }

  std::string dir_;
};

TEST_F(AuthTest, AdminIdentityIsTheClientCertificate) {
  auto who = WhoAmI(*client_);
  ASSERT_TRUE(who.ok()) << who.error().ToString();
  EXPECT_FALSE(who->empty());
}

TEST_F(AuthTest, UnreachableServerIsUnavailable) {
  // A port that was free a moment ago and has no listener.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  int port = ntohs(addr.sin_port);
  close(fd);

  Config c = Anonymous();
  c.server = "https://127.0.0.1:" + std::to_string(port);
  auto client = Client::Create(c);
  ASSERT_TRUE(client.ok()) << client.error().ToString();
  auto got = (*client)->Get(resources::ConfigMaps(), "default", "x");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, Error::Code::kUnavailable) << got.error().ToString();
  EXPECT_NE(got.error().message.find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << got.error().message;
  EXPECT_TRUE(got.error().Retryable());
  auto watch = (*client)->Watch(resources::ConfigMaps(), "default", {});
  ASSERT_FALSE(watch.ok());
  EXPECT_EQ(watch.error().code, Error::Code::kUnavailable);
}

TEST_F(AuthTest, WrongCaFailsTheTlsHandshake) {
  auto other = net::pki::MakeCa("some-other-ca");
  ASSERT_TRUE(other.ok());
  Config c = testenv::Cluster().AdminConfig();
  c.tls.ca_pem = other->cert_pem;
  auto client = Client::Create(c);
  ASSERT_TRUE(client.ok()) << client.error().ToString();
  auto got = (*client)->Get(resources::Namespaces(), "", "default");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, Error::Code::kUnavailable) << got.error().ToString();
  EXPECT_NE(got.error().message.find("certificate"), std::string::npos) << got.error().message;
}

TEST_F(AuthTest, BadPemInConfigIsRejectedByCreate) {
  Config c = Anonymous();
  c.tls.ca_pem = "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n";
  auto client = Client::Create(c);
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.error().message.find(c.server), std::string::npos) << client.error().message;
  Config empty;
  auto none = Client::Create(empty);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, Error::Code::kInvalidArgument);
}

TEST_F(AuthTest, InvalidBearerTokenIsUnauthorized) {
  Config c = Anonymous();
  c.bearer_token = "not-a-real-token";
  auto client = Client::Create(c);
  ASSERT_TRUE(client.ok());
  auto got = (*client)->Get(resources::Namespaces(), "", "default");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, Error::Code::kUnauthorized) << got.error().ToString();
  EXPECT_EQ(got.error().http_status, 401);
  EXPECT_EQ(got.error().message.find("not-a-real-token"), std::string::npos);  // never echoed
}

TEST_F(AuthTest, ExpiredBootstrapTokenIsUnauthorizedAValidOneAuthenticates) {
  auto secret = [](const std::string& id, const std::string& expiration) {
    json::object data{{"token-id", id},
                      {"token-secret", "0123456789abcdef"},
                      {"usage-bootstrap-authentication", "true"},
                      {"expiration", expiration}};
    return Object{{"metadata", json::object{{"name", "bootstrap-token-" + id}}},
                  {"type", "bootstrap.kubernetes.io/token"},
                  {"stringData", data}};
  };
  const auto& secrets = resources::Secrets();
  // Ids are unique per run so reruns against a kept cluster do not collide.
  std::string suffix = std::to_string(getpid() % 1000);
  if (suffix.size() < 3) suffix.insert(0, 3 - suffix.size(), '0');
  std::string expired_id = "exp" + suffix, valid_id = "val" + suffix;
  ASSERT_TRUE(
      client_->Create(secrets, "kube-system", secret(expired_id, "2001-01-01T00:00:00Z")).ok());
  ASSERT_TRUE(
      client_->Create(secrets, "kube-system", secret(valid_id, "2999-01-01T00:00:00Z")).ok());

  Config expired = Anonymous();
  expired.bearer_token = expired_id + ".0123456789abcdef";
  auto c1 = Client::Create(expired);
  ASSERT_TRUE(c1.ok());
  auto who = WhoAmI(**c1);
  ASSERT_FALSE(who.ok());
  EXPECT_EQ(who.error().code, Error::Code::kUnauthorized) << who.error().ToString();

  Config valid = Anonymous();
  valid.bearer_token = valid_id + ".0123456789abcdef";
  auto c2 = Client::Create(valid);
  ASSERT_TRUE(c2.ok());
  who = WhoAmI(**c2);
  ASSERT_TRUE(who.ok()) << who.error().ToString();
  EXPECT_EQ(*who, "system:bootstrap:" + valid_id);
  // Authenticated but not authorized for namespaces: Forbidden, typed.
  auto forbidden = (*c2)->Get(resources::Namespaces(), "", "default");
  ASSERT_FALSE(forbidden.ok());
  EXPECT_EQ(forbidden.error().code, Error::Code::kForbidden) << forbidden.error().ToString();
  EXPECT_EQ(forbidden.error().reason, "Forbidden");
}

TEST_F(AuthTest, ExecPluginProvidesAServiceAccountToken) {
  std::string token = ServiceAccountToken("exec-user");
  ASSERT_FALSE(token.empty());
  WritePlugin("#!/bin/sh\necho run >> " + dir_ + "/runs\n" +
              "cat <<EOF\n{\"apiVersion\":\"client.authentication.k8s.io/v1\","
              "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"" +
              token + "\",\"expirationTimestamp\":\"2999-01-01T00:00:00Z\"}}\nEOF\n");
  Config admin = testenv::Cluster().AdminConfig();
  std::string kubeconfig =
      "apiVersion: v1\nkind: Config\ncurrent-context: exec\nclusters:\n- name: local\n  cluster:\n"
      "    server: " +
      admin.server + "\n    certificate-authority: " + testenv::Cluster().ca_cert_path() +
      "\ncontexts:\n- name: exec\n  context:\n    cluster: local\n    user: plugin\n"
      "users:\n- name: plugin\n  user:\n    exec:\n      apiVersion: "
      "client.authentication.k8s.io/v1\n"
      "      command: ./plugin.sh\n      interactiveMode: Never\n";
  std::ofstream(dir_ + "/kubeconfig") << kubeconfig;
  auto cfg = LoadKubeconfig(dir_ + "/kubeconfig");
  ASSERT_TRUE(cfg.ok()) << cfg.error().ToString();
  auto client = Client::Create(*cfg);
  ASSERT_TRUE(client.ok()) << client.error().ToString();
  auto who = WhoAmI(**client);
  ASSERT_TRUE(who.ok()) << who.error().ToString();
  EXPECT_EQ(*who, "system:serviceaccount:" + ns_ + ":exec-user");
  ASSERT_TRUE(WhoAmI(**client).ok());
  EXPECT_EQ(testenv::ReadFile(dir_ + "/runs"),
            "run\n");  // cached until expiry: one run for two requests
}

TEST_F(AuthTest, UnauthorizedRefreshesTheExecTokenAndRetriesOnce) {
  std::string token = ServiceAccountToken("rotating");
  ASSERT_FALSE(token.empty());
  // The first run hands out a revoked-looking token; later runs the real one.
  WritePlugin("#!/bin/sh\necho run >> " + dir_ + "/runs\n" + "if [ \"$(wc -l < " + dir_ +
              "/runs)\" -eq 1 ]; then T=stale-token; else T='" + token + "'; fi\n" +
              "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":"
              "\"ExecCredential\",\"status\":{\"token\":\"'$T'\"," +
              "\"expirationTimestamp\":\"2999-01-01T00:00:00Z\"}}'\n");
  Config c = WithPlugin("client.authentication.k8s.io/v1beta1");
  auto client = Client::Create(c);
  ASSERT_TRUE(client.ok());
  auto who = WhoAmI(**client);
  ASSERT_TRUE(who.ok()) << who.error().ToString();
  EXPECT_EQ(*who, "system:serviceaccount:" + ns_ + ":rotating");
  EXPECT_EQ(testenv::ReadFile(dir_ + "/runs"), "run\nrun\n");

  // A plugin that always gives a bad token: one retry, then kUnauthorized.
  WritePlugin("#!/bin/sh\necho run >> " + dir_ +
              "/runs2\n"
              "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":"
              "\"ExecCredential\",\"status\":{\"token\":\"always-bad\"}}'\n");
  auto bad = Client::Create(c);
  ASSERT_TRUE(bad.ok());
  auto denied = WhoAmI(**bad);
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.error().code, Error::Code::kUnauthorized);
  EXPECT_EQ(testenv::ReadFile(dir_ + "/runs2"), "run\nrun\n");
}

TEST_F(AuthTest, FailingExecPluginIsAClearErrorNotACrash) {
  WritePlugin("#!/bin/sh\necho 'cannot reach the identity provider' >&2\nexit 1\n");
  Config c = WithPlugin("client.authentication.k8s.io/v1");
  auto client = Client::Create(c);
  ASSERT_TRUE(client.ok());
  auto got = (*client)->Get(resources::Namespaces(), "", "default");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, Error::Code::kUnauthorized);
  EXPECT_NE(got.error().message.find("cannot reach the identity provider"), std::string::npos)
      << got.error().message;
}

TEST_F(AuthTest, TokenFileIsUsedAndReReadAfterUnauthorized) {
  std::string token = ServiceAccountToken("file-user");
  ASSERT_FALSE(token.empty());
  std::string path = dir_ + "/token";
  std::ofstream(path) << "stale-token\n";
  Config c = Anonymous();
  c.bearer_token_file = path;
  auto client = Client::Create(c);
  ASSERT_TRUE(client.ok());
  auto first = WhoAmI(**client);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.error().code, Error::Code::kUnauthorized);
  std::ofstream(path) << token << "\n";  // rotated by the kubelet
  auto second = WhoAmI(**client);
  ASSERT_TRUE(second.ok()) << second.error().ToString();
  EXPECT_EQ(*second, "system:serviceaccount:" + ns_ + ":file-user");
}

}  // namespace
}  // namespace hyperslice::kube
