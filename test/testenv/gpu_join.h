// Set-up shared by the e2e tests whose rented GPU machines join the cluster for real
// (test/e2e/gpu_join, test/e2e/gpu_mesh): the cluster shape they need, the Lambda simulator with
// sim/gpumachine booting each machine from its payload, and the claim controller's boot payloads
// as `hyperslice operator --gpu` wires them. Header-only, so hs_testenv does not depend on hs_gpu
// or the simulators.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "sim/gpumachine/gpumachine.h"
#include "sim/lambda/simulator.h"
#include "src/gpu/api.h"
#include "src/gpu/boot_payload.h"
#include "src/gpu/bootstrap_token.h"
#include "src/gpu/claim_controller.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "test/testenv/eventually.h"
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
