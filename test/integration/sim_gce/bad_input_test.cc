// Bad input gets GCE's 400 error shape, never a crash: malformed JSON, unknown fields (at any
// depth), wrong JSON types, enum values compute.proto does not define, missing required fields,
// names that break GCE's RFC 1035 rule, bad query parameters. The server answers normally after.
#include "test/integration/sim_gce/sim_fixture.h"

namespace hyperslice::sim::gce::testing {
namespace {

using BadInputTest = SimTest;

struct Case {
  std::string name;
  std::string method;
  std::string rel;
  std::string body;
  int status;
  std::string reason;
  std::string message_part;  // a piece of error.message that must be there
};

TEST_F(BadInputTest, CorpusGetsGceErrorShape) {
  MakeTemplate("good", "ct6e-standard-4t");
  const std::string mig_path = "zones/us-central1-c/instanceGroupManagers";
  std::vector<Case> corpus = {
      {"malformed json", "POST", "global/instanceTemplates", "{\"name\": \"x\",", 400, "invalid",
       "Invalid JSON payload received."},
      {"not json at all", "POST", "global/instanceTemplates", "\x01\x02garbage", 400, "invalid",
       "Invalid JSON payload received."},
      {"array body", "POST", "global/instanceTemplates", "[1,2,3]", 400, "invalid",
       "Invalid JSON payload received."},
      {"deeply nested", "POST", "global/instanceTemplates",
       std::string(5000, '[') + std::string(5000, ']'), 400, "invalid",
       "Invalid JSON payload received."},
      {"empty body", "POST", "global/instanceTemplates", "", 400, "required",
       "Required field 'resource' not specified"},
      {"unknown top-level field", "POST", "global/instanceTemplates",
       R"({"name":"t1","properties":{"machineType":"e2-medium"},"foo":1})", 400, "invalid",
       "Invalid JSON payload received. Unknown name \"foo\" at 'instance_template': Cannot find "
       "field."},
      {"unknown nested field", "POST", "global/instanceTemplates",
       R"({"name":"t1","properties":{"machineType":"e2-medium","scheduling":{"preemptable":true}}})",
       400, "invalid",
       "Unknown name \"preemptable\" at 'instance_template.properties.scheduling': Cannot find "
       "field."},
      {"wrong type bool", "POST", "global/instanceTemplates",
       R"({"name":"t1","properties":{"machineType":"e2-medium","canIpForward":"yes"}})", 400,
       "invalid", "Invalid value at 'instance_template.properties.can_ip_forward' (TYPE_BOOL)"},
      {"wrong type object", "POST", "global/instanceTemplates",
       R"({"name":"t1","properties":"big"})", 400, "invalid",
       "Invalid value at 'instance_template.properties'"},
      {"list for scalar", "POST", "global/instanceTemplates", R"({"name":["t1"]})", 400, "invalid",
       "Proto field is not repeating, cannot start list."},
      {"bad enum", "POST", mig_path,
       R"({"name":"m1","instanceTemplate":"global/instanceTemplates/good","targetSize":1,"targetSizePolicy":{"mode":"ALL_AT_ONCE"}})",
       400, "invalid",
       "(type.googleapis.com/google.cloud.compute.v1.InstanceGroupManagerTargetSizePolicy.Mode), "
       "\"ALL_AT_ONCE\""},
      {"bad enum in policy", "POST", "regions/us-central1/resourcePolicies",
       R"({"name":"p1","workloadPolicy":{"type":"FAST"}})", 400, "invalid",
       "google.cloud.compute.v1.ResourcePolicyWorkloadPolicy.Type"},
      {"bad integer", "POST", mig_path,
       R"({"name":"m1","instanceTemplate":"global/instanceTemplates/good","targetSize":"four"})",
       400, "invalid", "Invalid value at 'instance_group_manager.target_size' (TYPE_INT32)"},
      {"missing name", "POST", "global/instanceTemplates",
       R"({"properties":{"machineType":"e2-medium"}})", 400, "required",
       "Required field 'resource.name' not specified"},
      {"missing instanceTemplate", "POST", mig_path, R"({"name":"m1","targetSize":1})", 400,
       "required", "Required field 'resource.instanceTemplate' not specified"},
      {"uppercase name", "POST", "global/instanceTemplates",
       R"({"name":"Bad_Name","properties":{"machineType":"e2-medium"}})", 400, "invalid",
       "Invalid value for field 'resource.name': 'Bad_Name'. Must be a match of regex "
       "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'"},
      {"trailing dash", "POST", "regions/us-central1/resourcePolicies", R"({"name":"pol-"})", 400,
       "invalid", "Invalid value for field 'resource.name': 'pol-'"},
      {"too long", "POST", "global/instanceTemplates",
       R"({"name":")" + std::string(64, 'a') + R"(","properties":{"machineType":"e2-medium"}})",
       400, "invalid", "Must be a match of regex"},
      {"starts with digit", "POST", mig_path,
       R"({"name":"1mig","instanceTemplate":"global/instanceTemplates/good"})", 400, "invalid",
       "Invalid value for field 'resource.name': '1mig'"},
      {"resize without size", "POST", mig_path + "/nope/resize", "", 400, "required",
       "Required field 'size' not specified"},
      {"bad requestId", "POST", "global/instanceTemplates?requestId=not-a-uuid",
       R"({"name":"t9","properties":{"machineType":"e2-medium"}})", 400, "invalid", "requestId"},
      {"missing template", "POST", mig_path,
       R"({"name":"m2","instanceTemplate":"global/instanceTemplates/absent","targetSize":1})", 404,
       "notFound",
       "The resource 'projects/my-gcp-project/global/instanceTemplates/absent' was not "
       "found"},
  };
  for (const Case& c : corpus) {
    SCOPED_TRACE(c.name);
    Reply r = ApiRaw(c.method, c.rel, c.body);
    EXPECT_EQ(r.status, c.status) << r.raw;
    EXPECT_EQ(ErrorReason(r), c.reason) << r.raw;
    if (r.body.is_object() && r.body.as_object().contains("error")) {
      std::string msg(r.body.at("error").at("message").as_string());
      EXPECT_NE(msg.find(c.message_part), std::string::npos) << msg;
      if (c.status == 400) {
        EXPECT_EQ(r.body.at("error").at("status"), "INVALID_ARGUMENT");
      }
    }
  }
  // Nothing was created by the corpus, and the server still answers.
  Reply list = Api("GET", "global/instanceTemplates");
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.body.at("items").as_array().size(), 1u);
  EXPECT_EQ(Api("GET", "zones/us-central1-c/instanceGroupManagers").status, 200);
}

TEST_F(BadInputTest, CamelCaseAndProtoNamesAndStringInt64sAreAccepted) {
  // JSON names are camelCase; int64 fields travel as strings (diskSizeGb) — both are valid input.
  Reply r = ApiRaw("POST", "global/instanceTemplates",
                   R"({"name":"ok","description":"d","properties":{"machineType":"e2-medium",
                       "disks":[{"boot":true,"initializeParams":{"diskSizeGb":"200"}}],
                       "scheduling":{"provisioningModel":"SPOT","onHostMaintenance":"TERMINATE"},
                       "metadata":{"items":[{"key":"a","value":"b"}]}}})");
  EXPECT_EQ(r.status, 200) << r.raw;
}

TEST_F(BadInputTest, UnknownPathsAndMethodsAreNotFound) {
  Reply r = ApiRaw("GET", "global/nothingHere", "");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(ErrorReason(r), "notFound");
  Reply wrong_method = ApiRaw("PUT", "global/instanceTemplates", "{}");
  EXPECT_EQ(wrong_method.status, 404);
  EXPECT_EQ(Api("GET", "zones").status, 200);
}

}  // namespace
}  // namespace hyperslice::sim::gce::testing
