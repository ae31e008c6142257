// Two processes campaign for one Lease on the real apiserver: exactly one reconciles; after
// kill -9 of the leader the other takes over within leaseDuration + retryPeriod (plus a margin for
// process scheduling); no reconcile ever runs in both. Plus: a graceful stop releases the Lease,
// and an in-process leader that cannot renew stops within renewDeadline.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "src/kube/internal/leader_election.h"
#include "test/integration/kube_runtime/lease_record.h"
#include "test/testenv/eventually.h"
#include "test/testenv/testenv.h"

namespace hyperslice::kube {
namespace {

using std::chrono::milliseconds;
using Clk = std::chrono::system_clock;

constexpr int64_t kLeaseMs = 4000, kRenewMs = 3000, kRetryMs = 1000;
// Scheduling slack on a loaded 2-core machine: process start-up of the first reconcile, one
// Lease GET+PUT and the helper's 30 ms reconcile.
constexpr int64_t kMarginMs = 1500;

// An in-process candidate for `lease` in `ns` with this test's durations.
LeaderElectionConfig Candidate(const std::string& ns, const std::string& lease,
                               const std::string& identity) {
  LeaderElectionConfig c;
  c.lease_namespace = ns;
  c.lease_name = lease;
  c.identity = identity;
  c.lease_duration = milliseconds(kLeaseMs);
  c.renew_deadline = milliseconds(kRenewMs);
  c.retry_period = milliseconds(kRetryMs);
  return c;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clk::now().time_since_epoch())
      .count();
}

struct Interval {
  int pid;
  int64_t start, end;
};

std::vector<Interval> ReadLog(const std::string& path) {
  std::vector<Interval> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    Interval iv{};
    if (ss >> iv.pid >> iv.start >> iv.end) out.push_back(iv);
  }
  return out;
}

// A helper process; killed (SIGKILL) and reaped when the test ends, whatever happens.
class Helper {
 public:
  Helper(const std::string& kubeconfig, const std::string& ns, const std::string& lease,
         const std::string& log) {
    std::vector<std::string> args{HS_LE_HELPER,
                                  "--kubeconfig",
                                  kubeconfig,
                                  "--namespace",
                                  ns,
                                  "--lease",
                                  lease,
                                  "--log",
                                  log,
                                  "--lease-ms",
                                  std::to_string(kLeaseMs),
                                  "--renew-ms",
                                  std::to_string(kRenewMs),
                                  "--retry-ms",
                                  std::to_string(kRetryMs)};
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test binary
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~Helper() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  int pid() const { return pid_; }
  void Kill9() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    reaped_ = true;
  }
  // Sends SIGTERM and returns the exit status (or -1 when it did not exit within `timeout`).
  int Terminate(milliseconds timeout) {
    kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return -1;
  }
  bool Alive() {
    if (reaped_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      reaped_ = true;
      return false;
    }
    return true;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

using testenv::Eventually;

std::set<int> Pids(const std::vector<Interval>& ivs) {
  std::set<int> s;
  for (const auto& iv : ivs) s.insert(iv.pid);
  return s;
}

// Fails the test for every pair of intervals from different processes that overlap in time.
void ExpectNoOverlap(std::vector<Interval> ivs) {
  std::sort(ivs.begin(), ivs.end(), [](auto& a, auto& b) { return a.start < b.start; });
  int64_t max_end = 0;
  int max_end_pid = 0;
  int overlaps = 0;
  for (const auto& iv : ivs) {
    EXPECT_LE(iv.start, iv.end);
    if (max_end_pid != 0 && iv.pid != max_end_pid && iv.start < max_end) {
      ++overlaps;
      ADD_FAILURE() << "reconcile of pid " << iv.pid << " started at " << iv.start << " while pid "
                    << max_end_pid << " was reconciling until " << max_end;
    }
    if (iv.end > max_end) {
      max_end = iv.end;
      max_end_pid = iv.pid;
    }
  }
  EXPECT_EQ(overlaps, 0);
}

TEST(LeaderElection, TwoProcessesExactlyOneReconcilesAndKillNineFailsOver) {
  auto& cluster = testenv::Cluster();
  const std::string ns = testenv::TestNamespace();
  const std::string lease = "le-two-processes";
  char tmpl[] = "/tmp/hs-le-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string log = std::string(tmpl) + "/reconciles.log";

  Helper a(cluster.kubeconfig_path(), ns, lease, log);
  Helper b(cluster.kubeconfig_path(), ns, lease, log);
  std::map<int, Helper*> by_pid{{a.pid(), &a}, {b.pid(), &b}};

  ASSERT_TRUE(Eventually([&] { return !ReadLog(log).empty(); }, milliseconds(60000)))
      << "no process started reconciling";
  // Both candidates keep campaigning; only the holder may reconcile: over six of its renewals
  // (one a retry period; the other tries once a retry period too).
  const std::string holder = LeaseRecord(lease).first;
  ASSERT_TRUE(WaitForRenewals(lease, holder, 6)) << "holder " << holder << " stopped renewing";
  auto before = ReadLog(log);
  ASSERT_EQ(Pids(before).size(), 1u) << "more than one process reconciled";
  const int leader = *Pids(before).begin();
  const int follower = leader == a.pid() ? b.pid() : a.pid();
  EXPECT_GT(before.size(), 10u) << "the leader should reconcile continuously";
  EXPECT_EQ(LeaseRecord(lease).first, "helper-" + std::to_string(leader));
  ASSERT_TRUE(by_pid[follower]->Alive());

  const int64_t killed_at = NowNs();
  by_pid[leader]->Kill9();

  ASSERT_TRUE(Eventually(
      [&] {
        auto ivs = ReadLog(log);
        return std::any_of(ivs.begin(), ivs.end(), [&](auto& iv) { return iv.pid == follower; });
      },
      milliseconds(30000)))
      << "the follower never took over";
  auto after = ReadLog(log);
  int64_t first_follower_start = INT64_MAX, last_leader_end = 0;
  for (const auto& iv : after) {
    if (iv.pid == follower) first_follower_start = std::min(first_follower_start, iv.start);
    if (iv.pid == leader) last_leader_end = std::max(last_leader_end, iv.end);
  }
  const double takeover_ms = static_cast<double>(first_follower_start - killed_at) / 1e6;
  std::printf("takeover after kill -9: %.0f ms (leaseDuration %lld ms + retryPeriod %lld ms)\n",
              takeover_ms, static_cast<long long>(kLeaseMs), static_cast<long long>(kRetryMs));
  EXPECT_LE(takeover_ms, kLeaseMs + kRetryMs + kMarginMs);
  // The lease was renewed at most one retryPeriod before the kill; taking over earlier than
  // leaseDuration after that renewal would mean the follower ignored a live lease.
  EXPECT_GE(takeover_ms, kLeaseMs - kRetryMs);
  EXPECT_GT(first_follower_start, last_leader_end);
  EXPECT_EQ(LeaseRecord(lease).first, "helper-" + std::to_string(follower));

  // The new leader keeps reconciling; then a graceful stop releases the Lease.
  ASSERT_TRUE(Eventually(
      [&] {
        auto ivs = ReadLog(log);
        return std::count_if(ivs.begin(), ivs.end(), [&](auto& iv) { return iv.pid == follower; }) >
               5;
      },
      milliseconds(10000)));
  EXPECT_EQ(by_pid[follower]->Terminate(milliseconds(15000)), 0) << "graceful stop failed";
  EXPECT_EQ(LeaseRecord(lease).first, "") << "ReleaseOnCancel should empty holderIdentity";

  auto all = ReadLog(log);
  EXPECT_EQ(Pids(all), (std::set<int>{leader, follower}));
  ExpectNoOverlap(all);
  std::filesystem::remove_all(tmpl);
}

TEST(LeaderElection, LeaseRecordHasClientGoFields) {
  auto admin = testenv::AdminClient();
  const std::string ns = testenv::TestNamespace();
  std::atomic<int> started{0}, stopped{0};
  LeaderElectionConfig c = Candidate(ns, "le-fields", "candidate-1");
  c.on_started_leading = [&] { ++started; };
  c.on_stopped_leading = [&] { ++stopped; };
  auto le = LeaderElector::Create(admin, c);
  ASSERT_TRUE(le.ok()) << le.error().ToString();
  (*le)->Start();
  ASSERT_TRUE(Eventually([&] { return (*le)->IsLeader(); }, milliseconds(20000)));
  // IsLeader() turns true just before the callback runs on the elector's thread.
  ASSERT_TRUE(Eventually([&] { return started.load() == 1; }, milliseconds(5000)));
  auto lease = admin->Get(resources::Leases(), ns, "le-fields");
  ASSERT_TRUE(lease.ok());
  const auto& spec = lease->at("spec").as_object();
  EXPECT_EQ(spec.at("holderIdentity").as_string(), "candidate-1");
  EXPECT_EQ(spec.at("leaseDurationSeconds").as_int64(), kLeaseMs / 1000);
  EXPECT_EQ(spec.at("leaseTransitions").as_int64(), 0);
  // MicroTime: 2006-01-02T15:04:05.000000Z
  for (const char* f : {"acquireTime", "renewTime"}) {
    std::string t(spec.at(f).as_string());
    EXPECT_EQ(t.size(), 27u) << f << "=" << t;
    EXPECT_EQ(t[10], 'T');
    EXPECT_EQ(t[19], '.');
    EXPECT_EQ(t.back(), 'Z');
  }
  // A second candidate cannot take a live lease.
  LeaderElectionConfig c2 = c;
  c2.identity = "candidate-2";
  c2.on_started_leading = nullptr;
  c2.on_stopped_leading = nullptr;
  auto le2 = LeaderElector::Create(admin, c2);
  ASSERT_TRUE(le2.ok());
  (*le2)->Start();
  // Over five renewals of candidate-1 (a lease duration and a retry period; candidate-2 tries
  // once a retry period).
  ASSERT_TRUE(WaitForRenewals("le-fields", "candidate-1", 5));
  EXPECT_FALSE((*le2)->IsLeader());
  EXPECT_EQ((*le2)->leader(), "candidate-1");
  // Release on stop: the second candidate acquires promptly, counting one transition.
  (*le)->Stop();
  EXPECT_EQ(stopped.load(), 1);
  ASSERT_TRUE(Eventually([&] { return (*le2)->IsLeader(); }, milliseconds(2 * kRetryMs + 1000)));
  lease = admin->Get(resources::Leases(), ns, "le-fields");
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->at("spec").at("holderIdentity").as_string(), "candidate-2");
  // client-go counts a change of holder: the release keeps the count, candidate-2 adds one.
  EXPECT_EQ(lease->at("spec").at("leaseTransitions").as_int64(), 1);
  (*le2)->Stop();
}

TEST(LeaderElection, InvalidDurationsAreRejected) {
  auto admin = testenv::AdminClient();
  LeaderElectionConfig c;
  c.lease_namespace = "x";
  c.lease_name = "y";
  c.identity = "z";
  c.lease_duration = milliseconds(3000);
  c.renew_deadline = milliseconds(3000);
  EXPECT_FALSE(LeaderElector::Create(admin, c).ok());
  c.lease_duration = milliseconds(4000);
  c.retry_period = milliseconds(2600);  // renewDeadline must exceed 1.2 × retryPeriod
  EXPECT_FALSE(LeaderElector::Create(admin, c).ok());
  c.retry_period = milliseconds(1000);
  c.identity = "";
  EXPECT_FALSE(LeaderElector::Create(admin, c).ok());
}

// Runs last in this binary: it stops the shared apiserver.
TEST(LeaderElectionZ, LeaderThatCannotRenewStopsWithinRenewDeadline) {
  auto& cluster = testenv::Cluster();
  auto admin = testenv::AdminClient();
  const std::string ns = testenv::TestNamespace();
  std::atomic<int64_t> stopped_at{0};
  LeaderElectionConfig c = Candidate(ns, "le-partition", "partitioned");
  c.on_stopped_leading = [&] { stopped_at = NowNs(); };
  auto le = LeaderElector::Create(admin, c);
  ASSERT_TRUE(le.ok());
  (*le)->Start();
  ASSERT_TRUE(Eventually([&] { return (*le)->IsLeader(); }, milliseconds(20000)));
  std::this_thread::sleep_for(milliseconds(kRetryMs / 2));
  const int64_t cut_at = NowNs();
  ASSERT_TRUE(cluster.StopApiserver().ok());
  ASSERT_TRUE(Eventually([&] { return stopped_at.load() != 0; }, milliseconds(kLeaseMs * 3)))
      << "a leader that cannot renew must stop leading";
  EXPECT_FALSE((*le)->IsLeader());
  const double ms = static_cast<double>(stopped_at.load() - cut_at) / 1e6;
  std::printf("leadership dropped %.0f ms after the apiserver went away (renewDeadline %lld)\n", ms,
              static_cast<long long>(kRenewMs));
  // Its last renewal was at most one retryPeriod before the cut; it stops renewDeadline after
  // that, strictly before leaseDuration after it, when another candidate could take over.
  EXPECT_LE(ms, kRenewMs + 300);
  EXPECT_LT(ms, static_cast<double>(kLeaseMs));
  ASSERT_TRUE(cluster.StartApiserver().ok());
  (*le)->Stop();
}

}  // namespace
}  // namespace hyperslice::kube
