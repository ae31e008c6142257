// /validate-tgp on AdmissionReview bodies (no socket): GPUNodePools against their class, classes'
// templates, and the warnings of a lowered class budget; cached reads first, refusals confirmed
// live.
#include <optional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/gpu/api.h"
#include "src/webhook/webhook.h"
#include "test/unit/webhook/review_fixtures.h"

namespace hyperslice::webhook {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;
using ::testing::Not;

json::object Class(const std::string& name, const std::string& max_hourly_cost,
                   const std::string& tmpl = "token: {{.MachineToken}}\n") {
  json::object spec{
      {"providers",
       json::array{json::object{{"name", "runpod"},
                                {"credentialsRef", json::object{{"name", "s"}, {"key", "k"}}}}}},
      {"talosConfig", json::object{{"machineConfigTemplate", tmpl}}}};
  if (!max_hourly_cost.empty()) {
    spec["limits"] = json::object{{"maxHourlyCost", max_hourly_cost}};
  }
  return json::object{{"apiVersion", "tgp.io/v1"},
                      {"kind", "GPUNodeClass"},
                      {"metadata", json::object{{"name", name}}},
                      {"spec", spec}};
}

json::object Pool(const std::string& ns, const std::string& name, const std::string& class_name,
                  const std::string& max_hourly_price, json::array requirements = {}) {
  json::object spec{
      {"nodeClassRef", json::object{{"kind", "GPUNodeClass"}, {"name", class_name}}},
      {"template", json::object{{"spec", json::object{{"requirements", requirements}}}}}};
  if (!max_hourly_price.empty()) spec["maxHourlyPrice"] = max_hourly_price;
  return json::object{{"apiVersion", "tgp.io/v1"},
                      {"kind", "GPUNodePool"},
                      {"metadata", json::object{{"name", name}, {"namespace", ns}}},
                      {"spec", spec}};
}

// An AdmissionReview v1 as kube-apiserver sends it for a tgp.io object.
std::string TgpReview(const json::object& object, const std::string& op = "CREATE",
                      const json::object* old_object = nullptr) {
  std::string kind(object.at("kind").as_string());
  const json::object& meta = object.at("metadata").as_object();
  json::object request{
      {"uid", "tgp-uid"},
      {"kind", json::object{{"group", "tgp.io"}, {"version", "v1"}, {"kind", kind}}},
      {"resource",
       json::object{{"group", "tgp.io"},
                    {"version", "v1"},
                    {"resource", kind == "GPUNodePool" ? "gpunodepools" : "gpunodeclasses"}}},
      {"name", meta.at("name")},
      {"operation", op},
      {"object", object},
      {"oldObject", old_object != nullptr ? json::value(*old_object) : json::value(nullptr)}};
  if (const json::value* ns = meta.if_contains("namespace")) request["namespace"] = *ns;
  return json::serialize(json::object{
      {"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}, {"request", request}});
}

// A cache and the live state, which may differ (a stale cache), counting what is read where.
class TwoLevelSource : public ObjectSource {
 public:
  StaticObjectSource cache, live;
  bool cache_synced = true;
  int live_reads = 0, cached_reads = 0;
  std::optional<Error> live_error;  // every live read fails with this

  Result<ObjectPtr> Get(const kube::Resource& r, const std::string& ns, const std::string& name,
                        Mode mode) override {
    if (mode == Mode::kCachedOnly) {
      ++cached_reads;
      auto got = cache_synced ? cache.Get(r, ns, name, mode) : Result<ObjectPtr>(NotCached());
      // An informer answers a miss as "not cached" (it may be newer than the cache).
      if (!got.ok()) return NotCached();
      return got;
    }
    ++live_reads;
    if (live_error) return *live_error;
    return live.Get(r, ns, name, mode);
  }
  Result<std::vector<ObjectPtr>> List(const kube::Resource& r, Mode mode) override {
    if (mode == Mode::kCachedOnly) {
      ++cached_reads;
      if (!cache_synced) return NotCached();
      return cache.List(r, mode);
    }
    ++live_reads;
    if (live_error) return *live_error;
    return live.List(r, mode);
  }
  void PutBoth(const kube::Resource& r, const json::object& obj) {
    cache.Put(r, obj);
    live.Put(r, obj);
  }

 private:
  static Error NotCached() {
    return Error::Make(Error::Code::kUnavailable, "not cached", ObjectSource::kNotCached);
  }
};

class TgpValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    source_.PutBoth(gpu::GPUNodeClasses(), Class("standard-gpu-class", "50.0"));
    source_.PutBoth(gpu::GPUNodeClasses(), Class("small", "1.5"));
  }
  // The decision after the live pass when the first one asked for it.
  json::object Decide(const std::string& review) {
    ReviewResult r = Review(kValidateTgpPath, review, source_, options_, /*allow_live=*/false);
    if (r.needs_live) r = Review(kValidateTgpPath, review, source_, options_, true);
    EXPECT_EQ(r.http_status, 200) << r.body;
    EXPECT_FALSE(r.needs_live);
    json::object resp = testing::ResponseOf(r.body);
    EXPECT_EQ(resp.at("uid").as_string(), "tgp-uid");
    return resp;
  }
  static bool Allowed(const json::object& resp) { return resp.at("allowed").as_bool(); }
  static std::string Message(const json::object& resp) {
    const json::value* status = resp.if_contains("status");
    return status != nullptr ? std::string(status->at("message").as_string()) : "";
  }
  static std::vector<std::string> Warnings(const json::object& resp) {
    std::vector<std::string> out;
    if (const json::value* w = resp.if_contains("warnings")) {
      for (const auto& s : w->as_array()) out.emplace_back(s.as_string());
    }
    return out;
  }
  TwoLevelSource source_;
  AdmissionOptions options_;
};

TEST_F(TgpValidation, APoolWithinItsClassIsAdmittedFromTheCache) {
  json::object resp = Decide(TgpReview(Pool("ml", "p", "standard-gpu-class", "2.0")));
  EXPECT_TRUE(Allowed(resp)) << Message(resp);
  EXPECT_EQ(source_.live_reads, 0);
}

TEST_F(TgpValidation, APoolNamingNoClassIsRefusedWithTheClassesThatExist) {
  json::object resp = Decide(TgpReview(Pool("ml", "p", "standard-gpu-clas", "")));
  EXPECT_FALSE(Allowed(resp));
  EXPECT_EQ(resp.at("status").at("code").as_int64(), 422);
  EXPECT_THAT(Message(resp), HasSubstr("GPUNodePool ml/p is invalid: spec.nodeClassRef.name "
                                       "\"standard-gpu-clas\" names no GPUNodeClass; create "
                                       "GPUNodeClass \"standard-gpu-clas\" first or name an "
                                       "existing one; existing classes: small, "
                                       "standard-gpu-class"));
  EXPECT_EQ(source_.live_reads, 2) << "the miss is confirmed live (get, then list)";
}

TEST_F(TgpValidation, AClassCreatedAMomentAgoIsSeenLive) {
  source_.live.Put(gpu::GPUNodeClasses(), Class("new-class", "10"));  // not cached yet
  ReviewResult first = Review(kValidateTgpPath, TgpReview(Pool("ml", "p", "new-class", "2")),
                              source_, options_, /*allow_live=*/false);
  EXPECT_TRUE(first.needs_live) << "decided on the I/O thread: " << first.body;
  json::object resp = Decide(TgpReview(Pool("ml", "p", "new-class", "2")));
  EXPECT_TRUE(Allowed(resp)) << Message(resp);
}

TEST_F(TgpValidation, PriceAboveTheClassBudgetIsRefusedOnTheLiveClass) {
  json::object resp = Decide(TgpReview(Pool("ml", "p", "small", "2.0")));
  EXPECT_FALSE(Allowed(resp));
  EXPECT_THAT(Message(resp), HasSubstr("spec.maxHourlyPrice \"2.0\" is above GPUNodeClass "
                                       "\"small\"'s limits.maxHourlyCost \"1.5\""));
  EXPECT_GE(source_.live_reads, 1) << "a refusal is decided live";

  // The cache still has the old budget; the class was just raised to 3: admitted.
  source_.live.Put(gpu::GPUNodeClasses(), Class("small", "3"));
  EXPECT_TRUE(Allowed(Decide(TgpReview(Pool("ml", "p", "small", "2.0")))));
}

TEST_F(TgpValidation, AClassBeingDeletedTakesNoNewPool) {
  json::object doomed = Class("doomed", "");
  doomed["metadata"].as_object()["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  source_.PutBoth(gpu::GPUNodeClasses(), doomed);
  json::object resp = Decide(TgpReview(Pool("ml", "p", "doomed", "")));
  EXPECT_FALSE(Allowed(resp));
  EXPECT_THAT(Message(resp), HasSubstr("names a GPUNodeClass that is being deleted"));
}

TEST_F(TgpValidation, UpdatesKeepingAGoneClassPassChangingToAGoneClassDoesNot) {
  json::object old_pool = Pool("ml", "p", "gone", "1");
  json::object edited = Pool("ml", "p", "gone", "1.2");
  EXPECT_TRUE(Allowed(Decide(TgpReview(edited, "UPDATE", &old_pool))));
  json::object moved = Pool("ml", "p", "also-gone", "1");
  json::object resp = Decide(TgpReview(moved, "UPDATE", &old_pool));
  EXPECT_FALSE(Allowed(resp));
  EXPECT_THAT(Message(resp), HasSubstr("\"also-gone\" names no GPUNodeClass"));
}

TEST_F(TgpValidation, MetadataOnlyUpdatesReadNothing) {
  json::object old_pool = Pool("ml", "p", "gone", "99");
  json::object pool = old_pool;
  testing::SetLabel(pool, "a", "b");
  EXPECT_TRUE(Allowed(Decide(TgpReview(pool, "UPDATE", &old_pool))));
  EXPECT_EQ(source_.live_reads + source_.cached_reads, 0);
}

TEST_F(TgpValidation, UnreadableClassIsAnErrorToRetryNotARefusalOfTheInput) {
  source_.cache_synced = false;
  source_.live_error = Error::Make(Error::Code::kUnavailable, "connection refused");
  json::object resp = Decide(TgpReview(Pool("ml", "p", "standard-gpu-class", "")));
  EXPECT_FALSE(Allowed(resp));
  EXPECT_EQ(resp.at("status").at("code").as_int64(), 503);
  EXPECT_THAT(Message(resp), HasSubstr("could not read GPUNodeClass \"standard-gpu-class\""));
  EXPECT_THAT(Message(resp), HasSubstr("try again"));
}

TEST_F(TgpValidation, RequirementProblemsAndWarningsReachTheAnswer) {
  json::array reqs{
      json::object{{"key", "tgp.io/gpu-type"}, {"operator", "In"}, {"values", {"B300"}}},
      json::object{{"key", "tgp.io/zone"}, {"operator", "Exists"}}};
  json::object resp = Decide(TgpReview(Pool("ml", "p", "standard-gpu-class", "", reqs)));
  EXPECT_FALSE(Allowed(resp));
  EXPECT_THAT(Message(resp), HasSubstr("\"tgp.io/zone\" is not a tgp.io label"));
  ASSERT_EQ(Warnings(resp).size(), 1u);
  EXPECT_THAT(Warnings(resp)[0], HasSubstr("\"B300\" is not a GPU type"));

  reqs.pop_back();
  json::object warned = Decide(TgpReview(Pool("ml", "p", "standard-gpu-class", "", reqs)));
  EXPECT_TRUE(Allowed(warned));
  EXPECT_EQ(Warnings(warned).size(), 1u);
}

TEST_F(TgpValidation, ClassTemplatesAreChecked) {
  EXPECT_TRUE(Allowed(Decide(TgpReview(Class("c", "")))));
  json::object resp = Decide(TgpReview(Class("c", "", "a: {{.MachineTokn}}\nb: {{.ClusterCA")));
  EXPECT_FALSE(Allowed(resp));
  EXPECT_THAT(Message(resp), HasSubstr("GPUNodeClass c is invalid: "
                                       "spec.talosConfig.machineConfigTemplate does not parse, "
                                       "line 2: "));
  json::object unknown = Decide(TgpReview(Class("c", "", "a: {{.MachineTokn}}\n")));
  EXPECT_THAT(Message(unknown), HasSubstr("{{.MachineTokn}} (line 1, did you mean "
                                          "{{.MachineToken}}?)"));
}

TEST_F(TgpValidation, LoweringAClassBudgetWarnsAboutThePoolsAboveIt) {
  source_.PutBoth(gpu::GPUNodePools(), Pool("ml", "dear", "standard-gpu-class", "20"));
  source_.PutBoth(gpu::GPUNodePools(), Pool("ml", "cheap", "standard-gpu-class", "2"));
  source_.PutBoth(gpu::GPUNodePools(), Pool("ml", "elsewhere", "small", "40"));
  json::object old_class = Class("standard-gpu-class", "50.0");
  json::object lowered = Class("standard-gpu-class", "10");
  json::object resp = Decide(TgpReview(lowered, "UPDATE", &old_class));
  EXPECT_TRUE(Allowed(resp)) << "lowering a budget is never refused";
  ASSERT_EQ(Warnings(resp).size(), 1u);
  EXPECT_THAT(Warnings(resp)[0], HasSubstr("GPUNodePool ml/dear has maxHourlyPrice \"20\" above "
                                           "this class's limits.maxHourlyCost \"10\""));

  // Raising it (or leaving it) lists nothing.
  int reads = source_.cached_reads + source_.live_reads;
  json::object raised = Class("standard-gpu-class", "60");
  json::object r2 = Decide(TgpReview(raised, "UPDATE", &old_class));
  EXPECT_TRUE(Warnings(r2).empty());
  EXPECT_EQ(source_.cached_reads + source_.live_reads, reads);
}

TEST_F(TgpValidation, OtherKindsAndSubresourcesPass) {
  json::object pod = testing::Pod("ns", "p", {});
  ReviewResult r = Review(kValidateTgpPath, testing::Review(pod), source_, options_, true);
  EXPECT_TRUE(testing::ResponseOf(r.body).at("allowed").as_bool());
  json::object bad = Pool("ml", "p", "gone", "1");
  std::string review = TgpReview(bad);
  json::value v = json::parse(review);
  v.at("request").as_object()["subResource"] = "status";
  EXPECT_TRUE(Allowed(Decide(json::serialize(v))));
}

TEST(TgpValidationSource, StaticSourceListsOneResource) {
  StaticObjectSource s;
  s.Put(gpu::GPUNodeClasses(), Class("a", ""));
  s.Put(gpu::GPUNodePools(), Pool("ns", "p", "a", ""));
  auto classes = s.List(gpu::GPUNodeClasses(), ObjectSource::Mode::kCachedOnly);
  ASSERT_TRUE(classes.ok());
  ASSERT_EQ(classes->size(), 1u);
  EXPECT_THAT(json::serialize(*(*classes)[0]), Not(HasSubstr("GPUNodePool")));
}

}  // namespace
}  // namespace hyperslice::webhook
