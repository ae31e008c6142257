// Set-up shared by the e2e tests whose rented GPU machines join the cluster for real
// (test/e2e/gpu_join, test/e2e/gpu_mesh): the cluster shape they need, the Lambda simulator with
// sim/gpumachine booting each machine from its payload, and the claim controller's boot payloads
// as `hyperslice operator --gpu` wires them; the set-up and take-down steps and the checks both
// make (the join script a machine read, its Node's InternalIP, the logs scanned for credentials).
// Header-only, so hs_testenv does not depend on hs_gpu
// or the simulators.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "sim/gpumachine/gpumachine.h"
#include "sim/lambda/simulator.h"
#include "sim/runpod/simulator.h"
#include "src/base/json.h"
#include "src/gpu/api.h"
#include "src/gpu/boot_payload.h"
#include "src/gpu/bootstrap_token.h"
#include "src/gpu/claim_controller.h"
#include "src/kube/client.h"
#include "src/kube/manager.h"
#include "src/kube/object_helpers.h"
#include "test/testenv/eventually.h"
#include "test/testenv/files.h"
#include "test/testenv/gpu_market.h"
#include "test/testenv/joining_cluster.h"
#include "test/testenv/testenv.h"
#include "test/testenv/tgp.h"

namespace hyperslice::testenv {

// The cluster shape they need: JoiningClusterOptions (joining_cluster.h).

// kube-controller-manager creates namespace default's ServiceAccount shortly after it starts; the
// ServiceAccount admission plugin refuses pods until then. False when it has not within 60 s.
inline bool WaitDefaultServiceAccount(kube::Client& client) {
  return Eventually(
      [&] {
        auto sa = client.Raw("GET", "/api/v1/namespaces/default/serviceaccounts/default");
        return sa.ok() && sa->status == 200;
      },
      std::chrono::seconds(60));
}

// The Lambda simulator selling an RTX 4090 in us-west-1 and us-east-1 (100 ms lifecycles) and the
// machines it rents booting from their payloads, running pods; `tailnet` is their tailnet seam.
struct LambdaFleet {
  std::unique_ptr<sim::market::MarketSimulator> sim;
  std::unique_ptr<sim::gpumachine::Fleet> fleet;
};
inline Result<LambdaFleet> StartLambdaFleet(
    uint64_t seed,
    std::function<Status(const sim::market::Instance&, const sim::gpumachine::JoinConfig&)>
        tailnet = nullptr) {
  using namespace std::chrono_literals;
  sim::market::ServerOptions so;
  so.market.provider = gpu::kLambda;
  so.market.listings = {sim::lambda::Rtx4090Listing("us-west-1"),
                        sim::lambda::Rtx4090Listing("us-east-1")};
  so.market.seed = seed;
  so.market.boot_delay = 100ms;
  so.market.running_delay = 100ms;
  so.market.terminate_delay = 100ms;
  LambdaFleet out;
  HS_ASSIGN_OR_RETURN(out.sim, sim::lambda::Start(so));
  HS_ASSIGN_OR_RETURN(out.fleet, sim::gpumachine::Fleet::Start({.market = &out.sim->market(),
                                                                .run_pods = true,
                                                                .lease_renew_interval = 2s,
                                                                .node_status_update_interval = 2s,
                                                                .retry_interval = 500ms,
                                                                .tailnet = std::move(tailnet)}));
  return out;
}

// The claim controller's boot payloads as src/gpu/operator.cc wires them: the machine dials the
// shared cluster's apiserver and trusts the CA the operator's client trusts, its bootstrap token
// lives for the launch and registration timeouts and is deleted when the claim lets go. Lambda
// launches need exactly one SSH key and seed 002's class names none: the simulator's accounts
// have "sim-ssh-key". `edit`, when set, changes each payload made (a test's broken one).
inline void SetJoinPayloads(
    gpu::ClaimControllerOptions& cl, const std::shared_ptr<kube::Client>& client,
    const std::function<void(const gpu::BootContext&, gpu::BootPayload&)>& edit = nullptr) {
  gpu::PayloadBuilderOptions pb;
  pb.client = client;
  pb.control_plane_endpoint = Cluster().server_url();
  pb.token_ttl =
      std::chrono::duration_cast<std::chrono::seconds>(cl.launch_timeout + cl.registration_timeout);
  gpu::PayloadBuilder build = gpu::NewPayloadBuilder(std::move(pb));
  cl.payload = [build, edit](const gpu::BootContext& ctx) -> Result<gpu::BootPayload> {
    auto p = build(ctx);
    if (!p.ok()) return p;
    if (p->ssh_key_names.empty()) p->ssh_key_names = {"sim-ssh-key"};
    if (edit) edit(ctx, *p);
    return p;
  };
  cl.release_credentials = [client](const kube::Object& claim) -> Status {
    auto deleted = gpu::DeleteBootstrapTokens(*client, std::string(kube::MetaString(claim, "uid")));
    if (!deleted.ok()) return deleted.error();
    return OkStatus();
  };
}

// What a joining test's SetUp starts with: `client` an admin client of the shared cluster, once
// namespace default's ServiceAccount exists, with the tgp CRDs installed. Fails the test otherwise
// (call under ASSERT_NO_FATAL_FAILURE).
inline void PrepareJoiningCluster(std::shared_ptr<kube::Client>& client,
                                  const std::string& deploy_dir) {
  client = AdminClient();
  ASSERT_TRUE(client);
  ASSERT_TRUE(WaitDefaultServiceAccount(*client));
  Status st = InstallTgpCrds(deploy_dir);
  ASSERT_TRUE(st.ok()) << st.error().ToString();
}

// The RunPod simulator with its default listings: seed 002's class names RunPod, whose offers run
// containers only and are skipped by a joining test's class controller.
inline Result<std::unique_ptr<sim::market::MarketSimulator>> StartContainerOnlyRunPod() {
  sim::market::ServerOptions ro;
  ro.market.listings = sim::runpod::DefaultListings();
  return sim::runpod::Start(ro);
}

// The join script a machine of `market` was given in its cloud-init user data, as it reads it.
// Fails the test when there is none (call under ASSERT_NO_FATAL_FAILURE).
inline void ReadUserDataJoin(sim::market::Market& market, const std::string& instance,
                             sim::gpumachine::JoinConfig& out) {
  auto inst = market.Get(instance);
  ASSERT_TRUE(inst.has_value());
  const auto* ud = inst->payload.if_contains("user_data");
  ASSERT_TRUE(ud != nullptr && ud->is_string());
  auto join = sim::gpumachine::ReadJoinScript(std::string(ud->as_string()), instance);
  ASSERT_TRUE(join.ok()) << join.error().ToString();
  out = std::move(*join);
}

// The Node's InternalIP, "" when it has none.
inline std::string NodeInternalIP(const boost::json::object& node) {
  std::string internal_ip;
  if (const auto* addrs =
          jsonfield::ArrayField(*jsonfield::ObjectField(node, "status"), "addresses")) {
    for (const auto& a : *addrs) {
      if (jsonfield::StringField(a.as_object(), "type") == "InternalIP")
        internal_ip = std::string(jsonfield::StringField(a.as_object(), "address"));
    }
  }
  return internal_ip;
}

// No Node carries `provider_id`.
inline void ExpectNoNodeFor(kube::Client& client, const std::string& provider_id) {
  auto nodes = client.List(kube::resources::Nodes(), "");
  ASSERT_TRUE(nodes.ok());
  for (const auto& n : nodes->items) {
    EXPECT_NE(Str(n, "spec", "providerID"), provider_id);
  }
}

// Each of `messages` is in one of `lines` at least (the scan saw where a credential was handled).
inline void ExpectLogged(const std::vector<std::string>& lines,
                         const std::vector<std::string>& messages) {
  for (const std::string& msg : messages) {
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find(msg) != std::string::npos;
    })) << msg;
  }
}

// The control plane's logs, by file name: kube-apiserver's, kube-controller-manager's and
// kube-scheduler's.
inline std::vector<std::pair<std::string, std::string>> ControlPlaneLogs() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* f :
       {"kube-apiserver.log", "kube-controller-manager.log", "kube-scheduler.log"}) {
    out.emplace_back(f, ReadFile(Cluster().work_dir() + "/" + f));
  }
  return out;
}

// Waits until a claim has an instance; its name and the instance's id ("" when none within
// `timeout`).
inline std::pair<std::string, std::string> WaitClaimInstance(kube::Client& client,
                                                             std::chrono::milliseconds timeout) {
  std::pair<std::string, std::string> out;
  Eventually(
      [&] {
        for (const auto& c : ListClaims(client)) {
          if (!Str(c, "status", "instanceID").empty()) {
            out = {std::string(kube::MetaString(c, "name")), Str(c, "status", "instanceID")};
            return true;
          }
        }
        return false;
      },
      timeout);
  return out;
}

// Waits until `fleet`'s machine for `instance` did not join for `reason`; false at `timeout`.
inline bool WaitMachineReason(const sim::gpumachine::Fleet& fleet, const std::string& instance,
                              const std::string& reason, std::chrono::milliseconds timeout) {
  return Eventually(
      [&] {
        auto m = fleet.Get(instance);
        return m && m->reason == reason;
      },
      timeout);
}

// One line on a machine for a failed wait's message (gpumachine's messages hold no credential).
inline std::string DescribeMachine(const sim::gpumachine::Machine& m) {
  return "machine " + m.instance_id + " " + sim::market::StateName(m.state) +
         " joined=" + std::to_string(m.joined) + " reason=" + m.reason + " " + m.message +
         " agent=" + sim::kubelet::PhaseName(m.agent.phase) + " " + m.agent.reason + " " +
         m.agent.message + "\n";
}

// What a joining test's TearDown starts with: its pods, then seed 002's pool, claims (their
// machines returned) and class deleted; then the controllers stopped.
inline void StopGpuControllers(kube::Client& client, kube::Manager* manager, std::thread& runner) {
  DeletePodsNow(client, "default");
  Status cleaned =
      DeleteGpuClassAndPool(client, "default", "ml-workload-pool", "standard-gpu-class");
  EXPECT_TRUE(cleaned.ok()) << cleaned.error().ToString();
  if (manager) manager->Stop();
  if (runner.joinable()) runner.join();
}

// Seed 002's GPU pod (deploy/examples/gpu-job.yaml's template) as default/`name`, running until
// deleted. Fails the test when it cannot be created (call under ASSERT_NO_FATAL_FAILURE).
inline void CreateSeedGpuPod(kube::Client& client, const std::string& deploy_dir,
                             const std::string& name) {
  auto created = client.Create(kube::resources::Pods(), "default", SeedGpuPod(deploy_dir, name));
  ASSERT_TRUE(created.ok()) << created.error().ToString();
}

// One "claim: <json>" line per claim for a failed wait's message, without managedFields;
// `status_only` where a test scans what it shows for credentials (a claim's status holds none).
inline std::string DescribeClaims(kube::Client& client, bool status_only) {
  std::string out;
  for (auto c : ListClaims(client)) {
    c["metadata"].as_object().erase("managedFields");
    out += "claim: " +
           (status_only ? boost::json::serialize(c["status"]) : boost::json::serialize(c)) + "\n";
  }
  return out;
}

// Every claim's bootstrap-token Secret.
inline std::vector<boost::json::object> BootstrapTokenSecrets(kube::Client& client) {
  kube::ListOptions lo;
  lo.label_selector = gpu::kLabelTokenClaimUid;  // every claim's
  auto l = client.List(kube::resources::Secrets(), gpu::kBootstrapTokenNamespace, lo);
  return l.ok() ? l->items : std::vector<boost::json::object>{};
}

// Waits until Pod <ns>/<name> is Running; the name of its Node, "" when `timeout` passes first.
inline std::string WaitPodRunning(kube::Client& client, const std::string& ns,
                                  const std::string& name, std::chrono::milliseconds timeout) {
  std::string node;
  Eventually(
      [&] {
        auto p = client.Get(kube::resources::Pods(), ns, name);
        if (!p.ok() || Str(*p, "status", "phase") != "Running") return false;
        node = Str(*p, "spec", "nodeName");
        return true;
      },
      timeout);
  return node;
}

}  // namespace hyperslice::testenv
