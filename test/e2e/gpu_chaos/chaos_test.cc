// "No doubled machine" (issue 17, Ephemeral GPUs 2/4): `hyperslice operator --gpu` runs as a child
// process against a real kube-apiserver + kube-scheduler and two marketplace simulators (Lambda
// and Paperspace, over their real wire APIs), and is killed with SIGKILL at seeded random moments
// while pending GPU pods are being turned into GPUNodeClaims and machines; meanwhile each
// simulator swallows 20 % of create answers (the machine is made, the connection dropped), answers
// some calls with 500 and rate-limits its list calls. At the end (faults cleared, the operator
// running steadily) the simulators' own state must show every claim with exactly one live
// machine carrying its tgp.io/claim-uid and named in its status, no live machine without a claim
// (after the garbage collector has had its grace period). Then the pods finish and the pool's
// disruption returns every machine under faults (a provider down for a minute) and further kills;
// at the end every machine is terminated and no claim was billed for more than one machine.
//
// HS_GPU_CHAOS_SEED=<n> replays a run (the seed is printed on start); HS_GPU_CHAOS_ROUNDS=<n> and
// HS_GPU_CHAOS_PODS=<n> change the rounds and the pods per round (defaults 9 × 6 = 54 launches).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "sim/lambda/simulator.h"
#include "sim/paperspace/simulator.h"
#include "src/base/json.h"
#include "src/gpu/api.h"
#include "src/gpu/claim_controller.h"
#include "src/gpu/planner.h"
#include "src/gpu/provider.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "test/e2e/gpu_chaos/harness.h"
#include "test/testenv/child_process.h"
#include "test/testenv/crds.h"
#include "test/testenv/eventually.h"
#include "test/testenv/testenv.h"
#include "test/testenv/tgp.h"

namespace hyperslice::gpu::chaos {
namespace {

using testenv::Eventually;

constexpr char kClass[] = "chaos-class";
constexpr char kPool[] = "chaos-pool";
constexpr char kClusterId[] = "gpu-chaos-e2e";
// The create calls, as each simulator names them for counters and faults.
constexpr char kLambdaLaunch[] = "POST /api/v1/instance-operations/launch";
constexpr char kPaperspaceCreate[] = "POST /v1/machines";

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

uint64_t Seed() {
  static const uint64_t seed = [] {
    uint64_t s = EnvOr("HS_GPU_CHAOS_SEED", 0);
    if (s == 0) s = std::random_device{}() | (static_cast<uint64_t>(std::random_device{}()) << 32);
    return s;
  }();
  return seed;
}

using testenv::Str;

class GpuChaos : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { testenv::ConfigureSchedulingCluster(); }

  void SetUp() override {
    std::printf("gpu chaos seed %llu (HS_GPU_CHAOS_SEED=%llu to replay)\n",
                static_cast<unsigned long long>(Seed()), static_cast<unsigned long long>(Seed()));
    std::fflush(stdout);
    rng_.seed(Seed());
    client_ = testenv::AdminClient();
    ASSERT_TRUE(client_);
    Status st = InstallOperatorCrds();
    ASSERT_TRUE(st.ok()) << st.error().ToString();

    market::ServerOptions lo;
    lo.market.listings = {sim::lambda::Rtx4090Listing("us-west-1", 690000, 1000)};
    lo.market.seed = Seed() | 1;
    lo.market.boot_delay = lo.market.running_delay = lo.market.terminate_delay = 50ms;
    auto lambda = sim::lambda::Start(lo);
    ASSERT_TRUE(lambda.ok()) << lambda.error().ToString();
    market::ServerOptions po;
    po.market.listings = sim::paperspace::DefaultListings();
    for (auto& l : po.market.listings) l.capacity = 1000;
    po.market.seed = Seed() | 2;
    po.market.boot_delay = po.market.running_delay = po.market.terminate_delay = 50ms;
    auto paperspace = sim::paperspace::Start(po);
    ASSERT_TRUE(paperspace.ok()) << paperspace.error().ToString();
    lambda_ = std::move(*lambda);
    paperspace_ = std::move(*paperspace);
    views_.push_back(std::make_unique<SimView>(kLambda, lambda_.get()));
    views_.push_back(std::make_unique<SimView>(kPaperspace, paperspace_.get()));
    nodes_ = std::make_unique<StandInNodes>(client_);
    nodes_->Watch(kLambda, lambda_->market());
    nodes_->Watch(kPaperspace, paperspace_->market());

    ASSERT_TRUE(
        testenv::PutSecret(*client_, "tgp-system", "chaos-keys", {{"key", "sim-key"}}).ok());
    auto created = client_->Create(GPUNodeClasses(), "", SimClass(kClass, "chaos-keys"));
    ASSERT_TRUE(created.ok()) << created.error().ToString();
    created = client_->Create(GPUNodePools(), "default", SimPool("default", kPool, kClass));
    ASSERT_TRUE(created.ok()) << created.error().ToString();

    dir_ = std::filesystem::temp_directory_path() / ("hs-gpu-chaos-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    op_ = std::make_unique<testenv::ChildProcess>(
        GpuOperatorArgs(
            HS_HYPERSLICE_BIN, dir_, lambda_->api_endpoint(), paperspace_->api_endpoint(),
            {"--health-probe-port=-1", "--cluster-id=" + std::string(kClusterId), "--workers=4",
             // Lambda's client allows one launch per 12 s; the simulators' own limits
             // are off.
             "--gpu-provider-qps=lambdalabs=50", "--gpu-provider-qps=paperspace=50",
             "--gpu-offer-refresh-interval=2s", "--gpu-gc-interval=1s", "--gpu-gc-grace=3s",
             "--gpu-batch-idle=200ms", "--gpu-batch-max=1s"}),
        (dir_ / "operator.log").string());
    Status started = StartGpuOperator(*op_, *client_, kClass, 60s);
    ASSERT_TRUE(started.ok()) << started.error().ToString();
  }

  void TearDown() override {
    if (op_) op_->Kill();
    if (nodes_) nodes_->Stop();
    if (lambda_) lambda_->Stop();
    if (paperspace_) paperspace_->Stop();
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  int64_t Creates() {
    return lambda_->market().Counters()[kLambdaLaunch] +
           paperspace_->market().Counters()[kPaperspaceCreate];
  }

  void CreatePod(const std::string& name, const std::string& provider) {
    auto created =
        client_->Create(kube::resources::Pods(), "default", PinnedGpuPod(name, provider));
    ASSERT_TRUE(created.ok()) << created.error().ToString();
  }

  std::vector<bj::object> Claims() { return testenv::ListClaims(*client_); }

  // Pods not bound to a Node yet, of those named.
  std::vector<std::string> Unbound(const std::vector<std::string>& names) {
    std::vector<std::string> out;
    auto l = client_->List(kube::resources::Pods(), "default");
    std::set<std::string> bound;
    if (l.ok()) {
      for (const auto& p : l->items) {
        if (!Str(p, "spec", "nodeName").empty()) bound.insert(Str(p, "metadata", "name"));
      }
    }
    for (const auto& n : names) {
      if (!bound.count(n)) out.push_back(n);
    }
    return out;
  }

  Result<std::vector<SimInstance>> AllInstances() {
    std::vector<SimInstance> all;
    for (auto& v : views_) {
      HS_ASSIGN_OR_RETURN(auto got, v->Instances());
      all.insert(all.end(), got.begin(), got.end());
    }
    return all;
  }

  // What is wrong with the final state, "" when nothing: every claim launched with exactly one
  // live instance carrying its uid (the one its status names), no live instance without a claim.
  std::string CheckMachines(const std::vector<bj::object>& claims,
                            const std::vector<SimInstance>& instances) {
    std::string out;
    std::map<std::string, std::vector<const SimInstance*>> live_by_uid;
    for (const auto& i : instances) {
      if (i.live) live_by_uid[i.claim_uid].push_back(&i);
    }
    std::set<std::string> uids;
    for (const auto& c : claims) {
      std::string name = Str(c, "metadata", "name"), uid = Str(c, "metadata", "uid");
      uids.insert(uid);
      std::string provider = Str(c, "status", "provider"), id = Str(c, "status", "instanceID");
      const auto& live = live_by_uid[uid];
      if (id.empty()) {
        out += "claim " + name + " has no instanceID (" + std::to_string(live.size()) +
               " live machine(s) carry its uid)\n";
        continue;
      }
      if (live.size() != 1) {
        out += "claim " + name + ": " + std::to_string(live.size()) + " live machines:";
        for (const auto* i : live) out += " " + i->provider + "/" + i->id;
        out += "\n";
        continue;
      }
      if (live[0]->provider != provider || live[0]->id != id) {
        out.append("claim ").append(name).append(" names ").append(provider).append("/");
        out.append(id).append(" but its machine is ").append(live[0]->provider).append("/");
        out.append(live[0]->id).append("\n");
      }
    }
    for (const auto& [uid, live] : live_by_uid) {
      if (uids.count(uid)) continue;
      for (const auto* i : live) {
        out += "machine " + i->provider + "/" + i->id + " (" + i->name + ", claim-uid \"" + uid +
               "\") has no claim\n";
      }
    }
    return out;
  }

  // Events the operator recorded on claims, summed by reason (and adoptions by tag).
  void CountEvents(int64_t* ambiguous, int64_t* adopted) {
    *ambiguous = *adopted = 0;
    auto l = client_->List(kube::resources::Events(), "");
    if (!l.ok()) return;
    for (const auto& e : l->items) {
      if (Str(e, "involvedObject", "kind") != "GPUNodeClaim") continue;
      int64_t n = jsonfield::IntField(e, "count").value_or(1);
      std::string reason = Str(e, "", "reason");
      if (reason == "AmbiguousLaunch") *ambiguous += n;
      if (reason == "Launched" && Str(e, "", "message").rfind("found instance", 0) == 0) {
        *adopted += n;
      }
    }
  }

  std::string Diagnose() {
    std::string out;
    for (auto c : Claims()) {
      c["metadata"].as_object().erase("managedFields");
      out += "claim: " + bj::serialize(c) + "\n";
    }
    auto inst = AllInstances();
    if (inst.ok()) {
      for (const auto& i : *inst) {
        out += "instance " + i.provider + "/" + i.id + " " + i.name + " " +
               market::StateName(i.state) + " uid=" + i.claim_uid + "\n";
      }
    }
    out += "operator log tail:\n" + op_->Tail(60);
    return out;
  }

  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }

  std::mt19937_64 rng_;
  std::shared_ptr<kube::Client> client_;
  std::unique_ptr<market::MarketSimulator> lambda_, paperspace_;
  std::vector<std::unique_ptr<SimView>> views_;
  std::unique_ptr<StandInNodes> nodes_;
  std::filesystem::path dir_;
  std::unique_ptr<testenv::ChildProcess> op_;
};

TEST_F(GpuChaos, KillNineDuringLaunchesNeverDoublesAMachine) {
  const auto started = std::chrono::steady_clock::now();
  const int rounds = static_cast<int>(EnvOr("HS_GPU_CHAOS_ROUNDS", 9));
  const int per_round = static_cast<int>(EnvOr("HS_GPU_CHAOS_PODS", 6));

  // Faults on both marketplaces: a fifth of the create answers lost after the machine was made,
  // a fifth of the instance lists rate-limited, and 3 % of every call answered with a 500.
  ASSERT_TRUE(Fault(*lambda_, kLambdaLaunch, "swallow", 0.2).ok());
  ASSERT_TRUE(Fault(*lambda_, "GET /api/v1/instances", "rate_limited", 0.2).ok());
  ASSERT_TRUE(Fault(*lambda_, "*", "server_error", 0.03).ok());
  ASSERT_TRUE(Fault(*paperspace_, kPaperspaceCreate, "swallow", 0.2).ok());
  ASSERT_TRUE(Fault(*paperspace_, "GET /v1/startup-scripts", "rate_limited", 0.2).ok());
  ASSERT_TRUE(Fault(*paperspace_, "*", "server_error", 0.03).ok());

  int kills = 0, crashes = 0;
  std::vector<std::string> pods;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::string> these;
    for (int i = 0; i < per_round; ++i) {
      std::string name = "chaos-" + std::to_string(round) + "-" + std::to_string(i);
      CreatePod(name, (round + i) % 2 == 0 ? kLambda : kPaperspace);
      these.push_back(name);
      pods.push_back(name);
    }
    // One to three kills per round, each after a random number of this round's creates reached a
    // simulator (0: while the batch is planned and claims written) plus a random delay.
    int kills_now = static_cast<int>(Uniform(1, 3));
    for (int k = 0; k < kills_now; ++k) {
      int64_t target = Creates() + Uniform(0, per_round - 1);
      (void)Eventually([&] { return Creates() >= target; }, 20s, 5ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(Uniform(0, 400)));
      if (!op_->Alive()) ++crashes;
      op_->Kill();
      ++kills;
      std::this_thread::sleep_for(std::chrono::milliseconds(Uniform(0, 300)));
      op_->Start();
    }
    ASSERT_TRUE(Eventually([&] { return Unbound(these).empty(); }, 120s, 200ms))
        << "round " << round << ": unbound pods " << Unbound(these).size() << "\n"
        << Diagnose();
    std::printf("round %d: %d pods bound, %d kills so far, %lld creates sent\n", round, per_round,
                kills, static_cast<long long>(Creates()));
    std::fflush(stdout);
  }

  // Steady state: faults cleared, the operator left running.
  ASSERT_TRUE(ClearFaults(*lambda_).ok());
  ASSERT_TRUE(ClearFaults(*paperspace_).ok());
  EXPECT_TRUE(op_->Alive()) << "the operator exited by itself\n" << op_->Tail();
  EXPECT_EQ(crashes, 0) << "the operator had exited by itself before a kill";
  EXPECT_TRUE(Unbound(pods).empty());

  // Every claim with exactly one machine, no machine without a claim: waits for the launches in
  // flight and for the garbage collector (3 s grace, 1 s interval) to return strays.
  std::vector<bj::object> claims;
  std::vector<SimInstance> instances;
  std::string problems = "not checked";
  bool settled = Eventually(
      [&] {
        claims = Claims();
        auto inst = AllInstances();
        if (!inst.ok()) {
          problems = inst.error().ToString();
          return false;
        }
        instances = *inst;
        problems = CheckMachines(claims, instances);
        return problems.empty();
      },
      90s, 500ms);
  EXPECT_TRUE(settled) << problems << Diagnose();

  // No claim rented for nothing: every claim's machine runs one of the pods (each pod needs a
  // whole one-GPU machine here, so a pod that got a second claim after a crash leaves one idle).
  // Matched by providerID through the pods' Nodes: a claim's status.nodeName is written after
  // its Node's taint comes off, so right after a kill a pod may run on a Node its claim has not
  // recorded yet.
  std::set<std::string> used_machines;
  std::map<std::string, std::string> provider_id_of;  // Node name -> spec.providerID
  if (auto nodes = client_->List(kube::resources::Nodes(), ""); nodes.ok()) {
    for (const auto& n : nodes->items)
      provider_id_of[Str(n, "metadata", "name")] = Str(n, "spec", "providerID");
  }
  if (auto l = client_->List(kube::resources::Pods(), "default"); l.ok()) {
    for (const auto& p : l->items) used_machines.insert(provider_id_of[Str(p, "spec", "nodeName")]);
  }
  int64_t idle = 0;
  for (const auto& c : claims) {
    if (used_machines.count(Str(c, "status", "providerID"))) continue;
    ++idle;
    ADD_FAILURE() << "claim " << Str(c, "metadata", "name") << " (machine "
                  << Str(c, "status", "providerID") << ", Node " << Str(c, "status", "nodeName")
                  << ") runs none of the pods";
  }

  // Giving the machines back under chaos (issue 19): the pods finish in waves, the pool returns
  // empty machines after 1 s within a 25 % budget, while a tenth of every call fails with a 500,
  // a tenth of Lambda's lists are rate-limited, Paperspace is down for a minute, and the operator
  // is killed at random moments while machines are being returned. Afterwards no claim is left, no
  // machine runs, and (below) no claim was billed for a second machine — a return that was
  // interrupted is finished, never duplicated or forgotten.
  {
    using Steady = std::chrono::steady_clock;
    auto pool = client_->Get(GPUNodePools(), "default", kPool);
    ASSERT_TRUE(pool.ok());
    (*pool)["spec"].as_object()["disruption"] = bj::object{
        {"consolidateAfter", "1s"}, {"budgets", bj::array{bj::object{{"nodes", "25%"}}}}};
    ASSERT_TRUE(client_->Update(GPUNodePools(), "default", *pool).ok());
    ASSERT_TRUE(Fault(*lambda_, "*", "server_error", 0.1).ok());
    ASSERT_TRUE(Fault(*lambda_, "GET /api/v1/instances", "rate_limited", 0.1).ok());
    ASSERT_TRUE(Fault(*paperspace_, "*", "server_error", 0.1).ok());
    auto deleting = [&] {
      int n = 0;
      for (const auto& c : Claims()) n += kube::IsDeleting(c) ? 1 : 0;
      return n;
    };
    const size_t waves = 4;
    int return_kills = 0;
    Steady::time_point down_since{};
    for (size_t wave = 0; wave < waves; ++wave) {
      for (size_t i = wave; i < pods.size(); i += waves) {
        (void)client_->Patch(kube::resources::Pods(), "default", pods[i], kube::PatchType::kMerge,
                             R"({"status":{"phase":"Succeeded"}})", {.subresource = "status"});
      }
      if (wave == 1) {  // Paperspace down for a minute from the second wave on
        ASSERT_TRUE(Fault(*paperspace_, "*", "unavailable", 1.0).ok());
        down_since = Steady::now();
      }
      // Kill while machines of this wave are being returned.
      (void)Eventually([&] { return deleting() > 0; }, 20s, 5ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(Uniform(0, 500)));
      op_->Kill();
      ++return_kills;
      std::this_thread::sleep_for(std::chrono::milliseconds(Uniform(0, 300)));
      op_->Start();
    }
    // Paperspace comes back after a minute (its machines of waves 1-3 wait for it).
    std::this_thread::sleep_until(down_since + std::chrono::seconds(60));
    EXPECT_GT(deleting(), 0) << "machines were waiting for Paperspace";
    ASSERT_TRUE(Fault(*paperspace_, "*", "server_error", 0.1).ok());
    const auto returning = std::chrono::steady_clock::now();
    bool all_returned = Eventually([&] { return Claims().empty(); }, 240s, 500ms);
    ASSERT_TRUE(ClearFaults(*lambda_).ok());
    ASSERT_TRUE(ClearFaults(*paperspace_).ok());
    EXPECT_TRUE(all_returned) << Claims().size() << " claims left\n" << Diagnose();
    EXPECT_TRUE(Eventually(
        [&] {
          auto inst = AllInstances();
          if (!inst.ok()) return false;
          for (const auto& i : *inst)
            if (i.live) return false;
          return true;
        },
        60s))
        << "a machine still runs after every claim was returned";
    kills += return_kills;
    std::printf(
        "returns under chaos: %zu machines given back in %.1f s after the last wave, %d "
        "kills during returns\n",
        claims.size(),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - returning).count(),
        return_kills);
  }

  // Who owned every machine ever made, for the billing check after the claims are gone: the
  // claim's uid by tag, and its name (a machine is named after its claim).
  std::map<std::string, std::string> uid_of, name_of;  // provider/instance id -> claim uid, name
  int64_t made = 0, gone_claims = 0;
  std::set<std::string> claim_uids;
  for (const auto& c : claims) claim_uids.insert(Str(c, "metadata", "uid"));
  for (const auto& i : instances) {
    ++made;
    std::string key = i.provider + "/" + i.id;
    if (!i.claim_uid.empty()) uid_of[key] = i.claim_uid;
    name_of[key] = i.name;
    if (!claim_uids.count(i.claim_uid)) ++gone_claims;
  }
  int64_t ambiguous = 0, adopted = 0;
  CountEvents(&ambiguous, &adopted);
  std::string log = op_->Log();
  int64_t collected = 0;
  for (size_t p = log.find("gpu gc: deleted"); p != std::string::npos;
       p = log.find("gpu gc: deleted", p + 1)) {
    ++collected;
  }

  // Return everything: pods first (nothing pending), then the pool, then the claims.
  for (const auto& p : pods) {
    kube::DeleteOptions d;
    d.grace_period_seconds = 0;
    (void)client_->Delete(kube::resources::Pods(), "default", p, d);
  }
  EXPECT_TRUE(Eventually([&] {
    auto l = client_->List(kube::resources::Pods(), "default");
    return l.ok() && l->items.empty();
  }));
  (void)client_->Delete(GPUNodePools(), "default", kPool);
  for (const auto& c : Claims())
    (void)client_->Delete(GPUNodeClaims(), "", Str(c, "metadata", "name"));
  EXPECT_TRUE(Eventually([&] { return Claims().empty(); }, 90s)) << Diagnose();
  EXPECT_TRUE(Eventually(
      [&] {
        for (auto& v : views_) {
          for (const auto& i : v->sim().market().List("")) {
            if (i.state != market::State::kTerminated) return false;
          }
        }
        return true;
      },
      30s))
      << Diagnose();

  // Billing: no claim paid for two machines (each simulator's ledger), by uid and by name.
  std::map<std::string, std::set<std::string>> by_uid, by_name;  // claim -> machines billed
  double spend = 0;
  size_t entries = 0;
  for (auto& v : views_) {
    for (const auto& e : v->sim().market().Ledger()) {
      std::string key = v->provider() + "/" + e.instance_id;
      ++entries;
      spend += e.Cost();
      if (auto u = uid_of.find(key); u != uid_of.end()) by_uid[u->second].insert(key);
      auto n = name_of.find(key);
      EXPECT_NE(n, name_of.end()) << key << " was billed but never seen in the simulator";
      if (n != name_of.end()) by_name[n->second].insert(key);
    }
  }
  for (const auto& group : {&by_uid, &by_name}) {
    for (const auto& [claim, ids] : *group) {
      std::string list;
      for (const auto& id : ids) list += " " + id;
      EXPECT_EQ(ids.size(), 1u) << "claim " << claim << " was billed for" << list;
    }
  }
  for (const auto& uid : claim_uids) {
    EXPECT_EQ(by_uid[uid].size(), 1u) << "claim uid " << uid;
  }

  (void)client_->Delete(GPUNodeClasses(), "", kClass);
  EXPECT_TRUE(Eventually([&] { return !client_->Get(GPUNodeClasses(), "", kClass).ok(); }));

  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf(
      "gpu chaos (seed %llu): %zu pods, %zu claims launched (%lld idle), %lld machines made (%lld "
      "of claims "
      "since deleted, %lld collected by the GC), %lld create requests, %zu ledger entries, %d "
      "kills, %d operator starts, %lld ambiguous creates seen (swallowed or 500), %lld adoptions "
      "by tag, $%.4f billed, %.1f s\n",
      static_cast<unsigned long long>(Seed()), pods.size(), claims.size(),
      static_cast<long long>(idle), static_cast<long long>(made),
      static_cast<long long>(gone_claims), static_cast<long long>(collected),
      static_cast<long long>(Creates()), entries, kills, op_->starts(),
      static_cast<long long>(ambiguous), static_cast<long long>(adopted), spend, seconds);
  if (rounds * per_round >= 50) {
    EXPECT_GE(claims.size(), 50u);
  }
}

}  // namespace
}  // namespace hyperslice::gpu::chaos
