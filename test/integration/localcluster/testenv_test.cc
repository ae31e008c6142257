// The fixture other integration tests stand on: hs_testenv's shared cluster, admin client and
// per-test namespaces, checked against the real apiserver.
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "src/kube/client.h"
#include "src/kube/config.h"
#include "src/kube/resource.h"
#include "test/testenv/testenv.h"

namespace hyperslice::testenv {
namespace {

bool IsDns1123Label(const std::string& s) {
  static const std::regex label("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
  return s.size() <= 63 && std::regex_match(s, label);
}

TEST(Testenv, AdminClientIsClusterAdmin) {
  auto client = AdminClient();
  ASSERT_NE(client, nullptr);
  auto readyz = client->Raw("GET", "/readyz");
  ASSERT_TRUE(readyz.ok()) << readyz.error().ToString();
  EXPECT_EQ(readyz->status, 200);
  EXPECT_EQ(readyz->body, "ok");
  // Cluster-scoped reads need more than a namespace's rights.
  auto nodes = client->List(kube::resources::Nodes(), "");
  EXPECT_TRUE(nodes.ok()) << nodes.error().ToString();
  auto sys = client->Get(kube::resources::Namespaces(), "", "kube-system");
  EXPECT_TRUE(sys.ok()) << sys.error().ToString();
}

TEST(Testenv, WrittenKubeconfigLoadsAsAdminConfig) {
  auto& cluster = Cluster();
  auto loaded = kube::LoadKubeconfig(cluster.kubeconfig_path());
  ASSERT_TRUE(loaded.ok()) << loaded.error().ToString();
  kube::Config direct = cluster.AdminConfig();
  EXPECT_EQ(loaded->server, direct.server);
  EXPECT_EQ(loaded->tls.ca_pem, direct.tls.ca_pem);
  EXPECT_EQ(loaded->tls.client_cert_pem, direct.tls.client_cert_pem);
  EXPECT_EQ(loaded->tls.client_key_pem, direct.tls.client_key_pem);
}

TEST(Testenv, TestNamespaceIsCreatedOncePerTest) {
  std::string ns = TestNamespace();
  EXPECT_TRUE(IsDns1123Label(ns)) << ns;
  EXPECT_EQ(ns.rfind("testenv-testnamespaceiscreatedoncepertest-", 0), 0u) << ns;
  EXPECT_EQ(TestNamespace(), ns);  // same test, same namespace
  auto got = AdminClient()->Get(kube::resources::Namespaces(), "", ns);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  auto* status = got->if_contains("status");
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(status->at("phase").as_string(), "Active");
}

TEST(Testenv, AVeryLongTestNameStillYieldsAValidNamespaceNameWithinSixtyThreeCharacters_X_Y) {
  std::string ns = TestNamespace();
  EXPECT_TRUE(IsDns1123Label(ns)) << ns;
  auto got = AdminClient()->Get(kube::resources::Namespaces(), "", ns);
  EXPECT_TRUE(got.ok()) << got.error().ToString();
}

}  // namespace
}  // namespace hyperslice::testenv
