// The link protocol and the agent's mutual TLS: join tokens are one-time, renewal keeps the
// identity, and an agent answers only a control node's current certificate from the runners CA.
#include <gtest/gtest.h>

#include <filesystem>

#include <sys/stat.h>

#include "test/integration/runners_agent/fixture.h"

namespace hyperslice::runners::testing {
namespace {

class LinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    env_ = Shared(&why);
    if (env_ == nullptr) GTEST_SKIP() << why;
  }
  link::LinkClientOptions Options(const std::string& runner) {
    link::LinkClientOptions o;
    o.endpoint = "127.0.0.1:" + std::to_string(env_->link->port());
    o.link_ca_pem = env_->ca.cert_pem;
    o.runner_name = runner;
    o.agent_address = "127.0.0.1:7443";
    o.state_dir = env_->dir + "/link-" + runner;
    return o;
  }
  Env* env_ = nullptr;
};

TEST_F(LinkTest, JoinTokenWorksOnceAndIdentityIsPrivate) {
  env_->tokens.Add("runner-once", "token-once");
  auto first = link::Link(Options("runner-once"), "token-once");
  ASSERT_TRUE(first.ok()) << first.error().message;
  auto info = net::pki::Inspect(first->cert_pem);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->common_name, "runner-once");
  EXPECT_TRUE(*net::pki::SignedBy(first->cert_pem, env_->ca.cert_pem));
  struct stat st {};
  ASSERT_EQ(::stat((Options("runner-once").state_dir + "/identity/key.pem").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto second = link::Link(Options("runner-once"), "token-once");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().reason, link::kReasonJoinTokenRefused);
  EXPECT_NE(second.error().message.find("already used"), std::string::npos)
      << second.error().message;
}

TEST_F(LinkTest, WrongOrForeignTokenRefused) {
  env_->tokens.Add("runner-x", "token-x");
  auto wrong = link::Link(Options("runner-x"), "not-the-token");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().reason, link::kReasonJoinTokenRefused);
  auto foreign = link::Link(Options("runner-y"), "token-x");
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.error().message.find("another runner"), std::string::npos);
}

TEST_F(LinkTest, RenewKeepsIdentityWithNewKey) {
  env_->tokens.Add("runner-renew", "token-renew");
  auto first = link::Link(Options("runner-renew"), "token-renew");
  ASSERT_TRUE(first.ok()) << first.error().message;
  // Renewal names no runner: the identity is the TLS client certificate. Asking with another
  // name in the options changes nothing.
  auto o = Options("runner-renew");
  auto renewed = link::Renew(o, *first);
  ASSERT_TRUE(renewed.ok()) << renewed.error().message;
  EXPECT_EQ(net::pki::Inspect(renewed->cert_pem)->common_name, "runner-renew");
  EXPECT_NE(renewed->key_pem, first->key_pem);
  auto loaded = link::LoadIdentity(o.state_dir);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->cert_pem, renewed->cert_pem);
  EXPECT_GT(link::RenewalTime(*renewed), renewed->obtained);
  EXPECT_LT(link::RenewalTime(*renewed), renewed->not_after);
}

TEST_F(LinkTest, RenewWithoutRunnerCertificateRefused) {
  link::AgentIdentity control_node;
  control_node.cert_pem = env_->control_node.cert_pem;
  control_node.key_pem = env_->control_node.key_pem;
  auto r = link::Renew(Options("control-node-a"), control_node);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, link::kReasonIdentityRefused);
}

class AgentTlsTest : public LinkTest {};

TEST_F(AgentTlsTest, AgentAnswersOnlyCurrentControlNodeCertificates) {
  AgentProcess agent(*env_, "runner-tls");
  ASSERT_TRUE(agent.Start());
  auto info = [&](const net::pki::KeyPair& client) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::RunnerInfo out;
    return agent.Stub(client)->Info(&ctx, v1::InfoRequest(), &out);
  };
  EXPECT_TRUE(info(env_->control_node).ok());

  // Expired: the TLS handshake fails (gRPC reports the channel unavailable).
  auto expired =
      link::IssueControlNodeClientCert(env_->ca, "control-node-old", std::chrono::seconds(-60));
  ASSERT_TRUE(expired.ok());
  grpc::Status st = info(*expired);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();

  // Another CA's control node.
  auto other_ca = link::MakeRunnersCa();
  auto foreign = link::IssueControlNodeClientCert(*other_ca, "control-node-a");
  st = info(*foreign);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();

  // The runners CA, but a runner's identity, not a control node's.
  auto runner_id = link::LoadIdentity(agent.state_dir());
  ASSERT_TRUE(runner_id.ok());
  st = info({runner_id->cert_pem, runner_id->key_pem});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();

  // The agent's join token was used once; a restart reuses the persisted identity.
  agent.Terminate();
  ASSERT_TRUE(agent.Start());
  EXPECT_TRUE(info(env_->control_node).ok());
}

}  // namespace
}  // namespace hyperslice::runners::testing
