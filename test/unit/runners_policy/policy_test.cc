// Workload policy evaluation: parsing the CR, launch-policy checks, image checks against cosign
// signatures (an in-memory source and a registry served on loopback by the project's HTTP server).
#include "src/runners/policy/policy.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/net/server.h"
#include "test/unit/runners_attest/signing.h"

namespace hyperslice::runners::policy {
namespace {

namespace json = boost::json;
using attest::testing::NewSigningKey;
using attest::testing::SignBase64;
using attest::testing::SigningKey;

const std::string kDigestA = "sha256:" + std::string(64, 'a');
const std::string kDigestB = "sha256:" + std::string(64, 'b');

json::object PolicyObject(const std::vector<std::string>& keys, const std::string& extra_spec) {
  json::array ks;
  for (const auto& k : keys) ks.push_back(json::object{{"name", "k"}, {"publicKey", k}});
  json::object spec = extra_spec.empty() ? json::object{} : json::parse(extra_spec).as_object();
  spec["trustedKeys"] = ks;
  return json::object{{"apiVersion", "runners.hyperslice.dev/v1alpha1"},
                      {"kind", "WorkloadPolicy"},
                      {"metadata", json::object{{"name", "models"}}},
                      {"spec", spec}};
}

json::object Pod(const std::string& container_json, const std::string& volumes_json = "[]") {
  return json::parse(R"({"metadata":{"name":"p","namespace":"default"},"spec":{"containers":[)" +
                     container_json + R"(],"volumes":)" + volumes_json + "}}")
      .as_object();
}

// Signatures by image digest, kept in memory.
class MemorySignatures : public SignatureSource {
 public:
  Result<std::vector<attest::CosignSignature>> Signatures(
      const registry::ImageRef& image) override {
    ++calls;
    return by_digest[image.digest];
  }
  void Sign(const SigningKey& key, const std::string& image, const std::string& digest,
            const std::string& payload_digest = "") {
    std::string payload =
        attest::MakeSimpleSigning(image, payload_digest.empty() ? digest : payload_digest);
    by_digest[digest].push_back({payload, SignBase64(key, payload)});
  }
  std::map<std::string, std::vector<attest::CosignSignature>> by_digest;
  int calls = 0;
};

class PolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = ParseWorkloadPolicy(PolicyObject({trusted_.public_pem}, ""));
    ASSERT_TRUE(p.ok()) << p.error().ToString();
    policy_ = *p;
  }
  Status CheckPod(const json::object& pod) { return Check(policy_, WorkloadFromPod(pod), sigs_); }

  SigningKey trusted_ = NewSigningKey();
  SigningKey untrusted_ = NewSigningKey();
  WorkloadPolicy policy_;
  MemorySignatures sigs_;
};

TEST(ParseWorkloadPolicyTest, ReadsEveryField) {
  SigningKey k = NewSigningKey();
  auto p = ParseWorkloadPolicy(
      PolicyObject({k.public_pem},
                   R"({"allowLogs":true,"launchPolicy":{"allowCommandOverride":true,
          "allowedEnvOverrides":["MODEL","PORT"],"allowedMountTypes":["emptyDir","secret"]}})"));
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_EQ(p->name, "models");
  EXPECT_EQ(p->trusted_keys_pem, std::vector<std::string>{k.public_pem});
  EXPECT_TRUE(p->allow_logs);
  EXPECT_TRUE(p->allow_command_override);
  EXPECT_EQ(p->allowed_env_overrides, (std::vector<std::string>{"MODEL", "PORT"}));
  ASSERT_TRUE(p->allowed_mount_types.has_value());
  EXPECT_EQ(*p->allowed_mount_types, (std::vector<std::string>{"emptyDir", "secret"}));
}

TEST(ParseWorkloadPolicyTest, DefaultsAreTheStrictOnes) {
  auto p = ParseWorkloadPolicy(PolicyObject({NewSigningKey().public_pem}, ""));
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_FALSE(p->allow_logs);
  EXPECT_FALSE(p->allow_command_override);
  EXPECT_TRUE(p->allowed_env_overrides.empty());
  EXPECT_FALSE(p->allowed_mount_types.has_value());
}

TEST(ParseWorkloadPolicyTest, RefusesWhatCannotWork) {
  auto none = ParseWorkloadPolicy(PolicyObject({}, ""));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("spec.trustedKeys is empty"), std::string::npos);
  auto bad = ParseWorkloadPolicy(PolicyObject({"-----BEGIN PUBLIC KEY-----\nAAAA\n"}, ""));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("spec.trustedKeys[0].publicKey is not a PEM public key"),
            std::string::npos);
  auto mount = ParseWorkloadPolicy(PolicyObject(
      {NewSigningKey().public_pem}, R"({"launchPolicy":{"allowedMountTypes":["hostPath"]}})"));
  ASSERT_FALSE(mount.ok());
  EXPECT_NE(mount.error().message.find("unknown type hostPath"), std::string::npos);
  auto nospec = ParseWorkloadPolicy(json::object{{"metadata", json::object{{"name", "x"}}}});
  EXPECT_FALSE(nospec.ok());
}

TEST_F(PolicyTest, SignedImageByDigestIsAllowed) {
  sigs_.Sign(trusted_, "127.0.0.1:5000/models/serve", kDigestA);
  Status st =
      CheckPod(Pod(R"({"name":"c","image":"127.0.0.1:5000/models/serve@)" + kDigestA + R"("})"));
  EXPECT_TRUE(st.ok()) << st.error().ToString();
}

TEST_F(PolicyTest, ImageByTagIsRefusedWithoutAskingTheRegistry) {
  Status st = CheckPod(Pod(R"({"name":"c","image":"127.0.0.1:5000/models/serve:v1"})"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Error::Code::kForbidden);
  EXPECT_EQ(st.error().reason, kReasonImageNotByDigest);
  EXPECT_NE(st.error().message.find("127.0.0.1:5000/models/serve:v1 is not pinned by digest"),
            std::string::npos);
  EXPECT_EQ(sigs_.calls, 0);
}

TEST_F(PolicyTest, UnsignedImageIsRefused) {
  Status st =
      CheckPod(Pod(R"({"name":"c","image":"127.0.0.1:5000/models/serve@)" + kDigestA + R"("})"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().reason, kReasonImageUnsigned);
  EXPECT_NE(st.error().message.find("workload policy models: container c"), std::string::npos);
}

TEST_F(PolicyTest, ImageSignedByAnUntrustedKeyIsRefused) {
  sigs_.Sign(untrusted_, "127.0.0.1:5000/models/serve", kDigestA);
  Status st =
      CheckPod(Pod(R"({"name":"c","image":"127.0.0.1:5000/models/serve@)" + kDigestA + R"("})"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().reason, kReasonImageUntrusted);
}

TEST_F(PolicyTest, SignatureOfAnotherImageMovedUnderThisDigestIsRefused) {
  // A trusted signature whose payload names B, stored under A's .sig tag.
  sigs_.Sign(trusted_, "127.0.0.1:5000/models/serve", kDigestA, kDigestB);
  Status st =
      CheckPod(Pod(R"({"name":"c","image":"127.0.0.1:5000/models/serve@)" + kDigestA + R"("})"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().reason, kReasonImageUntrusted);
  EXPECT_NE(st.error().message.find(kDigestB), std::string::npos);
}

TEST_F(PolicyTest, EveryContainerIsCheckedInitContainersToo) {
  sigs_.Sign(trusted_, "127.0.0.1:5000/models/serve", kDigestA);
  json::object pod =
      Pod(R"({"name":"c","image":"127.0.0.1:5000/models/serve@)" + kDigestA + R"("})");
  pod["spec"].as_object()["initContainers"] =
      json::parse(R"([{"name":"init","image":"127.0.0.1:5000/models/serve@)" + kDigestB + R"("}])");
  Status st = CheckPod(pod);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().reason, kReasonImageUnsigned);
  EXPECT_NE(st.error().message.find("container init"), std::string::npos);
}

TEST_F(PolicyTest, LaunchPolicyCommandOverride) {
  sigs_.Sign(trusted_, "127.0.0.1:5000/models/serve", kDigestA);
  const std::string image = "127.0.0.1:5000/models/serve@" + kDigestA;
  for (const char* field : {R"("command":["/bin/sh"])", R"("args":["-c","id"])"}) {
    Status st = CheckPod(Pod(R"({"name":"c","image":")" + image + R"(",)" + field + "}"));
    ASSERT_FALSE(st.ok()) << field;
    EXPECT_EQ(st.error().reason, kReasonCommandOverride);
  }
  policy_.allow_command_override = true;
  EXPECT_TRUE(CheckPod(Pod(R"({"name":"c","image":")" + image + R"(","args":["x"]})")).ok());
  // Checked before any signature: the spec refusal is the cheap one.
  policy_.allow_command_override = false;
  sigs_.calls = 0;
  EXPECT_FALSE(CheckPod(Pod(R"({"name":"c","image":")" + image + R"(","args":["x"]})")).ok());
  EXPECT_EQ(sigs_.calls, 0);
}

TEST_F(PolicyTest, LaunchPolicyEnvOverrides) {
  sigs_.Sign(trusted_, "127.0.0.1:5000/models/serve", kDigestA);
  const std::string image = "127.0.0.1:5000/models/serve@" + kDigestA;
  auto pod = [&](const std::string& env) {
    return Pod(R"({"name":"c","image":")" + image + R"(",)" + env + "}");
  };
  Status st = CheckPod(pod(R"("env":[{"name":"MODEL","value":"x"}])"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().reason, kReasonEnvOverride);
  EXPECT_NE(st.error().message.find("sets env MODEL"), std::string::npos);

  policy_.allowed_env_overrides = {"MODEL"};
  EXPECT_TRUE(CheckPod(pod(R"("env":[{"name":"MODEL","value":"x"}])")).ok());
  st = CheckPod(pod(R"("env":[{"name":"MODEL","value":"x"},{"name":"LD_PRELOAD","value":"y"}])"));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("LD_PRELOAD"), std::string::npos);
  st = CheckPod(pod(R"("envFrom":[{"configMapRef":{"name":"cm"}}])"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().reason, kReasonEnvOverride);

  policy_.allowed_env_overrides = {"*"};
  EXPECT_TRUE(CheckPod(pod(R"("envFrom":[{"configMapRef":{"name":"cm"}}])")).ok());
}

TEST_F(PolicyTest, LaunchPolicyMountTypes) {
  sigs_.Sign(trusted_, "127.0.0.1:5000/models/serve", kDigestA);
  const std::string c = R"({"name":"c","image":"127.0.0.1:5000/models/serve@)" + kDigestA + R"("})";
  const std::string vols =
      R"([{"name":"a","emptyDir":{}},{"name":"b","secret":{"secretName":"s"}}])";
  EXPECT_TRUE(CheckPod(Pod(c, vols)).ok());  // no list: every type runners support
  policy_.allowed_mount_types = std::vector<std::string>{"emptyDir"};
  Status st = CheckPod(Pod(c, vols));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().reason, kReasonMountType);
  EXPECT_NE(st.error().message.find("volume type secret"), std::string::npos);
  policy_.allowed_mount_types = std::vector<std::string>{"emptyDir", "secret"};
  EXPECT_TRUE(CheckPod(Pod(c, vols)).ok());
}

// The registry source against a registry served on loopback: the .sig manifest, its
// simple-signing layer, a layer whose bytes were changed.
class RegistrySignaturesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = net::HttpServer::Start(
        {}, [this](const net::ServerRequest& req, const std::shared_ptr<net::Responder>& r) {
          std::lock_guard lock(mu_);
          paths_.push_back(req.path);
          auto it = objects_.find(req.path);
          if (it == objects_.end()) {
            r->Send(404, R"({"errors":[{"code":"MANIFEST_UNKNOWN"}]})");
            return;
          }
          r->Send(200, it->second, {{"Content-Type", "application/octet-stream"}});
        });
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(*server);
    host_ = "127.0.0.1:" + std::to_string(server_->port());
    registry::RegistryOptions o;
    o.insecure_registries = {host_};
    source_ = NewRegistrySignatureSource(o);
  }

  // Stores a signature manifest for `digest` with one simple-signing layer.
  void StoreSignature(const std::string& digest, const std::string& payload,
                      const std::string& sig_b64, const std::string& served_payload) {
    std::string layer = "sha256:" + attest::Hex(attest::Sha256(payload));
    json::object manifest{
        {"schemaVersion", 2},
        {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
        {"config", json::object{{"mediaType", "application/vnd.oci.image.config.v1+json"},
                                {"digest", "sha256:" + std::string(64, 'c')},
                                {"size", 2}}},
        {"layers",
         json::array{json::object{
             {"mediaType", attest::kSimpleSigningMediaType},
             {"digest", layer},
             {"size", payload.size()},
             {"annotations", json::object{{attest::kCosignSignatureAnnotation, sig_b64}}}}}}};
    std::lock_guard lock(mu_);
    objects_["/v2/models/serve/manifests/" + *attest::CosignSignatureTag(digest)] =
        json::serialize(manifest);
    objects_["/v2/models/serve/blobs/" + layer] = served_payload;
  }

  std::unique_ptr<net::HttpServer> server_;
  std::string host_;
  std::unique_ptr<SignatureSource> source_;
  std::mutex mu_;
  std::map<std::string, std::string> objects_;
  std::vector<std::string> paths_;
};

TEST_F(RegistrySignaturesTest, ReadsTheSigTagAndVerifies) {
  SigningKey key = NewSigningKey();
  std::string payload = attest::MakeSimpleSigning(host_ + "/models/serve", kDigestA);
  StoreSignature(kDigestA, payload, SignBase64(key, payload), payload);
  auto ref = registry::ParseImageRef(host_ + "/models/serve@" + kDigestA);
  ASSERT_TRUE(ref.ok());
  auto sigs = source_->Signatures(*ref);
  ASSERT_TRUE(sigs.ok()) << sigs.error().ToString();
  ASSERT_EQ(sigs->size(), 1u);
  EXPECT_EQ((*sigs)[0].payload, payload);
  EXPECT_TRUE(attest::VerifyCosignSignatures(*sigs, {key.public_pem}, kDigestA).ok());
  std::lock_guard lock(mu_);
  EXPECT_EQ(paths_.front(), "/v2/models/serve/manifests/sha256-" + std::string(64, 'a') + ".sig");
}

TEST_F(RegistrySignaturesTest, NoSigTagIsNoSignature) {
  auto ref = registry::ParseImageRef(host_ + "/models/serve@" + kDigestB);
  ASSERT_TRUE(ref.ok());
  auto sigs = source_->Signatures(*ref);
  ASSERT_TRUE(sigs.ok()) << sigs.error().ToString();
  EXPECT_TRUE(sigs->empty());
}

TEST_F(RegistrySignaturesTest, ALayerThatDoesNotMatchItsDigestIsRefused) {
  SigningKey key = NewSigningKey();
  std::string payload = attest::MakeSimpleSigning(host_ + "/models/serve", kDigestA);
  std::string other = attest::MakeSimpleSigning(host_ + "/models/serve", kDigestB);
  StoreSignature(kDigestA, payload, SignBase64(key, other), other);
  auto ref = registry::ParseImageRef(host_ + "/models/serve@" + kDigestA);
  ASSERT_TRUE(ref.ok());
  auto sigs = source_->Signatures(*ref);
  ASSERT_FALSE(sigs.ok());
  EXPECT_EQ(sigs.error().reason, "BlobDigestMismatch");
}

TEST_F(RegistrySignaturesTest, AnUnreachableRegistryIsNotARefusal) {
  auto ref = registry::ParseImageRef("127.0.0.1:1/models/serve@" + kDigestA);
  ASSERT_TRUE(ref.ok());
  WorkloadPolicy p;
  p.name = "models";
  p.trusted_keys_pem = {NewSigningKey().public_pem};
  Workload w;
  w.containers.push_back({"c", "127.0.0.1:1/models/serve@" + kDigestA, false, {}, false});
  Status st = CheckImages(p, w, *source_);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().code, Error::Code::kForbidden);  // retried by the caller, not a refusal
}

}  // namespace
}  // namespace hyperslice::runners::policy
