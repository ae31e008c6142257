// The names and documents the sealed agent measures and the control node expects.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/runners/agent/agent.h"
#include "src/runners/attest/attest.h"
#include "src/runners/controlnode/api.h"
#include "src/runners/sealed/sealed.h"

namespace hyperslice::runners {
namespace {

v1::RunPodRequest Pod() {
  v1::RunPodRequest r;
  r.mutable_pod()->set_uid("u1");
  r.set_restart_policy("Never");
  auto* c = r.add_containers();
  c->set_name("main");
  c->set_image("127.0.0.1:5000/hs@sha256:" + std::string(64, 'a'));
  c->add_args("print:hi");
  auto* e = c->add_env();
  e->set_name("MODE");
  e->set_value("serve");
  return r;
}

TEST(CanonicalWorkloadSpec, IsSortedJsonOfThePolicyRelevantFields) {
  v1::RunPodRequest r = Pod();
  EXPECT_EQ(
      sealed::CanonicalWorkloadSpec(r, r.containers(0)),
      R"({"args":["print:hi"],"command":[],"env":[["MODE","serve"]],"hostNetwork":false,)"
      R"("image":"127.0.0.1:5000/hs@sha256:)" +
          std::string(64, 'a') +
          R"(","mounts":[],"restartPolicy":"Never","stdin":false,"tty":false,"workingDir":""})");
}

TEST(CanonicalWorkloadSpec, ChangesWithEveryPolicyRelevantField) {
  v1::RunPodRequest base = Pod();
  const std::string want = sealed::CanonicalWorkloadSpec(base, base.containers(0));
  auto differs = [&](auto edit) {
    v1::RunPodRequest r = Pod();
    edit(r);
    return sealed::CanonicalWorkloadSpec(r, r.containers(0)) != want;
  };
  EXPECT_TRUE(differs([](v1::RunPodRequest& r) { r.mutable_containers(0)->add_command("/sh"); }));
  EXPECT_TRUE(differs([](v1::RunPodRequest& r) { r.mutable_containers(0)->set_args(0, "x"); }));
  EXPECT_TRUE(differs(
      [](v1::RunPodRequest& r) { r.mutable_containers(0)->mutable_env(0)->set_value("debug"); }));
  EXPECT_TRUE(differs([](v1::RunPodRequest& r) { r.set_host_network(true); }));
  EXPECT_TRUE(differs([](v1::RunPodRequest& r) {
    auto* m = r.mutable_containers(0)->add_mounts();
    m->set_volume("v");
    m->set_container_path("/data");
  }));
  // Volume contents (Secrets) are not measured: the spec digest must not reveal them.
  EXPECT_FALSE(differs([](v1::RunPodRequest& r) {
    auto* f = r.add_volumes()->mutable_files()->add_files();
    f->set_path("key");
    f->set_content("secret");
  }));
}

TEST(Sealed, NamesAndDigests) {
  EXPECT_EQ(sealed::WorkloadImageName("u1", "main"), "workload/u1/main/image");
  EXPECT_EQ(sealed::WorkloadSpecName("u1", "main"), "workload/u1/main/spec");
  EXPECT_EQ(sealed::ImageDigest("r/x@sha256:ab"), "sha256:ab");
  EXPECT_EQ(sealed::ImageDigest("r:5000/x:tag"), "");
}

TEST(SealedConfigDocument, SameForAFleetDifferentForPolicy) {
  agent::AgentOptions a;
  a.runner_name = "r1";
  a.region = "europe-west4";
  a.listen = "127.0.0.2:7000";
  a.state_dir = "/var/lib/a";
  a.tpm_tcti = "swtpm:host=127.0.0.1,port=2321";
  a.capacity = {{"cpu", "4"}, {"memory", "8Gi"}};
  a.sealed = true;
  agent::AgentOptions b = a;
  // Identity, location, addresses, state and TPM address are not what the agent runs.
  b.runner_name = "r2";
  b.region = "us-central1";
  b.listen = "127.0.0.3:7001";
  b.state_dir = "/var/lib/b";
  b.tpm_tcti = "device:/dev/tpmrm0";
  EXPECT_EQ(agent::SealedConfigDocument(a), agent::SealedConfigDocument(b));
  agent::AgentOptions c = a;
  c.allow_host_network = true;
  EXPECT_NE(agent::SealedConfigDocument(a), agent::SealedConfigDocument(c));
  agent::AgentOptions d = a;
  d.insecure_registries = {"127.0.0.1:5000"};
  EXPECT_NE(agent::SealedConfigDocument(a), agent::SealedConfigDocument(d));
  agent::AgentOptions e = a;
  e.capacity["cpu"] = "8";
  EXPECT_NE(agent::SealedConfigDocument(a), agent::SealedConfigDocument(e));
  // Another trusted key in the workload policy is another configuration.
  agent::AgentOptions f = a;
  f.workload_policy = policy::WorkloadPolicy{};
  f.workload_policy->trusted_keys_pem = {"key-one"};
  agent::AgentOptions g = f;
  g.workload_policy->trusted_keys_pem = {"key-two"};
  EXPECT_NE(agent::SealedConfigDocument(a), agent::SealedConfigDocument(f));
  EXPECT_NE(agent::SealedConfigDocument(f), agent::SealedConfigDocument(g));
}

TEST(SealedReferenceValues, AreTheDigestsOfBinaryAndConfig) {
  agent::AgentOptions o;
  o.sealed = true;
  o.binary_path = "/proc/self/exe";
  auto refs = agent::SealedReferenceValues(o);
  ASSERT_TRUE(refs.ok()) << refs.error().message;
  ASSERT_EQ(refs->size(), 2u);
  EXPECT_EQ((*refs)[0].first, sealed::kAgentBinary);
  EXPECT_EQ((*refs)[1].first, sealed::kAgentConfig);
  EXPECT_EQ((*refs)[1].second, attest::Hex(attest::Sha256(agent::SealedConfigDocument(o))));
  o.binary_path = "/nonexistent/agent";
  EXPECT_EQ(agent::SealedReferenceValues(o).error().code, Error::Code::kNotFound);
}

kube::Object Policy(const std::string& spec) {
  return boost::json::parse(R"({"metadata":{"name":"p","generation":3},"spec":)" + spec + "}")
      .as_object();
}

TEST(ParseAttestationPolicy, ReadsReferenceValuesAndDefaults) {
  const std::string pem = "-----BEGIN CERTIFICATE-----\\nMIIB\\n-----END CERTIFICATE-----\\n";
  auto p =
      controlnode::ParseAttestationPolicy(Policy(R"({"ekCACertificates":")" + pem +
                                                 R"(","referenceValues":[{"name":"agent/binary",)"
                                                 R"("digests":[")" +
                                                 std::string(64, 'b') + R"("]}]})"));
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->name, "p");
  EXPECT_EQ(p->reference_values.at("agent/binary"), std::vector<std::string>{std::string(64, 'b')});
  EXPECT_EQ(p->required, (std::vector<std::string>{"agent/binary", "agent/config"}));
  EXPECT_EQ(p->reattest_interval, std::chrono::seconds(60));
  EXPECT_EQ(p->token_lifetime, std::chrono::seconds(300));

  auto bad_digest = controlnode::ParseAttestationPolicy(
      Policy(R"({"ekCACertificates":")" + pem +
             R"(","referenceValues":[{"name":"agent/binary","digests":["ABC"]}]})"));
  ASSERT_FALSE(bad_digest.ok());
  EXPECT_NE(bad_digest.error().message.find("referenceValues[agent/binary]"), std::string::npos);
  auto no_ca = controlnode::ParseAttestationPolicy(Policy(R"({"referenceValues":[]})"));
  ASSERT_FALSE(no_ca.ok());
  EXPECT_NE(no_ca.error().message.find("ekCACertificates"), std::string::npos);
  auto lifetime = controlnode::ParseAttestationPolicy(Policy(
      R"({"ekCACertificates":")" + pem + R"(","referenceValues":[],"tokenLifetimeSeconds":5})"));
  ASSERT_FALSE(lifetime.ok());
  EXPECT_NE(lifetime.error().message.find("tokenLifetimeSeconds"), std::string::npos);
}

TEST(ParseRunner, SealedSwitchAndPolicy) {
  auto r = controlnode::ParseRunner(
      boost::json::parse(R"({"metadata":{"name":"r"},"spec":{"controlNode":"cn",)"
                         R"("host":{"address":"127.0.0.2:7000"},"sealed":true,)"
                         R"("attestationPolicy":"fleet"}})")
          .as_object());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->sealed);
  EXPECT_EQ(r->attestation_policy, "fleet");
  auto cn = controlnode::ParseControlNode(
      boost::json::parse(R"({"metadata":{"name":"cn"},"spec":{"sealed":true,)"
                         R"("workloadPolicy":"signed","attestationPolicy":"fleet"}})")
          .as_object());
  ASSERT_TRUE(cn.ok());
  EXPECT_TRUE(cn->sealed);
  EXPECT_EQ(cn->attestation_policy, "fleet");
}

}  // namespace
}  // namespace hyperslice::runners
