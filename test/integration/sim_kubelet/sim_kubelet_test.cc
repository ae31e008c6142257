// Simulated TPU VMs joining a real control plane: kube-apiserver + kube-controller-manager
// (bootstrapsigner, CSR approval and signing, node lifecycle with a short grace period) started by
// LocalCluster with kubeadm's join objects, and the GCE simulator reached over HTTP by the real
// GCE client. The test plays the operator's part by hand: a bootstrap token Secret and the join
// values in the VM's metadata.
#include <unistd.h>

#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "sim/gce/simulator.h"
#include "sim/kubelet/fleet.h"
#include "src/gce/compute.h"
#include "src/kube/client.h"
#include "src/tpu/internal/device_plugin.h"
#include "test/testenv/eventually.h"
#include "test/testenv/gce_control.h"
#include "test/testenv/joining_cluster.h"
#include "test/testenv/json_str.h"
#include "test/testenv/node_ready.h"
#include "test/testenv/shell.h"
#include "test/testenv/sim_compute.h"
#include "test/testenv/sim_fleet.h"
#include "test/testenv/testenv.h"

namespace hyperslice::sim::kubelet {
namespace {

namespace json = boost::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kProject[] = "my-gcp-project";
constexpr char kZone[] = "us-central1-c";
constexpr char kMachineType[] = "tpu7x-standard-4t";
constexpr char kToken[] = "sim-kubelet-test-token";  // the GCE client's; a static simulator token

// The simulator of kProject (accepting kToken) with the suite's latencies: 50 ms operations,
// 100 ms boots and MIG retries.
gce::Options SimOptions() {
  gce::Options so;
  so.projects = {kProject};
  so.operation_latency = milliseconds(50);
  so.instance_boot_latency = milliseconds(100);
  so.mig_retry_interval = milliseconds(100);
  so.static_tokens = {kToken};
  return so;
}

using testenv::Eventually;  // polls a condition until it holds or the timeout passes
using testenv::Str;         // a string field, "" when absent

// The pin as kubeadm's documentation computes it, with the openssl CLI (independent of the
// agent's own code): sha256 of the DER SubjectPublicKeyInfo of the CA certificate.
std::string OpensslCaHash(const std::string& ca_path) {
  auto [rc, out] = testenv::Shell("openssl x509 -in '" + ca_path +
                                      "' -pubkey -noout | openssl pkey -pubin -outform der | "
                                      "openssl dgst -sha256 -hex",
                                  /*with_stderr=*/false);
  if (rc != 0) return "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return "sha256:" + out.substr(out.rfind(' ') + 1);
}

std::string RandomString(size_t n) {
  static std::mt19937_64 rng(std::random_device{}());
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += kChars[rng() % 36];
  return s;
}

struct Token {
  std::string id, secret;
  std::string Value() const { return id + "." + secret; }
  std::string User() const { return "system:bootstrap:" + id; }
};

class SimKubeletTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // kube-scheduler too: the pod tests' pods are bound to the simulated VMs.
    testenv::ConfigureCluster(testenv::QuickJoiningClusterOptions());
    cluster_ = &testenv::Cluster();
    admin_ = new std::shared_ptr<kube::Client>(testenv::AdminClient());
    ASSERT_TRUE(*admin_);

    auto sim = gce::Simulator::Start(SimOptions());
    ASSERT_TRUE(sim.ok()) << sim.error().ToString();
    sim_ = std::move(sim).value().release();
    auto compute = testenv::SimCompute(*sim_, kToken);
    ASSERT_TRUE(compute.ok()) << compute.error().ToString();
    compute_ = std::move(compute).value().release();

    FleetOptions fo = testenv::QuickFleetOptions(sim_, cluster_->server_url());
    // VMs of MIGs named pods-* run their pods (a second fleet); the others only join.
    auto running_pods = [](const std::string&, const std::string&, const std::string& name,
                           const std::string&) { return name.rfind("pods-", 0) == 0; };
    fo.filter = [running_pods](const std::string& p, const std::string& z, const std::string& n,
                               const std::string& m) { return !running_pods(p, z, n, m); };
    auto fleet = Fleet::Start(fo);
    ASSERT_TRUE(fleet.ok()) << fleet.error().ToString();
    fleet_ = std::move(fleet).value().release();
    fo.filter = running_pods;
    fo.agent.run_pods = true;
    auto pod_fleet = Fleet::Start(fo);
    ASSERT_TRUE(pod_fleet.ok()) << pod_fleet.error().ToString();
    pod_fleet_ = std::move(pod_fleet).value().release();

    // One instance template for every group of the suite.
    json::object tmpl = json::parse(R"json({
      "name": "sim-kubelet-it",
      "properties": {
        "machineType": "tpu7x-standard-4t",
        "disks": [{"boot": true, "autoDelete": true, "type": "PERSISTENT",
                   "initializeParams": {
                     "sourceImage": "projects/debian-cloud/global/images/family/debian-12"}}],
        "networkInterfaces": [{"network": "global/networks/default"}],
        "metadata": {"items": [{"key": "kube-labels",
                                "value": "cloud.google.com/gke-tpu-topology=2x2x2,example.com/pool=sim"}]}
      }})json")
                            .as_object();
    auto op = compute_->InsertInstanceTemplate(kProject, tmpl);
    ASSERT_TRUE(op.ok()) << op.error().ToString();
    ASSERT_TRUE(compute_->Wait(op->ref, seconds(30)).ok());
    template_link_ = op->target_link;
  }

  static void TearDownTestSuite() {
    delete pod_fleet_;
    delete fleet_;
    delete compute_;
    delete sim_;
    delete admin_;
  }

  kube::Client& admin() { return **admin_; }

  // A MIG of one VM; returns the VM's name once it is RUNNING.
  std::string CreateVm(const std::string& mig) {
    json::object body{{"name", mig},
                      {"baseInstanceName", mig},
                      {"instanceTemplate", template_link_},
                      {"targetSize", 1}};
    auto op = compute_->InsertInstanceGroupManager(kProject, kZone, body);
    EXPECT_TRUE(op.ok()) << op.error().ToString();
    if (!op.ok()) return "";
    EXPECT_TRUE(compute_->Wait(op->ref, seconds(30)).ok());
    std::string name;
    EXPECT_TRUE(Eventually(
        [&] {
          auto mis = compute_->ListManagedInstances(kProject, kZone, mig, {});
          if (!mis.ok() || mis->empty()) return false;
          if (Str(mis->front(), "instanceStatus") != "RUNNING") return false;
          name = Str(mis->front(), "name");
          return true;
        },
        seconds(30)));
    return name;
  }

  // What the operator does for a RUNNING VM: a bootstrap token Secret in kube-system.
  Token CreateBootstrapToken() {
    Token t{RandomString(6), RandomString(16)};
    auto expiration = std::chrono::system_clock::now() + std::chrono::hours(1);
    std::time_t secs = std::chrono::system_clock::to_time_t(expiration);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json::object secret{
        {"apiVersion", "v1"},
        {"kind", "Secret"},
        {"metadata",
         json::object{{"name", "bootstrap-token-" + t.id}, {"namespace", "kube-system"}}},
        {"type", "bootstrap.kubernetes.io/token"},
        {"stringData",
         json::object{{"token-id", t.id},
                      {"token-secret", t.secret},
                      {"expiration", when},
                      {"usage-bootstrap-authentication", "true"},
                      {"usage-bootstrap-signing", "true"},
                      {"auth-extra-groups", "system:bootstrappers:kubeadm:default-node-token"}}}};
    auto created = admin().Create(kube::resources::Secrets(), "kube-system", secret);
    EXPECT_TRUE(created.ok()) << created.error().ToString();
    return t;
  }

  // ...and the join values in that VM's metadata (setMetadata through the real GCE client).
  void SetJoinMetadata(const std::string& vm, const Token& t, const std::string& ca_hash,
                       const std::string& kube_labels = "") {
    auto updated = compute_->UpdateInstanceMetadata(
        kProject, kZone, vm, [&](hyperslice::gce::MetadataItems& items) {
          if (!kube_labels.empty()) items["kube-labels"] = kube_labels;
          items["kubeadm-join-token"] = t.Value();
          items["kubeadm-ca-hash"] = ca_hash;
          // The seed's control-plane address; the fleet routes it to the loopback apiserver.
          items["kubeadm-control-plane-ip"] = "10.128.0.2";
          return true;
        });
    ASSERT_TRUE(updated.ok()) << updated.error().ToString();
    ASSERT_TRUE(updated->has_value());
    ASSERT_TRUE(compute_->Wait((*updated)->ref, seconds(30)).ok());
  }

  std::optional<AgentState> AgentOf(const std::string& vm) {
    auto a = fleet_->agent(kProject, kZone, vm);
    if (!a) a = pod_fleet_->agent(kProject, kZone, vm);
    if (!a) return std::nullopt;
    return a->agent;
  }

  bool AgentPhase(const std::string& vm, Phase p) {
    auto a = AgentOf(vm);
    return a && a->phase == p;
  }

  std::optional<kube::Object> GetNode(const std::string& name) {
    auto n = admin().Get(kube::resources::Nodes(), "", name);
    if (!n.ok()) return std::nullopt;
    return *n;
  }

  // The status of the Node's Ready condition ("" when absent).
  std::string NodeReady(const std::string& name) { return testenv::NodeReadyStatus(admin(), name); }

  std::vector<kube::Object> CsrsOf(const std::string& username) {
    std::vector<kube::Object> out;
    auto list = admin().List(kube::resources::CertificateSigningRequests(), "");
    EXPECT_TRUE(list.ok()) << list.error().ToString();
    if (!list.ok()) return out;
    for (auto& csr : list->items) {
      if (Str(csr["spec"].as_object(), "username") == username) out.push_back(csr);
    }
    return out;
  }

  std::string LeaseRenewTime(const std::string& node) {
    auto l = admin().Get(kube::resources::Leases(), "kube-node-lease", node);
    if (!l.ok()) return "";
    return Str((*l)["spec"].as_object(), "renewTime");
  }

  std::string CaHash() { return OpensslCaHash(cluster_->ca_cert_path()); }

  // Creates a VM, a token and the metadata, and waits for the agent to run.
  std::string JoinedVm(const std::string& mig, const std::string& kube_labels = "") {
    std::string vm = CreateVm(mig);
    if (vm.empty()) return vm;
    Token t = CreateBootstrapToken();
    SetJoinMetadata(vm, t, CaHash(), kube_labels);
    EXPECT_TRUE(Eventually([&] { return AgentPhase(vm, Phase::kRunning); }, seconds(60)))
        << vm << " phase " << (AgentOf(vm) ? PhaseName(AgentOf(vm)->phase) : "none") << ": "
        << (AgentOf(vm) ? AgentOf(vm)->message : "");
    return vm;
  }

  static localcluster::LocalCluster* cluster_;  // the binary's (testenv.h)
  static std::shared_ptr<kube::Client>* admin_;
  static gce::Simulator* sim_;
  static hyperslice::gce::Compute* compute_;
  static Fleet* fleet_;
  static Fleet* pod_fleet_;
  static std::string template_link_;
};

localcluster::LocalCluster* SimKubeletTest::cluster_ = nullptr;
std::shared_ptr<kube::Client>* SimKubeletTest::admin_ = nullptr;
gce::Simulator* SimKubeletTest::sim_ = nullptr;
hyperslice::gce::Compute* SimKubeletTest::compute_ = nullptr;
Fleet* SimKubeletTest::fleet_ = nullptr;
Fleet* SimKubeletTest::pod_fleet_ = nullptr;
std::string SimKubeletTest::template_link_;

TEST_F(SimKubeletTest, VmJoinsThroughBootstrapTokenAndTlsBootstrap) {
  std::string vm = CreateVm("join");
  ASSERT_FALSE(vm.empty());
  // RUNNING without join values: the agent waits and nothing exists in the cluster.
  ASSERT_TRUE(
      Eventually([&] { return AgentPhase(vm, Phase::kWaitingForJoinValues); }, seconds(10)));
  EXPECT_FALSE(GetNode(vm).has_value());

  Token t = CreateBootstrapToken();
  SetJoinMetadata(vm, t, CaHash());
  ASSERT_TRUE(Eventually([&] { return NodeReady(vm) == "True"; }, seconds(60)))
      << "agent: " << PhaseName(AgentOf(vm)->phase) << " " << AgentOf(vm)->message;

  // The TLS bootstrap: one CSR, requested with the bootstrap token, approved and signed by
  // kube-controller-manager for system:node:<vm>.
  auto csrs = CsrsOf(t.User());
  ASSERT_EQ(csrs.size(), 1u);
  const json::object& spec = csrs[0]["spec"].as_object();
  EXPECT_EQ(Str(spec, "signerName"), "kubernetes.io/kube-apiserver-client-kubelet");
  const json::object& csr_status = csrs[0]["status"].as_object();
  EXPECT_FALSE(Str(csr_status, "certificate").empty());
  bool approved = false;
  for (const auto& c : csr_status.at("conditions").as_array()) {
    if (Str(c.as_object(), "type") == "Approved") {
      approved = true;
      EXPECT_EQ(Str(c.as_object(), "reason"), "AutoApproved");
    }
  }
  EXPECT_TRUE(approved);
  EXPECT_EQ(AgentOf(vm)->csr_name, Str(csrs[0]["metadata"].as_object(), "name"));

  // The Node as a kubelet registers it.
  auto node = GetNode(vm);
  ASSERT_TRUE(node.has_value());
  EXPECT_EQ(Str((*node)["spec"].as_object(), "providerID"),
            std::string("gce://") + kProject + "/" + kZone + "/" + vm);
  const json::object& labels = (*node)["metadata"].as_object().at("labels").as_object();
  EXPECT_EQ(Str(labels, "kubernetes.io/hostname"), vm);
  EXPECT_EQ(Str(labels, "kubernetes.io/os"), "linux");
  EXPECT_EQ(Str(labels, "node.kubernetes.io/instance-type"), kMachineType);
  EXPECT_EQ(Str(labels, "cloud.google.com/gke-tpu-topology"), "2x2x2");  // kube-labels
  EXPECT_EQ(Str(labels, "example.com/pool"), "sim");
  const json::object& status = (*node)["status"].as_object();
  EXPECT_EQ(Str(status.at("capacity").as_object(), "google.com/tpu"), "4");
  EXPECT_EQ(Str(status.at("allocatable").as_object(), "google.com/tpu"), "4");
  // Its address is the VM's own loopback address, never the GCE networkIP.
  const json::array& addresses = status.at("addresses").as_array();
  ASSERT_FALSE(addresses.empty());
  EXPECT_EQ(Str(addresses[0].as_object(), "type"), "InternalIP");
  EXPECT_EQ(Str(addresses[0].as_object(), "address"), AgentOf(vm)->address);
  EXPECT_EQ(AgentOf(vm)->address.rfind("127.", 0), 0u) << AgentOf(vm)->address;

  // The Lease is renewed.
  std::string first = LeaseRenewTime(vm);
  ASSERT_FALSE(first.empty());
  EXPECT_TRUE(Eventually([&] { return LeaseRenewTime(vm) != first; }, seconds(10)));
  auto lease = admin().Get(kube::resources::Leases(), "kube-node-lease", vm);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(Str((*lease)["spec"].as_object(), "holderIdentity"), vm);
}

TEST_F(SimKubeletTest, WrongCaHashRefusesToJoinAndCreatesNothing) {
  std::string vm = CreateVm("pin");
  ASSERT_FALSE(vm.empty());
  Token t = CreateBootstrapToken();
  std::string wrong = "sha256:" + std::string(64, 'a');
  SetJoinMetadata(vm, t, wrong);
  ASSERT_TRUE(Eventually([&] { return AgentPhase(vm, Phase::kJoinRefused); }, seconds(60)))
      << (AgentOf(vm) ? PhaseName(AgentOf(vm)->phase) : "no agent");
  auto state = AgentOf(vm);
  EXPECT_EQ(state->reason, "CACertHashMismatch");
  EXPECT_NE(state->message.find(CaHash()), std::string::npos) << state->message;
  EXPECT_TRUE(state->csr_name.empty());
  EXPECT_FALSE(state->has_credentials);
  // Nothing was created with the token.
  EXPECT_TRUE(CsrsOf(t.User()).empty());
  EXPECT_FALSE(GetNode(vm).has_value());

  // The refusal is about the pin: with the right one the same token joins.
  SetJoinMetadata(vm, t, CaHash());
  EXPECT_TRUE(Eventually([&] { return NodeReady(vm) == "True"; }, seconds(60)));
  EXPECT_EQ(CsrsOf(t.User()).size(), 1u);
}

// After the TLS bootstrap the agent acts as system:node:<vm>: NodeRestriction refuses a label no
// kubelet may set on itself (an admin identity could set it), so nothing is registered.
TEST_F(SimKubeletTest, NodeCredentialsAreSubjectToNodeRestriction) {
  std::string vm = CreateVm("restricted");
  ASSERT_FALSE(vm.empty());
  Token t = CreateBootstrapToken();
  SetJoinMetadata(vm, t, CaHash(), "node-restriction.kubernetes.io/pool=tpu");
  ASSERT_TRUE(Eventually(
      [&] {
        auto a = AgentOf(vm);
        return a && a->has_credentials && a->phase == Phase::kRegistering &&
               a->message.find("node-restriction.kubernetes.io/pool") != std::string::npos;
      },
      seconds(60)))
      << (AgentOf(vm) ? AgentOf(vm)->message : "no agent");
  EXPECT_NE(AgentOf(vm)->message.find("forbidden"), std::string::npos) << AgentOf(vm)->message;
  EXPECT_FALSE(GetNode(vm).has_value());
  EXPECT_EQ(CsrsOf(t.User()).size(), 1u);  // the bootstrap itself went through
}

TEST_F(SimKubeletTest, SilentNodeGoesUnknownThroughNodeLifecycleAndRecovers) {
  std::string vm = JoinedVm("heartbeat");
  ASSERT_FALSE(vm.empty());
  ASSERT_TRUE(Eventually([&] { return NodeReady(vm) == "True"; }, seconds(30)));

  ASSERT_TRUE(fleet_->StopHeartbeating(kProject, kZone, vm).ok());
  ASSERT_TRUE(Eventually([&] { return AgentPhase(vm, Phase::kHeartbeatStopped); }, seconds(5)));
  std::string silent_since = LeaseRenewTime(vm);
  // kube-controller-manager's node lifecycle controller (grace period 8 s) marks it Unknown.
  ASSERT_TRUE(Eventually([&] { return NodeReady(vm) == "Unknown"; }, seconds(40)));
  EXPECT_EQ(LeaseRenewTime(vm), silent_since);  // nothing was renewed meanwhile
  auto node = GetNode(vm);
  ASSERT_TRUE(node.has_value());
  for (const auto& c : (*node)["status"].as_object().at("conditions").as_array()) {
    if (Str(c.as_object(), "type") == "Ready") {
      EXPECT_EQ(Str(c.as_object(), "reason"), "NodeStatusUnknown");
    }
  }

  ASSERT_TRUE(fleet_->Restore(kProject, kZone, vm).ok());
  EXPECT_TRUE(Eventually([&] { return NodeReady(vm) == "True"; }, seconds(30)));
  EXPECT_NE(LeaseRenewTime(vm), silent_since);
}

TEST_F(SimKubeletTest, FleetFollowsKillAndRestoreOfTheSimulatedVm) {
  std::string vm = JoinedVm("killed");
  ASSERT_FALSE(vm.empty());
  std::string csr = AgentOf(vm)->csr_name;
  int64_t attempts = AgentOf(vm)->join_attempts;
  testenv::GceControl control(sim_->control_endpoint());
  auto call = [&](const std::string& path, const json::object& body) {
    auto r = control.Call("POST", path, body);  // an error unless 200
    ASSERT_TRUE(r.ok()) << r.error().ToString();
  };

  // Stopped VM: its agent is gone, the lease stops.
  call("/control/instances/kill", {{"zone", kZone}, {"name", vm}, {"mode", "stop"}});
  ASSERT_TRUE(Eventually(
      [&] {
        auto a = fleet_->agent(kProject, kZone, vm);
        return a && a->instance_status == "TERMINATED" && a->agent.phase == Phase::kStopped;
      },
      seconds(10)));
  std::string stopped_at = LeaseRenewTime(vm);

  // Restored: the same VM boots with its node credentials; no second join.
  call("/control/instances/restore", {{"zone", kZone}, {"name", vm}});
  ASSERT_TRUE(Eventually([&] { return AgentPhase(vm, Phase::kRunning); }, seconds(20)));
  EXPECT_TRUE(Eventually([&] { return LeaseRenewTime(vm) != stopped_at; }, seconds(10)));
  EXPECT_EQ(AgentOf(vm)->csr_name, csr);
  EXPECT_EQ(AgentOf(vm)->join_attempts, attempts);

  // Vanished: the group re-creates the VM under the same name with a new id; a new agent waits for
  // fresh join values (the template carries none).
  std::string old_id = fleet_->agent(kProject, kZone, vm)->instance_id;
  call("/control/instances/kill", {{"zone", kZone}, {"name", vm}, {"mode", "vanish"}});
  ASSERT_TRUE(Eventually(
      [&] {
        auto a = fleet_->agent(kProject, kZone, vm);
        return a && a->instance_id != old_id && a->instance_status == "RUNNING" &&
               a->agent.phase == Phase::kWaitingForJoinValues;
      },
      seconds(20)));
  EXPECT_FALSE(AgentOf(vm)->has_credentials);
}

// The simulator's observer hook the fleet is built on, without a control plane: every instance
// change arrives, in order, and nothing after UnsubscribeInstances.
TEST(SimulatorInstanceEvents, ReportCreationStatusChangesDeletionAndStopAfterUnsubscribe) {
  gce::Options so = SimOptions();
  so.operation_latency = milliseconds(20);
  so.mig_retry_interval = milliseconds(50);
  auto sim = gce::Simulator::Start(so);
  ASSERT_TRUE(sim.ok()) << sim.error().ToString();
  auto compute = testenv::SimCompute(**sim, kToken);
  ASSERT_TRUE(compute.ok());

  std::mutex mu;
  std::vector<gce::InstanceEvent> events;
  auto seen = [&] {
    std::lock_guard lock(mu);
    return events;
  };
  auto statuses = [&](const std::string& id) {
    std::string out;
    for (const auto& e : seen())
      if (e.id == id) out += (e.status.empty() ? "-" : e.status) + " ";
    return out;
  };
  uint64_t sub = (*sim)->SubscribeInstances([&](const gce::InstanceEvent& e) {
    std::lock_guard lock(mu);
    events.push_back(e);
  });

  json::object tmpl{{"name", "ev-it"}, {"properties", json::object{{"machineType", kMachineType}}}};
  auto op = (*compute)->InsertInstanceTemplate(kProject, tmpl);
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  ASSERT_TRUE((*compute)->Wait(op->ref, seconds(30)).ok());
  json::object mig{{"name", "ev"},
                   {"baseInstanceName", "ev"},
                   {"instanceTemplate", op->target_link},
                   {"targetSize", 1}};
  auto mop = (*compute)->InsertInstanceGroupManager(kProject, kZone, mig);
  ASSERT_TRUE(mop.ok()) << mop.error().ToString();
  ASSERT_TRUE(Eventually(
      [&] {
        auto ev = seen();
        return !ev.empty() && ev.back().status == "RUNNING";
      },
      seconds(10)));
  gce::InstanceEvent first = seen().front();
  EXPECT_EQ(first.project, kProject);
  EXPECT_EQ(first.zone, kZone);
  EXPECT_EQ(first.machine_type, kMachineType);
  EXPECT_EQ(first.name.rfind("ev-", 0), 0u);
  EXPECT_EQ(statuses(first.id), "PROVISIONING STAGING RUNNING ");

  // A second subscriber first hears of the instance as it is now.
  std::vector<gce::InstanceEvent> late;
  uint64_t sub2 = (*sim)->SubscribeInstances([&](const gce::InstanceEvent& e) {
    std::lock_guard lock(mu);
    late.push_back(e);
  });
  ASSERT_TRUE(Eventually(
      [&] {
        std::lock_guard lock(mu);
        return late.size() == 1;
      },
      seconds(5)));
  EXPECT_EQ(late[0].status, "RUNNING");
  (*sim)->UnsubscribeInstances(sub2);

  testenv::GceControl control((*sim)->control_endpoint());
  auto call = [&](const std::string& path, const json::object& body) {
    auto r = control.Call("POST", path, body);  // an error unless 200
    ASSERT_TRUE(r.ok()) << r.error().ToString();
  };
  call("/control/instances/kill", {{"zone", kZone}, {"name", first.name}, {"mode", "stop"}});
  call("/control/instances/restore", {{"zone", kZone}, {"name", first.name}});
  ASSERT_TRUE(Eventually(
      [&] {
        return statuses(first.id) == "PROVISIONING STAGING RUNNING TERMINATED STAGING RUNNING ";
      },
      seconds(10)))
      << statuses(first.id);

  // Vanished: gone (""), then re-created by its group under the same name with a new id.
  call("/control/instances/kill", {{"zone", kZone}, {"name", first.name}, {"mode", "vanish"}});
  ASSERT_TRUE(Eventually(
      [&] {
        auto ev = seen();
        return ev.back().id != first.id && ev.back().status == "RUNNING";
      },
      seconds(10)));
  EXPECT_EQ(statuses(first.id).substr(statuses(first.id).size() - 2), "- ");
  EXPECT_EQ(seen().back().name, first.name);

  (*sim)->UnsubscribeInstances(sub);
  size_t before = seen().size();
  call("/control/instances/kill", {{"zone", kZone}, {"name", first.name}, {"mode", "stop"}});
  auto got = (*compute)->GetInstance(kProject, kZone, first.name);  // the change has happened
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(Str(*got, "status"), "TERMINATED");
  EXPECT_FALSE(Eventually([&] { return seen().size() != before; }, milliseconds(300)));
  (*sim)->Stop();
}

// The pods bound to a VM run as a kubelet runs them, with the real device-plugin protocol: the
// operator's device-plugin DaemonSet (KCM's daemonset controller, kube-scheduler) runs in process
// on the VM and registers with the VM's kubelet; the Node's google.com/tpu comes from its
// ListAndWatch; a pod asking for chips is allocated them through GetPreferredAllocation and
// Allocate, runs with the plugin's variables and its own, and `kubectl logs` (the apiserver
// dialling the VM's loopback kubelet API) shows its environment.
TEST_F(SimKubeletTest, PodsRunWithTheDevicePluginAndChipsAllocated) {
  std::string vm = JoinedVm(
      "pods-a",
      "cloud.google.com/gke-tpu-accelerator=tpu7x,cloud.google.com/gke-tpu-topology=2x2x2");
  ASSERT_FALSE(vm.empty());
  // Before the plugin runs the Node has no google.com/tpu at all (a kubelet knows nothing of it).
  auto node = GetNode(vm);
  ASSERT_TRUE(node.has_value());
  EXPECT_EQ(
      (*node)["status"].as_object().at("allocatable").as_object().if_contains("google.com/tpu"),
      nullptr);

  auto ds = admin().Create(kube::resources::DaemonSets(), "kube-system",
                           tpu::internal::DevicePluginDaemonSet("kube-system", "hyperslice:dev"));
  ASSERT_TRUE(ds.ok()) << ds.error().ToString();
  auto allocatable = [&](const std::string& name) -> std::string {
    auto n = GetNode(name);
    if (!n) return "";
    return Str((*n)["status"].as_object().at("allocatable").as_object(), "google.com/tpu");
  };
  ASSERT_TRUE(Eventually([&] { return allocatable(vm) == "4"; }, seconds(60)))
      << "allocatable " << allocatable(vm) << ", registrations "
      << AgentOf(vm)->plugin_registrations;
  EXPECT_EQ(AgentOf(vm)->plugin_registrations, 1);
  // The DaemonSet's pod is Running on the VM.
  auto ds_pods = admin().List(kube::resources::Pods(), "kube-system",
                              {.field_selector = "spec.nodeName=" + vm});
  ASSERT_TRUE(ds_pods.ok());
  ASSERT_EQ(ds_pods->items.size(), 1u);
  EXPECT_EQ(Str(ds_pods->items[0]["status"].as_object(), "phase"), "Running");

  // A workload pod: four chips, its own variables (one the plugin also sets), a fieldRef and an
  // expansion.
  json::object pod = json::parse(R"json({
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "worker", "namespace": "default", "labels": {"app": "w"}},
    "spec": {
      "terminationGracePeriodSeconds": 1,
      "containers": [{
        "name": "main", "image": "example.com/tpu-job:1",
        "env": [{"name": "TPU_PROCESS_BOUNDS", "value": "9,9,9"},
                {"name": "MY_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "MY_APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {"name": "GREETING", "value": "hello $(MY_POD)"}],
        "resources": {"limits": {"google.com/tpu": "2"}}}]}})json")
                         .as_object();
  pod["spec"].as_object()["nodeSelector"] = json::object{{"kubernetes.io/hostname", vm}};
  ASSERT_TRUE(admin().Create(kube::resources::Pods(), "default", pod).ok());
  auto phase = [&](const std::string& name) -> std::string {
    auto p = admin().Get(kube::resources::Pods(), "default", name);
    if (!p.ok()) return "gone";
    return Str((*p)["status"].as_object(), "phase");
  };
  ASSERT_TRUE(Eventually([&] { return phase("worker") == "Running"; }, seconds(30)))
      << phase("worker");
  auto running = admin().Get(kube::resources::Pods(), "default", "worker");
  ASSERT_TRUE(running.ok());
  const json::object& pst = (*running)["status"].as_object();
  EXPECT_EQ(Str(pst, "hostIP"), AgentOf(vm)->address);
  EXPECT_EQ(Str(pst, "podIP").rfind("127.", 0), 0u);
  const json::object& cs = pst.at("containerStatuses").as_array()[0].as_object();
  EXPECT_FALSE(Str(cs.at("state").as_object().at("running").as_object(), "startedAt").empty());
  int ready = 0;
  for (const auto& c : pst.at("conditions").as_array())
    ready += Str(c.as_object(), "status") == "True" ? 1 : 0;
  EXPECT_EQ(ready,
            5);  // PodScheduled, PodReadyToStartContainers, Initialized, ContainersReady, Ready

  // kubectl logs: the apiserver reaches the VM's kubelet API at its loopback InternalIP.
  auto logs = admin().Raw("GET", "/api/v1/namespaces/default/pods/worker/log?container=main");
  ASSERT_TRUE(logs.ok()) << logs.error().ToString();
  ASSERT_EQ(logs->status, 200) << logs->body;
  const std::string& out = logs->body;
  // Two chips of four, contiguous on one NUMA node (GetPreferredAllocation), with the plugin's
  // sub-host bounds; the bound the user set wins over the plugin's.
  EXPECT_NE(out.find("TPU_VISIBLE_CHIPS=0,1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("TPU_CHIPS_PER_PROCESS_BOUNDS=1,2,1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("TPU_PROCESS_BOUNDS=9,9,9\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("TPU_PROCESS_BOUNDS=1,1,1"), std::string::npos) << out;
  EXPECT_NE(out.find("MY_POD=worker\n"), std::string::npos) << out;
  EXPECT_NE(out.find("MY_APP=w\n"), std::string::npos) << out;
  EXPECT_NE(out.find("GREETING=hello worker\n"), std::string::npos) << out;

  // More chips than the VM has: the scheduler keeps it Pending and says why.
  json::object big = pod;
  big["metadata"].as_object()["name"] = "too-big";
  big["spec"].as_object()["containers"].as_array()[0].as_object()["resources"] =
      json::object{{"limits", json::object{{"google.com/tpu", "5"}}}};
  ASSERT_TRUE(admin().Create(kube::resources::Pods(), "default", big).ok());
  std::string reason;
  ASSERT_TRUE(Eventually(
      [&] {
        auto p = admin().Get(kube::resources::Pods(), "default", "too-big");
        if (!p.ok()) return false;
        auto* conds = (*p)["status"].as_object().if_contains("conditions");
        if (conds == nullptr) return false;
        for (const auto& c : conds->as_array())
          if (Str(c.as_object(), "type") == "PodScheduled" &&
              Str(c.as_object(), "status") == "False") {
            reason = Str(c.as_object(), "message");
            return true;
          }
        return false;
      },
      seconds(30)));
  EXPECT_NE(reason.find("Insufficient google.com/tpu"), std::string::npos) << reason;
  EXPECT_EQ(phase("too-big"), "Pending");

  // A chip disappears from the VM: the plugin sees it, the kubelet reports allocatable 3 at once.
  auto removed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::unlink((AgentOf(vm)->vm_root + "/dev/accel3").c_str()), 0);
  ASSERT_TRUE(Eventually([&] { return allocatable(vm) == "3"; }, seconds(5)));
  auto took =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - removed_at);
  std::printf("chip removed -> Node allocatable 3 in %lld ms\n",
              static_cast<long long>(took.count()));
  EXPECT_LT(took.count(), 1000);
  node = GetNode(vm);
  EXPECT_EQ(Str((*node)["status"].as_object().at("capacity").as_object(), "google.com/tpu"), "4");

  // Deleted: the kubelet frees the chips and makes the final delete; the three healthy chips
  // left are all free again, so a pod asking for three runs.
  ASSERT_TRUE(admin().Delete(kube::resources::Pods(), "default", "worker").ok());
  ASSERT_TRUE(Eventually([&] { return phase("worker") == "gone"; }, seconds(30)));
  ASSERT_TRUE(admin().Delete(kube::resources::Pods(), "default", "too-big").ok());
  json::object three = pod;
  three["metadata"].as_object()["name"] = "three";
  three["spec"].as_object()["containers"].as_array()[0].as_object()["resources"] =
      json::object{{"limits", json::object{{"google.com/tpu", "3"}}}};
  ASSERT_TRUE(admin().Create(kube::resources::Pods(), "default", three).ok());
  ASSERT_TRUE(Eventually([&] { return phase("three") == "Running"; }, seconds(30)))
      << phase("three");
  ASSERT_TRUE(admin().Delete(kube::resources::Pods(), "default", "three").ok());
  ASSERT_TRUE(admin()
                  .Delete(kube::resources::DaemonSets(), "kube-system",
                          tpu::internal::kDevicePluginDaemonSetName)
                  .ok());
}

}  // namespace
}  // namespace hyperslice::sim::kubelet
