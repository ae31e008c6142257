// The deployment as shipped (deploy/ and deploy/helm/hyperslice) against a real kube-apiserver
// (LocalCluster), with the real kubectl (and helm, when it can be built from source here) as the
// tools a user runs:
// - every kustomization renders, and renders what the seed's `kubectl apply -k deploy/` promises;
// - the rendered objects pass the apiserver's strict schema validation (server-side dry run), and
//   a broken copy does not (the check bites);
// - after a real apply, the operator's ServiceAccount may do exactly what it needs (kubectl auth
//   can-i), and no more than the listed negatives;
// - the Helm chart renders the same objects and applies the same way.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "src/localcluster/localcluster.h"
#include "test/testenv/command.h"
#include "test/testenv/files.h"

namespace hyperslice::deploy_test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kSource = HS_SOURCE_DIR;
const std::string kDeploy = kSource + "/deploy";
const std::string kChart = kDeploy + "/helm/hyperslice";
// The chart requires Kubernetes >= 1.30 (matchConditions, preStop sleep); `helm template` assumes
// an old version unless told.
const std::string kKubeVersion = "1.36.3";
const std::string kOperatorSa = "system:serviceaccount:tpu-node-group:hyperslice-operator";
const std::string kWebhookSa = "system:serviceaccount:tpu-node-group:hyperslice-webhook";

// The real CLIs, as testenv runs them (kubectl from $KUBECTL or PATH).
using testenv::CommandResult;
using testenv::HaveKubectl;
using testenv::KubectlPath;
using testenv::RunCommand;

CommandResult Kustomize(const std::string& dir) {
  return RunCommand({KubectlPath(), "kustomize", dir});
}

std::vector<YAML::Node> Documents(const std::string& yaml) {
  std::vector<YAML::Node> docs;
  try {
    for (const auto& d : YAML::LoadAll(yaml)) {
      if (d.IsMap()) docs.push_back(d);
    }
  } catch (const YAML::Exception& e) {
    ADD_FAILURE() << "rendered YAML does not parse: " << e.what();
  }
  return docs;
}

std::string Emit(const std::vector<YAML::Node>& docs) {
  std::string out;
  for (const auto& d : docs) {
    YAML::Emitter e;
    e << d;
    out += "---\n" + std::string(e.c_str()) + "\n";
  }
  return out;
}

std::string Str(const YAML::Node& n) { return n && n.IsScalar() ? n.as<std::string>() : ""; }

// A YAML value with map keys sorted and no formatting: equal for equal data however written.
std::string Canonical(const YAML::Node& n) {
  if (!n) return "~";
  if (n.IsScalar()) return "'" + n.as<std::string>() + "'";
  std::string out;
  if (n.IsSequence()) {
    for (const auto& item : n) out += Canonical(item) + ",";
    return "[" + out + "]";
  }
  if (n.IsMap()) {
    std::vector<std::pair<std::string, std::string>> entries;
    for (const auto& kv : n) entries.emplace_back(kv.first.as<std::string>(), Canonical(kv.second));
    std::sort(entries.begin(), entries.end());
    for (const auto& [k, v] : entries) {
      out += k;
      out += ':';
      out += v;
      out += ',';
    }
    return "{" + out + "}";
  }
  return "~";
}

using ObjectKey = std::tuple<std::string, std::string, std::string>;  // kind, namespace, name
ObjectKey KeyOf(const YAML::Node& d) {
  return {Str(d["kind"]), Str(d["metadata"]["namespace"]), Str(d["metadata"]["name"])};
}

const YAML::Node* Find(const std::vector<YAML::Node>& docs, const std::string& kind,
                       const std::string& name) {
  for (const auto& d : docs) {
    if (Str(d["kind"]) == kind && Str(d["metadata"]["name"]) == name) return &d;
  }
  return nullptr;
}

std::set<ObjectKey> Keys(const std::vector<YAML::Node>& docs) {
  std::set<ObjectKey> keys;
  for (const auto& d : docs) keys.insert(KeyOf(d));
  return keys;
}

YAML::Node Container(const YAML::Node& deployment, const std::string& name) {
  for (const auto& c : deployment["spec"]["template"]["spec"]["containers"]) {
    if (Str(c["name"]) == name) return c;
  }
  return YAML::Node();
}

std::string EnvValue(const YAML::Node& container, const std::string& name) {
  for (const auto& e : container["env"]) {
    if (Str(e["name"]) == name) return Str(e["value"]);
  }
  return "";
}

std::vector<std::string> Args(const YAML::Node& container) {
  std::vector<std::string> args;
  for (const auto& a : container["args"]) args.push_back(Str(a));
  return args;
}

fs::path MakeTempDir(const std::string& prefix) {
  std::string tmpl = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) return {};
  return tmpl;
}

void WriteFile(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

using testenv::ReadFile;

// The kustomizations a user may apply on their own.
const std::vector<std::string> kKustomizations = {
    "",  // deploy/ itself
    "/crds",
    "/controller",
    "/webhook",
    "/webhook/base",
    "/webhook/self-signed",
    "/webhook/cert-manager",
    "/device-plugin",
};

// deploy/ with one of its components added, as the component's comment tells a user to.
std::string RenderWithComponent(const std::string& component);

TEST(Kustomize, EveryKustomizationRenders) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl is not installed";
  for (const auto& rel : kKustomizations) {
    CommandResult r = Kustomize(kDeploy + rel);
    EXPECT_EQ(r.exit_code, 0) << "deploy" << rel << ": " << r.errors;
    EXPECT_FALSE(Documents(r.output).empty()) << "deploy" << rel << " rendered nothing";
  }
}

TEST(Kustomize, TopLevelHoldsWhatTheSeedPromises) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl is not installed";
  CommandResult r = Kustomize(kDeploy);
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  auto docs = Documents(r.output);
  std::set<ObjectKey> keys = Keys(docs);

  EXPECT_TRUE(keys.count({"Namespace", "", "tpu-node-group"}));
  for (const char* crd :
       {"tpunodegroups", "resourcepolicies", "instancetemplates", "managedinstancegroups"}) {
    EXPECT_TRUE(keys.count({"CustomResourceDefinition", "", std::string(crd) + ".tpu.google.com"}))
        << crd;
  }
  // The operator's Roles stay in the namespaces they are for (a plain `namespace:` field would
  // have moved them to tpu-node-group).
  EXPECT_TRUE(keys.count({"Role", "kube-system", "hyperslice-operator-bootstrap-tokens"}));
  EXPECT_TRUE(keys.count({"RoleBinding", "kube-system", "hyperslice-operator-bootstrap-tokens"}));
  EXPECT_TRUE(keys.count({"Role", "kube-public", "hyperslice-operator-cluster-info"}));
  EXPECT_TRUE(keys.count({"Role", "tpu-node-group", "hyperslice-operator"}));
  // The operator deploys the device plugin itself: it is not deployed twice.
  for (const auto& d : docs) EXPECT_NE(Str(d["kind"]), "DaemonSet") << Str(d["metadata"]["name"]);
  // Every namespaced object of ours has a namespace.
  for (const auto& d : docs) {
    std::string kind = Str(d["kind"]);
    static const std::set<std::string> kClusterScoped = {
        "Namespace",          "CustomResourceDefinition",     "ClusterRole",
        "ClusterRoleBinding", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"};
    if (kClusterScoped.count(kind) == 0) {
      EXPECT_FALSE(Str(d["metadata"]["namespace"]).empty())
          << kind << " " << Str(d["metadata"]["name"]);
    }
  }

  const YAML::Node* op = Find(docs, "Deployment", "hyperslice-operator");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ((*op)["spec"]["replicas"].as<int>(), 2);
  YAML::Node pod = (*op)["spec"]["template"]["spec"];
  EXPECT_EQ(Str(pod["serviceAccountName"]), "hyperslice-operator");
  EXPECT_TRUE(pod["securityContext"]["runAsNonRoot"].as<bool>());
  YAML::Node c = Container(*op, "operator");
  ASSERT_TRUE(c) << "no operator container";
  EXPECT_EQ(Str(c["image"]), "hyperslice:latest");
  EXPECT_TRUE(c["securityContext"]["readOnlyRootFilesystem"].as<bool>());
  EXPECT_FALSE(c["securityContext"]["allowPrivilegeEscalation"].as<bool>());
  EXPECT_EQ(Str(c["livenessProbe"]["httpGet"]["path"]), "/healthz");
  EXPECT_EQ(Str(c["readinessProbe"]["httpGet"]["path"]), "/readyz");
  EXPECT_EQ(Str(c["ports"][0]["containerPort"]), "8081");
  EXPECT_TRUE(c["resources"]["requests"]["cpu"]);
  EXPECT_TRUE(c["resources"]["limits"]["memory"]);
  auto args = Args(c);
  EXPECT_EQ(args.at(0), "operator");
  EXPECT_THAT(args, ::testing::Contains("--leader-elect=true"));
  EXPECT_THAT(args, ::testing::Contains("--health-probe-port=8081"));
  bool downward = false;
  for (const auto& e : c["env"]) {
    if (Str(e["name"]) == "POD_NAMESPACE") {
      downward = Str(e["valueFrom"]["fieldRef"]["fieldPath"]) == "metadata.namespace";
    }
  }
  EXPECT_TRUE(downward) << "POD_NAMESPACE does not come from the downward API";
  // Credentials default to ADC: no key mounted unless the component is enabled.
  EXPECT_EQ(EnvValue(c, "GOOGLE_APPLICATION_CREDENTIALS"), "");

  // The self-signed webhook is the default (no cert-manager needed).
  const YAML::Node* wh = Find(docs, "Deployment", "hyperslice-webhook");
  ASSERT_NE(wh, nullptr);
  EXPECT_THAT(Args(Container(*wh, "webhook")), ::testing::Contains("--self-signed"));
  for (const auto& d : docs) EXPECT_NE(Str(d["apiVersion"]), "cert-manager.io/v1");
}

// The seed's flow: edit newName/newTag in deploy/kustomization.yaml. Both Deployments and the
// device-plugin image the operator deploys follow.
TEST(Kustomize, EditedImageReachesEveryContainerAndTheDevicePluginImage) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl is not installed";
  fs::path dir = MakeTempDir("hs-deploy-image");
  ASSERT_FALSE(dir.empty());
  fs::copy(kDeploy, dir / "deploy", fs::copy_options::recursive);
  std::string k = ReadFile(dir / "deploy/kustomization.yaml");
  auto at = k.find("newName: hyperslice");
  ASSERT_NE(at, std::string::npos);
  k.replace(at, std::string("newName: hyperslice").size(),
            "newName: registry.example/my-proj/hyperslice");
  at = k.find("newTag: latest");
  ASSERT_NE(at, std::string::npos);
  k.replace(at, std::string("newTag: latest").size(), "newTag: v1.2.3");
  WriteFile(dir / "deploy/kustomization.yaml", k);
  CommandResult r = Kustomize((dir / "deploy").string());
  fs::remove_all(dir);
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  auto docs = Documents(r.output);
  const std::string want = "registry.example/my-proj/hyperslice:v1.2.3";
  const YAML::Node* op = Find(docs, "Deployment", "hyperslice-operator");
  const YAML::Node* wh = Find(docs, "Deployment", "hyperslice-webhook");
  ASSERT_NE(op, nullptr);
  ASSERT_NE(wh, nullptr);
  EXPECT_EQ(Str(Container(*op, "operator")["image"]), want);
  EXPECT_EQ(EnvValue(Container(*op, "operator"), "DEVICE_PLUGIN_IMAGE"), want);
  EXPECT_EQ(Str(Container(*wh, "webhook")["image"]), want);
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("image: hyperslice:latest")));
}

std::string RenderWithComponent(const std::string& component) {
  fs::path dir = MakeTempDir("hs-deploy-component");
  if (dir.empty()) return "";
  fs::path rel = fs::relative(kDeploy, dir);
  WriteFile(dir / "kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1beta1\n"
            "kind: Kustomization\n"
            "resources:\n  - " +
                rel.string() + "\ncomponents:\n  - " + (rel / component).string() + "\n");
  CommandResult r = Kustomize(dir.string());
  fs::remove_all(dir);
  EXPECT_EQ(r.exit_code, 0) << component << ": " << r.errors;
  return r.output;
}

// The documented credentials option: a service-account key from the Secret, as seed 000 says.
std::string RenderWithCredentials() { return RenderWithComponent("credentials"); }

// failurePolicy of the webhook named `hook` in the configuration `kind`/`name`.
std::string FailurePolicy(const std::vector<YAML::Node>& docs, const std::string& kind,
                          const std::string& name) {
  const YAML::Node* cfg = Find(docs, kind, name);
  if (cfg == nullptr) return "<no " + kind + " " + name + ">";
  return Str((*cfg)["webhooks"][0]["failurePolicy"]);
}

// The webhook named `hook` in the ValidatingWebhookConfiguration hyperslice-tpunodegroups (which
// holds both validations: TPUNodeGroups and tgp.io), or a null node.
YAML::Node ValidatingHook(const std::vector<YAML::Node>& docs, const std::string& hook) {
  const YAML::Node* cfg = Find(docs, "ValidatingWebhookConfiguration", "hyperslice-tpunodegroups");
  if (cfg == nullptr) return YAML::Node();
  for (const auto& h : (*cfg)["webhooks"]) {
    if (Str(h["name"]) == hook) return h;
  }
  return YAML::Node();
}

// GPUNodePools and GPUNodeClasses go to /validate-tgp on CREATE and UPDATE, failing closed.
void ExpectTgpValidation(const std::vector<YAML::Node>& docs, const std::string& what) {
  YAML::Node h = ValidatingHook(docs, "tgp.hyperslice.dev");
  ASSERT_TRUE(h.IsMap()) << what << ": no tgp.hyperslice.dev webhook";
  EXPECT_EQ(Str(h["failurePolicy"]), "Fail") << what;
  EXPECT_EQ(Str(h["clientConfig"]["service"]["path"]), "/validate-tgp") << what;
  EXPECT_EQ(Str(h["clientConfig"]["service"]["name"]), "hyperslice-webhook") << what;
  ASSERT_EQ(h["rules"].size(), 1u) << what;
  const YAML::Node rule = h["rules"][0];
  EXPECT_EQ(Canonical(rule["apiGroups"]), Canonical(YAML::Load("[tgp.io]"))) << what;
  EXPECT_EQ(Canonical(rule["operations"]), Canonical(YAML::Load("[CREATE, UPDATE]"))) << what;
  EXPECT_EQ(Canonical(rule["resources"]), Canonical(YAML::Load("[gpunodepools, gpunodeclasses]")))
      << what;
}

// deploy/webhook on its own installs what deploy/ does (self-signed); cert-manager is an explicit
// overlay; failing open is a component, and only for the Pod injection.
TEST(Kustomize, WebhookDefaultIsSelfSignedAndFailOpenIsAComponent) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl is not installed";
  for (const char* rel : {"/webhook", "/webhook/self-signed"}) {
    CommandResult r = Kustomize(kDeploy + rel);
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    auto docs = Documents(r.output);
    const YAML::Node* wh = Find(docs, "Deployment", "hyperslice-webhook");
    ASSERT_NE(wh, nullptr) << rel;
    EXPECT_THAT(Args(Container(*wh, "webhook")), ::testing::Contains("--self-signed")) << rel;
    for (const auto& d : docs) EXPECT_NE(Str(d["apiVersion"]), "cert-manager.io/v1") << rel;
    EXPECT_EQ(FailurePolicy(docs, "MutatingWebhookConfiguration", "hyperslice-tpu-env"), "Fail");
  }
  CommandResult cm = Kustomize(kDeploy + "/webhook/cert-manager");
  ASSERT_EQ(cm.exit_code, 0) << cm.errors;
  auto cm_docs = Documents(cm.output);
  const YAML::Node* wh = Find(cm_docs, "Deployment", "hyperslice-webhook");
  ASSERT_NE(wh, nullptr);
  EXPECT_THAT(Args(Container(*wh, "webhook")),
              ::testing::Not(::testing::Contains("--self-signed")));

  auto open = Documents(RenderWithComponent("webhook/fail-open"));
  EXPECT_EQ(FailurePolicy(open, "MutatingWebhookConfiguration", "hyperslice-tpu-env"), "Ignore");
  EXPECT_EQ(FailurePolicy(open, "ValidatingWebhookConfiguration", "hyperslice-tpunodegroups"),
            "Fail");
  ExpectTgpValidation(open, "kustomize with webhook/fail-open");
  CommandResult closed = Kustomize(kDeploy);
  ASSERT_EQ(closed.exit_code, 0) << closed.errors;
  EXPECT_EQ(
      FailurePolicy(Documents(closed.output), "MutatingWebhookConfiguration", "hyperslice-tpu-env"),
      "Fail");
  ExpectTgpValidation(Documents(closed.output), "kustomize deploy/");
  ExpectTgpValidation(cm_docs, "kustomize deploy/webhook/cert-manager");
}

TEST(Kustomize, CredentialsComponentMountsTheKeyAndSetsAdcPath) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl is not installed";
  auto docs = Documents(RenderWithCredentials());
  const YAML::Node* op = Find(docs, "Deployment", "hyperslice-operator");
  ASSERT_NE(op, nullptr);
  YAML::Node c = Container(*op, "operator");
  EXPECT_EQ(EnvValue(c, "GOOGLE_APPLICATION_CREDENTIALS"), "/etc/gcp/key.json");
  bool mounted = false, volume = false;
  for (const auto& m : c["volumeMounts"]) {
    mounted |= Str(m["mountPath"]) == "/etc/gcp" && Str(m["readOnly"]) == "true";
  }
  for (const auto& v : (*op)["spec"]["template"]["spec"]["volumes"]) {
    volume |= v["secret"] && Str(v["secret"]["secretName"]) == "tpu-node-group-credentials";
  }
  EXPECT_TRUE(mounted);
  EXPECT_TRUE(volume);
}

#ifdef HS_HYPERSLICE_BIN
// The rendered containers' args (with the downward-API variables the kubelet would expand) are
// flags the binary accepts: it gets past flag parsing and stops only at the missing kubeconfig.
TEST(Kustomize, ContainerArgsAreAcceptedByTheBinary) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl is not installed";
  CommandResult r = Kustomize(kDeploy);
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  auto docs = Documents(r.output);
  for (const auto& [deployment, container] :
       {std::pair<std::string, std::string>{"hyperslice-operator", "operator"},
        {"hyperslice-webhook", "webhook"}}) {
    const YAML::Node* d = Find(docs, "Deployment", deployment);
    ASSERT_NE(d, nullptr) << deployment;
    std::vector<std::string> argv = {HS_HYPERSLICE_BIN};
    for (std::string a : Args(Container(*d, container))) {
      for (const auto& [var, value] :
           {std::pair<std::string, std::string>{"$(POD_NAMESPACE)", "tpu-node-group"},
            {"$(DEVICE_PLUGIN_IMAGE)", "hyperslice:latest"}}) {
        if (auto at = a.find(var); at != std::string::npos) a.replace(at, var.size(), value);
      }
      EXPECT_EQ(a.find("$("), std::string::npos) << "unexpanded variable in " << a;
      argv.push_back(a);
    }
    argv.push_back("--kubeconfig=/nonexistent/hyperslice-kubeconfig");
    CommandResult run = RunCommand(argv);
    std::string all = run.output + run.errors;
    EXPECT_NE(run.exit_code, 0) << all;
    EXPECT_THAT(all, ::testing::Not(HasSubstr("not expected"))) << container;
    EXPECT_THAT(all, HasSubstr("/nonexistent/hyperslice-kubeconfig")) << container << ": " << all;
  }
}

// The runtime stage of the Dockerfile installs packages that provide every shared library the
// built binary loads (checked against this Debian's package database: the build image is the same
// release).
TEST(Dockerfile, RuntimePackagesProvideEverySharedLibrary) {
  if (std::system("command -v dpkg >/dev/null && command -v apt-cache >/dev/null && command -v "
                  "ldd >/dev/null") != 0) {
    GTEST_SKIP() << "dpkg, apt-cache or ldd missing (not a Debian machine)";
  }
  std::string dockerfile = ReadFile(kSource + "/Dockerfile");
  auto runtime = dockerfile.find("FROM debian:bookworm-slim");
  ASSERT_NE(runtime, std::string::npos);
  auto install = dockerfile.find("--no-install-recommends", runtime);
  ASSERT_NE(install, std::string::npos);
  auto end = dockerfile.find("&&", install);
  std::string list = dockerfile.substr(install + 23, end - install - 23);
  std::vector<std::string> packages;
  {
    std::string word;
    for (char ch : list + " ") {
      if (std::isspace(static_cast<unsigned char>(ch)) != 0 || ch == '\\') {
        if (!word.empty()) packages.push_back(word);
        word.clear();
      } else {
        word += ch;
      }
    }
  }
  ASSERT_FALSE(packages.empty());
  std::vector<std::string> depends = {"apt-cache",       "depends",       "--recurse",
                                      "--no-recommends", "--no-suggests", "--no-conflicts",
                                      "--no-breaks",     "--no-replaces", "--no-enhances"};
  depends.insert(depends.end(), packages.begin(), packages.end());
  CommandResult closure = RunCommand(depends);
  ASSERT_EQ(closure.exit_code, 0) << closure.errors;
  std::set<std::string> provided;
  {
    std::istringstream lines(closure.output);
    std::string line;
    while (std::getline(lines, line)) {
      if (!line.empty() && line[0] != ' ') provided.insert(line);
    }
  }
  CommandResult ldd = RunCommand({"ldd", HS_HYPERSLICE_BIN});
  ASSERT_EQ(ldd.exit_code, 0) << ldd.errors;
  // Every resolved library as "*/<arch dir>/<file name>" (dpkg records /lib or /usr/lib depending
  // on the package; usrmerge makes both work), asked in one dpkg -S call whose lines read
  // "pkg1[:arch][, pkg2...]: path".
  std::map<std::string, std::set<std::string>> owners_of;  // "<arch dir>/<name>" -> packages
  std::vector<std::string> query = {"dpkg", "-S"};
  std::istringstream lines(ldd.output);
  std::string line;
  while (std::getline(lines, line)) {
    auto arrow = line.find("=> /");
    if (arrow == std::string::npos) continue;
    fs::path path = line.substr(arrow + 3, line.find(' ', arrow + 3) - arrow - 3);
    std::string key = path.parent_path().filename().string() + "/" + path.filename().string();
    if (owners_of.emplace(key, std::set<std::string>{}).second) query.push_back("*/" + key);
  }
  CommandResult owners = RunCommand(query);
  ASSERT_EQ(owners.exit_code, 0) << "a library belongs to no package: " << owners.errors;
  std::istringstream owner_lines(owners.output);
  while (std::getline(owner_lines, line)) {
    auto sep = line.rfind(": ");
    if (sep == std::string::npos) continue;
    fs::path path = line.substr(sep + 2);
    std::string key = path.parent_path().filename().string() + "/" + path.filename().string();
    auto it = owners_of.find(key);
    if (it == owners_of.end()) continue;
    std::istringstream pkgs(line.substr(0, sep));
    std::string pkg;
    while (std::getline(pkgs, pkg, ',')) {
      pkg.erase(0, pkg.find_first_not_of(' '));
      it->second.insert(pkg.substr(0, pkg.find(':')));
    }
  }
  for (const auto& [lib, pkgs] : owners_of) {
    bool covered = false;
    for (const auto& pkg : pkgs) covered |= provided.count(pkg) > 0;
    EXPECT_TRUE(covered) << lib << " comes from " << ::testing::PrintToString(pkgs)
                         << ", none of which the runtime stage installs";
  }
  EXPECT_GT(owners_of.size(), 5u);
}
#endif  // HS_HYPERSLICE_BIN

// --- on the apiserver
// ------------------------------------------------------------------------------

class DeployOnApiserver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!HaveKubectl()) return;
    auto started = localcluster::LocalCluster::Start({});
    if (!started.ok()) {
      start_error_ = started.error().ToString();
      return;
    }
    cluster_ = std::move(started).value().release();
    // CRDs first (kinds must exist before their objects), then the namespace, for real.
    CommandResult crds = Kubectl({"apply", "--server-side", "-k", kDeploy + "/crds"});
    if (crds.exit_code != 0) {
      start_error_ = "applying the CRDs: " + crds.errors;
      return;
    }
    CommandResult est = Kubectl({"wait", "--for=condition=Established", "--timeout=60s", "crd",
                                 "-l", "app.kubernetes.io/name=hyperslice"});
    if (est.exit_code != 0) {
      start_error_ = "CRDs not established: " + est.errors;
      return;
    }
    CommandResult ns = Kubectl({"apply", "-f", kDeploy + "/namespace.yaml"});
    if (ns.exit_code != 0) start_error_ = "namespace: " + ns.errors;
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (!HaveKubectl()) GTEST_SKIP() << "kubectl is not installed";
    ASSERT_NE(cluster_, nullptr) << "LocalCluster did not start: " << start_error_;
    ASSERT_EQ(start_error_, "");
  }

  static CommandResult Kubectl(std::vector<std::string> args) {
    std::vector<std::string> argv = {KubectlPath(), "--kubeconfig=" + cluster_->kubeconfig_path(),
                                     "--cache-dir=" + cluster_->work_dir() + "/kubectl-cache"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }

  // `kubectl apply -f <yaml>` with the given extra flags.
  static CommandResult Apply(const std::string& yaml, std::vector<std::string> flags) {
    fs::path file =
        fs::path(cluster_->work_dir()) / ("apply-" + std::to_string(++applies_) + ".yaml");
    WriteFile(file, yaml);
    flags.insert(flags.begin(), "apply");
    flags.push_back("-f");
    flags.push_back(file.string());
    return Kubectl(flags);
  }
  static CommandResult DryRun(const std::string& yaml) {
    return Apply(yaml, {"--dry-run=server", "--validate=strict"});
  }

  // Whether `sa` may `verb` the resource (`kubectl auth can-i`: 0 yes, 1 no).
  static bool CanI(const std::string& sa, std::vector<std::string> args) {
    args.insert(args.begin(), {"auth", "can-i", "--as=" + sa});
    CommandResult r = Kubectl(args);
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.output << r.errors;
    return r.exit_code == 0;
  }

  static void ApplyTopLevelOnce() {
    static bool applied = false;
    if (applied) return;
    CommandResult r = Kustomize(kDeploy);
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    CommandResult a = Apply(r.output, {"--validate=strict"});
    ASSERT_EQ(a.exit_code, 0) << a.output << a.errors;
    applied = true;
  }

  static localcluster::LocalCluster* cluster_;
  static std::string start_error_;
  static int applies_;
};
localcluster::LocalCluster* DeployOnApiserver::cluster_ = nullptr;
std::string DeployOnApiserver::start_error_;
int DeployOnApiserver::applies_ = 0;

TEST_F(DeployOnApiserver, EveryKustomizationPassesServerSideDryRun) {
  for (const auto& rel : kKustomizations) {
    CommandResult r = Kustomize(kDeploy + rel);
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    // cert-manager's kinds do not exist without cert-manager: everything else is checked here,
    // and those objects must be there.
    std::vector<YAML::Node> ours;
    int cert_manager = 0;
    for (const auto& d : Documents(r.output)) {
      if (Str(d["apiVersion"]).rfind("cert-manager.io/", 0) == 0) {
        ++cert_manager;
      } else {
        ours.push_back(d);
      }
    }
    EXPECT_EQ(cert_manager, rel == "/webhook/cert-manager" ? 4 : 0) << rel;
    CommandResult dry = DryRun(Emit(ours));
    EXPECT_EQ(dry.exit_code, 0) << "deploy" << rel << ": " << dry.output << dry.errors;
  }
  CommandResult creds = DryRun(RenderWithCredentials());
  EXPECT_EQ(creds.exit_code, 0) << "with credentials: " << creds.errors;
  CommandResult open = DryRun(RenderWithComponent("webhook/fail-open"));
  EXPECT_EQ(open.exit_code, 0) << "with webhook/fail-open: " << open.errors;
}

TEST_F(DeployOnApiserver, AMisplacedFieldIsRejected) {
  CommandResult r = Kustomize(kDeploy + "/controller");
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  std::string yaml = r.output;
  auto at = yaml.find("readinessProbe:");
  ASSERT_NE(at, std::string::npos);
  yaml.replace(at, std::string("readinessProbe:").size(), "readinesProbe:");
  CommandResult dry = DryRun(yaml);
  EXPECT_NE(dry.exit_code, 0) << "a broken manifest was accepted: " << dry.output;
  EXPECT_THAT(dry.errors, HasSubstr("readinesProbe"));
}

TEST_F(DeployOnApiserver, OperatorServiceAccountMayDoWhatItNeeds) {
  ASSERT_NO_FATAL_FAILURE(ApplyTopLevelOnce());
  const std::string& sa = kOperatorSa;
  for (const char* res :
       {"tpunodegroups", "resourcepolicies", "instancetemplates", "managedinstancegroups"}) {
    std::string r = std::string(res) + ".tpu.google.com";
    for (const char* verb : {"get", "list", "watch", "create", "update", "patch", "delete"}) {
      EXPECT_TRUE(CanI(sa, {verb, r, "-n", "default"})) << verb << " " << r;
      EXPECT_TRUE(CanI(sa, {verb, r, "-n", "team-a"})) << verb << " " << r << " in any namespace";
    }
    for (const char* verb : {"get", "update", "patch"}) {
      EXPECT_TRUE(CanI(sa, {verb, r, "--subresource=status", "-n", "default"})) << verb << " " << r;
    }
    EXPECT_TRUE(CanI(sa, {"update", r, "--subresource=finalizers", "-n", "default"})) << r;
  }
  for (const char* verb : {"get", "list", "watch", "patch", "update", "delete"}) {
    EXPECT_TRUE(CanI(sa, {verb, "nodes"})) << verb << " nodes";
  }
  for (const char* verb : {"create", "get", "list", "watch", "delete", "patch"}) {
    EXPECT_TRUE(CanI(sa, {verb, "secrets", "-n", "kube-system"})) << verb << " secrets";
  }
  EXPECT_TRUE(CanI(sa, {"get", "configmaps/cluster-info", "-n", "kube-public"}));
  EXPECT_TRUE(CanI(sa, {"get", "namespaces/kube-system"}));
  for (const char* verb : {"get", "list", "watch", "create", "patch", "delete"}) {
    EXPECT_TRUE(CanI(sa, {verb, "daemonsets.apps", "-n", "tpu-node-group"})) << verb;
  }
  for (const char* verb : {"create", "patch"}) {
    EXPECT_TRUE(CanI(sa, {verb, "events", "-n", "default"})) << verb;
    EXPECT_TRUE(CanI(sa, {verb, "events.events.k8s.io", "-n", "team-a"})) << verb;
  }
  for (const char* verb : {"get", "create", "update"}) {
    EXPECT_TRUE(CanI(sa, {verb, "leases.coordination.k8s.io", "-n", "tpu-node-group"})) << verb;
  }
  // Ephemeral GPUs: classes and pools read and their status written, claims owned, GPU pods
  // read, provider keys read in tgp-system.
  for (const char* res : {"gpunodeclasses.tgp.io", "gpunodepools.tgp.io"}) {
    for (const char* verb : {"get", "list", "watch", "update", "patch"}) {
      EXPECT_TRUE(CanI(sa, {verb, res, "-n", "team-a"})) << verb << " " << res;
    }
    EXPECT_TRUE(CanI(sa, {"update", res, "--subresource=status", "-n", "team-a"})) << res;
  }
  for (const char* verb : {"get", "list", "watch", "create", "update", "patch", "delete"}) {
    EXPECT_TRUE(CanI(sa, {verb, "gpunodeclaims.tgp.io"})) << verb;
  }
  EXPECT_TRUE(CanI(sa, {"update", "gpunodeclaims.tgp.io", "--subresource=status"}));
  for (const char* verb : {"get", "list", "watch", "delete"}) {
    EXPECT_TRUE(CanI(sa, {verb, "pods", "-n", "team-a"})) << verb << " pods";
  }
  // Drains evict (issue 4/4): the Eviction API, so PodDisruptionBudgets hold.
  EXPECT_TRUE(CanI(sa, {"create", "pods", "--subresource=eviction", "-n", "team-a"}));
  EXPECT_TRUE(CanI(sa, {"get", "secrets", "-n", "tgp-system"}));
}

TEST_F(DeployOnApiserver, OperatorServiceAccountMayDoNothingElse) {
  ASSERT_NO_FATAL_FAILURE(ApplyTopLevelOnce());
  const std::string& sa = kOperatorSa;
  // Secrets: written only in kube-system (bootstrap tokens) and tpu-node-group (runner join
  // tokens); read one at a time elsewhere only to resolve the env and volumes of pods on control
  // nodes (as a kubelet does), never listed cluster-wide.
  EXPECT_TRUE(CanI(sa, {"get", "secrets", "-n", "default"}));
  EXPECT_FALSE(CanI(sa, {"create", "secrets", "-n", "default"}));
  EXPECT_FALSE(CanI(sa, {"list", "secrets", "--all-namespaces"}));
  EXPECT_FALSE(CanI(sa, {"update", "secrets", "-n", "kube-system"}));
  // Provider keys: one Secret read at a time, never listed or written.
  EXPECT_FALSE(CanI(sa, {"list", "secrets", "-n", "tgp-system"}));
  EXPECT_FALSE(CanI(sa, {"update", "secrets", "-n", "tgp-system"}));
  // Pods are never created or updated (only evicted, deleted with their machine gone, or, on a
  // control node, annotated with their runner and given their status as a kubelet does).
  EXPECT_FALSE(CanI(sa, {"update", "pods", "-n", "default"}));
  EXPECT_TRUE(CanI(sa, {"patch", "pods", "--subresource=status", "-n", "default"}));
  EXPECT_FALSE(CanI(sa, {"create", "gpunodeclasses.tgp.io"}));
  // ConfigMaps only read (one at a time: cluster-info, and those pods on control nodes use).
  EXPECT_FALSE(CanI(sa, {"list", "configmaps", "-n", "kube-public"}));
  EXPECT_FALSE(CanI(sa, {"update", "configmaps/cluster-info", "-n", "kube-public"}));
  EXPECT_FALSE(CanI(sa, {"list", "configmaps", "-n", "kube-system"}));
  // DaemonSets and Leases only in its own namespace.
  EXPECT_FALSE(CanI(sa, {"create", "daemonsets.apps", "-n", "kube-system"}));
  EXPECT_FALSE(CanI(sa, {"update", "daemonsets.apps", "-n", "tpu-node-group"}));
  EXPECT_FALSE(CanI(sa, {"create", "leases.coordination.k8s.io", "-n", "kube-system"}));
  // Node Leases only in kube-node-lease (control nodes); namespaces other than kube-system are
  // not read.
  EXPECT_TRUE(CanI(sa, {"update", "leases.coordination.k8s.io", "-n", "kube-node-lease"}));
  EXPECT_FALSE(CanI(sa, {"update", "leases.coordination.k8s.io", "-n", "default"}));
  EXPECT_FALSE(CanI(sa, {"get", "namespaces/default"}));
  EXPECT_FALSE(CanI(sa, {"list", "namespaces"}));
  EXPECT_FALSE(CanI(sa, {"create", "pods", "-n", "default"}));
  EXPECT_FALSE(CanI(sa, {"create", "customresourcedefinitions.apiextensions.k8s.io"}));
  EXPECT_FALSE(CanI(sa, {"delete", "events", "-n", "default"}));
}

TEST_F(DeployOnApiserver, WebhookServiceAccountReadsOwnersAndWritesOnlyItsCa) {
  ASSERT_NO_FATAL_FAILURE(ApplyTopLevelOnce());
  for (const char* r :
       {"statefulsets.apps", "jobs.batch", "tpunodegroups.tpu.google.com", "gpunodepools.tgp.io"}) {
    for (const char* verb : {"get", "list", "watch"}) {
      EXPECT_TRUE(CanI(kWebhookSa, {verb, r, "-n", "default"})) << verb << " " << r;
    }
    EXPECT_FALSE(CanI(kWebhookSa, {"create", r, "-n", "default"})) << r;
  }
  // /validate-tgp reads the classes pools name (cluster-scoped), and writes no tgp.io object.
  for (const char* verb : {"get", "list", "watch"}) {
    EXPECT_TRUE(CanI(kWebhookSa, {verb, "gpunodeclasses.tgp.io"})) << verb;
  }
  for (const char* verb : {"create", "update", "patch", "delete"}) {
    EXPECT_FALSE(CanI(kWebhookSa, {verb, "gpunodeclasses.tgp.io"})) << verb;
    EXPECT_FALSE(CanI(kWebhookSa, {verb, "gpunodepools.tgp.io", "-n", "default"})) << verb;
  }
  EXPECT_FALSE(CanI(kWebhookSa, {"get", "gpunodeclaims.tgp.io"}));
  EXPECT_TRUE(CanI(kWebhookSa, {"get", "secrets/hyperslice-webhook-tls", "-n", "tpu-node-group"}));
  // Renewal rewrites the Secret (resourceVersion-preconditioned updates).
  EXPECT_TRUE(
      CanI(kWebhookSa, {"update", "secrets/hyperslice-webhook-tls", "-n", "tpu-node-group"}));
  EXPECT_FALSE(CanI(kWebhookSa, {"update", "secrets/other", "-n", "tpu-node-group"}));
  EXPECT_FALSE(CanI(kWebhookSa, {"get", "secrets/other", "-n", "tpu-node-group"}));
  EXPECT_TRUE(CanI(kWebhookSa, {"patch",
                                "mutatingwebhookconfigurations.admissionregistration.k8s.io/"
                                "hyperslice-tpu-env"}));
  EXPECT_FALSE(CanI(kWebhookSa, {"patch",
                                 "mutatingwebhookconfigurations.admissionregistration.k8s.io/"
                                 "someone-else"}));
  EXPECT_FALSE(CanI(kWebhookSa, {"create", "tpunodegroups.tpu.google.com", "-n", "default"}));
}

// --- Helm ----------------------------------------------------------------------------------------

// The helm CLI: $HELM, else scripts/build-helm.sh (builds it from its Go module once, cached).
// Empty with the reason in *why when it cannot be had.
std::string Helm(std::string* why) {
  static std::string path, reason;
  static bool tried = false;
  if (!tried) {
    tried = true;
    const char* env = std::getenv("HELM");
    if (env != nullptr && *env != '\0') {
      path = env;
    } else {
      CommandResult r = RunCommand({"timeout", "900", "bash", kSource + "/scripts/build-helm.sh"});
      std::string out = r.output;
      while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
      if (r.exit_code == 0 && !out.empty() && fs::exists(out)) {
        path = out;
      } else {
        std::string tail =
            r.errors.size() > 600 ? r.errors.substr(r.errors.size() - 600) : r.errors;
        reason = "helm could not be built from its Go module by scripts/build-helm.sh (exit " +
                 std::to_string(r.exit_code) + (r.exit_code == 124 ? ", over 900 s" : "") +
                 "): " + tail;
      }
    }
  }
  *why = reason;
  return path;
}

CommandResult HelmTemplate(const std::string& helm, const std::vector<std::string>& sets) {
  std::vector<std::string> argv = {
      helm,        "template",       "hyperslice",     kChart,
      "-n",        "tpu-node-group", "--include-crds", "--kube-version",
      kKubeVersion};
  for (const auto& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  return RunCommand(argv);
}

TEST(HelmChart, LintsAndRendersTheSameObjectsAsKustomize) {
  std::string why;
  std::string helm = Helm(&why);
  if (helm.empty()) GTEST_SKIP() << why;
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl is not installed";
  CommandResult lint = RunCommand({helm, "lint", "--kube-version", kKubeVersion, kChart});
  EXPECT_EQ(lint.exit_code, 0) << lint.output << lint.errors;

  CommandResult h = HelmTemplate(helm, {});
  ASSERT_EQ(h.exit_code, 0) << h.errors;
  CommandResult k = Kustomize(kDeploy);
  ASSERT_EQ(k.exit_code, 0) << k.errors;
  std::set<ObjectKey> want = Keys(Documents(k.output));
  want.erase({"Namespace", "", "tpu-node-group"});  // helm install --create-namespace
  EXPECT_EQ(Keys(Documents(h.output)), want);

  // The operator's container is the same in both (args, probes, security context, resources).
  auto hd = Documents(h.output);
  auto kd = Documents(k.output);
  const YAML::Node* ho = Find(hd, "Deployment", "hyperslice-operator");
  const YAML::Node* ko = Find(kd, "Deployment", "hyperslice-operator");
  ASSERT_NE(ho, nullptr);
  ASSERT_NE(ko, nullptr);
  EXPECT_EQ(Args(Container(*ho, "operator")), Args(Container(*ko, "operator")));
  for (const char* field : {"securityContext", "livenessProbe", "readinessProbe", "resources"}) {
    EXPECT_EQ(Canonical(Container(*ho, "operator")[field]),
              Canonical(Container(*ko, "operator")[field]))
        << field;
  }
  EXPECT_EQ((*ho)["spec"]["replicas"].as<int>(), 2);
  EXPECT_EQ(EnvValue(Container(*ho, "operator"), "DEVICE_PLUGIN_IMAGE"), "hyperslice:latest");

  // The webhook's grants and its tgp.io validation are the same in both.
  const YAML::Node* hr = Find(hd, "ClusterRole", "hyperslice-webhook");
  const YAML::Node* kr = Find(kd, "ClusterRole", "hyperslice-webhook");
  ASSERT_NE(hr, nullptr);
  ASSERT_NE(kr, nullptr);
  EXPECT_EQ(Canonical((*hr)["rules"]), Canonical((*kr)["rules"]));
  ExpectTgpValidation(hd, "helm");
  ExpectTgpValidation(kd, "kustomize");
  YAML::Node hh = ValidatingHook(hd, "tgp.hyperslice.dev");
  YAML::Node kh = ValidatingHook(kd, "tgp.hyperslice.dev");
  for (const char* field : {"rules", "matchConditions", "failurePolicy", "timeoutSeconds"}) {
    EXPECT_EQ(Canonical(hh[field]), Canonical(kh[field])) << field;
  }
}

TEST(HelmChart, ValuesReachTheObjects) {
  std::string why;
  std::string helm = Helm(&why);
  if (helm.empty()) GTEST_SKIP() << why;
  CommandResult h =
      HelmTemplate(helm, {"image.repository=registry.example/my-proj/hyperslice", "image.tag=v9",
                          "operator.replicas=3", "gce.endpoint=http://127.0.0.1:9/compute/v1/",
                          "gce.credentialsSecret=tpu-node-group-credentials",
                          "webhook.mode=cert-manager", "operator.resources.limits.memory=1Gi"});
  ASSERT_EQ(h.exit_code, 0) << h.errors;
  auto docs = Documents(h.output);
  const YAML::Node* op = Find(docs, "Deployment", "hyperslice-operator");
  ASSERT_NE(op, nullptr);
  YAML::Node c = Container(*op, "operator");
  EXPECT_EQ((*op)["spec"]["replicas"].as<int>(), 3);
  EXPECT_EQ(Str(c["image"]), "registry.example/my-proj/hyperslice:v9");
  EXPECT_EQ(EnvValue(c, "DEVICE_PLUGIN_IMAGE"), "registry.example/my-proj/hyperslice:v9");
  EXPECT_EQ(EnvValue(c, "GOOGLE_APPLICATION_CREDENTIALS"), "/etc/gcp/key.json");
  EXPECT_THAT(Args(c), ::testing::Contains("--gce-endpoint=http://127.0.0.1:9/compute/v1/"));
  EXPECT_EQ(Str(c["resources"]["limits"]["memory"]), "1Gi");
  int cert_manager = 0;
  for (const auto& d : docs) cert_manager += Str(d["apiVersion"]) == "cert-manager.io/v1";
  EXPECT_EQ(cert_manager, 4);
  const YAML::Node* wh = Find(docs, "Deployment", "hyperslice-webhook");
  ASSERT_NE(wh, nullptr);
  EXPECT_THAT(Args(Container(*wh, "webhook")),
              ::testing::Not(::testing::Contains("--self-signed")));

  CommandResult none = HelmTemplate(helm, {"webhook.mode=none"});
  ASSERT_EQ(none.exit_code, 0) << none.errors;
  EXPECT_EQ(Find(Documents(none.output), "Deployment", "hyperslice-webhook"), nullptr);

  CommandResult bad = HelmTemplate(helm, {"webhook.mode=sometimes"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.errors, HasSubstr("webhook.mode must be"));

  // The Pod injection's failurePolicy is a value (default Fail, as kustomize's default).
  EXPECT_EQ(FailurePolicy(docs, "MutatingWebhookConfiguration", "hyperslice-tpu-env"), "Fail");
  CommandResult open = HelmTemplate(helm, {"webhook.tpuPodFailurePolicy=Ignore"});
  ASSERT_EQ(open.exit_code, 0) << open.errors;
  auto open_docs = Documents(open.output);
  EXPECT_EQ(FailurePolicy(open_docs, "MutatingWebhookConfiguration", "hyperslice-tpu-env"),
            "Ignore");
  EXPECT_EQ(FailurePolicy(open_docs, "ValidatingWebhookConfiguration", "hyperslice-tpunodegroups"),
            "Fail");
  CommandResult bad_policy = HelmTemplate(helm, {"webhook.tpuPodFailurePolicy=Sometimes"});
  EXPECT_NE(bad_policy.exit_code, 0);
  EXPECT_THAT(bad_policy.errors, HasSubstr("webhook.tpuPodFailurePolicy must be Fail or Ignore"));
}

TEST_F(DeployOnApiserver, HelmChartPassesServerSideDryRun) {
  std::string why;
  std::string helm = Helm(&why);
  if (helm.empty()) GTEST_SKIP() << why;
  for (const std::vector<std::string>& sets :
       {std::vector<std::string>{},
        std::vector<std::string>{"webhook.mode=none", "gce.credentialsSecret=creds"}}) {
    CommandResult h = HelmTemplate(helm, sets);
    ASSERT_EQ(h.exit_code, 0) << h.errors;
    CommandResult dry = DryRun(h.output);
    EXPECT_EQ(dry.exit_code, 0) << dry.output << dry.errors;
  }
}

}  // namespace
}  // namespace hyperslice::deploy_test
