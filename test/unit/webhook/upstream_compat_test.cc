// gke-tpu-env-injector's contract (seed 001) on AdmissionReview bodies: its path /mutate for
// StatefulSets and Pods, the order of the variables its integration test reads by position, and
// the v1beta1 reviews its configuration asks for.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "src/base/log.h"
#include "src/kube/yaml.h"
#include "src/webhook/webhook.h"
#include "test/unit/webhook/review_fixtures.h"
#include "test/unit/webhook/upstream_samples.h"

namespace hyperslice::webhook {
namespace {

using namespace testing;  // NOLINT: the fixtures
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kTemplate[] = "spec/template/spec";

class UpstreamPath : public ::testing::Test {
 protected:
  // The sample's StatefulSet as the apiserver sends it on CREATE (namespace set, uid assigned).
  static json::object SampleStatefulSet(bool with_extra_env) {
    auto objects = kube::ObjectsFromYaml(upstream::Sample(with_extra_env));
    EXPECT_TRUE(objects.ok());
    json::object sts = (*objects)[1];
    EXPECT_EQ(sts.at("kind").as_string(), "StatefulSet");
    json::object& meta = sts["metadata"].as_object();
    meta["namespace"] = "ns1";
    meta["uid"] = "sts-uid";
    return sts;
  }
  json::object Decide(const std::string& review) {
    ReviewResult r = webhook::Review(kMutatePath, review, source_, options_, true);
    EXPECT_EQ(r.http_status, 200) << r.body;
    return ResponseOf(r.body);
  }
  // `sts` with the response's patch applied.
  static json::object Patched(const json::object& sts, const json::object& resp) {
    json::value doc = sts;
    if (resp.contains("patch")) {
      EXPECT_TRUE(
          ApplyPatch(doc, json::parse(DecodeBase64(resp.at("patch").as_string())).as_array()));
    }
    return doc.as_object();
  }
  // The Pod the StatefulSet controller creates for `ordinal` from the (mutated) template.
  static json::object PodOf(const json::object& sts, int ordinal) {
    const json::object& tmpl = sts.at("spec").at("template").as_object();
    json::object pod{{"apiVersion", "v1"},
                     {"kind", "Pod"},
                     {"metadata", tmpl.at("metadata")},
                     {"spec", tmpl.at("spec")}};
    std::string name = "web-" + std::to_string(ordinal);
    json::object& meta = pod["metadata"].as_object();
    meta["name"] = name;
    meta["namespace"] = "ns1";
    SetLabel(pod, "apps.kubernetes.io/pod-index", std::to_string(ordinal));
    SetLabel(pod, "statefulset.kubernetes.io/pod-name", name);
    SetOwner(pod, "apps/v1", "StatefulSet", "web", "sts-uid");
    return pod;
  }

  StaticObjectSource source_;
  AdmissionOptions options_;
};

TEST_F(UpstreamPath, SampleStatefulSetsGetHostnamesInTheirTemplateAfterTheirOwnEnv) {
  json::object bare = SampleStatefulSet(false);
  json::object resp = Decide(testing::Review(bare));
  EXPECT_TRUE(resp.at("allowed").as_bool());
  std::string patch = DecodeBase64(resp.at("patch").as_string());
  EXPECT_THAT(patch, HasSubstr(R"("path":"/spec/template/spec/containers/0/env")"));
  EXPECT_THAT(EnvAfter(bare, resp, 0, kTemplate),
              ElementsAre(std::string("TPU_WORKER_HOSTNAMES=") + upstream::kHostnames));

  json::object foo = SampleStatefulSet(true);
  resp = Decide(testing::Review(foo));
  EXPECT_THAT(DecodeBase64(resp.at("patch").as_string()),
              HasSubstr(R"("path":"/spec/template/spec/containers/0/env/-")"));
  EXPECT_THAT(EnvAfter(foo, resp, 0, kTemplate),
              ElementsAre("FOO=BAR", std::string("TPU_WORKER_HOSTNAMES=") + upstream::kHostnames));
}

TEST_F(UpstreamPath, PodsOfTheMutatedTemplateEndWithHostnamesThenWorkerId) {
  for (bool with_extra_env : {false, true}) {
    json::object sts = SampleStatefulSet(with_extra_env);
    sts = Patched(sts, Decide(testing::Review(sts)));
    source_.Put(kube::resources::StatefulSets(), sts);
    for (int ordinal : {0, 2}) {
      json::object pod = PodOf(sts, ordinal);
      std::vector<std::string> env = EnvAfter(pod, Decide(testing::Review(pod)));
      std::vector<std::string> want;
      if (with_extra_env) want.emplace_back("FOO=BAR");
      want.push_back(std::string("TPU_WORKER_HOSTNAMES=") + upstream::kHostnames);
      want.push_back("TPU_WORKER_ID=" + std::to_string(ordinal));
      EXPECT_EQ(env, want);
    }
  }
}

TEST_F(UpstreamPath, StatefulSetUpdateNeverDuplicatesAndFollowsReplicas) {
  json::object sts = SampleStatefulSet(true);
  sts = Patched(sts, Decide(testing::Review(sts)));
  // An update that changes nothing we derive from: no patch (upstream appends another entry).
  json::object relabelled = sts;
  SetLabel(relabelled, "team", "ml");
  json::object resp = Decide(testing::Review(relabelled, "u2", "UPDATE", &sts));
  EXPECT_TRUE(resp.at("allowed").as_bool());
  EXPECT_FALSE(resp.contains("patch")) << DecodeBase64(resp.at("patch").as_string());

  // Scaled through the spec: the value injected for 3 replicas follows to 4, in place.
  json::object scaled = sts;
  scaled["spec"].as_object()["replicas"] = 4;
  resp = Decide(testing::Review(scaled, "u3", "UPDATE", &sts));
  EXPECT_THAT(EnvAfter(scaled, resp, 0, kTemplate),
              ElementsAre("FOO=BAR",
                          "TPU_WORKER_HOSTNAMES=web-0.nginx,web-1.nginx,web-2.nginx,"
                          "web-3.nginx"));

  // A value the user set is theirs, whatever the replicas.
  json::object own = SampleStatefulSet(false);
  own["spec"]
      .as_object()["template"]
      .as_object()["spec"]
      .as_object()["containers"]
      .as_array()[0]
      .as_object()["env"] =
      json::array{json::object{{"name", "TPU_WORKER_HOSTNAMES"}, {"value", "a.example,b.example"}}};
  json::object own_scaled = own;
  own_scaled["spec"].as_object()["replicas"] = 2;
  EXPECT_FALSE(Decide(testing::Review(own_scaled, "u4", "UPDATE", &own)).contains("patch"));
  EXPECT_FALSE(Decide(testing::Review(own)).contains("patch"));
}

TEST_F(UpstreamPath, OptOutNoServiceAndOtherKindsAreLeftAlone) {
  json::object disabled = SampleStatefulSet(false);
  json::object& tmpl_meta =
      disabled["spec"].as_object()["template"].as_object()["metadata"].as_object();
  tmpl_meta["labels"].as_object()[kInjectLabel] = "disabled";
  EXPECT_FALSE(Decide(testing::Review(disabled)).contains("patch"));

  json::object headless = SampleStatefulSet(false);
  headless["spec"].as_object().erase("serviceName");
  json::object resp = Decide(testing::Review(headless));
  EXPECT_FALSE(resp.contains("patch"));
  ASSERT_TRUE(resp.contains("warnings"));
  EXPECT_THAT(std::string(resp.at("warnings").as_array()[0].as_string()),
              HasSubstr("no serviceName"));

  // Not labelled and no TPU request in the template: nothing (as on /mutate-pods).
  json::object unlabelled = SampleStatefulSet(false);
  unlabelled["metadata"].as_object().erase("labels");
  unlabelled["spec"].as_object()["template"].as_object()["metadata"].as_object().erase("labels");
  EXPECT_FALSE(Decide(testing::Review(unlabelled)).contains("patch"));

  // A status write is a subresource: not ours.
  json::object sts = SampleStatefulSet(false);
  std::string status_review = testing::Review(sts, "u5", "UPDATE", &sts);
  json::value doc = json::parse(status_review);
  doc.as_object()["request"].as_object()["subResource"] = "status";
  EXPECT_FALSE(Decide(json::serialize(doc)).contains("patch"));
}

TEST_F(UpstreamPath, V1beta1ReviewIsAnsweredInV1beta1) {
  json::object sts = SampleStatefulSet(false);
  ReviewResult r = webhook::Review(
      kMutatePath, testing::Review(sts, "beta-uid", "CREATE", nullptr, "admission.k8s.io/v1beta1"),
      source_, options_, true);
  ASSERT_EQ(r.http_status, 200) << r.body;
  json::object review = json::parse(r.body).as_object();
  EXPECT_EQ(review.at("apiVersion").as_string(), "admission.k8s.io/v1beta1");
  EXPECT_EQ(review.at("kind").as_string(), "AdmissionReview");
  json::object resp = review.at("response").as_object();
  EXPECT_EQ(resp.at("uid").as_string(), "beta-uid");
  EXPECT_EQ(resp.at("patchType").as_string(), "JSONPatch");
  EXPECT_THAT(EnvAfter(sts, resp, 0, kTemplate),
              ElementsAre(std::string("TPU_WORKER_HOSTNAMES=") + upstream::kHostnames));
}

// --verbose (upstream's debug level): one line per admission, and none without it.
TEST_F(UpstreamPath, DebugLevelLogsEachAdmission) {
  std::vector<std::string> lines;
  log::SetSink([&lines](std::string_view line) { lines.emplace_back(line); });
  log::Level before = log::GetLevel();
  json::object sts = SampleStatefulSet(false);
  Decide(testing::Review(sts));
  EXPECT_THAT(lines, ::testing::IsEmpty());
  log::SetLevel(log::Level::kDebug);
  Decide(testing::Review(sts));
  log::SetLevel(before);
  log::SetSink(nullptr);
  ASSERT_EQ(lines.size(), 1u);
  for (const char* field :
       {R"("msg":"admission")", R"("path":"/mutate")", R"("kind":"StatefulSet")",
        R"("operation":"CREATE")", R"("name":"web")", R"("patched":true)"}) {
    EXPECT_THAT(lines[0], HasSubstr(field));
  }
}

}  // namespace
}  // namespace hyperslice::webhook
