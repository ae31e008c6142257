// The RunPod simulator's GraphQL reader (sim/runpod/graphql.h) and schema validation, on the
// documents runpod-python and the RunPod docs send, and on broken ones.
#include "sim/runpod/graphql.h"

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "sim/runpod/internal.h"

namespace hyperslice::sim::runpod {
namespace {

using graphql::Document;
using graphql::Parse;
using graphql::Value;

TEST(GraphqlParse, RunPodPythonCreateMutation) {
  // runpod-python 1.12.0 generate_pod_deployment_mutation output, as sent.
  auto r = Parse(R"(
    mutation {
      podFindAndDeployOnDemand(
        input: {
          name: "test", imageName: "runpod/stack", cloudType: ALL, startSsh: true, gpuTypeId: "NVIDIA GeForce RTX 4090", supportPublicIp: true, gpuCount: 1, volumeInGb: 0, minVcpuCount: 1, minMemoryInGb: 1, dataCenterId: null, dockerArgs: "", containerDiskInGb: 10, volumeMountPath: "/runpod-volume", env: [{ key: "A", value: "b \"q\"" }, { key: "U", value: "\u00e9\ud83d\ude00" }]
        }
      ) {
        id
        imageName
        env
        machineId
        machine {
          podHostId
        }
      }
    }
  )");
  ASSERT_TRUE(r.document) << r.error.message;
  const Document& d = *r.document;
  EXPECT_EQ(d.operation, Document::Operation::kMutation);
  ASSERT_EQ(d.selections.size(), 1u);
  const auto& s = d.selections[0];
  EXPECT_EQ(s.name, "podFindAndDeployOnDemand");
  const Value* in = s.Arg("input");
  ASSERT_NE(in, nullptr);
  EXPECT_EQ(in->Field("cloudType")->kind, Value::Kind::kEnum);
  EXPECT_EQ(in->Field("cloudType")->s, "ALL");
  EXPECT_EQ(in->Field("gpuCount")->i, 1);
  EXPECT_EQ(in->Field("dataCenterId")->kind, Value::Kind::kNull);
  EXPECT_TRUE(in->Field("startSsh")->b);
  const Value* env = in->Field("env");
  ASSERT_EQ(env->list.size(), 2u);
  EXPECT_EQ(env->list[0].Field("value")->s, "b \"q\"");
  EXPECT_EQ(env->list[1].Field("value")->s, "\xC3\xA9\xF0\x9F\x98\x80");
  ASSERT_EQ(s.selections.size(), 5u);
  EXPECT_EQ(s.selections[4].name, "machine");
  EXPECT_TRUE(s.selections[4].has_selection_set);
  EXPECT_EQ(s.selections[4].selections[0].name, "podHostId");
  EXPECT_TRUE(Validate(d, RunPodSchema()).empty());
}

TEST(GraphqlParse, NamedQueryAliasesVariablesNumbersBlockStrings) {
  boost::json::object vars{{"id", "NVIDIA L40S"}, {"n", 2}};
  auto r = Parse(R"(# a comment
    query GpuTypes($id: String!, $n: Int = 1, $dc: String) {
      gpuTypes(input: {id: $id}) {
        id
        one: lowestPrice(input: {gpuCount: $n, dataCenterId: $dc}) { minimumBidPrice }
        __typename
      }
      x: __typename
    })",
                 vars);
  ASSERT_TRUE(r.document) << r.error.message;
  const auto& g = r.document->selections[0];
  EXPECT_EQ(r.document->name, "GpuTypes");
  EXPECT_EQ(g.Arg("input")->Field("id")->s, "NVIDIA L40S");
  const auto& lp = g.selections[1];
  EXPECT_EQ(lp.alias, "one");
  EXPECT_EQ(lp.ResponseKey(), "one");
  EXPECT_EQ(lp.Arg("input")->Field("gpuCount")->i, 2);
  EXPECT_EQ(lp.Arg("input")->Field("dataCenterId")->kind, Value::Kind::kNull);
  EXPECT_TRUE(Validate(*r.document, RunPodSchema()).empty());

  auto nums = Parse(R"({ gpuTypes { lowestPrice(input: {gpuCount: -0, minDisk: 1e3}) { x } } })");
  ASSERT_TRUE(nums.document) << nums.error.message;
  const auto* in = nums.document->selections[0].selections[0].Arg("input");
  EXPECT_EQ(in->Field("gpuCount")->kind, Value::Kind::kInt);
  EXPECT_EQ(in->Field("minDisk")->kind, Value::Kind::kFloat);
  EXPECT_EQ(in->Field("minDisk")->f, 1000);

  auto block = Parse("{ pod(input: {podId: \"\"\"\n    abc\n      def\n  \"\"\"}) { id } }");
  ASSERT_TRUE(block.document) << block.error.message;
  EXPECT_EQ(block.document->selections[0].Arg("input")->Field("podId")->s, "abc\n  def");
}

TEST(GraphqlParse, SyntaxErrorsWithLocations) {
  struct Case {
    std::string src, message;
    int line, column;
  };
  for (const auto& c : std::vector<Case>{
           {"{ myself { id }", "Syntax Error: Expected Name, found <EOF>.", 1, 16},
           {"query {\n  pod(input: {podId: \"x}) { id } }", "Syntax Error: Unterminated string.", 2,
            35},
           {"{ a(x: 01) }", "Syntax Error: Invalid number, unexpected digit after 0.", 1, 9},
           {"{ a(x: \"\\q\") }", "Syntax Error: Invalid character escape sequence.", 1, 11},
           {"{ }", "Syntax Error: Expected Name, found \"}\".", 1, 3},
           {"{ a(): b }", "Syntax Error: Expected Name, found \")\".", 1, 5},
           {"{ ...F }", "Syntax Error: fragments are not supported by the RunPod simulator.", 1, 3},
           {"subscription { a }",
            "Syntax Error: subscriptions are not supported by the RunPod simulator.", 1, 1},
           {"{ a } { b }", "Syntax Error: Unexpected \"{\".", 1, 7},
           {"{ a ? }", "Syntax Error: Unexpected character \"?\".", 1, 5},
       }) {
    auto r = Parse(c.src);
    EXPECT_FALSE(r.document) << c.src;
    EXPECT_EQ(r.error.message, c.message) << c.src;
    EXPECT_EQ(r.error.location.line, c.line) << c.src;
    EXPECT_EQ(r.error.location.column, c.column) << c.src;
  }
}

TEST(GraphqlParse, DeepNestingIsRefusedNotACrash) {
  std::string deep(10000, '[');
  auto r = Parse("{ a(x: " + deep + ") }");
  EXPECT_FALSE(r.document);
  std::string sel;
  for (int k = 0; k < 1000; ++k) sel += "{ a ";
  EXPECT_FALSE(Parse(sel).document);
}

TEST(GraphqlValidate, ListCoercionAndScalars) {
  // One value where a list is expected is coerced; an Int is a valid Float.
  auto r = Parse(
      "mutation { podRentInterruptable(input: {bidPerGpu: 1, env: {key: \"a\", value: \"b\"}, "
      "allowedCudaVersions: \"12.4\"}) { id } }");
  ASSERT_TRUE(r.document);
  EXPECT_TRUE(Validate(*r.document, RunPodSchema()).empty());
  auto bad = Parse(
      "mutation { podRentInterruptable(input: {bidPerGpu: \"1\", env: [{key: \"a\"}]}) { id "
      "runtime } }");
  ASSERT_TRUE(bad.document);
  auto errs = Validate(*bad.document, RunPodSchema());
  ASSERT_EQ(errs.size(), 3u);
  EXPECT_EQ(errs[0].message, "Float cannot represent non numeric value: \"1\"");
  EXPECT_EQ(errs[1].message,
            "Field \"EnvironmentVariableInput.value\" of required type \"String!\" was not "
            "provided.");
  EXPECT_EQ(errs[2].message,
            "Field \"runtime\" of type \"PodRuntime\" must have a selection of subfields. Did "
            "you mean \"runtime { ... }\"?");
  for (const auto& e : errs) EXPECT_EQ(e.code, "GRAPHQL_VALIDATION_FAILED");
}

}  // namespace
}  // namespace hyperslice::sim::runpod
