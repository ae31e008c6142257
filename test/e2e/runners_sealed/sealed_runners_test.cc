// Sealed runners end to end (issue 21, items 1-3) on a real kube-apiserver + kube-scheduler:
// the operator's control node with its link server and attestation token issuer (JWKS and OIDC
// discovery over HTTPS), an AttestationPolicy with the reference values of the agent binary and
// of one fleet configuration, and two `hyperslice runner-agent --sealed` processes, each on its
// own software TPM (swtpm manufactured with an EK certificate from the test's own CA):
//  - runner-good runs with the fleet configuration: it is enrolled, attested, linked, adds its
//    capacity to the Node; a pod runs on it as a runc container from a local registry image by
//    digest and its program asks the agent's socket for a token, which verifies against the
//    served JWKS with the pod's image digest and the workload's nonce; a relying party for
//    another audience refuses it;
//  - runner-bad runs with --allow-host-network (another agent/config): it links but is
//    Untrusted, its condition and Event name PCR 23 and "agent/config" with both digests, it
//    adds nothing to the Node, and no pod is ever placed on it.
#include <stdlib.h>

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "src/base/command.h"
#include "src/base/json.h"
#include "src/kube/client.h"
#include "src/kube/resource.h"
#include "src/net/http.h"
#include "src/runners/agent/agent.h"
#include "src/runners/attest/attest.h"
#include "src/runners/controlnode/api.h"
#include "src/runners/controlnode/controlnode.h"
#include "test/integration/runners_attest/swtpm.h"
#include "test/testenv/command.h"
#include "test/testenv/eventually.h"
#include "test/testenv/registry.h"
#include "test/testenv/runner_agent.h"
#include "test/testenv/runners_env.h"

namespace hyperslice {
namespace {

namespace json = boost::json;
namespace cn = runners::controlnode;
using namespace std::chrono_literals;
using runners::attest::testing::Swtpm;
using testenv::Eventually;

constexpr char kControlNode[] = "sealed-cn";
constexpr char kAudience[] = "https://kbs.example/model-weights";
constexpr char kNonce[] = "workload-nonce-0123456789";
// The hex SHA-256 of a key the workload holds: bound into the quote and the token.
const std::string kTeeKey(64, 'a');

// The fleet's agent flags (what the reference values are computed from) and a deviation.
std::vector<std::string> FleetFlags(const std::string& registry) {
  return {"--insecure-registry", registry, "--capacity", "cpu=4", "--capacity", "memory=8Gi"};
}

class SealedRunnersTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_ = testenv::RunnerToolsMissing();
    if (skip_.empty()) {
      if (auto missing = Swtpm::Missing()) skip_ = *missing;
    }
    if (!skip_.empty()) return;
    ::setenv("TSS2_LOG", "all+none", 1);

    // The operator's runners part with the token issuer, as `hyperslice operator --runners`.
    testenv::RunnersEnvOptions eo;
    eo.name = "sealed-e2e";
    eo.image = "hs/sealed";
    eo.extra_crds = {
        {"runners.hyperslice.dev_attestationpolicies.yaml", cn::AttestationPolicies()}};
    eo.configure = [](testenv::RunnersEnv& env, cn::OperatorOptions& oo,
                      cn::ServersOptions& sv) -> Status {
      HS_ASSIGN_OR_RETURN(int oidc_port, FreeLoopbackPort("127.0.0.1"));
      issuer_url_ = "https://127.0.0.1:" + std::to_string(oidc_port);
      HS_ASSIGN_OR_RETURN(auto key, cn::EnsureAttestationKey(*env.client(), env.ns(),
                                                             "hyperslice-runners-attestation"));
      HS_ASSIGN_OR_RETURN(std::shared_ptr<runners::attest::TokenIssuer> token_issuer,
                          runners::attest::TokenIssuer::FromPrivateKeyPem(issuer_url_, key));
      oo.token_issuer = token_issuer;
      sv.attestation_address = "127.0.0.1:" + std::to_string(oidc_port);
      sv.token_issuer = token_issuer;
      sv.csr_timeout = 5s;
      return OkStatus();
    };
    auto env = testenv::RunnersEnv::Start(eo);
    ASSERT_TRUE(env.ok()) << env.error().message;
    env_ = std::move(*env);
    ca_pem_ = env_->ca().ca.cert_pem;

    // Two TPMs as a vendor ships them: EK certificates in NV from the test's own CAs.
    for (auto* tpm : {&good_tpm_, &bad_tpm_}) {
      auto t = Swtpm::Start(/*with_ek_certificate=*/true);
      ASSERT_TRUE(t.ok()) << t.error().message;
      *tpm = std::move(*t);
    }

    // The admin's reference values: this agent binary and the fleet configuration, as
    // `hyperslice runner-agent --sealed --print-reference-values <fleet flags>` prints them.
    std::vector<std::string> print = {HS_BINARY, "runner-agent", "--sealed",
                                      "--print-reference-values"};
    for (const auto& f : FleetFlags(env_->registry().host())) print.push_back(f);
    auto printed = RunCommand(print);
    ASSERT_EQ(printed.exit_code, 0) << printed.errors;
    reference_values_yaml_ = printed.output;
    runners::agent::AgentOptions fleet;
    fleet.sealed = true;
    fleet.binary_path = HS_BINARY;
    fleet.insecure_registries = {env_->registry().host()};
    fleet.capacity = {{"cpu", "4"}, {"memory", "8Gi"}};
    auto refs = runners::agent::SealedReferenceValues(fleet);
    ASSERT_TRUE(refs.ok()) << refs.error().message;
    json::array values;
    for (const auto& [name, digest] : *refs) {
      values.push_back(
          json::object{{"name", name}, {"digests", json::array{json::string(digest)}}});
      config_digest_ = digest;  // the last one is agent/config
    }
    Create(cn::AttestationPolicies(), "",
           json::serialize(json::object{
               {"apiVersion", "runners.hyperslice.dev/v1alpha1"},
               {"kind", "AttestationPolicy"},
               {"metadata", json::object{{"name", "fleet"}}},
               {"spec",
                json::object{{"ekCACertificates", good_tpm_->ek_ca_pem() + bad_tpm_->ek_ca_pem()},
                             {"referenceValues", values},
                             {"reattestIntervalSeconds", 5},
                             {"tokenLifetimeSeconds", 120}}}}));
    Status node = env_->CreateControlNode(kControlNode);
    ASSERT_TRUE(node.ok()) << node.error().message;

    using StopWith = testenv::RunnerAgent::StopWith;
    good_ = std::make_unique<testenv::RunnerAgent>("runner-good", "127.0.0.2", env_->dir(),
                                                   StopWith::kSigterm);
    bad_ = std::make_unique<testenv::RunnerAgent>("runner-bad", "127.0.0.3", env_->dir(),
                                                  StopWith::kSigterm);
    for (testenv::RunnerAgent* a : {good_.get(), bad_.get()}) {
      Create(cn::Runners(), "",
             R"({"apiVersion":"runners.hyperslice.dev/v1alpha1","kind":"Runner",)"
             R"("metadata":{"name":")" +
                 a->name() + R"("},"spec":{"controlNode":")" + kControlNode +
                 R"(","host":{"address":")" + a->address() +
                 R"("},"sealed":true,"attestationPolicy":"fleet"}})");
      auto token = env_->JoinToken(a->name(), 30s);
      ASSERT_TRUE(token.ok()) << token.error().message;
      a->SetToken(*token);
      // The TPM, then the fleet's flags (the bad one adds one: not the fleet's config).
      std::vector<std::string> flags = {"--sealed", "--tpm",
                                        (a == good_.get() ? good_tpm_ : bad_tpm_)->Tcti()};
      for (const auto& f : FleetFlags(env_->registry().host())) flags.push_back(f);
      if (a == bad_.get()) flags.emplace_back("--allow-host-network");
      ASSERT_TRUE(a->Start(env_->servers().link_port(), env_->ca_file(), flags));
    }
  }

  static void TearDownTestSuite() {
    if (env_) {
      (void)env_->client()->Delete(kube::resources::Pods(), env_->ns(), "attested", {});
      env_->WaitNoPods(30s);
    }
    good_.reset();
    bad_.reset();
    env_.reset();
    good_tpm_.reset();
    bad_tpm_.reset();
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  static void Create(const kube::Resource& r, const std::string& ns, const std::string& body) {
    Status created = env_->Create(r, ns, body);
    ASSERT_TRUE(created.ok()) << created.error().message;
  }
  static std::optional<json::object> Get(const kube::Resource& r, const std::string& ns,
                                         const std::string& name) {
    return env_->Get(r, ns, name);
  }
  static std::string RunnerPhase(const std::string& name) { return env_->RunnerPhase(name); }
  // The Runner's condition of `type`: status and message ("" when absent).
  static std::pair<std::string, std::string> Condition(const std::string& runner,
                                                       const std::string& type) {
    auto r = Get(cn::Runners(), "", runner);
    const json::object* st = r ? jsonfield::ObjectField(*r, "status") : nullptr;
    const json::array* conds = st ? jsonfield::ArrayField(*st, "conditions") : nullptr;
    for (const auto& c : conds ? *conds : json::array{}) {
      if (c.is_object() && jsonfield::StringField(c.as_object(), "type") == type) {
        return {std::string(jsonfield::StringField(c.as_object(), "status")),
                std::string(jsonfield::StringField(c.as_object(), "reason")) + ": " +
                    std::string(jsonfield::StringField(c.as_object(), "message"))};
      }
    }
    return {"", ""};
  }
  static int64_t NodeCpuMilli() { return env_->NodeMilli(kControlNode, "capacity", "cpu"); }
  static std::string Diagnostics() {
    std::string out;
    for (const char* r : {"runner-good", "runner-bad"}) {
      auto obj = Get(cn::Runners(), "", r);
      out += "\n--- Runner " + std::string(r) + " status ---\n" +
             (obj && obj->contains("status") ? json::serialize(obj->at("status")) : "");
    }
    auto pod = Get(kube::resources::Pods(), env_->ns(), "attested");
    if (pod) out += "\n--- pod attested ---\n" + json::serialize(*pod);
    auto node = Get(kube::resources::Nodes(), "", kControlNode);
    if (node && node->contains("status")) {
      out += "\n--- Node status ---\n" + json::serialize(node->at("status"));
    }
    return out + "\n--- runner-good log ---\n" + good_->Log() + "\n--- runner-bad log ---\n" +
           bad_->Log();
  }

  static inline std::string skip_;
  static inline std::unique_ptr<testenv::RunnersEnv> env_;
  static inline std::string ca_pem_, issuer_url_, config_digest_, reference_values_yaml_;
  static inline std::unique_ptr<Swtpm> good_tpm_, bad_tpm_;
  static inline std::unique_ptr<testenv::RunnerAgent> good_, bad_;
};

TEST_F(SealedRunnersTest, TheReferenceValuesAreWhatTheAgentPrints) {
  // The admin's tool and the library the test used agree (agent/config of the fleet flags).
  EXPECT_NE(reference_values_yaml_.find("- name: agent/config\n    digests: [\"" + config_digest_),
            std::string::npos)
      << reference_values_yaml_;
}

TEST_F(SealedRunnersTest, ARunnerWhoseConfigDiffersIsUntrustedNamedAndNeverScheduled) {
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([] { return RunnerPhase("runner-bad") == "Untrusted"; }, 60s))
      << "phase " << RunnerPhase("runner-bad") << Diagnostics();
  auto took = std::chrono::steady_clock::now() - t0;
  auto [status, message] = Condition("runner-bad", "Attested");
  EXPECT_EQ(status, "False");
  EXPECT_NE(message.find("MeasurementMismatch: PCR 23 measurement \"agent/config\": expected " +
                         config_digest_ + ", got "),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("agent/binary"), std::string::npos) << "only the config differs";
  auto r = Get(cn::Runners(), "", "runner-bad");
  ASSERT_TRUE(r);
  const json::object* att = jsonfield::ObjectAt(*r, "status.attestation");
  ASSERT_NE(att, nullptr);
  EXPECT_FALSE(jsonfield::BoolField(*att, "trusted").value_or(true));
  // The Event says the same.
  ASSERT_TRUE(Eventually(
      [] {
        kube::ListOptions lo;
        lo.field_selector = "involvedObject.name=runner-bad,reason=RunnerUntrusted";
        auto ev = env_->client()->List(kube::resources::Events(), "default", lo);
        if (!ev.ok()) return false;
        for (const auto& e : ev->items) {
          if (std::string(jsonfield::StringField(e, "message")).find("\"agent/config\"") !=
              std::string::npos) {
            return true;
          }
        }
        return false;
      },
      20s));
  // Linked and healthy, but its capacity never reaches the Node: only runner-good's 4 CPUs.
  ASSERT_TRUE(Eventually([] { return RunnerPhase("runner-good") == "Linked"; }, 60s))
      << RunnerPhase("runner-good") << Diagnostics();
  ASSERT_TRUE(Eventually([] { return NodeCpuMilli() == 4000; }, 30s)) << NodeCpuMilli();
  std::this_thread::sleep_for(3s);  // several reconciles later, still only runner-good's
  EXPECT_EQ(NodeCpuMilli(), 4000);
  EXPECT_EQ(RunnerPhase("runner-bad"), "Untrusted");
  std::printf("untrusted after %.1f s\n", std::chrono::duration<double>(took).count());
}

TEST_F(SealedRunnersTest, AnAttestedWorkloadGetsATokenThatVerifiesAgainstTheServedJwks) {
  ASSERT_TRUE(Eventually([] { return Condition("runner-good", "Attested").first == "True"; }, 60s))
      << Condition("runner-good", "Attested").second << Diagnostics();
  auto t0 = std::chrono::steady_clock::now();
  Create(kube::resources::Pods(), env_->ns(),
         R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"attested"},"spec":{)"
         R"("restartPolicy":"Never","tolerations":[{"key":"runners.hyperslice.dev/control-node",)"
         R"("operator":"Exists","effect":"NoSchedule"}],"containers":[{"name":"main","image":")" +
             env_->image() + R"(","args":["token:)" + kAudience + ":" + kNonce +
             R"(","sleep:30"],"env":[{"name":"HS_TEE_KEY","value":")" + kTeeKey +
             R"("}],"resources":{"requests":{"cpu":"1","memory":"64Mi"}}}]}})");
  // The pod is placed on runner-good only.
  std::string runner;
  ASSERT_TRUE(Eventually(
      [&] {
        auto p = Get(kube::resources::Pods(), env_->ns(), "attested");
        runner =
            p ? testenv::StringAt(*p, "metadata.annotations", "runners.hyperslice.dev/runner") : "";
        return !runner.empty();
      },
      60s))
      << Diagnostics();
  EXPECT_EQ(runner, "runner-good");
  // Its program printed the token it got from /run/hyperslice/teeserver.sock.
  std::string logs, token;
  ASSERT_TRUE(Eventually(
      [&] {
        auto r = testenv::Kubectl({"logs", "-n", env_->ns(), "attested"});
        logs = r.output;
        auto at = logs.find("token=");
        if (at == std::string::npos) return false;
        token = logs.substr(at + 6);
        token = token.substr(0, token.find('\n'));
        return !token.empty();
      },
      60s))
      << logs << Diagnostics();
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(logs.find("token error"), std::string::npos) << logs;

  // A relying party fetches discovery and keys from the issuer over HTTPS (runners CA).
  net::HttpClient::Options ho;
  ho.base_url = issuer_url_;
  ho.tls.ca_pem = ca_pem_;
  auto http = net::HttpClient::Create(ho);
  ASSERT_TRUE(http.ok()) << http.error().message;
  net::Request disc_req;
  disc_req.target = "/.well-known/openid-configuration";
  auto disc = (*http)->Do(disc_req);
  ASSERT_TRUE(disc.ok()) << disc.error().message;
  ASSERT_EQ(disc->status, 200) << disc->body;
  auto disc_json = json::parse(disc->body).as_object();
  EXPECT_EQ(jsonfield::StringField(disc_json, "issuer"), issuer_url_);
  ASSERT_EQ(jsonfield::StringField(disc_json, "jwks_uri"), issuer_url_ + "/jwks");
  net::Request jwks_req;
  jwks_req.target = "/jwks";
  auto jwks = (*http)->Do(jwks_req);
  ASSERT_TRUE(jwks.ok()) << jwks.error().message;
  ASSERT_EQ(jwks->status, 200);

  auto claims = runners::attest::VerifyToken(token, jwks->body, issuer_url_, kAudience,
                                             std::chrono::system_clock::now());
  ASSERT_TRUE(claims.ok()) << claims.error().reason << ": " << claims.error().message;
  EXPECT_EQ(claims->subject, "runner-good");
  EXPECT_EQ(claims->image_digest, env_->image().substr(env_->image().find('@') + 1));
  EXPECT_EQ(claims->eat_nonce, std::vector<std::string>{kNonce});
  EXPECT_EQ(claims->hwmodel, "TPM2");
  EXPECT_EQ(claims->dbgstat, "disabled-since-boot");
  EXPECT_LE(claims->expires_at - claims->issued_at, 120s);
  // The workload's key binding, for a key broker (kbs.h kKeyBindingClaim).
  EXPECT_NE(claims->extra_json.find("\"tee_pubkey_sha256\":\"" + kTeeKey + "\""), std::string::npos)
      << claims->extra_json;
  // A relying party with another audience refuses the same token.
  auto other = runners::attest::VerifyToken(token, jwks->body, issuer_url_, "https://other.example",
                                            std::chrono::system_clock::now());
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().reason, "TokenAudience");
  // The runner was re-attested after the workload started: its measurements are in the status.
  auto [status, message] = Condition("runner-good", "Attested");
  EXPECT_EQ(status, "True") << message;
  std::printf("pod created -> token in its log: %.1f s\n",
              std::chrono::duration<double>(took).count());
}

}  // namespace
}  // namespace hyperslice
