// Seed 000 end to end with nothing played by hand: a real control plane (kube-apiserver, etcd,
// kube-controller-manager with kubeadm's join objects and a short node-monitor grace period), the
// GCE simulator reached over HTTP by the real GCE client, the TPU operator in-process
// (testenv::tpuenv::InProcessOperator: tpu::RegisterOperator on a kube::Manager), and simulated TPU
// VMs (sim/kubelet) that join as kubeadm + kubelet do: bootstrap token from their metadata,
// cluster-info JWS and CA pin, CSR approved and signed by kube-controller-manager, their own Node
// and Lease. kube-scheduler binds pods; the VMs run them (the operator's device-plugin DaemonSet in
// process on each VM's fake TPU tree, registering with the VM's kubelet), and the admission webhook
// runs in process, registered by deploy/webhook's configurations: seed 000's workload
// (deploy/examples/tpu-workload.yaml), applied with kubectl, runs on the slice with its chips and
// its variables.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "sim/kubelet/fleet.h"
#include "src/base/base64.h"
#include "src/base/envsubst.h"
#include "src/base/log.h"
#include "src/gce/compute.h"
#include "src/kube/client.h"
#include "src/kube/informer.h"
#include "src/kube/object_helpers.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/device_plugin.h"
#include "src/webhook/webhook.h"
#include "test/testenv/command.h"
#include "test/testenv/eventually.h"
#include "test/testenv/examples.h"
#include "test/testenv/in_process_operator.h"
#include "test/testenv/joining_cluster.h"
#include "test/testenv/json_str.h"
#include "test/testenv/local_webhook.h"
#include "test/testenv/node_ready.h"
#include "test/testenv/sim_fleet.h"
#include "test/testenv/tpu_env.h"

namespace hyperslice::tpu {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;

// The operator's test environment (test/testenv/tpu_env.h): seed 000's project, region and zone;
// the device-plugin DaemonSet's namespace.
using testenv::tpuenv::kProject;
using testenv::tpuenv::kRegion;
using testenv::tpuenv::kZone;
constexpr const char* kDevicePluginNs = testenv::tpuenv::kOperatorNs;
constexpr char kReservation[] = "my-tpu-reservation";
constexpr char kGroup[] = "my-tpu-node-group";

using testenv::Eventually;    // polls a condition until it holds or the timeout passes
using testenv::Kubectl;       // kubectl on the shared cluster: {exit code, stdout, stderr}
using testenv::KubectlApply;  // `kubectl apply -f` of a YAML text
using testenv::Str;           // a string field, "" when absent

class TpuSliceE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Every log line of this process (operator, agents, clients) is kept for the token check.
    log::SetSink([this](std::string_view line) {
      {
        std::lock_guard lock(log_mu_);
        logs_.emplace_back(line);
      }
      std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
    });

    // The shared environment on a control plane the VMs join (kube-controller-manager with
    // kubeadm's join objects, kube-scheduler): TPU CRDs, the device-plugin namespace, the GCE
    // simulator with the seed's reservation, and the real GCE client on it.
    testenv::ConfigureCluster(testenv::QuickJoiningClusterOptions());
    sim::gce::Options so = testenv::tpuenv::SimOptions();
    so.instance_boot_latency = 200ms;
    so.reservations.push_back({kProject, kZone, kReservation, "tpu7x-standard-4t", 2});
    env_ = &testenv::tpuenv::SharedEnv("tpu-slice-e2e", so);
    ASSERT_TRUE(env_->error.empty()) << env_->error;
    client_ = env_->client;
    compute_ = env_->compute;
    StartWebhook();

    // The VMs: the seed's control-plane address (10.128.0.2) is routed to the local apiserver.
    sim::kubelet::FleetOptions fo =
        testenv::QuickFleetOptions(env_->sim.get(), testenv::Cluster().server_url());
    fo.agent.run_pods = true;
    auto fleet = sim::kubelet::Fleet::Start(fo);
    ASSERT_TRUE(fleet.ok()) << fleet.error().ToString();
    fleet_ = std::move(*fleet);

    // Every bootstrap token the cluster ever holds, to look for it in logs and metadata (the
    // project's informer follows the Secrets).
    secrets_ = std::make_unique<kube::SharedInformer>(client_, kube::resources::Secrets(),
                                                      kube::InformerOptions{.ns = "kube-system"});
    secrets_->AddEventHandler(
        {.on_add = [this](const kube::ObjectPtr& o) { NoteToken(*o); },
         .on_update = [this](const kube::ObjectPtr&, const kube::ObjectPtr& o) { NoteToken(*o); }});
    secrets_->Start();
    ASSERT_TRUE(secrets_->WaitForCacheSync(60s));
    // Node history: cordoned (spec.unschedulable) before deleted?
    nodes_ = std::make_unique<kube::SharedInformer>(client_, kube::resources::Nodes());
    nodes_->AddEventHandler(
        {.on_add = [this](const kube::ObjectPtr& o) { NoteCordon(*o); },
         .on_update = [this](const kube::ObjectPtr&, const kube::ObjectPtr& o) { NoteCordon(*o); },
         .on_delete =
             [this](const kube::ObjectPtr& o, bool) {
               std::lock_guard lock(nodes_mu_);
               deleted_.insert(Str(o->at("metadata").as_object(), "name"));
             }});
    nodes_->Start();
    ASSERT_TRUE(nodes_->WaitForCacheSync(60s));

    // The operator in process, on the environment's client and Compute.
    Status started = operator_.Start(*env_);
    ASSERT_TRUE(started.ok()) << started.error().ToString();
  }

  void TearDown() override {
    operator_.Stop();
    nodes_.reset();
    secrets_.reset();
    fleet_.reset();
    webhook_.reset();  // stops serving, removes its serving pair
    compute_.reset();
    client_.reset();
    log::SetSink(nullptr);
  }

  static std::string Decode(const std::string& b64) {
    auto decoded = Base64Decode(b64, "secret data");
    return decoded.ok() ? *decoded : std::string();
  }
  void NoteToken(const kube::Object& secret) {
    if (Str(secret, "type") != "bootstrap.kubernetes.io/token") return;
    auto* data = secret.if_contains("data");
    if (data == nullptr || !data->is_object()) return;
    std::string id = Decode(Str(data->as_object(), "token-id"));
    std::string token_secret = Decode(Str(data->as_object(), "token-secret"));
    if (id.empty() || token_secret.empty()) return;
    std::lock_guard lock(tokens_mu_);
    tokens_.insert(id + "." + token_secret);
  }
  void NoteCordon(const kube::Object& node) {
    auto* spec = node.if_contains("spec");
    if (spec == nullptr || !spec->is_object()) return;
    auto* u = spec->as_object().if_contains("unschedulable");
    if (u == nullptr || !u->is_bool() || !u->as_bool()) return;
    std::lock_guard lock(nodes_mu_);
    cordoned_before_delete_.insert(Str(node.at("metadata").as_object(), "name"));
  }

  // The webhook in process, registered by deploy/webhook's own configurations (URL clientConfig).
  void StartWebhook() {
    webhook::ServerOptions o;
    o.source = webhook::NewInformerObjectSource(client_, 20s);
    auto started = testenv::LocalWebhook::Start("tpu-slice-e2e-webhook", std::move(o));
    ASSERT_TRUE(started.ok()) << started.error().ToString();
    webhook_ = std::move(*started);
    Status registered =
        webhook_->Register(*client_, std::string(HS_DEPLOY_DIR) + "/webhook/base/webhooks.yaml");
    ASSERT_TRUE(registered.ok()) << registered.error().ToString();
  }

  // `kubectl logs`: a simulated container prints its environment, KEY=VALUE per line.
  std::map<std::string, std::string> PodEnv(const std::string& pod) {
    auto logs = Kubectl({"logs", "-n", "default", pod});
    if (logs.exit_code != 0) return {};
    return ParseEnvFile(logs.output);  // KEY=VALUE lines, as an .env file
  }

  std::string Allocatable(const std::string& node) {
    auto n = client_->Get(kube::resources::Nodes(), "", node);
    if (!n.ok()) return "";
    return Str(n->at("status").at("allocatable").as_object(), kTpuResourceName);
  }

  std::optional<kube::Condition> GroupCondition(const std::string& type) {
    return testenv::tpuenv::Cond(*client_, "default", kGroup, type);
  }
  // Whether the group's Ready condition has `status`, within `timeout`.
  bool GroupReadyBecomes(const std::string& status, std::chrono::milliseconds timeout) {
    return Eventually(
        [&] {
          auto c = GroupCondition(kCondReady);
          return c && c->status == status;
        },
        timeout);
  }
  std::string DescribeGroup() {
    return testenv::tpuenv::DescribeGroup(*client_, "default", kGroup);
  }

  std::vector<json::object> Instances() {
    auto l = compute_->ListInstances(kProject, kZone, {});
    return l.ok() ? *l : std::vector<json::object>{};
  }

  std::string NodeReady(const std::string& name) {
    return testenv::NodeReadyStatus(*client_, name);
  }

  std::set<std::string> Tokens() {
    std::lock_guard lock(tokens_mu_);
    return tokens_;
  }

  testenv::tpuenv::Env* env_ = nullptr;  // the binary's; lives until exit
  std::shared_ptr<kube::Client> client_;
  std::shared_ptr<gce::Compute> compute_;
  std::unique_ptr<sim::kubelet::Fleet> fleet_;
  std::unique_ptr<testenv::LocalWebhook> webhook_;
  testenv::tpuenv::InProcessOperator operator_;
  std::unique_ptr<kube::SharedInformer> secrets_, nodes_;

  std::mutex log_mu_;
  std::vector<std::string> logs_;
  std::mutex tokens_mu_;
  std::set<std::string> tokens_;
  std::mutex nodes_mu_;
  std::set<std::string> cordoned_before_delete_, deleted_;
};

TEST_F(TpuSliceE2eTest, SeedExampleJoinsForRealSurvivesAHostFailureAndTearsDown) {
  // 1. The seed's example as deploy/examples ships it, with tpu7x-2x2x2.env's values
  //    (envsubst), applied as a user would.
  auto applied = KubectlApply(testenv::Example("tpunodegroup.yaml", "tpu7x-2x2x2.env"));
  ASSERT_EQ(applied.exit_code, 0) << applied.output << applied.errors;
  auto waited = Kubectl({"wait", "--for=condition=Ready", "tpunodegroup/my-tpu-node-group", "-n",
                         "default", "--timeout=180s"});
  ASSERT_EQ(waited.exit_code, 0) << waited.output << waited.errors << DescribeGroup();

  // 2. Two VMs, each joined as its own Node through the bootstrap token and the TLS bootstrap.
  auto vms = Instances();
  ASSERT_EQ(vms.size(), 2u);
  std::vector<std::string> names;
  names.reserve(vms.size());
  for (const auto& vm : vms) names.push_back(Str(vm, "name"));
  auto csrs = client_->List(kube::resources::CertificateSigningRequests(), "");
  ASSERT_TRUE(csrs.ok());
  std::set<std::string> bootstrap_users;
  for (const auto& csr : csrs->items) {
    const auto& spec = csr.at("spec").as_object();
    if (Str(spec, "signerName") != "kubernetes.io/kube-apiserver-client-kubelet") continue;
    EXPECT_FALSE(Str(csr.at("status").as_object(), "certificate").empty());
    bootstrap_users.insert(Str(spec, "username"));
  }
  EXPECT_EQ(bootstrap_users.size(), 2u) << "one bootstrap token identity per VM";
  for (const auto& u : bootstrap_users) EXPECT_EQ(u.rfind("system:bootstrap:", 0), 0u) << u;
  for (const auto& name : names) {
    auto agent = fleet_->agent(kProject, kZone, name);
    ASSERT_TRUE(agent.has_value()) << name;
    EXPECT_TRUE(agent->agent.has_credentials) << name;
    EXPECT_FALSE(agent->agent.csr_name.empty()) << name;
    auto node = client_->Get(kube::resources::Nodes(), "", name);
    ASSERT_TRUE(node.ok()) << name;
    EXPECT_EQ(Str(node->at("spec").as_object(), "providerID"), ProviderId(kProject, kZone, name));
    // google.com/tpu from the device plugin the DaemonSet runs on the VM.
    EXPECT_TRUE(Eventually([&] { return Allocatable(name) == "4"; }, 60s)) << Allocatable(name);
    EXPECT_EQ(NodeReady(name), "True");
    // Labels and taint, by the operator.
    ASSERT_TRUE(Eventually(
        [&] {
          auto n = client_->Get(kube::resources::Nodes(), "", name);
          if (!n.ok()) return false;
          const auto& labels = n->at("metadata").at("labels").as_object();
          bool tainted = false;
          if (auto* taints = n->at("spec").as_object().if_contains("taints")) {
            for (const auto& t : taints->as_array())
              tainted = tainted || (Str(t.as_object(), "key") == kTaintKey &&
                                    Str(t.as_object(), "value") == kTaintValue &&
                                    Str(t.as_object(), "effect") == kTaintEffect);
          }
          return Str(labels, kLabelNodeGroup) == "default-my-tpu-node-group" &&
                 Str(labels, kLabelAccelerator) == "tpu7x" &&
                 Str(labels, kLabelTopology) == "2x2x2" &&
                 Str(labels, kLabelAcceleratorCount) == "4" && tainted;
        },
        30s))
        << name;
  }
  EXPECT_TRUE(client_
                  ->Get(kube::resources::DaemonSets(), kDevicePluginNs,
                        internal::kDevicePluginDaemonSetName)
                  .ok());

  // 3. Tokens are single-use: after the join no token Secret and no token in any VM's metadata;
  //    no token in the operator's (or anyone's) log lines or in Events.
  std::set<std::string> tokens = Tokens();
  ASSERT_GE(tokens.size(), 2u) << "the operator created no bootstrap tokens?";
  ASSERT_TRUE(Eventually(
      [&] {
        auto secrets = client_->List(kube::resources::Secrets(), "kube-system");
        if (!secrets.ok()) return false;
        for (const auto& s : secrets->items)
          if (Str(s, "type") == "bootstrap.kubernetes.io/token") return false;
        for (const auto& vm : Instances()) {
          auto items = gce::MetadataItemsOf(vm.at("metadata").as_object());
          if (items.count(kMetaJoinToken) != 0) return false;
        }
        return true;
      },
      60s))
      << "a bootstrap token outlived the join";
  {
    std::lock_guard lock(log_mu_);
    ASSERT_FALSE(logs_.empty());
    for (const auto& line : logs_) {
      for (const auto& t : tokens) {
        ASSERT_EQ(line.find(t.substr(7)), std::string::npos) << "token secret in a log line";
      }
    }
  }
  auto events = client_->List(kube::resources::Events(), "");
  ASSERT_TRUE(events.ok());
  for (const auto& e : events->items)
    for (const auto& t : tokens)
      EXPECT_EQ(json::serialize(e).find(t.substr(7)), std::string::npos) << "token in an Event";

  // 3b. Seed 000's workload, applied with kubectl: one pod per host with all four chips, the
  //     webhook's TPU_WORKER_ID/TPU_WORKER_HOSTNAMES, and every variable the seed sets as written.
  auto workload = KubectlApply(testenv::Example("tpu-workload.yaml", "tpu7x-2x2x2.env"));
  ASSERT_EQ(workload.exit_code, 0) << workload.output << workload.errors;
  auto pods_ready = Kubectl({"wait", "--for=condition=Ready", "pod/tpu-worker-v7x-0",
                             "pod/tpu-worker-v7x-1", "-n", "default", "--timeout=120s"});
  ASSERT_EQ(pods_ready.exit_code, 0) << pods_ready.output << pods_ready.errors
                                     << Kubectl({"get", "pods", "-A", "-o", "wide"}).output;
  std::set<std::string> pod_nodes;
  for (int i = 0; i < 2; ++i) {
    std::string pod = "tpu-worker-v7x-" + std::to_string(i);
    auto p = client_->Get(kube::resources::Pods(), "default", pod);
    ASSERT_TRUE(p.ok());
    pod_nodes.insert(Str(p->at("spec").as_object(), "nodeName"));
    auto env = PodEnv(pod);
    EXPECT_EQ(env["TPU_WORKER_ID"], std::to_string(i)) << pod;
    EXPECT_EQ(env["TPU_WORKER_HOSTNAMES"],
              "tpu-worker-v7x-0.tpu-svc-v7x,tpu-worker-v7x-1.tpu-svc-v7x")
        << pod;
    EXPECT_EQ(env["TPU_VISIBLE_CHIPS"], "0,1,2,3") << pod;  // the device plugin's Allocate
    // As the seed wrote them (the webhook would compute tpu7x-16 for TPU_ACCELERATOR_TYPE).
    EXPECT_EQ(env["TPU_ACCELERATOR_TYPE"], "tpu7x-4") << pod;
    EXPECT_EQ(env["TPU_TOPOLOGY"], "2x2x2") << pod;
    EXPECT_EQ(env["TPU_HOST_BOUNDS"], "1,1,2") << pod;
    EXPECT_EQ(env["TPU_CHIPS_PER_HOST_BOUNDS"], "2,2,1") << pod;
    EXPECT_EQ(env["K8S_POD_NAME"], pod);
    EXPECT_EQ(env["NODE_IP"].rfind("127.", 0), 0u) << env["NODE_IP"];
  }
  EXPECT_EQ(pod_nodes, std::set<std::string>(names.begin(), names.end()));

  // 3c. A chip of one host is lost: its Node's allocatable drops to 3, and the slice is not
  //     Ready, naming the node. The chip back: Ready again.
  {
    const std::string host = names[1];
    auto agent = fleet_->agent(kProject, kZone, host);
    ASSERT_TRUE(agent.has_value());
    const std::string chip = agent->agent.vm_root + "/dev/accel2";
    ASSERT_EQ(::unlink(chip.c_str()), 0);
    EXPECT_TRUE(Eventually([&] { return Allocatable(host) == "3"; }, 5s)) << Allocatable(host);
    ASSERT_TRUE(Eventually(
        [&] {
          auto c = GroupCondition(kCondReady);
          return c && c->status == "False" && c->reason == "TPUChipsUnavailable" &&
                 c->message.find(host) != std::string::npos &&
                 c->message.find("3 of 4") != std::string::npos;
        },
        30s))
        << DescribeGroup();
    std::ofstream(chip).flush();
    ASSERT_TRUE(GroupReadyBecomes("True", 30s)) << DescribeGroup();
  }

  // 4. One host dies (the VM stops): its Node goes silent, kube-controller-manager marks it
  //    Unknown, the group is not Ready and names it. Restored: Ready again.
  const std::string victim = names[0];
  const int64_t attempts_before = fleet_->agent(kProject, kZone, victim)->agent.join_attempts;
  auto call = [&](const std::string& path, const json::object& body) {
    auto r = env_->control->Call("POST", path, body);  // an error unless 200
    ASSERT_TRUE(r.ok()) << r.error().ToString();
  };
  call("/control/instances/kill", {{"zone", kZone}, {"name", victim}, {"mode", "stop"}});
  ASSERT_TRUE(Eventually(
      [&] {
        auto c = GroupCondition(kCondReady);
        return c && c->status == "False" && c->message.find(victim) != std::string::npos;
      },
      60s))
      << DescribeGroup();
  EXPECT_TRUE(Eventually([&] { return NodeReady(victim) == "Unknown"; }, 30s));
  call("/control/instances/restore", {{"zone", kZone}, {"name", victim}});
  ASSERT_TRUE(GroupReadyBecomes("True", 60s)) << DescribeGroup();
  EXPECT_EQ(NodeReady(victim), "True");
  EXPECT_EQ(fleet_->agent(kProject, kZone, victim)->agent.join_attempts, attempts_before)
      << "a restarted VM keeps its node credentials: no second join";

  // 5. Deleted: Nodes cordoned then removed, GCE empty, the device-plugin DaemonSet gone.
  auto deleted =
      Kubectl({"delete", "tpunodegroup/my-tpu-node-group", "-n", "default", "--wait=false"});
  ASSERT_EQ(deleted.exit_code, 0) << deleted.output << deleted.errors;
  ASSERT_TRUE(Eventually(
      [&] { return testenv::tpuenv::IsGone(*client_, TPUNodeGroups(), "default", kGroup); }, 120s))
      << DescribeGroup();
  for (const auto& name : names) {
    EXPECT_FALSE(client_->Get(kube::resources::Nodes(), "", name).ok()) << name << " is left";
    std::lock_guard lock(nodes_mu_);
    EXPECT_TRUE(cordoned_before_delete_.count(name)) << name << " was not cordoned";
    EXPECT_TRUE(deleted_.count(name)) << name << " was not deleted";
  }
  EXPECT_TRUE(Instances().empty());
  auto migs = compute_->ListInstanceGroupManagers(kProject, kZone, {});
  ASSERT_TRUE(migs.ok());
  EXPECT_TRUE(migs->empty());
  auto templates = compute_->ListInstanceTemplates(kProject, {});
  ASSERT_TRUE(templates.ok());
  EXPECT_TRUE(templates->empty());
  auto policies = compute_->ListResourcePolicies(kProject, kRegion, {});
  ASSERT_TRUE(policies.ok());
  EXPECT_TRUE(policies->empty());
  EXPECT_TRUE(Eventually(
      [&] {
        return testenv::tpuenv::IsGone(*client_, kube::resources::DaemonSets(), kDevicePluginNs,
                                       internal::kDevicePluginDaemonSetName);
      },
      30s));
  EXPECT_TRUE(Eventually([&] { return fleet_->agents().empty(); }, 30s));
}

}  // namespace
}  // namespace hyperslice::tpu
