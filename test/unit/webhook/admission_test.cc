// Admission decisions on AdmissionReview bodies (no socket): env injection and validation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "src/webhook/internal.h"
#include "src/webhook/webhook.h"
#include "test/unit/webhook/review_fixtures.h"

namespace hyperslice::webhook {
namespace {

using namespace testing;  // NOLINT: the fixtures
using ::testing::ElementsAre;

class PodInjection : public ::testing::Test {
 protected:
  void SetUp() override {
    source_.Put(kube::resources::StatefulSets(), StatefulSet("ns1", "web", "sts-uid", 3, "nginx"));
    source_.Put(kube::resources::Jobs(), IndexedJob("ns1", "train", "job-uid", 4, "workers"));
    source_.Put(TPUNodeGroups(), NodeGroup("ns1", "my-group", "2x2x2", "tpu7x-standard-4t", 2));
  }
  json::object StsPod(int ordinal, std::vector<json::object> containers) {
    json::object pod = Pod("ns1", "web-" + std::to_string(ordinal), std::move(containers));
    SetOwner(pod, "apps/v1", "StatefulSet", "web", "sts-uid");
    SetLabel(pod, "apps.kubernetes.io/pod-index", std::to_string(ordinal));
    return pod;
  }
  json::object Decide(const json::object& pod, bool allow_live = true) {
    ReviewResult r =
        webhook::Review(kMutatePodsPath, testing::Review(pod), source_, options_, allow_live);
    EXPECT_EQ(r.http_status, 200) << r.body;
    EXPECT_FALSE(r.needs_live);
    return ResponseOf(r.body);
  }
  StaticObjectSource source_;
  AdmissionOptions options_;
};

TEST_F(PodInjection, StatefulSetPodGetsHostnamesThenIdAfterExistingEnv) {
  json::object pod = StsPod(1, {Container("main", 0, {{"A", "1"}})});
  SetLabel(pod, kCompatInjectLabel, "enabled");
  json::object resp = Decide(pod);
  EXPECT_EQ(resp.at("uid").as_string(), "req-uid-1");
  EXPECT_TRUE(resp.at("allowed").as_bool());
  EXPECT_EQ(resp.at("patchType").as_string(), "JSONPatch");
  EXPECT_THAT(EnvAfter(pod, resp),
              ElementsAre("A=1", "TPU_WORKER_HOSTNAMES=web-0.nginx,web-1.nginx,web-2.nginx",
                          "TPU_WORKER_ID=1"));
}

TEST_F(PodInjection, OrdinalFallsBackToNameSuffix) {
  json::object pod = Pod("ns1", "web-2", {Container("main", 4)});
  SetOwner(pod, "apps/v1", "StatefulSet", "web", "sts-uid");
  EXPECT_THAT(
      EnvAfter(pod, Decide(pod)),
      ElementsAre("TPU_WORKER_HOSTNAMES=web-0.nginx,web-1.nginx,web-2.nginx", "TPU_WORKER_ID=2"));
}

TEST_F(PodInjection, ContainerWithoutEnvListGetsOne) {
  json::object pod = StsPod(0, {Container("main", 4, {}, /*with_env_list=*/false)});
  json::object resp = Decide(pod);
  std::string patch = DecodeBase64(resp.at("patch").as_string());
  EXPECT_NE(patch.find(R"("path":"/spec/containers/0/env")"), std::string::npos) << patch;
  EXPECT_EQ(patch.find("/env/-"), std::string::npos) << patch;
  EXPECT_THAT(EnvAfter(pod, resp),
              ElementsAre(::testing::StartsWith("TPU_WORKER_HOSTNAMES="), "TPU_WORKER_ID=0"));
}

TEST_F(PodInjection, ContainerWithEnvFromIsInjectedWithAWarning) {
  json::object c = Container("main", 4, {{"A", "1"}});
  c["envFrom"] = json::array{json::object{{"configMapRef", json::object{{"name", "tpu-env"}}}}};
  json::object pod = StsPod(1, {c, Container("other", 4)});
  json::object resp = Decide(pod);
  EXPECT_THAT(
      EnvAfter(pod, resp),
      ElementsAre("A=1", ::testing::StartsWith("TPU_WORKER_HOSTNAMES="), "TPU_WORKER_ID=1"));
  ASSERT_EQ(resp.at("warnings").as_array().size(), 1u) << json::serialize(resp);
  std::string warning(resp.at("warnings").as_array()[0].as_string());
  EXPECT_THAT(warning, ::testing::HasSubstr("container main uses envFrom"));

  // Nothing injected into it (the user set both in env): no warning.
  json::object both = Container("main", 4, {{"TPU_WORKER_ID", "7"}, {"TPU_WORKER_HOSTNAMES", "h"}});
  both["envFrom"] = c["envFrom"];
  json::object quiet = Decide(StsPod(1, {both}));
  EXPECT_FALSE(quiet.contains("patch"));
  EXPECT_FALSE(quiet.contains("warnings")) << json::serialize(quiet);
}

TEST_F(PodInjection, OnlyTpuContainersUnlessCompatLabel) {
  json::object pod = StsPod(1, {Container("sidecar", 0), Container("tpu", 4)});
  json::object resp = Decide(pod);
  EXPECT_TRUE(EnvAfter(pod, resp, 0).empty());
  EXPECT_EQ(EnvAfter(pod, resp, 1).size(), 2u);

  SetLabel(pod, kCompatInjectLabel, "enabled");
  resp = Decide(pod);
  EXPECT_EQ(EnvAfter(pod, resp, 0).size(), 2u);
  EXPECT_EQ(EnvAfter(pod, resp, 1).size(), 2u);

  SetLabel(pod, kInjectLabel, "disabled");
  EXPECT_FALSE(Decide(pod).contains("patch"));
}

TEST_F(PodInjection, SecondReviewOfPatchedPodIsEmpty) {
  json::object pod = StsPod(1, {Container("main", 4, {{"A", "1"}})});
  json::object resp = Decide(pod);
  json::value patched = pod;
  ASSERT_TRUE(
      ApplyPatch(patched, json::parse(DecodeBase64(resp.at("patch").as_string())).as_array()));
  json::object again = Decide(patched.as_object());
  EXPECT_TRUE(again.at("allowed").as_bool());
  EXPECT_FALSE(again.contains("patch"));
}

TEST_F(PodInjection, UserSetVariableIsNeverOverriddenOrDuplicated) {
  json::object pod = StsPod(1, {Container("main", 4, {{"TPU_WORKER_ID", "7"}})});
  EXPECT_THAT(
      EnvAfter(pod, Decide(pod)),
      ElementsAre("TPU_WORKER_ID=7", "TPU_WORKER_HOSTNAMES=web-0.nginx,web-1.nginx,web-2.nginx"));
}

TEST_F(PodInjection, FqdnAndPortAnnotations) {
  json::object pod = StsPod(0, {Container("main", 4)});
  SetAnnotation(pod, kFqdnAnnotation, "true");
  SetAnnotation(pod, kPortAnnotation, "8471");
  options_.cluster_domain = "example.internal";
  EXPECT_THAT(EnvAfter(pod, Decide(pod)),
              ElementsAre("TPU_WORKER_HOSTNAMES=web-0.nginx.ns1.svc.example.internal:8471,"
                          "web-1.nginx.ns1.svc.example.internal:8471,"
                          "web-2.nginx.ns1.svc.example.internal:8471",
                          "TPU_WORKER_ID=0"));
  SetAnnotation(pod, kPortAnnotation, "http");
  json::object bad = Decide(pod);
  EXPECT_FALSE(bad.at("allowed").as_bool());
  EXPECT_NE(std::string(bad.at("status").at("message").as_string()).find(kPortAnnotation),
            std::string::npos);
}

TEST_F(PodInjection, IndexedJobPodGetsCompletionIndexAndHostnames) {
  json::object pod = Pod("ns1", "train-2-abcde", {Container("main", 4)});
  SetOwner(pod, "batch/v1", "Job", "train", "job-uid");
  SetAnnotation(pod, "batch.kubernetes.io/job-completion-index", "2");
  EXPECT_THAT(EnvAfter(pod, Decide(pod)),
              ElementsAre("TPU_WORKER_HOSTNAMES=train-0.workers,train-1.workers,train-2.workers,"
                          "train-3.workers",
                          "TPU_WORKER_ID=2"));
}

TEST_F(PodInjection, NodeGroupSelectionAddsTopologyVariablesUserValueKept) {
  // Seed 000's shape: the user set TPU_ACCELERATOR_TYPE=tpu7x-4 and TPU_TOPOLOGY by hand.
  json::object pod = StsPod(
      1,
      {Container("tpu-job", 4, {{"TPU_TOPOLOGY", "2x2x2"}, {"TPU_ACCELERATOR_TYPE", "tpu7x-4"}})});
  pod["spec"].as_object()["nodeSelector"] = json::object{
      {kNodeGroupLabel, "ns1-my-group"}, {"cloud.google.com/gke-tpu-topology", "2x2x2"}};
  EXPECT_THAT(
      EnvAfter(pod, Decide(pod)),
      ElementsAre("TPU_TOPOLOGY=2x2x2", "TPU_ACCELERATOR_TYPE=tpu7x-4",
                  "TPU_WORKER_HOSTNAMES=web-0.nginx,web-1.nginx,web-2.nginx", "TPU_WORKER_ID=1",
                  "TPU_CHIPS_PER_HOST_BOUNDS=2,2,1", "TPU_HOST_BOUNDS=1,1,2"));
  // Without the user's values the formula's accelerator type is used.
  json::object bare = StsPod(0, {Container("tpu-job", 4)});
  bare["spec"].as_object()["nodeSelector"] = json::object{{kNodeGroupLabel, "ns1-my-group"}};
  EXPECT_THAT(EnvAfter(bare, Decide(bare)), ::testing::Contains("TPU_ACCELERATOR_TYPE=tpu7x-16"));
}

TEST_F(PodInjection, NodeGroupThroughRequiredAffinityAndDashedNamespace) {
  source_.Put(TPUNodeGroups(), NodeGroup("team-a", "g", "2x4", "ct6e-standard-8t", 1));
  json::object pod = Pod("other", "solo", {Container("main", 8)});
  pod["spec"].as_object()["affinity"] = json::parse(R"({"nodeAffinity":{
      "requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[
        {"matchExpressions":[{"key":"cloud.google.com/tpu-node-group","operator":"In",
                              "values":["team-a-g"]}]}]}}})");
  EXPECT_THAT(EnvAfter(pod, Decide(pod)),
              ElementsAre("TPU_TOPOLOGY=2x4x1", "TPU_ACCELERATOR_TYPE=v6e-8",
                          "TPU_CHIPS_PER_HOST_BOUNDS=2,4,1", "TPU_HOST_BOUNDS=1,1,1"));
}

TEST_F(PodInjection, UnrelatedPodsAreUnchanged) {
  json::object plain = Pod("ns1", "plain", {Container("main", 0)});
  json::object resp = Decide(plain);
  EXPECT_TRUE(resp.at("allowed").as_bool());
  EXPECT_FALSE(resp.contains("patch"));
  // Opted in but nothing to inject (no owner, no group).
  json::object lone = Pod("ns1", "lone", {Container("main", 4)});
  EXPECT_FALSE(Decide(lone).contains("patch"));
}

TEST_F(PodInjection, UnreadableOwnerDeniesOrAllowsPerFlag) {
  json::object pod = Pod("ns1", "gone-0", {Container("main", 4)});
  SetOwner(pod, "apps/v1", "StatefulSet", "gone", "x");
  json::object deny = Decide(pod);
  EXPECT_FALSE(deny.at("allowed").as_bool());
  EXPECT_EQ(deny.at("status").at("code").as_int64(), 404);
  EXPECT_NE(std::string(deny.at("status").at("message").as_string()).find("StatefulSet ns1/gone"),
            std::string::npos);
  options_.owner_unreadable = OwnerUnreadable::kAllow;
  json::object allow = Decide(pod);
  EXPECT_TRUE(allow.at("allowed").as_bool());
  EXPECT_FALSE(allow.contains("patch"));
  EXPECT_EQ(allow.at("warnings").as_array().size(), 1u);
}

TEST_F(PodInjection, StaleOwnerUidAndOutOfRangeOrdinalAreExplained) {
  json::object recreated = StsPod(1, {Container("main", 4)});
  SetOwner(recreated, "apps/v1", "StatefulSet", "web", "old-uid");
  json::object r1 = Decide(recreated);
  EXPECT_FALSE(r1.at("allowed").as_bool());
  EXPECT_NE(std::string(r1.at("status").at("message").as_string()).find("re-created"),
            std::string::npos);
  json::object beyond = StsPod(5, {Container("main", 4)});
  json::object r2 = Decide(beyond);
  EXPECT_FALSE(r2.at("allowed").as_bool());
  EXPECT_NE(std::string(r2.at("status").at("message").as_string()).find("replicas 3"),
            std::string::npos);
}

// A source with no cache: the first pass must ask for a live read instead of blocking.
class LiveOnlySource : public ObjectSource {
 public:
  explicit LiveOnlySource(StaticObjectSource* inner) : inner_(inner) {}
  Result<ObjectPtr> Get(const kube::Resource& r, const std::string& ns, const std::string& name,
                        Mode mode) override {
    if (mode == Mode::kCachedOnly) {
      return Error::Make(Error::Code::kUnavailable, "no cache", kNotCached);
    }
    ++live_reads;
    return inner_->Get(r, ns, name, mode);
  }
  int live_reads = 0;

 private:
  StaticObjectSource* inner_;
};

TEST_F(PodInjection, CacheMissAsksForLiveReadOffTheIoThread) {
  LiveOnlySource live(&source_);
  json::object pod = StsPod(1, {Container("main", 4)});
  ReviewResult first =
      webhook::Review(kMutatePodsPath, testing::Review(pod), live, options_, false);
  EXPECT_TRUE(first.needs_live);
  EXPECT_EQ(live.live_reads, 0);
  ReviewResult second =
      webhook::Review(kMutatePodsPath, testing::Review(pod), live, options_, true);
  EXPECT_FALSE(second.needs_live);
  EXPECT_EQ(live.live_reads, 1);
  EXPECT_EQ(EnvAfter(pod, ResponseOf(second.body)).size(), 2u);
}

TEST(Envelope, MalformedReviewsAreBadRequests) {
  StaticObjectSource source;
  AdmissionOptions options;
  for (const char* body :
       {"", "{", "[]",
        R"({"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{"uid":"u"}})",
        R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"})",
        R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":""}})"}) {
    ReviewResult r = Review(kMutatePodsPath, body, source, options, true);
    EXPECT_EQ(r.http_status, 400) << body;
    EXPECT_FALSE(r.body.empty());
  }
}

class Validation : public ::testing::Test {
 protected:
  json::object Decide(const json::object& group, const std::string& op = "CREATE",
                      const json::object* old = nullptr) {
    ReviewResult r = webhook::Review(
        kValidateNodeGroupsPath, testing::Review(group, "v-uid", op, old), source_, options_, true);
    EXPECT_EQ(r.http_status, 200) << r.body;
    json::object resp = ResponseOf(r.body);
    EXPECT_EQ(resp.at("uid").as_string(), "v-uid");
    return resp;
  }
  static std::string Message(const json::object& resp) {
    return std::string(resp.at("status").at("message").as_string());
  }
  StaticObjectSource source_;
  AdmissionOptions options_;
};

TEST_F(Validation, SeedExampleIsValid) {
  EXPECT_TRUE(Decide(NodeGroup("d", "g", "2x2x2", "tpu7x-standard-4t", 2)).at("allowed").as_bool());
  EXPECT_TRUE(Decide(NodeGroup("d", "g", "2x2x1", "tpu7x-standard-4t", 1, "INDIVIDUAL"))
                  .at("allowed")
                  .as_bool());
}

TEST_F(Validation, WrongNodeCountSaysWhatToSet) {
  json::object resp = Decide(NodeGroup("d", "g", "2x2x2", "tpu7x-standard-4t", 3));
  EXPECT_FALSE(resp.at("allowed").as_bool());
  EXPECT_EQ(resp.at("status").at("code").as_int64(), 422);
  EXPECT_NE(Message(resp).find("topology 2x2x2 on tpu7x-standard-4t needs nodeCount 2 (8 chips / "
                               "4 per host); got 3"),
            std::string::npos)
      << Message(resp);
}

TEST_F(Validation, MultiHostNeedsBulk) {
  json::object resp = Decide(NodeGroup("d", "g", "2x2x4", "tpu7x-standard-4t", 4, "INDIVIDUAL"));
  EXPECT_FALSE(resp.at("allowed").as_bool());
  EXPECT_NE(Message(resp).find("set spec.targetSizePolicyMode to BULK"), std::string::npos)
      << Message(resp);
}

TEST_F(Validation, TopologyMachineTypeMismatch) {
  json::object resp = Decide(NodeGroup("d", "g", "2x4", "tpu7x-standard-4t", 2));
  EXPECT_FALSE(resp.at("allowed").as_bool());
  EXPECT_NE(Message(resp).find("3D"), std::string::npos) << Message(resp);
}

TEST_F(Validation, TemplateFromAnotherProjectIsRefused) {
  json::object g = NodeGroup("d", "g", "2x2x2", "", 2);
  g["spec"].as_object()["instanceTemplateURI"] =
      "projects/other-project/global/instanceTemplates/tpl";
  json::object resp = Decide(g);
  EXPECT_FALSE(resp.at("allowed").as_bool());
  EXPECT_NE(Message(resp).find("project other-project but spec.project is my-project"),
            std::string::npos)
      << Message(resp);
  g["spec"].as_object()["instanceTemplateURI"] = "projects/my-project/global/instanceTemplates/tpl";
  EXPECT_TRUE(Decide(g).at("allowed").as_bool());
  EXPECT_EQ(internal::ProjectOfTemplateUri("global/instanceTemplates/t"), "");
  EXPECT_EQ(internal::ProjectOfTemplateUri(
                "https://compute.example/compute/v1/projects/p1/regions/r/instanceTemplates/t"),
            "p1");
}

TEST_F(Validation, MetadataOnlyUpdateOfInvalidGroupPasses) {
  json::object bad = NodeGroup("d", "g", "2x2x2", "tpu7x-standard-4t", 3);
  json::object updated = bad;
  updated["metadata"].as_object()["finalizers"] = json::array{};
  EXPECT_TRUE(Decide(updated, "UPDATE", &bad).at("allowed").as_bool());
  json::object respec = bad;
  respec["spec"].as_object()["nodeCount"] = 5;
  EXPECT_FALSE(Decide(respec, "UPDATE", &bad).at("allowed").as_bool());
}

TEST(Base64, MatchesRfc4648Vectors) {
  EXPECT_EQ(internal::Base64(""), "");
  EXPECT_EQ(internal::Base64("f"), "Zg==");
  EXPECT_EQ(internal::Base64("fo"), "Zm8=");
  EXPECT_EQ(internal::Base64("foo"), "Zm9v");
  EXPECT_EQ(internal::Base64("foobar"), "Zm9vYmFy");
  std::string appended = "x";
  internal::AppendBase64(appended, "fo");
  EXPECT_EQ(appended, "xZm8=");
  // Every byte value at every offset within a 3-byte group, against a bit-by-bit encoder.
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  for (size_t skip = 0; skip < 3; ++skip) {
    std::string in = all.substr(skip), want;
    static constexpr char kA[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string bits;
    for (unsigned char c : in) {
      for (int b = 7; b >= 0; --b) bits += ((c >> b) & 1) != 0 ? '1' : '0';
    }
    while (bits.size() % 6 != 0) bits += '0';
    for (size_t k = 0; k < bits.size(); k += 6)
      want += kA[std::stoi(bits.substr(k, 6), nullptr, 2)];
    while (want.size() % 4 != 0) want += '=';
    EXPECT_EQ(internal::Base64(in), want) << skip;
  }
}

// The hot path writes responses and patches by hand; every string must come out exactly as
// boost::json::serialize writes it, and parse back to itself.
TEST(AppendJsonString, EscapesAsBoostJsonSerializes) {
  std::string all_bytes;
  for (int c = 1; c < 128; ++c) all_bytes += static_cast<char>(c);
  for (std::string s :
       {std::string(), std::string("plain"), std::string("q\"uote\\back"),
        std::string("tab\tnl\ncr\rbs\bff\f"), std::string("\x01\x1f\x7f"),
        std::string("h\xc3\xa9llo \xe2\x82\xac"), std::string(1, '\0'), all_bytes}) {
    std::string out;
    internal::AppendJsonString(out, s);
    EXPECT_EQ(out, json::serialize(json::string(s))) << out;
    EXPECT_EQ(json::parse(out).as_string(), s);
  }
  // Strings longer than one 16-byte scan step, with the byte to escape at every position.
  for (char special : {'"', '\\', '\n', '\x1f', '\x80'}) {
    for (size_t at = 0; at < 40; ++at) {
      std::string s(40, 'a');
      s[at] = special;
      if (at + 17 < s.size()) s[at + 17] = '"';
      std::string out;
      internal::AppendJsonString(out, s);
      EXPECT_EQ(out, json::serialize(json::string(s))) << at;
    }
  }
}

TEST(Review, DenialAndWarningsAreValidJson) {
  // An owner that does not exist: a denial with a status (deny) or a warning (allow), both with
  // quotes in the message taken from the pod's name.
  json::object c = Container("c", 1, {});
  json::object pod = Pod("ns", "we\"ird-0", {c});
  SetOwner(pod, "apps/v1", "StatefulSet", "we\"ird", "u\\id");
  StaticObjectSource source;
  for (OwnerUnreadable mode : {OwnerUnreadable::kDeny, OwnerUnreadable::kAllow}) {
    AdmissionOptions options;
    options.owner_unreadable = mode;
    ReviewResult r = webhook::Review(kMutatePodsPath, testing::Review(pod, "u\"1"), source, options,
                                     /*allow_live=*/true);
    ASSERT_EQ(r.http_status, 200);
    json::object resp = ResponseOf(r.body);
    EXPECT_EQ(resp.at("uid").as_string(), "u\"1");
    if (mode == OwnerUnreadable::kDeny) {
      EXPECT_FALSE(resp.at("allowed").as_bool());
      EXPECT_EQ(resp.at("status").at("code").as_int64(), 404);
      EXPECT_NE(std::string(resp.at("status").at("message").as_string()).find("we\"ird"),
                std::string::npos);
    } else {
      EXPECT_TRUE(resp.at("allowed").as_bool());
      ASSERT_EQ(resp.at("warnings").as_array().size(), 1u);
      EXPECT_FALSE(resp.contains("patch"));
    }
  }
}

}  // namespace
}  // namespace hyperslice::webhook
