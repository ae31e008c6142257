// The control node on a real kube-apiserver + etcd + kube-scheduler + kube-controller-manager,
// with in-process test doubles of remote runner agents (agent_double.h; the end-to-end with the
// real `hyperslice runner-agent` is test/e2e's): the Node registered with the summed capacity of
// healthy runners and its Lease renewed; a Job's pod scheduled by the real scheduler onto the
// control node, run on the right runner with its env and Secret files resolved, its status
// reported back until the Job completes; a pod no single runner can hold refused; bad input
// refused with a condition and an Event; a silent runner Unhealthy within the bound, capacity
// gone, its pod Failed (RunnerLost), then relinked without a duplicate RunPod and its stale copy
// deleted; deletions finished on the agent; no runner ever a Node.
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/json.h"
#include "src/kube/client.h"
#include "src/kube/manager.h"
#include "src/kube/object_helpers.h"
#include "src/kube/quantity.h"
#include "src/kube/store.h"
#include "src/runners/attest/attest.h"
#include "src/runners/controlnode/api.h"
#include "src/runners/controlnode/controlnode.h"
#include "src/runners/controlnode/kubelet_backend.h"
#include "src/runners/link/link.h"
#include "src/runners/policy/policy.h"
#include "test/integration/runners_controlnode/agent_double.h"
#include "test/testenv/crds.h"
#include "test/testenv/eventually.h"
#include "test/testenv/registry.h"
#include "test/testenv/testenv.h"
#include "test/unit/runners_attest/signing.h"

namespace hyperslice {
namespace {

namespace json = boost::json;
namespace cn = runners::controlnode;
using namespace std::chrono_literals;
using testenv::Eventually;
using testing::AgentDouble;

constexpr char kDigest[] =
    "registry.local/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

std::string Str(const json::object& o, std::string_view dotted, std::string_view key) {
  const json::object* at = dotted.empty() ? &o : jsonfield::ObjectAt(o, dotted);
  return at ? std::string(jsonfield::StringField(*at, key)) : std::string();
}

int64_t Milli(const std::string& q) {
  auto v = kube::Quantity::Parse(q);
  return v.ok() ? v->MilliValue() : -1;
}

json::object Parse(const std::string& s) { return json::parse(s).as_object(); }

const kube::Resource kServiceAccounts{"", "v1", "serviceaccounts", "ServiceAccount", true};

class ControlNodeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    localcluster::Options o;
    o.controller_manager = true;
    o.scheduler = true;
    testenv::ConfigureCluster(o);
    client_ = testenv::AdminClient();
    ASSERT_TRUE(client_);
    Status crds =
        testenv::InstallCrds({HS_DEPLOY_DIR "/crds/runners.hyperslice.dev_controlnodes.yaml",
                              HS_DEPLOY_DIR "/crds/runners.hyperslice.dev_runners.yaml",
                              HS_DEPLOY_DIR "/crds/runners.hyperslice.dev_workloadpolicies.yaml"},
                             {cn::ControlNodes(), cn::Runners(), cn::WorkloadPolicies()});
    ASSERT_TRUE(crds.ok()) << crds.error().message;
    ns_ = testenv::TestNamespace();
    kube::ManagerOptions mo;
    mo.client = client_;
    auto mgr = kube::Manager::Create(mo);
    ASSERT_TRUE(mgr.ok());
    mgr_ = std::move(*mgr);
    cn::OperatorOptions oo;
    oo.client = client_;
    oo.ns = ns_;
    oo.agent_credentials =
        [](const std::string&) -> Result<std::shared_ptr<grpc::ChannelCredentials>> {
      return grpc::InsecureChannelCredentials();
    };
    oo.verify_runner_name = false;
    oo.probe_interval = 200ms;
    oo.unhealthy_after = 2s;
    oo.lease_renew_interval = 1s;
    // Sealed control nodes read cosign signatures from a local registry (docker-registry on
    // loopback); without it the sealed cases skip.
    if (auto reg = testenv::LocalRegistry::Start(); reg.ok()) {
      registry_ = std::move(*reg);
      oo.registry.insecure_registries = {registry_->host()};
    } else {
      registry_error_ = reg.error().message;
    }
    auto set = cn::RegisterOperator(*mgr_, oo);
    ASSERT_TRUE(set.ok()) << set.error().message;
    set_ = *set;
    run_ = std::thread([] { (void)mgr_->Run(); });
  }
  static void TearDownTestSuite() {
    if (mgr_) mgr_->Stop();
    if (run_.joinable()) run_.join();
    mgr_.reset();
    // Its controllers' work queues use the process clock: left to static destruction they could
    // outlive it (UBSan: "member call on address … which does not point to an object of type
    // 'Clock'" in ~WorkQueue at exit).
    set_.reset();
    registry_.reset();
  }

  static std::unique_ptr<AgentDouble> Agent(const std::string& name,
                                            std::map<std::string, std::string> caps,
                                            const std::string& zone) {
    AgentDouble::Options o;
    o.runner = name;
    o.capacity = std::move(caps);
    o.zone = zone;
    o.region = zone.substr(0, zone.rfind('-'));
    auto a = std::make_unique<AgentDouble>(o);
    EXPECT_TRUE(a->Start());
    return a;
  }

  static void Apply(const kube::Resource& r, const std::string& ns, const std::string& yamlish) {
    auto obj = Parse(yamlish);
    auto created = client_->Create(r, ns, obj);
    ASSERT_TRUE(created.ok()) << created.error().message;
  }

  static void MakeControlNode(const std::string& name) {
    Apply(
        cn::ControlNodes(), "",
        R"({"apiVersion":"runners.hyperslice.dev/v1alpha1","kind":"ControlNode","metadata":{"name":")" +
            name +
            R"("},"spec":{"address":"127.0.0.1","capacityPolicy":{"reserved":{"cpu":"500m"}}}})");
  }
  static void MakeRunner(const std::string& name, const std::string& control_node,
                         const std::string& address, const std::string& extra = "") {
    Apply(
        cn::Runners(), "",
        R"({"apiVersion":"runners.hyperslice.dev/v1alpha1","kind":"Runner","metadata":{"name":")" +
            name + R"("},"spec":{"controlNode":")" + control_node + R"(","host":{"address":")" +
            address + R"("})" + extra + "}}");
  }

  static std::optional<json::object> Get(const kube::Resource& r, const std::string& ns,
                                         const std::string& name) {
    auto got = client_->Get(r, ns, name);
    if (!got.ok()) return std::nullopt;
    return *got;
  }
  static std::string NodeQuantity(const std::string& node, const char* which, const char* res) {
    auto n = Get(kube::resources::Nodes(), "", node);
    return n ? Str(*n, std::string("status.") + which, res) : "";
  }
  static std::optional<json::object> Pod(const std::string& name) {
    return Get(kube::resources::Pods(), ns_, name);
  }
  static std::string PodPhase(const std::string& name) {
    auto p = Pod(name);
    return p ? Str(*p, "status", "phase") : "";
  }
  static std::string PodUid(const std::string& name) {
    auto p = Pod(name);
    return p ? std::string(kube::MetaString(*p, "uid")) : "";
  }
  // A pod bound straight to the node (no scheduler), one container.
  static void BoundPod(const std::string& name, const std::string& node,
                       const std::string& extra_spec, const std::string& image = kDigest,
                       const std::string& requests = "") {
    std::string res = requests.empty() ? "" : R"(,"resources":{"requests":)" + requests + "}";
    Apply(
        kube::resources::Pods(), ns_,
        R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":")" + name +
            R"("},"spec":{"nodeName":")" + node +
            R"(","restartPolicy":"Never","automountServiceAccountToken":false,"containers":[{"name":"main","image":")" +
            image + R"(")" + res + "}]" + extra_spec + "}}");
  }
  static bool HasEvent(const std::string& pod, const std::string& reason) {
    auto list = client_->List(kube::resources::Events(), ns_);
    if (!list.ok()) return false;
    for (const auto& e : list->items) {
      if (Str(e, "involvedObject", "name") == pod && Str(e, "", "reason") == reason) return true;
    }
    return false;
  }
  static std::string Condition(const json::object& pod, const std::string& type,
                               const char* field) {
    const json::object* st = jsonfield::ObjectField(pod, "status");
    const json::array* cs = st ? jsonfield::ArrayField(*st, "conditions") : nullptr;
    if (cs == nullptr) return "";
    for (const auto& c : *cs) {
      if (c.is_object() && jsonfield::StringField(c.as_object(), "type") == type) {
        return std::string(jsonfield::StringField(c.as_object(), field));
      }
    }
    return "";
  }

  static inline std::shared_ptr<kube::Client> client_;
  static inline std::unique_ptr<kube::Manager> mgr_;
  static inline std::shared_ptr<cn::ControlNodeSet> set_;
  static inline std::thread run_;
  static inline std::string ns_;
  static inline std::unique_ptr<testenv::LocalRegistry> registry_;
  static inline std::string registry_error_;
};

TEST_F(ControlNodeTest, NodeCarriesSummedCapacityLeaseAndAJobRunsOnTheRightRunner) {
  auto cpu_runner = Agent("job-cpu", {{"cpu", "4"}, {"memory", "8Gi"}}, "us-east1-b");
  auto gpu_runner =
      Agent("job-gpu", {{"cpu", "8"}, {"memory", "16Gi"}, {"nvidia.com/gpu", "1"}}, "us-east1-b");
  MakeControlNode("cn-job");
  MakeRunner("job-cpu", "cn-job", cpu_runner->address());
  MakeRunner("job-gpu", "cn-job", gpu_runner->address());

  // Capacity = 4 + 8 cpu, allocatable minus the 500m reserved; both runners' memory and GPU.
  ASSERT_TRUE(Eventually([&] { return NodeQuantity("cn-job", "capacity", "cpu") == "12"; }, 30s))
      << NodeQuantity("cn-job", "capacity", "cpu");
  EXPECT_EQ(Milli(NodeQuantity("cn-job", "allocatable", "cpu")), 11500);
  EXPECT_EQ(Milli(NodeQuantity("cn-job", "capacity", "memory")), Milli("24Gi"));
  EXPECT_EQ(NodeQuantity("cn-job", "capacity", "nvidia.com/gpu"), "1");
  EXPECT_EQ(NodeQuantity("cn-job", "capacity", "pods"), "220");
  auto node = Get(kube::resources::Nodes(), "", "cn-job");
  ASSERT_TRUE(node);
  EXPECT_EQ(Str(*node, "metadata.labels", cn::kControlNodeLabel), "cn-job");
  EXPECT_EQ(Str(*node, "metadata.labels", "topology.kubernetes.io/zone"), "us-east1-b");
  EXPECT_EQ(Str(*node, "metadata.labels", "topology.kubernetes.io/region"), "us-east1");
  EXPECT_NE(json::serialize(*node).find(
                R"("key":"runners.hyperslice.dev/control-node","effect":"NoSchedule")"),
            std::string::npos);
  EXPECT_EQ(Condition(*node, "Ready", "status"), "True");

  // The Lease is renewed.
  std::string first;
  ASSERT_TRUE(Eventually([&] {
    auto l = Get(kube::resources::Leases(), "kube-node-lease", "cn-job");
    if (l) first = Str(*l, "spec", "renewTime");
    return !first.empty();
  }));
  EXPECT_TRUE(Eventually(
      [&] {
        auto l = Get(kube::resources::Leases(), "kube-node-lease", "cn-job");
        return l && Str(*l, "spec", "renewTime") != first;
      },
      10s));

  // Runner statuses.
  ASSERT_TRUE(Eventually([&] {
    auto r = Get(cn::Runners(), "", "job-gpu");
    return r && Str(*r, "status", "phase") == "Linked" &&
           Str(*r, "status.capacity", "nvidia.com/gpu") == "1";
  }));

  // A Job whose pod needs the GPU, its env from a Secret and a ConfigMap, and a Secret volume.
  Apply(
      kube::resources::Secrets(), ns_,
      R"({"apiVersion":"v1","kind":"Secret","metadata":{"name":"model-key"},"stringData":{"key":"s3cr3t","extra":"x"}})");
  Apply(
      kube::resources::ConfigMaps(), ns_,
      R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings"},"data":{"mode":"fast"}})");
  ASSERT_TRUE(Eventually([&] { return Get(kServiceAccounts, ns_, "default").has_value(); }, 30s));
  Apply(kube::resources::Jobs(), ns_,
        R"({"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"train"},
    "spec":{"backoffLimit":0,"template":{"spec":{"restartPolicy":"Never",
      "tolerations":[{"key":"runners.hyperslice.dev/control-node","operator":"Exists","effect":"NoSchedule"}],
      "containers":[{"name":"main","image":")" +
            std::string(kDigest) + R"(",
        "env":[{"name":"KEY","valueFrom":{"secretKeyRef":{"name":"model-key","key":"key"}}},
               {"name":"MODE","valueFrom":{"configMapKeyRef":{"name":"settings","key":"mode"}}},
               {"name":"POD","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}}],
        "resources":{"limits":{"nvidia.com/gpu":"1"}},
        "volumeMounts":[{"name":"key","mountPath":"/etc/key","readOnly":true}]}],
      "volumes":[{"name":"key","secret":{"secretName":"model-key","items":[{"key":"key","path":"k"}]}}]}}}})");

  std::string pod_name, uid;
  ASSERT_TRUE(Eventually(
      [&] {
        auto list =
            client_->List(kube::resources::Pods(), ns_, {.label_selector = "job-name=train"});
        if (!list.ok() || list->items.empty()) return false;
        const auto& p = list->items.front();
        if (Str(p, "spec", "nodeName") != "cn-job") return false;
        pod_name = std::string(kube::MetaString(p, "name"));
        uid = std::string(kube::MetaString(p, "uid"));
        return true;
      },
      60s))
      << "the scheduler did not bind the Job's pod to the control node";
  ASSERT_TRUE(Eventually([&] { return gpu_runner->RunPodCalls(uid) == 1; }, 30s));
  EXPECT_EQ(cpu_runner->RunPodCalls(uid), 0);
  auto req = gpu_runner->LastRequest(uid);
  ASSERT_TRUE(req);
  std::map<std::string, std::string> env;
  for (const auto& e : req->containers(0).env()) env[e.name()] = e.value();
  EXPECT_EQ(env["KEY"], "s3cr3t");
  EXPECT_EQ(env["MODE"], "fast");
  EXPECT_EQ(env["POD"], pod_name);
  bool found_file = false;
  for (const auto& v : req->volumes()) {
    for (const auto& f : v.files().files()) {
      if (v.name() == "key" && f.path() == "k" && f.content() == "s3cr3t") found_file = true;
    }
  }
  EXPECT_TRUE(found_file);
  ASSERT_TRUE(Eventually([&] { return PodPhase(pod_name) == "Running"; }, 30s));
  auto running = Pod(pod_name);
  EXPECT_EQ(Str(*running, "metadata.annotations", cn::kRunnerAnnotation), "job-gpu");
  EXPECT_EQ(Str(*running, "status", "hostIP"), "127.0.0.1");
  EXPECT_FALSE(Str(*running, "status", "podIP").empty());
  EXPECT_EQ(Condition(*running, "Ready", "status"), "True");

  gpu_runner->Finish(uid, 0);
  ASSERT_TRUE(Eventually([&] { return PodPhase(pod_name) == "Succeeded"; }, 30s));
  EXPECT_TRUE(Eventually(
      [&] {
        auto job = Get(kube::resources::Jobs(), ns_, "train");
        return job && Condition(*job, "Complete", "status") == "True";
      },
      60s))
      << "the Job did not complete";
  EXPECT_EQ(gpu_runner->RunPodCalls(uid), 1);

  // No runner is a Node.
  for (const char* r : {"job-cpu", "job-gpu"}) EXPECT_FALSE(Get(kube::resources::Nodes(), "", r));
}

TEST_F(ControlNodeTest, PodTooBigForAnyOneRunnerIsRefusedNotSplit) {
  auto a = Agent("big-a", {{"cpu", "4"}, {"memory", "8Gi"}}, "europe-west4-a");
  auto b = Agent("big-b", {{"cpu", "4"}, {"memory", "8Gi"}}, "us-central1-a");
  MakeControlNode("cn-big");
  // One runner linked: the Node carries its region and zone.
  MakeRunner("big-a", "cn-big", a->address());
  ASSERT_TRUE(Eventually([&] { return NodeQuantity("cn-big", "capacity", "cpu") == "4"; }, 30s));
  auto node = Get(kube::resources::Nodes(), "", "cn-big");
  EXPECT_EQ(Str(*node, "metadata.labels", "topology.kubernetes.io/region"), "europe-west4");
  // A second one in another region: the labels set before go (a merge patch alone only adds;
  // a CI run once read europe-west4 here). Capacity and labels are written from one snapshot.
  MakeRunner("big-b", "cn-big", b->address());
  ASSERT_TRUE(Eventually([&] { return NodeQuantity("cn-big", "capacity", "cpu") == "8"; }, 30s));
  node = Get(kube::resources::Nodes(), "", "cn-big");
  EXPECT_EQ(Str(*node, "metadata.labels", "topology.kubernetes.io/region"), "");
  EXPECT_EQ(Str(*node, "metadata.labels", "topology.kubernetes.io/zone"), "");
  // 6 cpu fits the Node's sum (the scheduler binds it) but neither runner: refused.
  BoundPod("too-big", "cn-big", "", kDigest, R"({"cpu":"6"})");
  ASSERT_TRUE(Eventually([&] { return PodPhase("too-big") == "Failed"; }, 30s));
  auto p = Pod("too-big");
  EXPECT_EQ(Str(*p, "status", "reason"), "NoRunnerFits");
  EXPECT_EQ(Condition(*p, cn::kRefusedCondition, "reason"), "NoRunnerFits");
  EXPECT_TRUE(Eventually([&] { return HasEvent("too-big", "NoRunnerFits"); }));
  EXPECT_EQ(a->TotalRunPodCalls() + b->TotalRunPodCalls(), 0);
  // 3 cpu fits one of them.
  BoundPod("fits", "cn-big", "", kDigest, R"({"cpu":"3"})");
  EXPECT_TRUE(Eventually([&] { return PodPhase("fits") == "Running"; }, 30s));
}

TEST_F(ControlNodeTest, BadInputIsRefusedWithAReason) {
  auto a = Agent("bad-a", {{"cpu", "4"}, {"memory", "8Gi"}}, "us-east1-b");
  MakeControlNode("cn-bad");
  MakeRunner("bad-a", "cn-bad", a->address());
  ASSERT_TRUE(Eventually([&] { return NodeQuantity("cn-bad", "capacity", "cpu") == "4"; }, 30s));
  BoundPod("hostpath", "cn-bad", R"(,"volumes":[{"name":"h","hostPath":{"path":"/etc"}}])");
  BoundPod("tagged", "cn-bad", "", "registry.local/app:latest");
  BoundPod("hostnet", "cn-bad", R"(,"hostNetwork":true)");
  BoundPod("nosecret", "cn-bad", R"(,"volumes":[{"name":"s","secret":{"secretName":"absent"}}])");
  for (const auto& refused :
       std::vector<std::pair<std::string, std::string>>{{"hostpath", "UnsupportedVolume"},
                                                        {"tagged", "ImageNotByDigest"},
                                                        {"hostnet", "HostNetworkForbidden"}}) {
    // Named copies, not structured bindings: the lambdas below capture them.
    const std::string& pod = refused.first;
    const std::string& reason = refused.second;
    ASSERT_TRUE(Eventually([&] { return PodPhase(pod) == "Failed"; }, 30s)) << pod;
    auto p = Pod(pod);
    EXPECT_EQ(Str(*p, "status", "reason"), reason) << pod;
    EXPECT_EQ(Condition(*p, cn::kRefusedCondition, "reason"), reason) << pod;
    EXPECT_TRUE(Eventually([&] { return HasEvent(pod, reason); })) << pod;
  }
  // A missing Secret is waited for (as a kubelet does), not refused.
  EXPECT_TRUE(Eventually([&] { return HasEvent("nosecret", "FailedToResolveInputs"); }));
  EXPECT_EQ(PodPhase("nosecret"), "Pending");
  EXPECT_EQ(a->TotalRunPodCalls(), 0);
  Apply(
      kube::resources::Secrets(), ns_,
      R"({"apiVersion":"v1","kind":"Secret","metadata":{"name":"absent"},"stringData":{"a":"b"}})");
  EXPECT_TRUE(Eventually([&] { return PodPhase("nosecret") == "Running"; }, 60s));
}

TEST_F(ControlNodeTest, SilentRunnerIsLostWithinTheBoundThenRelinksWithoutDuplicates) {
  auto a = Agent("lost-a", {{"cpu", "4"}, {"memory", "8Gi"}}, "us-east1-b");
  auto b = Agent("lost-b", {{"cpu", "2"}, {"memory", "4Gi"}}, "us-east1-b");
  MakeControlNode("cn-lost");
  MakeRunner("lost-a", "cn-lost", a->address());
  MakeRunner("lost-b", "cn-lost", b->address());
  ASSERT_TRUE(Eventually([&] { return NodeQuantity("cn-lost", "capacity", "cpu") == "6"; }, 30s));
  BoundPod("victim", "cn-lost", "", kDigest, R"({"cpu":"3"})");  // only lost-a holds 3 cpu
  ASSERT_TRUE(Eventually([&] { return PodPhase("victim") == "Running"; }, 30s));
  std::string uid = PodUid("victim");
  ASSERT_EQ(a->RunPodCalls(uid), 1);
  BoundPod("doomed", "cn-lost", "", kDigest, R"({"cpu":"1"})");
  ASSERT_TRUE(Eventually([&] { return PodPhase("doomed") == "Running"; }, 30s));
  std::string doomed_runner = Str(*Pod("doomed"), "metadata.annotations", cn::kRunnerAnnotation);
  std::string doomed_uid = PodUid("doomed");

  auto killed = std::chrono::steady_clock::now();
  a->Kill();
  ASSERT_TRUE(Eventually(
      [&] {
        return NodeQuantity("cn-lost", "capacity", "cpu") == "2";  // lost-b's alone
      },
      10s));
  auto dropped = std::chrono::steady_clock::now() - killed;
  EXPECT_LT(dropped, 2s + 3s) << "allocatable dropped late";
  ASSERT_TRUE(Eventually([&] { return PodPhase("victim") == "Failed"; }, 10s));
  EXPECT_EQ(Str(*Pod("victim"), "status", "reason"), cn::kRunnerLostReason);
  ASSERT_TRUE(Eventually(
      [&] {
        auto r = Get(cn::Runners(), "", "lost-a");
        return r && Str(*r, "status", "phase") == "Unhealthy" &&
               Condition(*r, "Healthy", "status") == "False";
      },
      10s));
  // While it is away, a pod of it is deleted from the API: gone from the agent on relink.
  if (doomed_runner == "lost-a") {
    ASSERT_TRUE(
        client_->Delete(kube::resources::Pods(), ns_, "doomed", {.grace_period_seconds = 0}).ok());
  }

  ASSERT_TRUE(a->Start());  // a new boot id, the same pods
  ASSERT_TRUE(Eventually([&] { return NodeQuantity("cn-lost", "capacity", "cpu") == "6"; }, 15s));
  ASSERT_TRUE(Eventually(
      [&] {
        auto r = Get(cn::Runners(), "", "lost-a");
        return r && Str(*r, "status", "phase") == "Linked" &&
               Str(*r, "status", "bootID") == "boot-2";
      },
      15s));
  // The lost pod's copy is removed from the runner, never run again.
  EXPECT_TRUE(Eventually([&] { return !a->Has(uid); }, 15s));
  EXPECT_EQ(a->RunPodCalls(uid), 1);
  EXPECT_EQ(PodPhase("victim"), "Failed");
  if (doomed_runner == "lost-a") {
    EXPECT_TRUE(Eventually([&] { return !a->Has(doomed_uid); }, 15s));
  }
  // It takes work again.
  BoundPod("after", "cn-lost", "", kDigest, R"({"cpu":"3"})");
  ASSERT_TRUE(Eventually([&] { return PodPhase("after") == "Running"; }, 30s));
  EXPECT_EQ(a->RunPodCalls(PodUid("after")), 1);
}

TEST_F(ControlNodeTest, DeletionIsFinishedOnTheAgentAndControlNodeDeletionRemovesTheNode) {
  auto a = Agent("del-a", {{"cpu", "4"}, {"memory", "8Gi"}}, "us-east1-b");
  MakeControlNode("cn-del");
  MakeRunner("del-a", "cn-del", a->address());
  ASSERT_TRUE(Eventually([&] { return NodeQuantity("cn-del", "capacity", "cpu") == "4"; }, 30s));
  BoundPod("short", "cn-del", "");
  ASSERT_TRUE(Eventually([&] { return PodPhase("short") == "Running"; }, 30s));
  std::string uid = PodUid("short");
  ASSERT_TRUE(client_->Delete(kube::resources::Pods(), ns_, "short", {}).ok());
  EXPECT_TRUE(Eventually([&] { return !Pod("short").has_value(); }, 30s));
  EXPECT_GE(a->DeletePodCalls(uid), 1);
  EXPECT_FALSE(a->Has(uid));

  ASSERT_TRUE(client_->Delete(cn::ControlNodes(), "", "cn-del", {}).ok());
  EXPECT_TRUE(Eventually(
      [&] {
        return !Get(kube::resources::Nodes(), "", "cn-del") &&
               !Get(kube::resources::Leases(), "kube-node-lease", "cn-del") &&
               !Get(cn::ControlNodes(), "", "cn-del");
      },
      30s));
}

TEST_F(ControlNodeTest, UnlinkedRunnerGetsAOneTimeJoinToken) {
  MakeControlNode("cn-join");
  Apply(
      cn::Runners(), "",
      R"({"apiVersion":"runners.hyperslice.dev/v1alpha1","kind":"Runner","metadata":{"name":"join-gce"},
            "spec":{"controlNode":"cn-join","gce":{"project":"p","zone":"asia-east1-a","machineType":"ct6e-standard-4t"}}})");
  std::string secret = cn::JoinTokenSecretName("join-gce");
  std::optional<json::object> s;
  ASSERT_TRUE(Eventually(
      [&] {
        s = Get(kube::resources::Secrets(), ns_, secret);
        return s.has_value();
      },
      30s));
  EXPECT_EQ(Str(*s, "", "type"), cn::kJoinTokenSecretType);
  auto token = Base64Decode(Str(*s, "data", "token"));
  ASSERT_TRUE(token.ok());
  // The Secret is made first and the Runner's status names it after: wait for that write.
  std::optional<json::object> r;
  EXPECT_TRUE(Eventually(
      [&] {
        r = Get(cn::Runners(), "", "join-gce");
        return r && !Str(*r, "status", "joinTokenSecret").empty();
      },
      30s));
  ASSERT_TRUE(r);
  EXPECT_EQ(Str(*r, "status", "phase"), "Pending");
  EXPECT_EQ(Str(*r, "status", "joinTokenSecret"), ns_ + "/" + secret);
  auto tokens = set_->join_tokens();
  EXPECT_FALSE(tokens->Consume("join-gce", "wrong").ok());
  EXPECT_TRUE(tokens->Consume("join-gce", *token).ok());
  Status twice = tokens->Consume("join-gce", *token);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().reason, runners::link::kReasonJoinTokenRefused);
  EXPECT_FALSE(Get(kube::resources::Secrets(), ns_, secret));
  // No new token once consumed: a no-op spec change (requireDigest's default) makes a generation
  // that only a reconcile of the consumed Runner can observe; by its status write that reconcile
  // has passed the point where it would have minted one.
  auto poked = client_->Patch(cn::Runners(), "", "join-gce", kube::PatchType::kMerge,
                              R"({"spec":{"policy":{"requireDigest":true}}})");
  ASSERT_TRUE(poked.ok()) << poked.error().message;
  const int64_t generation = kube::Generation(*poked);
  EXPECT_TRUE(Eventually(
      [&] {
        r = Get(cn::Runners(), "", "join-gce");
        const json::object* st = r ? jsonfield::ObjectField(*r, "status") : nullptr;
        return st && jsonfield::IntField(*st, "observedGeneration").value_or(0) >= generation;
      },
      30s));
  EXPECT_FALSE(Get(kube::resources::Secrets(), ns_, secret));
}

}  // namespace
}  // namespace hyperslice

namespace hyperslice {
namespace {

// Sealed control node: a pod sent past admission (bound straight to the Node, no webhook) that
// its WorkloadPolicy does not admit is refused before any runner sees it — unsigned, signed by an
// untrusted key, by tag, overriding the command; a signed one runs. Its kubelet API backend
// refuses exec, attach, port-forward and logs.
TEST_F(ControlNodeTest, SealedControlNodeRefusesWhatItsWorkloadPolicyDoesNotAdmit) {
  if (!registry_) GTEST_SKIP() << "no local registry: " << registry_error_;
  using runners::attest::testing::NewSigningKey;
  using runners::attest::testing::SignBase64;
  auto trusted = NewSigningKey();
  auto untrusted = NewSigningKey();
  // Signatures only: the control node reads the .sig tag, never the image itself.
  const std::string repo = registry_->host() + "/sealed/app";
  auto image = [&](char c) { return repo + "@sha256:" + std::string(64, c); };
  auto sign = [&](const std::string& ref, const runners::attest::testing::SigningKey& key) {
    std::string payload = runners::attest::MakeSimpleSigning(repo, ref.substr(ref.find('@') + 1));
    Status st = registry_->PushCosignSignature(ref, payload, SignBase64(key, payload));
    ASSERT_TRUE(st.ok()) << st.error().message;
  };
  sign(image('1'), trusted);
  sign(image('3'), untrusted);
  json::object policy{
      {"apiVersion", "runners.hyperslice.dev/v1alpha1"},
      {"kind", "WorkloadPolicy"},
      {"metadata", json::object{{"name", "sealed-models"}}},
      {"spec", json::object{
                   {"trustedKeys", json::array{json::object{{"name", "release"},
                                                            {"publicKey", trusted.public_pem}}}}}}};
  ASSERT_TRUE(client_->Create(cn::WorkloadPolicies(), "", policy).ok());
  Apply(cn::ControlNodes(), "",
        R"({"apiVersion":"runners.hyperslice.dev/v1alpha1","kind":"ControlNode",)"
        R"("metadata":{"name":"cn-sealed"},"spec":{"address":"127.0.0.1","sealed":true,)"
        R"("workloadPolicy":"sealed-models"}})");
  auto a = Agent("sealed-a", {{"cpu", "4"}, {"memory", "8Gi"}}, "europe-west4-a");
  MakeRunner("sealed-a", "cn-sealed", a->address());
  ASSERT_TRUE(Eventually([&] { return NodeQuantity("cn-sealed", "capacity", "cpu") == "4"; }, 30s));
  // Pods are admitted once the namespace's default ServiceAccount exists.
  ASSERT_TRUE(Eventually([&] { return Get(kServiceAccounts, ns_, "default").has_value(); }, 30s));

  BoundPod("sealed-signed", "cn-sealed", "", image('1'));
  BoundPod("sealed-unsigned", "cn-sealed", "", image('2'));
  BoundPod("sealed-untrusted", "cn-sealed", "", image('3'));
  BoundPod("sealed-tag", "cn-sealed", "", repo + ":v1");
  Apply(kube::resources::Pods(), ns_,
        R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"sealed-args"},"spec":{)"
        R"("nodeName":"cn-sealed","restartPolicy":"Never","automountServiceAccountToken":false,)"
        R"("containers":[{"name":"main","image":")" +
            image('1') + R"(","args":["sh"]}]}})");
  for (const auto& refusal : std::vector<std::pair<std::string, std::string>>{
           {"sealed-unsigned", runners::policy::kReasonImageUnsigned},
           {"sealed-untrusted", runners::policy::kReasonImageUntrusted},
           {"sealed-tag", runners::policy::kReasonImageNotByDigest},
           {"sealed-args", runners::policy::kReasonCommandOverride}}) {
    const std::string& pod = refusal.first;
    const std::string& reason = refusal.second;
    ASSERT_TRUE(Eventually([&] { return PodPhase(pod) == "Failed"; }, 30s)) << pod;
    auto p = Pod(pod);
    EXPECT_EQ(Str(*p, "status", "reason"), reason) << pod;
    EXPECT_EQ(Condition(*p, cn::kRefusedCondition, "reason"), reason) << pod;
    EXPECT_NE(Condition(*p, cn::kRefusedCondition, "message").find("workload policy sealed-models"),
              std::string::npos)
        << pod;
    EXPECT_TRUE(Eventually([&] { return HasEvent(pod, reason); })) << pod;
    EXPECT_EQ(a->RunPodCalls(PodUid(pod)), 0) << pod;
  }
  ASSERT_TRUE(Eventually([&] { return PodPhase("sealed-signed") == "Running"; }, 30s));
  EXPECT_EQ(a->TotalRunPodCalls(), 1);

  // The kubelet API's backend: no administrative access, no logs (the policy does not allow them).
  auto backend = cn::MakeKubeletBackend(client_, set_);
  runners::kubeletapi::ExecRequest er;
  er.namespace_name = ns_;
  er.pod = "sealed-signed";
  er.container = "main";
  er.command = {"/bin/sh"};
  Status exec = backend->AdmitExec(er);
  ASSERT_FALSE(exec.ok());
  EXPECT_EQ(exec.error().http_status, 403);
  EXPECT_EQ(exec.error().reason, runners::policy::kReasonAdminAccess);
  EXPECT_NE(exec.error().message.find("control node cn-sealed is sealed"), std::string::npos);
  for (const char* kind : {"attach", "portForward"}) {
    Status st = backend->AdmitUnsupported(kind, ns_, "sealed-signed");
    ASSERT_FALSE(st.ok()) << kind;
    EXPECT_EQ(st.error().http_status, 403) << kind;
  }
  struct NoSink : runners::kubeletapi::LogSink {
    bool Write(std::string_view) override { return true; }
    bool Cancelled() const override { return false; }
    bool WaitCancelled(std::chrono::milliseconds) override { return false; }
  } sink;
  Status logs = backend->Logs(ns_, "sealed-signed", "main", {}, sink);
  ASSERT_FALSE(logs.ok());
  EXPECT_EQ(logs.error().reason, runners::policy::kReasonLogs);
  // Exec on an unsealed control node's pod is admitted (the refusal is the seal's).
  BoundPod("unsealed", "cn-bad-absent", "");
  er.pod = "unsealed";
  EXPECT_TRUE(backend->AdmitExec(er).ok());
}

}  // namespace
}  // namespace hyperslice
