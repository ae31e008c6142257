// src/gpu/template_vars.h and src/gpu/validation.h: the machine config template's syntax and
// variables, tgp.io/ requirements, prices against limits — each refusal with a message that says
// what to change, and seed 002's example class and pool valid.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/gpu/normalize.h"
#include "src/gpu/template_vars.h"
#include "src/gpu/validation.h"
#include "src/kube/yaml.h"
#include "test/testenv/files.h"

namespace hyperslice::gpu {
namespace {

namespace json = boost::json;

json::object Spec(const std::string& json_text) { return json::parse(json_text).as_object(); }

// The spec of seed 002's example `file` as deploy/examples holds it (test/integration/gpu_crds
// applies the same files through the webhook).
json::object ExampleSpec(const std::string& file) {
  auto docs =
      kube::ObjectsFromYaml(testenv::ReadFile(std::string(HS_DEPLOY_DIR "/examples/") + file));
  EXPECT_TRUE(docs.ok() && docs->size() == 1);
  return docs.ok() && !docs->empty() ? (*docs)[0].at("spec").as_object() : json::object();
}

#define EXPECT_CONTAINS(haystack, needle)                          \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) \
      << "\"" << (needle) << "\" not in:\n"                        \
      << (haystack)

std::string Render(const std::vector<TemplatePart>& parts) {
  std::string out;
  for (const auto& p : parts) {
    out +=
        p.kind == TemplatePart::Kind::kText ? std::string(p.text) : "<" + std::string(p.text) + ">";
  }
  return out;
}

// ---- template syntax ----

TEST(TemplateVars, TheListIsTheIssuesAndEveryNameIsKnown) {
  EXPECT_EQ(kTemplateVars.size(), 12u);
  for (std::string_view v : {"MachineToken", "ClusterCA", "ClusterID", "ClusterSecret",
                             "ControlPlaneEndpoint", "ClusterName", "TailscaleAuthKey", "NodeName",
                             "NodePool", "NodeIndex", "KubernetesBootstrapToken", "KubernetesCA"}) {
    EXPECT_TRUE(IsTemplateVar(v)) << v;
  }
  EXPECT_FALSE(IsTemplateVar("machineToken"));  // Go field names are case-sensitive
  EXPECT_FALSE(IsTemplateVar(""));
  EXPECT_CONTAINS(TemplateVarList(), "MachineToken, ClusterCA, ");
}

TEST(ParseTemplate, SplitsTextAndVariablesWithGoSpellings) {
  auto parts = ParseTemplate("token: {{.MachineToken}}\nca: {{ .ClusterCA }}\n");
  ASSERT_TRUE(parts.ok()) << parts.error().message;
  EXPECT_EQ(Render(*parts), "token: <MachineToken>\nca: <ClusterCA>\n");
  ASSERT_EQ(parts->size(), 5u);
  EXPECT_EQ((*parts)[1].line, 1);
  EXPECT_EQ((*parts)[3].line, 2);
}

TEST(ParseTemplate, TrimMarkersAndCommentsAsGoDoes) {
  auto parts = ParseTemplate("a  \n {{- .NodeName -}} \n b{{/* gone */}}c{{- /* also */ -}}  d");
  ASSERT_TRUE(parts.ok()) << parts.error().message;
  EXPECT_EQ(Render(*parts), "a<NodeName>bcd");
  // "{{-3}}" is not a trim marker in Go (no space): here it is not a variable either.
  EXPECT_FALSE(ParseTemplate("{{-3}}").ok());
  // Literal "}}" outside an action is text.
  auto literal = ParseTemplate("a }} b");
  ASSERT_TRUE(literal.ok());
  EXPECT_EQ(Render(*literal), "a }} b");
  EXPECT_TRUE(ParseTemplate("")->empty());
}

TEST(ParseTemplate, UnclosedActionNamesItsLine) {
  auto r = ParseTemplate("a: 1\nb: {{.MachineToken\nc: {{.ClusterCA}}\n");
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.error().message, "line 2: ");
  EXPECT_CONTAINS(r.error().message, "is never closed");
  EXPECT_CONTAINS(r.error().message, "{{.MachineToken");
  auto end = ParseTemplate("x\n\n{{ .NodeName");
  ASSERT_FALSE(end.ok());
  EXPECT_CONTAINS(end.error().message, "line 3: ");
  auto comment = ParseTemplate("{{/* never ends }}");
  ASSERT_FALSE(comment.ok());
  EXPECT_CONTAINS(comment.error().message, "\"*/}}\"");
}

TEST(ParseTemplate, OnlyVariablesAreSupported) {
  for (const char* t : {"{{if .NodeName}}x{{end}}", "{{.NodeName | quote}}", "{{printf \"%s\" 1}}",
                        "{{.A.B}}", "{{}}", "{{ }}", "{{$x := 1}}"}) {
    auto r = ParseTemplate(t);
    EXPECT_FALSE(r.ok()) << t;
  }
  auto hint = ParseTemplate("{{MachineToken}}");
  ASSERT_FALSE(hint.ok());
  EXPECT_CONTAINS(hint.error().message, "write {{.MachineToken}}");
}

// ---- classes ----

TEST(ClassSpecFindings, Seed002ExampleClassIsValid) {
  json::object spec = ExampleSpec("gpunodeclass.yaml");
  Findings f = ClassSpecFindings(spec);
  EXPECT_TRUE((f.problems).empty());
  EXPECT_TRUE((f.warnings).empty());
}

TEST(ClassSpecFindings, UnknownVariablesAreNamedWithTheNearestAndTheKnownList) {
  json::object spec = Spec(R"({"providers":[{"name":"runpod"},{"name":"vastai","talosConfig":{
      "machineConfigTemplate":"a: {{.NodeNmae}}\nb: {{.Foo}}\nc: {{.Foo}}"}}],
      "talosConfig":{"machineConfigTemplate":"token: {{.MachineToken}}\n"}})");
  Findings f = ClassSpecFindings(spec);
  ASSERT_EQ(f.problems.size(), 1u);
  const std::string& p = f.problems[0];
  EXPECT_CONTAINS(p,
                  "spec.providers[1].talosConfig.machineConfigTemplate uses unknown "
                  "variables: {{.NodeNmae}} (line 1, did you mean {{.NodeName}}?), "
                  "{{.Foo}} (line 2)");
  EXPECT_CONTAINS(p, "the known variables are MachineToken, ClusterCA");
  EXPECT_EQ(p.find("{{.Foo}}", p.find("{{.Foo}}") + 1), std::string::npos) << "Foo twice: " << p;
}

TEST(ClassSpecFindings, ATemplateThatDoesNotParseIsRefused) {
  json::object spec =
      Spec(R"({"talosConfig":{"machineConfigTemplate":"machine:\n  token: {{.MachineToken\n"}})");
  Findings f = ClassSpecFindings(spec);
  ASSERT_EQ(f.problems.size(), 1u);
  EXPECT_CONTAINS(f.problems[0],
                  "spec.talosConfig.machineConfigTemplate does not parse, "
                  "line 2: ");
}

TEST(ClassSpecFindings, ASecretRefTemplateIsNotReadHere) {
  // The webhook cannot read Secrets; the class controller checks those templates.
  Findings f = ClassSpecFindings(
      Spec(R"({"talosConfig":{"machineConfigSecretRef":{"name":"s","key":"k"}}})"));
  EXPECT_TRUE((f.problems).empty());
}

// ---- pools ----

TEST(PoolSpecFindings, Seed002ExamplePoolIsValidAndFitsTheExampleClass) {
  json::object pool = ExampleSpec("gpunodepool.yaml");
  Findings f = PoolSpecFindings(pool);
  EXPECT_TRUE((f.problems).empty());
  EXPECT_TRUE((f.warnings).empty());
  EXPECT_TRUE(
      (PoolClassProblems(pool, "standard-gpu-class", ExampleSpec("gpunodeclass.yaml"))).empty());
}

TEST(PoolSpecFindings, UnknownTgpKeysAreRefusedOthersAreNot) {
  json::object spec = Spec(R"({"template":{"spec":{"requirements":[
      {"key":"tgp.io/gpu","operator":"In","values":["RTX4090"]},
      {"key":"tgp.io/gpu-type","operator":"Exists"},
      {"key":"gpu.example.com/tgp.io","operator":"Exists"},
      {"key":"karpenter.sh/capacity-type","operator":"In","values":["spot"]},
      {"key":"tgp.io/nodepool","operator":"Exists"},
      {"key":"tgp.io/provisioned","operator":"In","values":["true"]},
      {"key":"tgp.io/gpu-typ","operator":"Exists"}]}}})");
  Findings f = PoolSpecFindings(spec);
  ASSERT_EQ(f.problems.size(), 2u);
  EXPECT_CONTAINS(f.problems[0],
                  "spec.template.spec.requirements[0].key \"tgp.io/gpu\" is "
                  "not a tgp.io label");
  EXPECT_CONTAINS(f.problems[0],
                  "use one of tgp.io/gpu-type, tgp.io/region, "
                  "tgp.io/provider, tgp.io/spot, tgp.io/nodepool, "
                  "tgp.io/provisioned");
  EXPECT_CONTAINS(f.problems[1], "requirements[6]");
  EXPECT_CONTAINS(f.problems[1], "(did you mean \"tgp.io/gpu-type\"?)");
}

TEST(PoolSpecFindings, ProviderAndRegionValuesMustBeKnown) {
  json::object spec = Spec(R"({"template":{"spec":{"requirements":[
      {"key":"tgp.io/provider","operator":"In","values":["runpod","lambda"]},
      {"key":"tgp.io/provider","operator":"NotIn","values":["vastai","vast.ai"]},
      {"key":"tgp.io/region","operator":"In","values":["us-west","us-west-1","eu-wst"]},
      {"key":"tgp.io/spot","operator":"In","values":["yes"]},
      {"key":"tgp.io/region","operator":"Gt","values":["3"]}]}}})");
  Findings f = PoolSpecFindings(spec);
  ASSERT_EQ(f.problems.size(), 6u);
  EXPECT_CONTAINS(f.problems[0],
                  "requirements[0].values[1] \"lambda\" is not a provider; "
                  "use one of runpod, lambdalabs, paperspace, vastai");
  EXPECT_CONTAINS(f.problems[1], "requirements[1].values[1] \"vast.ai\"");
  EXPECT_CONTAINS(f.problems[2],
                  "requirements[2].values[1] \"us-west-1\" is not a "
                  "normalised region");
  EXPECT_CONTAINS(f.problems[2], "us-central, us-east, us-south, us-west");
  EXPECT_CONTAINS(f.problems[3], "\"eu-wst\"");
  EXPECT_CONTAINS(f.problems[3], "did you mean \"eu-west\"?");
  EXPECT_CONTAINS(f.problems[4], "use \"true\" or \"false\"");
  EXPECT_CONTAINS(f.problems[5], "Gt and Lt compare integers");
  EXPECT_TRUE((f.warnings).empty());
}

TEST(PoolSpecFindings, UnknownGpuTypeIsAWarningWithTheKnownNames) {
  json::object spec = Spec(R"({"template":{"spec":{"requirements":[
      {"key":"tgp.io/gpu-type","operator":"In","values":["RTX4090","rtx4090","B300"]}]}}})");
  Findings f = PoolSpecFindings(spec);
  EXPECT_TRUE((f.problems).empty());
  ASSERT_EQ(f.warnings.size(), 2u);
  EXPECT_CONTAINS(f.warnings[0],
                  "values[1] \"rtx4090\" is not a GPU type the "
                  "normalisation tables know");
  EXPECT_CONTAINS(f.warnings[0], "did you mean \"RTX4090\"?");
  EXPECT_CONTAINS(f.warnings[1], "\"B300\"");
  for (const std::string& g : KnownGpuTypes()) EXPECT_CONTAINS(f.warnings[1], g);
}

TEST(PoolSpecFindings, MaxHourlyPriceAboveThePoolsOwnLimit) {
  EXPECT_TRUE(
      (PoolSpecFindings(Spec(R"({"maxHourlyPrice":"2.5","limits":{"maxHourlyCost":"2.5"}})"))
           .problems)
          .empty());
  Findings f =
      PoolSpecFindings(Spec(R"({"maxHourlyPrice":"2.500001","limits":{"maxHourlyCost":"2.5"}})"));
  ASSERT_EQ(f.problems.size(), 1u);
  EXPECT_CONTAINS(f.problems[0],
                  "spec.maxHourlyPrice \"2.500001\" is above the pool's own "
                  "limits.maxHourlyCost \"2.5\"");
  EXPECT_CONTAINS(f.problems[0], "at most 2.50");
}

TEST(PoolClassProblems, ComparesExactMicroDollars) {
  json::object cls = Spec(R"({"limits":{"maxHourlyCost":"50.0"}})");
  EXPECT_TRUE((PoolClassProblems(Spec(R"({"maxHourlyPrice":"50"})"), "c", cls)).empty());
  EXPECT_TRUE((PoolClassProblems(Spec(R"({"maxHourlyPrice":"49.999999"})"), "c", cls)).empty());
  auto p = PoolClassProblems(Spec(R"({"maxHourlyPrice":"50.000001"})"), "standard-gpu-class", cls);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_CONTAINS(p[0],
                  "spec.maxHourlyPrice \"50.000001\" is above GPUNodeClass "
                  "\"standard-gpu-class\"'s limits.maxHourlyCost \"50.0\"");
  EXPECT_CONTAINS(p[0],
                  "lower maxHourlyPrice to at most 50.00 or raise the class's "
                  "limits.maxHourlyCost");
  // No limit, no price: nothing to compare.
  EXPECT_TRUE((PoolClassProblems(Spec(R"({"maxHourlyPrice":"99"})"), "c", Spec("{}"))).empty());
  EXPECT_TRUE((PoolClassProblems(Spec("{}"), "c", cls)).empty());
}

TEST(PoolsAboveClassCost, OnePerPoolOfThisClassAboveTheLimit) {
  json::object cls = Spec(R"({"limits":{"maxHourlyCost":"1.5"}})");
  json::object a = Spec(R"({"metadata":{"namespace":"ml","name":"a"},
                            "spec":{"nodeClassRef":{"name":"c"},"maxHourlyPrice":"2.0"}})");
  json::object b = Spec(R"({"metadata":{"namespace":"ml","name":"b"},
                            "spec":{"nodeClassRef":{"name":"c"},"maxHourlyPrice":"1.5"}})");
  json::object other = Spec(R"({"metadata":{"namespace":"ml","name":"o"},
                                "spec":{"nodeClassRef":{"name":"d"},"maxHourlyPrice":"9"}})");
  json::object none = Spec(R"({"metadata":{"namespace":"x","name":"n"},
                               "spec":{"nodeClassRef":{"name":"c"}}})");
  auto w = PoolsAboveClassCost("c", cls, {&a, &b, &other, &none});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_CONTAINS(w[0],
                  "GPUNodePool ml/a has maxHourlyPrice \"2.0\" above this class's "
                  "limits.maxHourlyCost \"1.5\"");
}

TEST(KnownLabelKeys, ArePlannersLabels) {
  EXPECT_EQ(KnownLabelKeys(),
            (std::vector<std::string>{"tgp.io/gpu-type", "tgp.io/region", "tgp.io/provider",
                                      "tgp.io/spot", "tgp.io/nodepool", "tgp.io/provisioned"}));
}

}  // namespace
}  // namespace hyperslice::gpu
