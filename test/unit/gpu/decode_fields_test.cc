// What the provider decoders make of a string, object or number field that is null, absent or of
// another type: the rules the shared field accessors (src/base/json.h) must keep when the
// decoders read through them.
#include <gtest/gtest.h>

#include <string>

#include "src/gpu/providers/lambda/decode.h"
#include "src/gpu/providers/paperspace/decode.h"
#include "src/gpu/providers/runpod/decode.h"
#include "src/gpu/providers/vast/decode.h"

namespace hyperslice::gpu::providers {
namespace {

// A Lambda instance whose optional fields are given as `name`, `ip` and `region`.
std::string LambdaInstance(const std::string& name, const std::string& ip,
                           const std::string& region) {
  return R"({"data":{"id":"i-1","status":"active",)" + name + ip + region +
         R"("instance_type":{"name":"gpu_1x_a10","description":"1x A10",
         "gpu_description":"A10","price_cents_per_hour":75,
         "specs":{"vcpus":30,"memory_gib":200,"storage_gib":1400,"gpus":1}}}})";
}

TEST(DecodeFields, LambdaStringsNullAbsentOrOtherTypeReadEmpty) {
  for (const std::string& variant :
       {std::string(R"("name":null,"ip":null,"region":{"name":null},)"),
        std::string(R"("name":7,"ip":[],"region":{"name":{}},)"), std::string()}) {
    SCOPED_TRACE(variant);
    auto inst = lambda::DecodeInstance(LambdaInstance(variant, "", ""));
    ASSERT_TRUE(inst.ok()) << inst.error().message;
    EXPECT_EQ(inst->id, "i-1");
    EXPECT_EQ(inst->name, "");
    EXPECT_EQ(inst->public_ip, "");
    EXPECT_EQ(inst->offer_id, "gpu_1x_a10");
  }
  auto named = lambda::DecodeInstance(LambdaInstance(R"("name":"n",)", R"("ip":"192.0.2.1",)", ""));
  ASSERT_TRUE(named.ok()) << named.error().message;
  EXPECT_EQ(named->name, "n");
  EXPECT_EQ(named->public_ip, "192.0.2.1");
  // A null or non-string id is no id.
  EXPECT_FALSE(lambda::DecodeInstance(R"({"data":{"id":null,"status":"active"}})").ok());
  EXPECT_FALSE(lambda::DecodeInstance(R"({"data":{"id":5,"status":"active"}})").ok());
}

TEST(DecodeFields, RunPodNullsReadAbsent) {
  auto pod = runpod::DecodePod(
      R"({"data":{"pod":{"id":"p-1","name":null,"desiredStatus":"RUNNING","podType":7,
      "runtime":null,"env":null,"machine":null,"gpuCount":null,"costPerHr":null}}})");
  ASSERT_TRUE(pod.ok()) << pod.error().message;
  EXPECT_EQ(pod->name, "");
  EXPECT_FALSE(pod->spot);
  EXPECT_NE(pod->state, InstanceState::kRunning);  // no runtime: the container is not running
  EXPECT_EQ(pod->gpu_count, 0);
  EXPECT_FALSE(pod->price.has_value());
  EXPECT_EQ(pod->offer_id, "");
  // Present values of the right type are read; a port's null ip is no address.
  auto running = runpod::DecodePod(
      R"({"data":{"pod":{"id":"p-2","name":"n","desiredStatus":"RUNNING","podType":"INTERRUPTABLE",
      "gpuCount":2,"costPerHr":1.5,"machine":{"gpuTypeId":"NVIDIA A40","dataCenterId":"EU-RO-1"},
      "runtime":{"ports":[{"isIpPublic":true,"ip":null},{"isIpPublic":true,"ip":"192.0.2.9"}]}}}})");
  ASSERT_TRUE(running.ok()) << running.error().message;
  EXPECT_EQ(running->name, "n");
  EXPECT_TRUE(running->spot);
  EXPECT_EQ(running->state, InstanceState::kRunning);
  EXPECT_EQ(running->gpu_count, 2);
  EXPECT_EQ(running->offer_id, "NVIDIA A40|EU-RO-1|2");
  EXPECT_EQ(running->public_ip, "192.0.2.9");
  EXPECT_FALSE(runpod::DecodePod(R"({"data":{"pod":{"id":null}}})").ok());
}

TEST(DecodeFields, VastNullsAndOtherTypesReadAbsent) {
  boost::json::object o = {{"id", 42},
                           {"label", nullptr},
                           {"actual_status", 3},
                           {"gpu_name", nullptr},
                           {"geolocation", false},
                           {"public_ipaddr", nullptr},
                           {"num_gpus", nullptr},
                           {"dph_total", "0.5"}};
  Instance i = vast::InstanceFromJson(o);
  EXPECT_EQ(i.id, "42");
  EXPECT_EQ(i.name, "");
  EXPECT_EQ(i.provider_state, "");
  EXPECT_EQ(i.state, InstanceState::kPending);  // no status yet
  EXPECT_EQ(i.public_ip, "");
  EXPECT_EQ(i.gpu_count, 0);
  EXPECT_FALSE(i.price.has_value());
  // An offer whose rentable is null is listed as not available; absent, availability is unknown.
  boost::json::object offer = {{"id", 7},
                               {"gpu_name", nullptr},
                               {"rentable", nullptr},
                               {"verification", 1},
                               {"num_gpus", 2.0}};
  auto with_null = vast::OfferFromJson(offer);
  ASSERT_TRUE(with_null.has_value());
  EXPECT_EQ(with_null->provider_gpu_name, "");
  EXPECT_EQ(with_null->available, 0);
  EXPECT_EQ(with_null->gpu_count, 2);
  EXPECT_EQ(with_null->attributes.count("verification"), 0U);
  offer.erase("rentable");
  auto without = vast::OfferFromJson(offer);
  ASSERT_TRUE(without.has_value());
  EXPECT_EQ(without->available, Offer{}.available);
}

TEST(DecodeFields, PaperspaceTellsNullFromOtherType) {
  // Absent or null strings read as empty; another type is a malformed answer.
  auto m = paperspace::DecodeMachine(R"({"id":"m-1","name":null,"publicIp":null})");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->name, "");
  EXPECT_EQ(m->public_ip, "");
  EXPECT_FALSE(paperspace::DecodeMachine(R"({"id":"m-1","name":5})").ok());
  EXPECT_FALSE(paperspace::DecodeMachine(R"({"id":null})").ok());
  auto s = paperspace::DecodeStartupScript(R"({"id":"s-1","name":null})");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->name, "");
  EXPECT_FALSE(paperspace::DecodeStartupScript(R"({"id":"s-1","name":[]})").ok());
}

}  // namespace
}  // namespace hyperslice::gpu::providers
