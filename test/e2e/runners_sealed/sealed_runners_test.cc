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

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/command.h"
#include "src/base/json.h"
#include "src/base/log.h"
#include "src/kube/client.h"
#include "src/kube/metrics.h"
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
#include "test/testenv/runners_suite.h"
#include "test/testenv/testenv.h"
#include "test/unit/runners_attest/signing.h"

namespace hyperslice {
namespace {

namespace json = boost::json;
namespace cn = runners::controlnode;
namespace fs = std::filesystem;
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

class SealedRunnersTest : public testenv::RunnersSuite<SealedRunnersTest> {
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
    eo.extra_crds = {{"runners.hyperslice.dev_attestationpolicies.yaml", cn::AttestationPolicies()},
                     {"runners.hyperslice.dev_workloadpolicies.yaml", cn::WorkloadPolicies()}};
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
      sv.kbs_namespace = env.ns();                                // the key broker's Secrets
      oo.registry.insecure_registries = {env.registry().host()};  // cosign signatures over HTTP
      sv.csr_timeout = 5s;
      return OkStatus();
    };
    // Every line the in-process operator logs (the key broker's included), still on stderr.
    log::SetSink([](std::string_view line) {
      {
        std::lock_guard lock(log_mu_);
        operator_log_ += line;
        operator_log_ += '\n';
      }
      std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
    });
    auto env = testenv::RunnersEnv::Start(eo);
    ASSERT_TRUE(env.ok()) << env.error().message;
    env_ = std::move(*env);
    ca_pem_ = env_->ca().ca.cert_pem;
    // The release key signs what the sealed control node runs (cosign's format, in the registry).
    signing_key_ = runners::attest::testing::NewSigningKey();
    Sign(env_->image());

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
    // A sealed control node: signed images only, logs allowed, the workloads' arguments and the
    // two variables the tests' programs read.
    Create(
        cn::WorkloadPolicies(), "",
        json::serialize(json::object{
            {"apiVersion", "runners.hyperslice.dev/v1alpha1"},
            {"kind", "WorkloadPolicy"},
            {"metadata", json::object{{"name", "sealed-models"}}},
            {"spec",
             json::object{
                 {"trustedKeys", json::array{json::object{{"name", "release"},
                                                          {"publicKey", signing_key_.public_pem}}}},
                 {"allowLogs", true},
                 {"launchPolicy",
                  json::object{{"allowCommandOverride", true},
                               {"allowedEnvOverrides", json::array{"HS_TEE_KEY", "HS_BLOB"}}}}}}}));
    Create(cn::ControlNodes(), "",
           R"({"apiVersion":"runners.hyperslice.dev/v1alpha1","kind":"ControlNode",)"
           R"("metadata":{"name":")" +
               std::string(kControlNode) + R"("},"spec":{"address":"127.0.0.1","kubeletPort":)" +
               std::to_string(env_->kubelet_port()) +
               R"(,"sealed":true,"workloadPolicy":"sealed-models"}})");

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
      for (const char* pod : {"attested", "kbs-workload", "admin-probe"}) {
        (void)env_->client()->Delete(kube::resources::Pods(), env_->ns(), pod, {});
      }
      env_->WaitNoPods(30s);
    }
    good_.reset();
    bad_.reset();
    env_.reset();
    log::SetSink(nullptr);
    good_tpm_.reset();
    bad_tpm_.reset();
  }

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
  // The runners the ControlNode's status counts (-1 when absent).
  struct RunnerCounts {
    int64_t linked = -1, healthy = -1;
  };
  static RunnerCounts ControlNodeCounts() {
    auto c = Get(cn::ControlNodes(), "", kControlNode);
    const json::object* st = c ? jsonfield::ObjectField(*c, "status") : nullptr;
    if (st == nullptr) return {};
    return {jsonfield::IntField(*st, "linkedRunners").value_or(-1),
            jsonfield::IntField(*st, "healthyRunners").value_or(-1)};
  }
  // Finished ControlNode reconciles (each requeues itself for the Lease renewal).
  static double ControlNodeReconciles() {
    return kube::metrics::Registry::Default()
        .GetCounter("controller_runtime_reconcile_total", "",
                    {{"controller", "runners-controlnode"}, {"result", "requeue_after"}})
        .Value();
  }
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

  // A cosign signature of `image_ref` by the release key, as `cosign sign` stores it.
  static void Sign(const std::string& image_ref) {
    const std::string repo = image_ref.substr(0, image_ref.find('@'));
    std::string payload =
        runners::attest::MakeSimpleSigning(repo, image_ref.substr(image_ref.find('@') + 1));
    Status st = env_->registry().PushCosignSignature(
        image_ref, payload, runners::attest::testing::SignBase64(signing_key_, payload));
    ASSERT_TRUE(st.ok()) << st.error().message;
  }
  static std::string OperatorLog() {
    std::lock_guard lock(log_mu_);
    return operator_log_;
  }

  static inline runners::attest::testing::SigningKey signing_key_;
  static inline std::mutex log_mu_;
  static inline std::string operator_log_;
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
  // Linked and healthy, but its capacity never reaches the Node: only runner-good's 4 CPUs, from
  // a ControlNode reconcile that saw both runners answer and runner-good usable (its status; the
  // Node is written before it) and still two reconciles later (the controller's metric).
  ASSERT_TRUE(Eventually([] { return RunnerPhase("runner-good") == "Linked"; }, 60s))
      << RunnerPhase("runner-good") << Diagnostics();
  RunnerCounts counts;
  ASSERT_TRUE(Eventually(
      [&] {
        counts = ControlNodeCounts();
        return counts.linked == 2 && counts.healthy >= 1;
      },
      30s))
      << counts.linked << " linked" << Diagnostics();
  EXPECT_EQ(counts.healthy, 1) << "runner-bad counted";
  EXPECT_EQ(NodeCpuMilli(), 4000);
  const double reconciled = ControlNodeReconciles();
  ASSERT_TRUE(Eventually([&] { return ControlNodeReconciles() >= reconciled + 2; }, 30s));
  EXPECT_EQ(NodeCpuMilli(), 4000);
  EXPECT_EQ(ControlNodeCounts().healthy, 1);
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

// ---------------------------------------------------------------------------------------------
// Secrets only to attested workloads (issue 21 §6): the key broker on the issuer's listener.

constexpr char kKbsPod[] = "kbs-workload";
constexpr char kKbsNonce[] = "kbs-nonce-0123456789";
constexpr char kPlaintext[] = "the model weights are 42";

std::string Hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// base64(iv | AES-256-GCM(key, plaintext) | tag): the test blob the workload decrypts.
std::string SealBlob(const std::string& key, const std::string& plaintext) {
  std::string iv(12, '\0'), ct(plaintext.size(), '\0'), tag(16, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(iv.data()), static_cast<int>(iv.size()));
  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> c(EVP_CIPHER_CTX_new(),
                                                                    &EVP_CIPHER_CTX_free);
  int n = 0, fin = 0;
  EVP_EncryptInit_ex(c.get(), EVP_aes_256_gcm(), nullptr,
                     reinterpret_cast<const unsigned char*>(key.data()),
                     reinterpret_cast<const unsigned char*>(iv.data()));
  EVP_EncryptUpdate(c.get(), reinterpret_cast<unsigned char*>(ct.data()), &n,
                    reinterpret_cast<const unsigned char*>(plaintext.data()),
                    static_cast<int>(plaintext.size()));
  EVP_EncryptFinal_ex(c.get(), reinterpret_cast<unsigned char*>(ct.data()) + n, &fin);
  EVP_CIPHER_CTX_ctrl(c.get(), EVP_CTRL_GCM_GET_TAG, 16, tag.data());
  return Base64Encode(iv + ct + tag);
}

// The Go toolchain that builds the workload ("" when there is none).
std::string GoBinary() {
  for (std::string go : {"go", "/usr/local/go/bin/go"}) {
    if (RunCommand({go, "version"}).exit_code == 0) return go;
  }
  return "";
}

// A key-broker resource as the admin declares it (servers.h kKbsResourceLabel).
void CreateKbsSecret(kube::Client& client, const std::string& ns, const std::string& name,
                     const std::string& audience, const std::string& digests,
                     const std::string& value, bool labelled = true) {
  json::object meta{{"name", name},
                    {"annotations", json::object{{cn::kKbsAudienceAnnotation, audience},
                                                 {cn::kKbsImagesAnnotation, digests}}}};
  if (labelled) meta["labels"] = json::object{{cn::kKbsResourceLabel, "true"}};
  auto created =
      client.Create(kube::resources::Secrets(), ns,
                    json::object{{"apiVersion", "v1"},
                                 {"kind", "Secret"},
                                 {"metadata", meta},
                                 {"data", json::object{{"value", Base64Encode(value)}}}});
  ASSERT_TRUE(created.ok()) << created.error().message;
}

// A signed static Go program (kbs_workload/main.go) on runner-good: P-256 key, token bound to
// it from the agent's socket, the model key from the key broker through the same socket (the
// pod's network is its own loopback), the blob decrypted. The test then checks the token
// against the JWKS, every refusal of the endpoint, and that no log holds the secret.
TEST_F(SealedRunnersTest, AnAttestedWorkloadGetsTheModelKeyFromTheKeyBrokerAndDecryptsABlob) {
  const std::string go = GoBinary();
  if (go.empty()) GTEST_SKIP() << "no Go toolchain (go) to build the workload";
  ASSERT_TRUE(Eventually([] { return Condition("runner-good", "Attested").first == "True"; }, 60s))
      << Condition("runner-good", "Attested").second << Diagnostics();
  const char* home = std::getenv("HOME");
  const std::string bin = env_->dir() + "/kbs_workload";
  auto t0 = std::chrono::steady_clock::now();
  auto built = RunCommand(
      {go, "build", "-o", bin, HS_KBS_WORKLOAD_SOURCE},
      {"CGO_ENABLED=0", "GOTOOLCHAIN=local", "GOPROXY=off", "GOFLAGS=",
       "GOCACHE=" + (home ? std::string(home) + "/.cache/go-build" : env_->dir() + "/gocache")});
  ASSERT_EQ(built.exit_code, 0) << built.errors;
  auto build_took = std::chrono::steady_clock::now() - t0;
  auto pushed = env_->registry().PushProgramImage("hs/kbs-workload", "v1", bin);
  ASSERT_TRUE(pushed.ok()) << pushed.error().message;
  const std::string image = *pushed;
  const std::string digest = image.substr(image.find('@') + 1);
  Sign(image);

  // The admin's secrets: the model key for this image and audience, and three it may not get.
  std::string model_key(32, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(model_key.data()), 32);
  CreateKbsSecret(*env_->client(), env_->ns(), "model-key", kAudience,
                  "sha256:" + std::string(64, '0') + ", " + digest, model_key);
  CreateKbsSecret(*env_->client(), env_->ns(), "model-key-other-image", kAudience,
                  "sha256:" + std::string(64, '1'), model_key);
  CreateKbsSecret(*env_->client(), env_->ns(), "model-key-other-audience", "https://other.example",
                  digest, model_key);
  CreateKbsSecret(*env_->client(), env_->ns(), "model-key-unlabelled", kAudience, digest, model_key,
                  false);

  auto t1 = std::chrono::steady_clock::now();
  json::object container{
      {"name", "main"},
      {"image", image},
      {"args", json::array{kAudience, kKbsNonce, "model-key"}},
      {"env",
       json::array{json::object{{"name", "HS_BLOB"}, {"value", SealBlob(model_key, kPlaintext)}}}},
      {"resources", json::object{{"requests", json::object{{"cpu", "1"}, {"memory", "64Mi"}}}}}};
  json::object toleration{{"key", "runners.hyperslice.dev/control-node"},
                          {"operator", "Exists"},
                          {"effect", "NoSchedule"}};
  Create(kube::resources::Pods(), env_->ns(),
         json::serialize(
             json::object{{"apiVersion", "v1"},
                          {"kind", "Pod"},
                          {"metadata", json::object{{"name", kKbsPod}}},
                          {"spec", json::object{{"restartPolicy", "Never"},
                                                {"tolerations", json::array{toleration}},
                                                {"containers", json::array{container}}}}}));
  std::string logs;
  ASSERT_TRUE(Eventually(
      [&] {
        logs = testenv::Kubectl({"logs", "-n", env_->ns(), kKbsPod}).output;
        return logs.find("plaintext=") != std::string::npos ||
               logs.find("error:") != std::string::npos ||
               logs.find("kbs status=") != std::string::npos;
      },
      90s))
      << logs << Diagnostics();
  auto took = std::chrono::steady_clock::now() - t1;
  EXPECT_NE(logs.find(std::string("plaintext=") + kPlaintext + "\n"), std::string::npos) << logs;
  auto at = logs.find("token=");
  ASSERT_NE(at, std::string::npos) << logs;
  std::string token = logs.substr(at + 6);
  token = token.substr(0, token.find('\n'));

  // The token verifies against the served JWKS with this image's digest and the nonce.
  net::HttpClient::Options ho;
  ho.base_url = issuer_url_;
  ho.tls.ca_pem = ca_pem_;
  auto http = net::HttpClient::Create(ho);
  ASSERT_TRUE(http.ok()) << http.error().message;
  auto jwks = (*http)->Do({.target = "/jwks"});
  ASSERT_TRUE(jwks.ok() && jwks->status == 200);
  auto claims = runners::attest::VerifyToken(token, jwks->body, issuer_url_, kAudience,
                                             std::chrono::system_clock::now());
  ASSERT_TRUE(claims.ok()) << claims.error().reason << ": " << claims.error().message;
  EXPECT_EQ(claims->image_digest, digest);
  EXPECT_EQ(claims->eat_nonce, std::vector<std::string>{kKbsNonce});
  EXPECT_NE(claims->extra_json.find("\"tee_pubkey_sha256\":\""), std::string::npos);

  // The endpoint's refusals, asked directly over HTTPS as any relying party's client would.
  std::string forged = token;  // one byte of the signature changed
  const size_t flip = token.rfind('.') + 5;
  forged[flip] = forged[flip] == 'A' ? 'B' : 'A';
  const auto thief = runners::attest::testing::NewSigningKey();  // a P-256 key the TEE never held
  auto ask = [&](const std::string& resource, const std::string& authorization,
                 const std::string& method = "POST") -> std::pair<int, std::string> {
    net::Request r;
    r.method = method;
    r.target = "/kbs/v0/resource/" + resource;
    if (!authorization.empty()) r.headers.push_back({"Authorization", authorization});
    r.body = json::serialize(json::object{{"publicKey", thief.public_pem}});
    auto resp = (*http)->Do(r);
    if (!resp.ok()) return {-1, resp.error().message};
    return {resp->status, resp->body};
  };
  for (const auto& [resource, auth, status, reason] :
       std::vector<std::tuple<std::string, std::string, int, std::string>>{
           {"model-key", "", 401, "TokenMissing"},
           {"model-key", "Bearer not-a-token", 401, "TokenMalformed"},
           {"model-key", "Bearer " + forged, 401, "TokenSignature"},
           // The workload's valid token, presented with another key: a stolen token.
           {"model-key", "Bearer " + token, 403, "SecretPolicy"},
           {"model-key-other-image", "Bearer " + token, 403, "SecretPolicy"},
           {"model-key-other-audience", "Bearer " + token, 401, "TokenAudience"},
           {"model-key-unlabelled", "Bearer " + token, 404, "NotFound"},
           {"hyperslice-runners-attestation", "Bearer " + token, 404, "NotFound"},
           {"no-such-secret", "Bearer " + token, 404, "NotFound"}}) {
    auto [got, body] = ask(resource, auth);
    EXPECT_EQ(got, status) << resource << " " << auth.substr(0, 20) << ": " << body;
    EXPECT_NE(body.find("\"error\":\"" + reason + "\""), std::string::npos)
        << resource << ": " << body;
    EXPECT_EQ(body.find("ciphertext"), std::string::npos) << body;
  }
  EXPECT_EQ(ask("model-key", "Bearer " + token, "GET").first, 405);

  // Neither the secret, nor the plaintext, nor the token is in any log; the broker's decisions
  // are (so the capture works).
  const std::string op_log = OperatorLog();
  EXPECT_NE(op_log.find("kbs: resource released"), std::string::npos);
  EXPECT_NE(op_log.find("kbs: resource refused"), std::string::npos);
  EXPECT_NE(good_->Log().find("sealed: key broker request relayed"), std::string::npos);
  for (const std::string& secret :
       {Hex(model_key), Base64Encode(model_key), model_key, std::string(kPlaintext), token,
        token.substr(token.rfind('.') + 1)}) {
    for (const auto& [who, text] : std::vector<std::pair<std::string, std::string>>{
             {"operator", op_log}, {"runner-good", good_->Log()}, {"runner-bad", bad_->Log()}}) {
      EXPECT_EQ(text.find(secret), std::string::npos) << who << " logged a secret";
    }
  }
  std::printf("go build %.1f s; pod created -> plaintext in its log: %.1f s\n",
              std::chrono::duration<double>(build_took).count(),
              std::chrono::duration<double>(took).count());
}

// Issue 21 §5 with the real kubectl through the real apiserver: exec, attach and port-forward to
// a pod of the sealed control node are refused; and runner-good's agent listens on its gRPC port
// and its workloads' token sockets, nothing else.
TEST_F(SealedRunnersTest, KubectlExecAttachPortForwardAreRefusedAndTheAgentHasNoOtherListener) {
  ASSERT_TRUE(Eventually([] { return Condition("runner-good", "Attested").first == "True"; }, 60s))
      << Condition("runner-good", "Attested").second << Diagnostics();
  Create(kube::resources::Pods(), env_->ns(),
         R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"admin-probe"},"spec":{)"
         R"("restartPolicy":"Never","tolerations":[{"key":"runners.hyperslice.dev/control-node",)"
         R"("operator":"Exists","effect":"NoSchedule"}],"containers":[{"name":"main","image":")" +
             env_->image() +
             R"(","args":["sleep:120"],"resources":{"requests":{"cpu":"1","memory":"64Mi"}}}]}})");
  ASSERT_TRUE(Eventually(
      [] {
        auto p = Get(kube::resources::Pods(), env_->ns(), "admin-probe");
        return p && testenv::StringAt(*p, "status", "phase") == "Running";
      },
      90s))
      << Diagnostics();
  const std::string kubeconfig = testenv::Cluster().kubeconfig_path();
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"exec", "-n", env_->ns(), "admin-probe", "--", "/hstest", "print:x"},
           {"exec", "-i", "-t", "-n", env_->ns(), "admin-probe", "--", "/bin/sh"},
           {"attach", "-n", env_->ns(), "admin-probe"},
           {"port-forward", "-n", env_->ns(), "pod/admin-probe", "0:8080"}}) {
    // port-forward would wait for connections if it were allowed: bounded.
    std::vector<std::string> argv = {"timeout", "30", testenv::KubectlPath(), "--kubeconfig",
                                     kubeconfig};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv);
    EXPECT_NE(r.exit_code, 0) << args[0] << ": " << r.output;
    EXPECT_NE(r.exit_code, 124) << args[0] << " was not refused (timed out)";
    EXPECT_NE(r.errors.find("control node " + std::string(kControlNode) + " is sealed"),
              std::string::npos)
        << args[0] << ": " << r.errors;
    EXPECT_EQ(r.output.find("x\n"), std::string::npos) << args[0] << " ran: " << r.output;
  }

  // Listening sockets of the agent process: its socket inodes (from /proc/<pid>/fd) matched in
  // its network namespace's tables.
  const pid_t pid = good_->pid();
  ASSERT_GT(pid, 0);
  std::set<std::string> inodes;
  for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    std::error_code ec;
    std::string target = fs::read_symlink(fd.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  ASSERT_FALSE(inodes.empty());
  std::vector<std::string> listening;
  for (const char* table : {"tcp", "tcp6", "udp", "udp6"}) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/net/" + table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
      // TCP LISTEN is 0A; any UDP socket receives.
      const bool udp = std::string(table).rfind("udp", 0) == 0;
      if (inodes.count(inode) && (udp || st == "0A")) {
        listening.push_back(std::string(table) + " " + local);
      }
    }
  }
  const std::string port = good_->address().substr(good_->address().rfind(':') + 1);
  char hex_port[8];
  std::snprintf(hex_port, sizeof hex_port, "%04X", std::stoi(port));
  // 127.0.0.2 in /proc's little-endian hex, on an IPv4 socket or IPv4-mapped on an IPv6 one (as
  // gRPC binds): one socket, its gRPC port.
  const std::string v4 = "0200007F:" + std::string(hex_port);
  ASSERT_EQ(listening.size(), 1u) << testing::PrintToString(listening) << " agent address "
                                  << good_->address();
  EXPECT_TRUE(listening[0] == "tcp " + v4 || listening[0] == "tcp6 0000000000000000FFFF0000" + v4)
      << listening[0] << " agent address " << good_->address();
  std::vector<std::string> unix_listening;
  std::ifstream in("/proc/" + std::to_string(pid) + "/net/unix");
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string num, refs, proto, flags, type, st, inode, path;
    f >> num >> refs >> proto >> flags >> type >> st >> inode >> path;
    if (inodes.count(inode) && flags == "00010000") unix_listening.push_back(path);
  }
  ASSERT_FALSE(unix_listening.empty()) << "the pods' token sockets";
  for (const auto& path : unix_listening) {
    EXPECT_TRUE(path.ends_with("/teeserver.sock")) << path;
  }
  (void)env_->client()->Delete(kube::resources::Pods(), env_->ns(), "admin-probe", {});
}

}  // namespace
}  // namespace hyperslice
