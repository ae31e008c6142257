// A rented GPU machine joins over a real tailnet (issue "Ephemeral GPUs 3/4", the mesh acceptance):
// gpu_join's setup (test/e2e/gpu_join/join_test.cc: seed 002's class and pool, the GPU controllers
// in process as `hyperslice operator --gpu` wires them, a real kube-apiserver,
// kube-controller-manager and kube-scheduler, the Lambda simulator, sim/gpumachine booting each
// machine from its cloud-init) plus a real headscale on loopback and, per machine, a real
// userspace tailscaled in a network namespace of its own (sim/gpumachine/mesh_machines.h).
//
// What is added to seed 002's class (deploy/examples/gpunodeclass.yaml, otherwise applied as
// written): spec.tailscaleConfig.loginServer = the loopback headscale's URL, and
// spec.tailscaleConfig.apiKeySecretRef = {namespace: tgp-system, name: headscale-api} (key
// "api-key", the CRD's default), a Secret holding headscale's API key. Its tags (tag:k8s,
// tag:gpu) and ephemeral: true are the seed's.
//
//   - one GPU pod -> a claim whose launch minted a single-use, tagged, ephemeral headscale key
//     (its id on the claim) -> a Lambda machine that reads its cloud-init, runs `tailscale up`
//     with the key from it against headscale, TLS-bootstraps, registers; the claim records the
//     machine's tailnet IP and headscale node id (what the machine's own `tailscale ip -4` says);
//     the pod runs on it. The Node's InternalIP stays the machine's loopback address (the apiserver
//     reaches the simulated kubelet there; no 100.64/10 address is dialed from the host network);
//   - deleting the pod and the pool (its claim with it): the machine is terminated at the
//     provider, its headscale node is gone, its bootstrap token Secret is gone, and neither the
//     bootstrap token nor the auth key appears in any log line (this process at debug level, the
//     control plane's logs), Event, or the claim's status at any point it was read;
//   - a machine whose payload carries a key headscale never issued: its real tailscaled is
//     refused, it stays unjoined (TailnetJoinFailed), no Node registers and its kubelet never
//     starts up to the machine's end (taken back at the provider: no window to outwait);
//   - a device our tags and naming mark as ours but that no claim owns is collected after the
//     grace; one with our tags but another name is left alone.
// Covered elsewhere, not repeated here: a spent single-use key is refused by headscale to a
// second machine (test/integration/gpu_mesh/mesh_test.cc,
// KeysJoinListReachDeleteAndASpentKeyIsRefused); a machine whose payload is broken never registers
// and its claim times out (test/e2e/gpu_join/join_test.cc,
// AMachineWhosePayloadIsBrokenNeverRegistersAndIsReturned).
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stop_token>
#include <thread>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>

#include "sim/gpumachine/gpumachine.h"
#include "sim/gpumachine/mesh_machines.h"
#include "sim/lambda/simulator.h"
#include "sim/runpod/simulator.h"
#include "src/base/json.h"
#include "src/base/log.h"
#include "src/gpu/api.h"
#include "src/gpu/boot_payload.h"
#include "src/gpu/bootstrap_token.h"
#include "src/gpu/claim_controller.h"
#include "src/gpu/class_controller.h"
#include "src/gpu/planner.h"
#include "src/gpu/providers.h"
#include "src/gpu/provisioner.h"
#include "src/gpu/tailnet.h"
#include "src/gpu/tailnet_credentials.h"
#include "src/kube/client.h"
#include "src/kube/events.h"
#include "src/kube/manager.h"
#include "src/kube/metrics.h"
#include "src/kube/object_helpers.h"
#include "src/kube/store.h"
#include "src/kube/yaml.h"
#include "src/localmesh/localmesh.h"
#include "test/testenv/eventually.h"
#include "test/testenv/files.h"
#include "test/testenv/gpu_join.h"
#include "test/testenv/log_capture.h"
#include "test/testenv/testenv.h"
#include "test/testenv/tgp.h"

namespace hyperslice::gpu {
namespace {

// Finished passes of the GPU garbage collector (it runs in this process).
double GcPasses() {
  return kube::metrics::Registry::Default()
      .GetCounter("hyperslice_gpu_garbage_collection_passes_total", "", {})
      .Value();
}

namespace bj = boost::json;
using namespace std::chrono_literals;
using testenv::Eventually;
namespace market = sim::market;

using testenv::Str;

// Every place a value may have leaked to: `where` names it in a failure.
void ExpectAbsent(const std::string& text, const std::vector<std::string>& secrets,
                  const std::string& where) {
  for (const std::string& s : secrets) {
    EXPECT_EQ(text.find(s), std::string::npos) << "a credential in " << where;
  }
}

class GpuMesh : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!localmesh::MeshUnavailableReason().empty()) return;
    testenv::ConfigureCluster(testenv::JoiningClusterOptions());
  }

  void SetUp() override {
    std::string why = localmesh::MeshUnavailableReason();
    if (!why.empty()) {
      skipped_ = true;
      GTEST_SKIP() << "the tailnet e2e needs the mesh: " << why;
    }
    log_ = std::make_unique<testenv::LogCapture>();
    ASSERT_NO_FATAL_FAILURE(testenv::PrepareJoiningCluster(client_, HS_DEPLOY_DIR));

    // The mesh: headscale on the host's loopback, the machines' LAN of namespaces.
    std::string tmpl = ::testing::TempDir() + "hs-gpumesh-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    auto hs = localmesh::Headscale::Start(localmesh::MeshBinDir(), dir_ + "/headscale");
    ASSERT_TRUE(hs.ok()) << hs.error().message;
    headscale_ = std::move(*hs);
    auto lan = localmesh::MeshLan::Create();
    ASSERT_TRUE(lan.ok()) << lan.error().message;
    lan_ = std::move(*lan);
    mesh_ = std::make_unique<sim::gpumachine::MeshMachines>(localmesh::MeshBinDir(), *headscale_,
                                                            *lan_, dir_);
    // The test's own view of headscale (what the product's admin sees, for the assertions).
    HeadscaleConfig hc;
    hc.login_server = headscale_->url();
    hc.api_key = StaticCredential(headscale_->api_key());
    auto admin = NewHeadscaleAdmin(hc);
    ASSERT_TRUE(admin.ok()) << admin.error().message;
    admin_ = std::move(*admin);

    static int round = 0;
    auto lambda = testenv::StartLambdaFleet(static_cast<uint64_t>(++round) * 7919, mesh_->Seam());
    ASSERT_TRUE(lambda.ok()) << lambda.error().ToString();
    sim_ = std::move(lambda->sim);
    fleet_ = std::move(lambda->fleet);
    auto runpod = testenv::StartContainerOnlyRunPod();
    ASSERT_TRUE(runpod.ok()) << runpod.error().ToString();
    runpod_ = std::move(*runpod);
    ASSERT_TRUE(testenv::PutSimOperatorSecret(*client_).ok());
    ASSERT_TRUE(testenv::PutSecret(*client_, "tgp-system", "headscale-api",
                                   {{"api-key", headscale_->api_key()}})
                    .ok());

    auto kit = testenv::NewGpuControllerKit(client_, &registry_);
    ASSERT_TRUE(kit.ok()) << kit.error().ToString();
    manager_ = std::move(kit->manager);

    ClassControllerOptions co =
        kit->ClassOptions({{kLambda, sim_->api_endpoint()}, {kRunPod, runpod_->api_endpoint()}});
    co.skip_container_offers = true;
    ASSERT_TRUE(RegisterClassController(*manager_, co).ok());

    ClaimControllerOptions cl = kit->ClaimOptions();
    cl.cluster_id = "e2e-mesh";
    cl.ambiguous_settle = 2s;
    cl.registration_timeout = 90s;
    cl.gc_interval = 1s;
    cl.gc_grace = 3s;
    // As gpu::RegisterOperator (src/gpu/operator.cc) wires it: the class's own admin (headscale,
    // its API key from the Secret the class names), the key into the payload through BootContext.
    cl.tailnet = std::make_shared<TailnetCredentials>(
        TailnetCredentialsOptions{.client = client_, .credentials_namespace = "tgp-system"});
    testenv::SetJoinPayloads(cl, client_, [this](const BootContext& ctx, BootPayload& p) {
      if (corrupt_keys_ && !ctx.tailnet_auth_key.empty()) {
        // A key headscale never issued: the last character of the minted one changed.
        std::string bad = ctx.tailnet_auth_key;
        bad.back() = bad.back() == 'a' ? 'b' : 'a';
        auto at = p.user_data.find(ctx.tailnet_auth_key);
        if (at != std::string::npos) p.user_data.replace(at, bad.size(), bad);
      }
    });
    ASSERT_TRUE(RegisterClaimController(*manager_, cl).ok());
    ProvisionerOptions po = kit->ProvisionerOptions();
    ASSERT_TRUE(RegisterProvisioner(*manager_, po).ok());
    runner_ = std::thread([this] { (void)manager_->Run(); });

    // Seed 002's class, with the two additions the header names.
    bj::object cls = testenv::SeedGpuClass(HS_DEPLOY_DIR);
    bj::object& ts = cls["spec"].as_object()["tailscaleConfig"].as_object();
    ts["loginServer"] = headscale_->url();
    ts["apiKeySecretRef"] = bj::object{{"namespace", "tgp-system"}, {"name", "headscale-api"}};
    Status seeded =
        testenv::CreateGpuClassAndPool(*client_, cls, testenv::SeedGpuPool(HS_DEPLOY_DIR));
    ASSERT_TRUE(seeded.ok()) << seeded.error().ToString();
  }

  void TearDown() override {
    if (skipped_) return;
    testenv::StopGpuControllers(*client_, manager_.get(), runner_);
    if (fleet_) fleet_->Stop();
    if (sim_) sim_->Stop();
    if (runpod_) runpod_->Stop();
    mesh_.reset();
    lan_.reset();
    headscale_.reset();
    testenv::DeleteNodes(*client_);
    log_.reset();
  }

  std::vector<bj::object> ListClaims() { return testenv::ListClaims(*client_); }

  std::vector<bj::object> TokenSecrets() { return testenv::BootstrapTokenSecrets(*client_); }

  std::vector<Device> HeadscaleNodes() {
    auto d = admin_->ListDevices();
    EXPECT_TRUE(d.ok()) << d.error().message;
    return d.ok() ? *d : std::vector<Device>{};
  }

  void CreateGpuPod(const std::string& name) {
    ASSERT_NO_FATAL_FAILURE(testenv::CreateSeedGpuPod(*client_, HS_DEPLOY_DIR, name));
  }

  // Diagnostics for a failed wait; claims' status never holds a credential (asserted below), and
  // machines' messages are gpumachine's, which never hold one either.
  std::string Diagnose() {
    std::string out = testenv::DescribeClaims(*client_, /*status_only=*/true);
    for (const auto& m : fleet_->Machines()) out += testenv::DescribeMachine(m);
    out += testenv::DescribeEvents(*client_);
    return out;
  }

  bool skipped_ = false;
  std::atomic<bool> corrupt_keys_{false};
  std::string dir_;
  std::unique_ptr<localmesh::Headscale> headscale_;
  std::unique_ptr<localmesh::MeshLan> lan_;
  std::unique_ptr<sim::gpumachine::MeshMachines> mesh_;
  std::unique_ptr<TailnetAdmin> admin_;
  std::shared_ptr<kube::Client> client_;
  kube::metrics::Registry registry_;
  std::unique_ptr<market::MarketSimulator> sim_;
  std::unique_ptr<market::MarketSimulator> runpod_;
  std::unique_ptr<sim::gpumachine::Fleet> fleet_;
  std::unique_ptr<kube::Manager> manager_;
  std::thread runner_;
  std::unique_ptr<testenv::LogCapture> log_;
};

TEST_F(GpuMesh, ALambdaMachineJoinsTheHeadscaleTailnetRegistersRunsThePodThenLeavesNothing) {
  CreateGpuPod("trainer");
  std::string node_name = testenv::WaitPodRunning(*client_, "default", "trainer", 180s);
  ASSERT_FALSE(node_name.empty()) << Diagnose();
  auto claims = ListClaims();
  ASSERT_EQ(claims.size(), 1u);
  EXPECT_EQ(node_name, std::string(kube::MetaString(claims[0], "name")));
  std::string instance = Str(claims[0], "status", "instanceID");
  std::vector<std::string> statuses;  // every status read, scanned at the end

  // What the machine was given: the bootstrap token and the tailnet key, both in its cloud-init.
  sim::gpumachine::JoinConfig join;
  ASSERT_NO_FATAL_FAILURE(testenv::ReadUserDataJoin(sim_->market(), instance, join));
  EXPECT_EQ(join.tailnet_login_server, headscale_->url());
  ASSERT_FALSE(join.tailnet_auth_key.empty());
  std::vector<std::string> secrets = {join.token.substr(7), join.tailnet_auth_key};
  // headscale keys are "hskey-auth-<prefix>-<secret>": the secret part alone must not leak either.
  if (auto dash = join.tailnet_auth_key.rfind('-');
      dash != std::string::npos && join.tailnet_auth_key.size() - dash > 12) {
    secrets.push_back(join.tailnet_auth_key.substr(dash + 1));
  }

  // The machine joined with real tailscaled; the claim has its key id, tailnet IP and device id.
  auto machine = fleet_->Get(instance);
  ASSERT_TRUE(machine.has_value());
  EXPECT_TRUE(machine->joined) << Diagnose();
  std::string ts_ip = mesh_->Cli(instance, {"ip", "-4"});
  ts_ip.erase(std::remove(ts_ip.begin(), ts_ip.end(), '\n'), ts_ip.end());
  ASSERT_FALSE(ts_ip.empty()) << "the machine's tailscale has no IPv4 address";
  EXPECT_EQ(ts_ip.rfind("100.", 0), 0u) << ts_ip;
  bj::object claim;
  ASSERT_TRUE(Eventually(
      [&] {
        auto c = client_->Get(GPUNodeClaims(), "", node_name);
        if (!c.ok()) return false;
        claim = *c;
        statuses.push_back(bj::serialize(claim["status"]));
        return !Str(claim, "status", "tailnetDeviceID").empty();
      },
      30s))
      << Diagnose();
  EXPECT_EQ(Str(claim, "status", "tailnetIP"), ts_ip);
  EXPECT_FALSE(Str(claim, "status", "tailnetKeyID").empty());
  EXPECT_TRUE(kube::IsConditionTrue(claim, "Ready")) << bj::serialize(claim["status"]);
  std::string device_id = Str(claim, "status", "tailnetDeviceID");
  bool listed = false;
  for (const Device& d : HeadscaleNodes()) {
    if (d.id != device_id) continue;
    listed = true;
    EXPECT_EQ(d.hostname, node_name);
    EXPECT_NE(std::find(d.addresses.begin(), d.addresses.end(), ts_ip), d.addresses.end());
    EXPECT_NE(std::find(d.tags.begin(), d.tags.end(), "tag:gpu"), d.tags.end());
    EXPECT_NE(std::find(d.tags.begin(), d.tags.end(), "tag:k8s"), d.tags.end());
  }
  EXPECT_TRUE(listed) << "headscale has no node " << device_id;
  // The key was single-use and is spent: headscale lists it as used (the refusal of a second
  // machine is gpu_mesh_integration's KeysJoinListReachDeleteAndASpentKeyIsRefused).

  // The Node: the apiserver reaches the simulated kubelet on its loopback address; the tailnet
  // address is the claim's, never a destination on the host network.
  auto node = client_->Get(kube::resources::Nodes(), "", node_name);
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(Str(*node, "spec", "providerID"), "lambdalabs://" + instance);
  std::string internal_ip = testenv::NodeInternalIP(*node);
  EXPECT_EQ(internal_ip.rfind("127.", 0), 0u) << internal_ip;
  EXPECT_TRUE(Eventually([&] { return TokenSecrets().empty(); }, 20s));

  // Pod, pool, claim: the machine is returned, its headscale node and token go.
  kube::DeleteOptions d;
  d.grace_period_seconds = 0;
  ASSERT_TRUE(client_->Delete(kube::resources::Pods(), "default", "trainer", d).ok());
  EXPECT_TRUE(Eventually(
      [&] { return !client_->Get(kube::resources::Pods(), "default", "trainer").ok(); }, 30s));
  ASSERT_TRUE(client_->Delete(GPUNodePools(), "default", "ml-workload-pool").ok());
  ASSERT_TRUE(client_->Delete(GPUNodeClaims(), "", node_name).ok());
  EXPECT_TRUE(Eventually([&] { return ListClaims().empty(); }, 60s)) << Diagnose();
  auto after = sim_->market().Get(instance);
  ASSERT_TRUE(after.has_value());
  EXPECT_TRUE(testenv::Returned(after->state)) << market::StateName(after->state);
  for (const Device& dv : HeadscaleNodes()) {
    EXPECT_NE(dv.id, device_id) << "the machine's headscale node outlived its claim";
  }
  EXPECT_FALSE(client_->Get(kube::resources::Nodes(), "", node_name).ok());
  EXPECT_TRUE(TokenSecrets().empty());

  // No bootstrap token or auth key in a log line, an Event or any status read.
  std::vector<std::string> lines = log_->Lines();
  testenv::ExpectLogged(lines, {"gpu tailnet key created", "mesh: machine joined the tailnet",
                                "gpu tailnet device deleted", "gpu bootstrap token created"});
  for (const auto& line : lines) ExpectAbsent(line, secrets, "a log line: " + line.substr(0, 80));
  for (const auto& [f, text] : testenv::ControlPlaneLogs()) ExpectAbsent(text, secrets, f);
  auto events = client_->List(kube::resources::Events(), "");
  ASSERT_TRUE(events.ok());
  EXPECT_FALSE(events->items.empty());
  for (const auto& e : events->items) ExpectAbsent(bj::serialize(e), secrets, "an Event");
  for (const auto& s : statuses) ExpectAbsent(s, secrets, "the claim's status");
  auto cls = client_->Get(GPUNodeClasses(), "", "standard-gpu-class");
  if (cls.ok()) ExpectAbsent(bj::serialize((*cls)["status"]), secrets, "the class's status");
}

TEST_F(GpuMesh, AMachineWhoseKeyHeadscaleRefusesStaysUnjoinedAndNeverRegisters) {
  corrupt_keys_ = true;
  CreateGpuPod("trainer");
  const std::string instance = testenv::WaitClaimInstance(*client_, 60s).second;
  ASSERT_FALSE(instance.empty()) << Diagnose();
  // Real tailscaled presented the key to real headscale, which refused it: no kubelet started.
  ASSERT_TRUE(testenv::WaitMachineReason(*fleet_, instance, "TailnetJoinFailed", 90s))
      << Diagnose();
  EXPECT_FALSE(fleet_->Get(instance)->joined);
  EXPECT_NE(fleet_->Get(instance)->message.find("tailscale up failed"), std::string::npos)
      << fleet_->Get(instance)->message;
  EXPECT_TRUE(mesh_->Joined().empty());
  ASSERT_NO_FATAL_FAILURE(testenv::ExpectNoNodeFor(*client_, "lambdalabs://" + instance));
  for (const Device& d : HeadscaleNodes()) {
    EXPECT_EQ(d.hostname.rfind("ml-workload-pool-", 0), std::string::npos) << d.hostname;
  }
  // Never registers, without a window to outwait: the provider takes the machine back, and the
  // fleet handles an instance's changes one at a time, in order, so it sees the stop only after
  // the boot that recorded TailnetJoinFailed has returned. A kubelet that boot started, however
  // late, has its node name in the record the stop keeps (sim/gpumachine/gpumachine.h).
  auto inst = sim_->market().Get(instance);
  ASSERT_TRUE(inst.has_value());
  ASSERT_TRUE(sim_->market().Terminate(instance, inst->owner));
  ASSERT_TRUE(Eventually(
      [&] {
        auto m = fleet_->Get(instance);
        return m && testenv::Returned(m->state);
      },
      30s))
      << Diagnose();
  auto ended = fleet_->Get(instance);
  EXPECT_FALSE(ended->joined);
  EXPECT_EQ(ended->agent.node_name, "") << "the refused machine started its kubelet";
  EXPECT_EQ(ended->agent.join_attempts, 0);
}

TEST_F(GpuMesh, ADeviceNoClaimOwnsIsCollectedAndOthersAreLeftAlone) {
  // Two machines join headscale outside hyperslice's launches, both with the class's tags: one
  // named like a claim of the pool (what a machine whose claim went unseen would leave), one not.
  AuthKeyRequest req;
  req.tags = {"tag:k8s", "tag:gpu"};
  req.expiry = 5min;
  std::vector<std::unique_ptr<localmesh::NetNamespace>> nss;
  std::vector<std::unique_ptr<localmesh::Tailscaled>> tss;
  std::vector<std::string> joined;
  auto named = [&](const std::string& host) {
    for (const Device& d : HeadscaleNodes()) {
      if (d.hostname == host) return true;
    }
    return false;
  };
  // `tailscale up` returns once the node is running, which may be after the GC has seen it and
  // its grace passed: a poller records that headscale listed the orphan at all.
  // A jthread: an ASSERT returning early still stops and joins it.
  std::atomic<bool> orphan_listed{false};
  std::jthread poller([&](const std::stop_token& stop) {
    while (!stop.stop_requested() && !orphan_listed) {
      if (named("ml-workload-pool-bcd42")) orphan_listed = true;
      std::this_thread::sleep_for(100ms);
    }
  });
  for (const std::string host : {"ml-workload-pool-bcd42", "someone-elses-box"}) {
    auto key = admin_->CreateAuthKey(req);
    ASSERT_TRUE(key.ok()) << key.error().message;
    auto ns = lan_->AddMachine(host.substr(0, 4) + std::to_string(nss.size()));
    ASSERT_TRUE(ns.ok()) << ns.error().message;
    nss.push_back(std::move(*ns));
    auto ts = localmesh::Tailscaled::Start(localmesh::MeshBinDir(), *nss.back(), *headscale_,
                                           dir_ + "/" + host);
    ASSERT_TRUE(ts.ok()) << ts.error().message;
    tss.push_back(std::move(*ts));
    auto up = tss.back()->Up(key->key, host, 60);
    ASSERT_EQ(up.exit_code, 0) << "tailscale up failed";
    joined.push_back(host);
  }
  poller.request_stop();
  poller.join();
  EXPECT_TRUE(orphan_listed) << "headscale never listed the orphan device";
  ASSERT_EQ(joined.size(), 2u);
  ASSERT_TRUE(named("someone-elses-box"));
  EXPECT_TRUE(Eventually([&] { return !named("ml-workload-pool-bcd42"); }, 30s));
  // Three more finished collector passes, each of which saw the other device.
  const double passes = GcPasses();
  ASSERT_TRUE(Eventually([&] { return GcPasses() >= passes + 3; }, 60s));
  EXPECT_TRUE(named("someone-elses-box")) << "a device not named like ours was collected";
  tss.clear();
  nss.clear();
}

}  // namespace
}  // namespace hyperslice::gpu
