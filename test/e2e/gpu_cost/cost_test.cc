// "Cost you can see" (issue 19): `hyperslice operator --gpu` as a child process (its real
// /metrics), the Lambda and Paperspace simulators with their default lifecycle delays, a real
// kube-apiserver and kube-scheduler, stand-in machines that register a Node for every running
// instance (test/e2e/gpu_chaos/harness.h). Four GPU pods (two pinned to each provider) get
// machines that run for a while; two are finished and their machines returned by consolidation,
// the operator is killed with -9 and started again, then the other two are returned. The total
// spend the operator exports must equal the sum of the simulators' own billing ledgers
// (GET /control/ledger: price x seconds from the accepted create until terminated) within 1 %,
// across the restart. And deploy/grafana/gpu-cost.json: every metric its queries name is one
// the operator exported in this run.
//
// HS_GPU_COST_RUN_SECONDS (default 100) sets how long the machines run before each return: the
// operator learns a machine is gone from the claim controller's poll of the provider (once a
// second), so each machine's spend is over by up to a second, and a shorter run cannot hold 1 %.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
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
#include "src/gpu/internal/claim.h"
#include "src/gpu/planner.h"
#include "src/gpu/provider.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/net/http.h"
#include "test/e2e/gpu_chaos/harness.h"
#include "test/testenv/child_process.h"
#include "test/testenv/crds.h"
#include "test/testenv/eventually.h"
#include "test/testenv/testenv.h"
#include "test/testenv/tgp.h"

namespace hyperslice::gpu::chaos {
namespace {

using testenv::Eventually;

constexpr char kClass[] = "cost-class";
constexpr char kPool[] = "cost-pool";
constexpr char kPoolKey[] = "default/cost-pool";

using testenv::Str;

int RunSeconds() {
  const char* v = std::getenv("HS_GPU_COST_RUN_SECONDS");
  return v != nullptr && *v != '\0' ? std::atoi(v) : 100;
}

// A loopback port nothing listens on now (the operator binds it right after).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

// One sample of the text exposition: name, labels, value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

std::vector<Sample> ParseExposition(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream in(text);
  std::string line;
  static const std::regex kLabel(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)")re");
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t brace = line.find('{');
    size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    if (brace != std::string::npos && brace < space) {
      s.name = line.substr(0, brace);
      size_t close = line.rfind('}');
      std::string labels = line.substr(brace + 1, close - brace - 1);
      for (std::sregex_iterator it(labels.begin(), labels.end(), kLabel), end; it != end; ++it) {
        s.labels[(*it)[1]] = (*it)[2];
      }
    } else {
      s.name = line.substr(0, line.find(' '));
    }
    s.value = std::strtod(line.c_str() + space + 1, nullptr);
    out.push_back(std::move(s));
  }
  return out;
}

// Sum of the samples named `name` whose labels include every pair of `match`.
double Sum(const std::vector<Sample>& samples, const std::string& name,
           const std::map<std::string, std::string>& match = {}) {
  double total = 0;
  for (const Sample& s : samples) {
    if (s.name != name) continue;
    bool ok = true;
    for (const auto& [k, v] : match) {
      auto it = s.labels.find(k);
      ok = ok && it != s.labels.end() && it->second == v;
    }
    if (ok) total += s.value;
  }
  return total;
}

// The metric names a PromQL expression reads: identifiers left after string literals, label
// matchers, range selectors, grouping clauses, Grafana variables and function calls are removed.
std::set<std::string> MetricNamesIn(std::string expr) {
  static const std::regex kLabelValues(R"re(label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)[^)]*\))re");
  static const std::regex kStrings(R"re("(?:[^"\\]|\\.)*")re");
  static const std::regex kMatchers(R"re(\{[^}]*\})re");
  static const std::regex kRanges(R"re(\[[^\]]*\])re");
  static const std::regex kGrouping(
      R"re(\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\))re");
  static const std::regex kVariables(R"re(\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?)re");
  static const std::regex kIdent(R"re(([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?)re");
  static const std::set<std::string> kKeywords = {"and",    "or",  "unless", "bool",
                                                  "offset", "inf", "nan"};
  expr = std::regex_replace(expr, kLabelValues, "$1");
  expr = std::regex_replace(expr, kStrings, "");
  expr = std::regex_replace(expr, kMatchers, "");
  expr = std::regex_replace(expr, kRanges, "");
  expr = std::regex_replace(expr, kGrouping, "");
  expr = std::regex_replace(expr, kVariables, "");
  std::set<std::string> names;
  for (std::sregex_iterator it(expr.begin(), expr.end(), kIdent), end; it != end; ++it) {
    if ((*it)[2].matched) continue;  // a function
    std::string id = (*it)[1];
    // A number's exponent or a duration ("1e3", "5m") starts with a digit and is not matched.
    if (kKeywords.count(id) != 0) continue;
    names.insert(id);
  }
  return names;
}

// Every PromQL query of a Grafana dashboard (panels, rows' panels, templating), with where it is.
void CollectQueries(const bj::value& v, const std::string& where,
                    std::vector<std::pair<std::string, std::string>>& out, int& panels) {
  if (const bj::object* o = v.if_object()) {
    if (o->contains("targets") && o->contains("type")) {
      ++panels;
      const bj::array* targets = jsonfield::ArrayField(*o, "targets");
      std::string title(jsonfield::StringField(*o, "title"));
      int n = 0;
      for (const bj::value& t : targets != nullptr ? *targets : bj::array{}) {
        if (const bj::object* to = t.if_object()) {
          std::string expr(jsonfield::StringField(*to, "expr"));
          if (!expr.empty()) {
            out.emplace_back("panel \"" + title + "\"", expr);
            ++n;
          }
        }
      }
      if (n == 0) out.emplace_back("panel \"" + title + "\"", "");  // a panel without a query
    }
    for (const auto& [k, child] : *o) {
      if (k == "targets") continue;
      if (k == "definition" && child.is_string()) {
        out.emplace_back(where + " variable", std::string(child.get_string()));
      } else {
        CollectQueries(child, where, out, panels);
      }
    }
  } else if (const bj::array* a = v.if_array()) {
    for (const bj::value& child : *a) CollectQueries(child, where, out, panels);
  }
}

TEST(MetricNamesIn, FindsMetricsNotFunctionsLabelsOrVariables) {
  EXPECT_EQ(MetricNamesIn(R"(histogram_quantile(0.99, sum by (le, provider) )"
                          R"((rate(x_seconds_bucket{nodepool=~"$nodepool"}[$__rate_interval]))))"),
            std::set<std::string>{"x_seconds_bucket"});
  EXPECT_EQ(MetricNamesIn("time() - a_timestamp_seconds"),
            std::set<std::string>{"a_timestamp_seconds"});
  EXPECT_EQ(MetricNamesIn("sum(a) / sum(b) * 3600"), (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(MetricNamesIn("label_values(hyperslice_gpu_nodeclaims, nodepool)"),
            std::set<std::string>{"hyperslice_gpu_nodeclaims"});
}

class GpuCost : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { testenv::ConfigureSchedulingCluster(); }

  void SetUp() override {
    client_ = testenv::AdminClient();
    ASSERT_TRUE(client_);
    Status st = InstallOperatorCrds();
    ASSERT_TRUE(st.ok()) << st.error().ToString();

    // The simulators' default lifecycle delays (boot, running 300 ms, terminate 200 ms): billing
    // starts at the accepted create and ends 200 ms after the accepted delete.
    market::ServerOptions lo;
    lo.market.listings = {sim::lambda::Rtx4090Listing("us-west-1", 690000, 100)};
    lo.market.seed = 11;
    auto lambda = sim::lambda::Start(lo);
    ASSERT_TRUE(lambda.ok()) << lambda.error().ToString();
    market::ServerOptions po;
    po.market.listings = sim::paperspace::DefaultListings();
    for (auto& l : po.market.listings) l.capacity = 100;
    po.market.seed = 12;
    auto paperspace = sim::paperspace::Start(po);
    ASSERT_TRUE(paperspace.ok()) << paperspace.error().ToString();
    lambda_ = std::move(*lambda);
    paperspace_ = std::move(*paperspace);
    nodes_ = std::make_unique<StandInNodes>(client_);
    nodes_->Watch(kLambda, lambda_->market());
    nodes_->Watch(kPaperspace, paperspace_->market());

    ASSERT_TRUE(testenv::PutSecret(*client_, "tgp-system", "cost-keys", {{"key", "sim-key"}}).ok());
    auto created = client_->Create(GPUNodeClasses(), "", SimClass(kClass, "cost-keys"));
    ASSERT_TRUE(created.ok()) << created.error().ToString();
    // Empty machines go back 1 s after their pods end, all at once (no budget holds them).
    bj::object pool = SimPool("default", kPool, kClass);
    pool["spec"].as_object()["disruption"] =
        bj::object{{"consolidationPolicy", "WhenEmpty"},
                   {"consolidateAfter", "1s"},
                   {"budgets", bj::array{bj::object{{"nodes", "100%"}}}}};
    created = client_->Create(GPUNodePools(), "default", pool);
    ASSERT_TRUE(created.ok()) << created.error().ToString();

    dir_ = std::filesystem::temp_directory_path() / ("hs-gpu-cost-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    port_ = FreePort();
    ASSERT_GT(port_, 0);
    op_ = std::make_unique<testenv::ChildProcess>(
        GpuOperatorArgs(
            HS_HYPERSLICE_BIN, dir_, lambda_->api_endpoint(), paperspace_->api_endpoint(),
            {"--health-probe-address=127.0.0.1", "--health-probe-port=" + std::to_string(port_),
             "--cluster-id=gpu-cost-e2e", "--gpu-provider-qps=lambdalabs=50",
             "--gpu-provider-qps=paperspace=50", "--gpu-offer-refresh-interval=2s",
             "--gpu-gc-interval=1s", "--gpu-gc-grace=3s"}),
        (dir_ / "operator.log").string());
    Status started = StartGpuOperator(*op_, *client_, kClass, 60s);
    ASSERT_TRUE(started.ok()) << started.error().ToString();
  }

  void TearDown() override {
    testenv::DeletePodsNow(*client_, "default");
    if (op_ && op_->Alive()) {
      for (const auto& c : Claims())
        (void)client_->Delete(GPUNodeClaims(), "", Str(c, "metadata", "name"));
      EXPECT_TRUE(Eventually([&] { return Claims().empty(); }, 60s));
      (void)client_->Delete(GPUNodePools(), "default", kPool);
      (void)client_->Delete(GPUNodeClasses(), "", kClass);
      (void)Eventually([&] { return !client_->Get(GPUNodeClasses(), "", kClass).ok(); }, 30s);
    }
    if (op_) op_->Kill();
    if (nodes_) nodes_->Stop();
    if (lambda_) lambda_->Stop();
    if (paperspace_) paperspace_->Stop();
    testenv::DeleteNodes(*client_);
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  void CreatePod(const std::string& name, const std::string& provider) {
    auto created =
        client_->Create(kube::resources::Pods(), "default", PinnedGpuPod(name, provider));
    ASSERT_TRUE(created.ok()) << created.error().ToString();
  }

  // The pod is done: what a finished Job's pod looks like to consolidation is covered by the
  // disruption tests; here it is deleted so its Node is empty.
  void FinishPod(const std::string& name) {
    kube::DeleteOptions d;
    d.grace_period_seconds = 0;
    ASSERT_TRUE(client_->Delete(kube::resources::Pods(), "default", name, d).ok());
  }

  std::vector<bj::object> Claims() { return testenv::ListClaims(*client_); }

  bool AllBound(const std::vector<std::string>& names) {
    auto l = client_->List(kube::resources::Pods(), "default");
    if (!l.ok()) return false;
    std::set<std::string> bound;
    for (const auto& p : l->items) {
      if (!Str(p, "spec", "nodeName").empty()) bound.insert(Str(p, "metadata", "name"));
    }
    for (const auto& n : names) {
      if (bound.count(n) == 0) return false;
    }
    return true;
  }

  std::string NodeOf(const std::string& pod) {
    auto p = client_->Get(kube::resources::Pods(), "default", pod);
    return p.ok() ? Str(*p, "spec", "nodeName") : std::string();
  }

  Result<std::string> ScrapeText() {
    net::HttpClient::Options o;
    o.base_url = "http://127.0.0.1:" + std::to_string(port_);
    HS_ASSIGN_OR_RETURN(auto http, net::HttpClient::Create(o));
    net::Request req;
    req.method = "GET";
    req.target = "/metrics";
    HS_ASSIGN_OR_RETURN(auto resp, http->Do(req));
    if (resp.status != 200) {
      return Error::Make(Error::Code::kInternal, "/metrics: " + std::to_string(resp.status));
    }
    return resp.body;
  }
  std::vector<Sample> Scrape() {
    auto text = ScrapeText();
    if (text.ok()) last_text_ = *text;
    return text.ok() ? ParseExposition(*text) : std::vector<Sample>{};
  }

  // The simulator's own bill: {"entries":[...],"totalUsd":x}.
  double LedgerUsd(market::MarketSimulator& sim, int* machines = nullptr) {
    testenv::SimHttp control(sim.control_endpoint());
    auto r = control.Call("GET", "/control/ledger");
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().ToString());
    if (!r.ok()) return -1;
    if (machines != nullptr) {
      const bj::array* e = jsonfield::ArrayField(r->as_object(), "entries");
      *machines = e != nullptr ? static_cast<int>(e->size()) : 0;
    }
    return jsonfield::NumberField(r->as_object(), "totalUsd").value_or(-1);
  }

  std::string Diagnose() {
    std::string out;
    for (auto c : Claims()) {
      c["metadata"].as_object().erase("managedFields");
      out += "claim: " + bj::serialize(c) + "\n";
    }
    return out + "operator log tail:\n" + (op_ ? op_->Tail(60) : "");
  }

  std::shared_ptr<kube::Client> client_;
  std::unique_ptr<market::MarketSimulator> lambda_, paperspace_;
  std::unique_ptr<StandInNodes> nodes_;
  std::unique_ptr<testenv::ChildProcess> op_;
  std::filesystem::path dir_;
  int port_ = -1;
  std::string last_text_;
};

TEST_F(GpuCost, ExportedSpendMatchesTheSimulatorsLedgersAcrossARestart) {
  const auto run = std::chrono::seconds(RunSeconds());
  // One offer list of Lambda fails on every attempt: the provider error series exists (the
  // dashboard shows it); the class keeps its cached offers.
  {
    testenv::SimHttp control(lambda_->control_endpoint());
    bj::object fault{
        {"method", "GET /api/v1/instance-types"}, {"kind", "server_error"}, {"count", 5}};
    ASSERT_TRUE(control.Call("POST", "/control/faults", &fault).ok());
  }
  const std::vector<std::string> pods = {"ll-a", "ps-a", "ll-b", "ps-b"};
  for (const auto& p : pods) CreatePod(p, p.rfind("ll-", 0) == 0 ? kLambda : kPaperspace);
  ASSERT_TRUE(Eventually([&] { return AllBound(pods); }, 120s)) << Diagnose();

  // Hourly cost now: the claims' prices, in the metrics and in the class's and pool's status.
  MicroUsd hourly = 0;
  auto claims = Claims();
  ASSERT_EQ(claims.size(), 4u) << Diagnose();
  for (const auto& c : claims) {
    hourly += internal::ClaimHourlyCost(c);
    EXPECT_FALSE(Str(c, "status", "billingStart").empty()) << bj::serialize(c);
  }
  std::vector<Sample> m;
  ASSERT_TRUE(Eventually(
      [&] {
        m = Scrape();
        return Sum(m, "hyperslice_gpu_nodeclaims", {{"phase", "Ready"}}) == 4 &&
               std::abs(Sum(m, "hyperslice_gpu_hourly_cost_usd") -
                        static_cast<double>(hourly) / 1e6) < 1e-6;
      },
      20s))
      << last_text_;
  EXPECT_EQ(Sum(m, "hyperslice_gpu_nodeclaims", {{"phase", "Launching"}}), 0);
  EXPECT_EQ(Sum(m, "hyperslice_gpu_nodeclaim_launch_duration_seconds_count"), 4);
  EXPECT_EQ(Sum(m, "hyperslice_gpu_nodeclaim_registration_duration_seconds_count"), 4);
  EXPECT_EQ(Sum(m, "karpenter_nodeclaims_created_total", {{"nodepool", kPoolKey}}), 4);
  EXPECT_GT(Sum(m, "hyperslice_gpu_hourly_cost_usd", {{"provider", kLambda}}), 0);
  EXPECT_GT(Sum(m, "hyperslice_gpu_hourly_cost_usd", {{"provider", kPaperspace}}), 0);
  std::printf("4 machines, $%.4f/h; launch mean %.3f s, registration mean %.3f s\n",
              static_cast<double>(hourly) / 1e6,
              Sum(m, "hyperslice_gpu_nodeclaim_launch_duration_seconds_sum") / 4,
              Sum(m, "hyperslice_gpu_nodeclaim_registration_duration_seconds_sum") / 4);
  ASSERT_TRUE(Eventually(
      [&] {
        auto cls = client_->Get(GPUNodeClasses(), "", kClass);
        auto pool = client_->Get(GPUNodePools(), "default", kPool);
        return cls.ok() && pool.ok() && Str(*cls, "status", "hourlyCost") == FormatUsd(hourly) &&
               Str(*pool, "status", "hourlyCost") == FormatUsd(hourly);
      },
      20s));

  // Two machines run, then go back (their pods finished): their spend is written to the pool.
  std::this_thread::sleep_for(run);
  FinishPod("ll-a");
  FinishPod("ps-a");
  ASSERT_TRUE(Eventually([&] { return Claims().size() == 2; }, 60s)) << Diagnose();
  ASSERT_TRUE(Eventually(
      [&] {
        auto pool = client_->Get(GPUNodePools(), "default", kPool);
        const bj::array* spend =
            pool.ok() ? jsonfield::ArrayField(pool->at("status").as_object(), "spend") : nullptr;
        return spend != nullptr && spend->size() == 2;
      },
      20s));
  ASSERT_TRUE(Eventually(
      [&] {
        m = Scrape();
        return Sum(m, "karpenter_nodeclaims_terminated_total") == 2 &&
               Sum(m, "hyperslice_gpu_nodeclaims", {{"phase", "Ready"}}) == 2;
      },
      20s))
      << last_text_;
  // The dashboard is checked against this process's metrics: it has launched, registered,
  // disrupted and terminated claims (a restarted operator has not launched any yet).
  std::string first_process = last_text_;
  double before_kill = Sum(m, "hyperslice_gpu_spend_usd_total");

  // Killed with -9 and started again: the total resumes from the pool's status plus the two
  // machines still running (without the persisted part it would drop to theirs alone).
  op_->Kill();
  op_->Start();
  ASSERT_TRUE(Eventually(
      [&] {
        m = Scrape();
        return Sum(m, "hyperslice_gpu_nodeclaims", {{"phase", "Ready"}}) == 2;
      },
      60s))
      << op_->Tail();
  double after_restart = Sum(m, "hyperslice_gpu_spend_usd_total");
  EXPECT_GE(after_restart, before_kill);
  std::printf("spend before the kill $%.6f, after the restart $%.6f\n", before_kill, after_restart);

  std::this_thread::sleep_for(run);
  FinishPod("ll-b");
  FinishPod("ps-b");
  ASSERT_TRUE(Eventually([&] { return Claims().empty(); }, 60s)) << Diagnose();
  ASSERT_TRUE(Eventually(
      [&] {
        m = Scrape();
        return Sum(m, "karpenter_nodeclaims_terminated_total") == 2 &&
               Sum(m, "hyperslice_gpu_hourly_cost_usd") == 0;
      },
      20s))
      << last_text_;

  // The operator's total against the simulators' ledgers, per provider and in all.
  int lambda_machines = 0, paperspace_machines = 0;
  double ledger_lambda = LedgerUsd(*lambda_, &lambda_machines);
  double ledger_paperspace = LedgerUsd(*paperspace_, &paperspace_machines);
  EXPECT_EQ(lambda_machines, 2);
  EXPECT_EQ(paperspace_machines, 2);
  double op_lambda = Sum(m, "hyperslice_gpu_spend_usd_total", {{"provider", kLambda}});
  double op_paperspace = Sum(m, "hyperslice_gpu_spend_usd_total", {{"provider", kPaperspace}});
  double op_total = Sum(m, "hyperslice_gpu_spend_usd_total", {{"nodepool", kPoolKey}});
  double ledger = ledger_lambda + ledger_paperspace;
  std::printf(
      "spend: operator $%.6f (lambdalabs %.6f, paperspace %.6f), ledgers $%.6f (%.6f, %.6f): "
      "%+.3f %%\n",
      op_total, op_lambda, op_paperspace, ledger, ledger_lambda, ledger_paperspace,
      100 * (op_total - ledger) / ledger);
  std::fflush(stdout);
  EXPECT_GT(ledger, 0);
  EXPECT_NEAR(op_total, ledger, 0.01 * ledger);
  EXPECT_NEAR(op_lambda, ledger_lambda, 0.01 * ledger_lambda);
  EXPECT_NEAR(op_paperspace, ledger_paperspace, 0.01 * ledger_paperspace);
  // What the pool's status keeps equals what is exported once nothing runs.
  auto pool = client_->Get(GPUNodePools(), "default", kPool);
  ASSERT_TRUE(pool.ok());
  double persisted = 0;
  for (const bj::value& e : *jsonfield::ArrayField(pool->at("status").as_object(), "spend")) {
    persisted += static_cast<double>(internal::PriceField(&e.as_object(), "usd").value_or(0)) / 1e6;
  }
  EXPECT_NEAR(persisted, op_total, 1e-5);

  // The dashboard: every metric a query names was exported by the operator in this run.
  std::set<std::string> exported;
  for (const std::string* text : {&first_process, &last_text_}) {
    for (const Sample& s : ParseExposition(*text)) exported.insert(s.name);
  }
  std::ifstream in(HS_DEPLOY_DIR "/grafana/gpu-cost.json");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  boost::system::error_code ec;
  bj::value dashboard = bj::parse(ss.str(), ec);
  ASSERT_FALSE(ec) << "gpu-cost.json is not JSON";
  std::vector<std::pair<std::string, std::string>> queries;
  int panels = 0;
  CollectQueries(dashboard, "dashboard", queries, panels);
  EXPECT_GE(panels, 10);
  std::set<std::string> used;
  for (const auto& [where, expr] : queries) {
    EXPECT_FALSE(expr.empty()) << where << " has no query";
    auto names = MetricNamesIn(expr);
    EXPECT_FALSE(names.empty()) << where << ": no metric in " << expr;
    for (const auto& n : names) {
      used.insert(n);
      EXPECT_TRUE(exported.count(n))
          << where << " reads " << n << ", which the operator does not export";
    }
  }
  // The cost, node and latency metrics are on it.
  for (const char* n :
       {"hyperslice_gpu_hourly_cost_usd", "hyperslice_gpu_spend_usd_total",
        "hyperslice_gpu_nodeclaims", "hyperslice_gpu_nodeclaim_launch_duration_seconds_bucket"}) {
    EXPECT_TRUE(used.count(n)) << n << " is not on the dashboard";
  }
}

}  // namespace
}  // namespace hyperslice::gpu::chaos
