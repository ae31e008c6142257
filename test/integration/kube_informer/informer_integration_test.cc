// SharedInformer against the real apiserver: every create/update/delete of 5,000 ConfigMaps is
// observed, in order per object; also while the apiserver restarts mid-stream, while the watch is
// forced to 410 Gone by etcd compaction, and when the watch stream is cut in the middle of an
// event.
//
// What "no loss" means (client-go's guarantee, asserted here):
//  - Without a relist (steady watch), every written version of every object is delivered, exactly
//    once, in write order, and each delete carries the object's final state.
//  - Across a relist (after 410 Gone, or after an apiserver restart when the new watch cache cannot
//    serve the old resourceVersion), versions written while disconnected may be coalesced: the
//    relist delivers the object's current state. Still: every object's FINAL state is delivered;
//    every delete is delivered (when the delete happened while disconnected, as a delete with
//    final_state_unknown carrying the last state the cache knew); an object's sequence of versions
//    never goes backwards (a relist of an unchanged object may repeat its version); every delivered
//    (resourceVersion, content) pair is one that was written.
//  - Afterwards the cache equals a fresh List.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "src/base/log.h"
#include "src/kube/client.h"
#include "src/kube/informer.h"
#include "src/localcluster/localcluster.h"
#include "test/integration/kube_informer/tcp_proxy.h"
#include "test/testenv/eventually.h"
#include "test/testenv/own_cluster.h"
#include "test/testenv/testenv.h"

namespace hyperslice::kube {
namespace {

using namespace std::chrono_literals;

// 5,000 objects (the acceptance figure). Sanitizer builds (scripts/test.sh runs these tests under
// ASan/UBSan and TSan, to find races and memory errors, not to prove scale) use 1,000 so the
// instrumented client stays well inside the suite's timeout.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kObjects = 1000;
#else
constexpr int kObjects = 5000;
#endif
constexpr int kWriters = 8;
constexpr auto kConverge = 300s;  // hang guard only; the tests wait for conditions

std::string Name(int i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "cm-%05d", i);
  return buf;
}

int VersionOf(const Object& obj) {
  const auto* data = obj.if_contains("data");
  if (data == nullptr || !data->is_object()) return -1;
  const auto* v = data->get_object().if_contains("v");
  if (v == nullptr || !v->is_string()) return -1;
  return std::atoi(std::string(v->get_string()).c_str());
}

bool Retryable(const Error& e) {
  return e.code == Error::Code::kUnavailable || e.code == Error::Code::kTimeout ||
         e.code == Error::Code::kTooManyRequests || e.code == Error::Code::kInternal ||
         e.code == Error::Code::kUnknown;
}

// Writes ConfigMaps "cm-NNNNN" with data.v = version number, remembering the resourceVersion the
// apiserver gave each version. Retries through apiserver restarts; resolves ambiguous writes (the
// request succeeded but the answer was lost) by reading the object back.
class Workload {
 public:
  Workload(std::shared_ptr<Client> client, std::string ns, int n)
      : client_(std::move(client)), ns_(std::move(ns)), rvs_(n), deleted_(n) {}

  int size() const { return static_cast<int>(rvs_.size()); }
  const std::vector<std::string>& rvs(int i) const { return rvs_[i]; }
  bool deleted(int i) const { return deleted_[i]; }
  int writes() const { return writes_.load(); }

  // Runs fn(i) for each i with filter(i), on kWriters threads.
  void ForEach(const std::function<bool(int)>& filter, const std::function<void(int)>& fn) {
    std::atomic<int> next{0};
    std::vector<std::thread> threads;
    threads.reserve(kWriters);
    for (int t = 0; t < kWriters; ++t) {
      threads.emplace_back([&] {
        for (int i = next++; i < size(); i = next++) {
          if (filter(i)) fn(i);
        }
      });
    }
    for (auto& t : threads) t.join();
  }

  void Create(int i) {
    Object obj{{"apiVersion", "v1"},
               {"kind", "ConfigMap"},
               {"metadata", boost::json::object{{"name", Name(i)}, {"namespace", ns_}}},
               {"data", boost::json::object{{"v", "0"}}}};
    for (int attempt = 0;; ++attempt) {
      auto r = client_->Create(resources::ConfigMaps(), ns_, obj);
      if (r.ok()) return Record(i, *r);
      if (r.error().code == Error::Code::kAlreadyExists && attempt > 0) {
        auto got = Get(i);
        if (VersionOf(got) == 0) return Record(i, got);
      }
      if (!Retryable(r.error()) || attempt > 600) return Fail("create", i, r.error());
      std::this_thread::sleep_for(100ms);
    }
  }

  void Update(int i) {
    int v = static_cast<int>(rvs_[i].size());
    if (v == 0) return;
    Object obj{{"apiVersion", "v1"},
               {"kind", "ConfigMap"},
               {"metadata",
                boost::json::object{
                    {"name", Name(i)}, {"namespace", ns_}, {"resourceVersion", rvs_[i].back()}}},
               {"data", boost::json::object{{"v", std::to_string(v)}}}};
    for (int attempt = 0;; ++attempt) {
      auto r = client_->Update(resources::ConfigMaps(), ns_, obj);
      if (r.ok()) return Record(i, *r);
      if (r.error().code == Error::Code::kConflict && attempt > 0) {
        auto got = Get(i);
        if (VersionOf(got) == v) return Record(i, got);
      }
      if (!Retryable(r.error()) || attempt > 600) return Fail("update", i, r.error());
      std::this_thread::sleep_for(100ms);
    }
  }

  void Delete(int i) {
    for (int attempt = 0;; ++attempt) {
      auto s = client_->Delete(resources::ConfigMaps(), ns_, Name(i));
      if (s.ok() || (s.error().code == Error::Code::kNotFound && attempt > 0)) {
        deleted_[i] = true;
        ++writes_;
        return;
      }
      if (!Retryable(s.error()) || attempt > 600) return Fail("delete", i, s.error());
      std::this_thread::sleep_for(100ms);
    }
  }

  std::vector<std::string> failures() {
    std::lock_guard lock(mu_);
    return failures_;
  }

 private:
  Object Get(int i) {
    for (int attempt = 0; attempt < 600; ++attempt) {
      auto r = client_->Get(resources::ConfigMaps(), ns_, Name(i));
      if (r.ok()) return *r;
      if (!Retryable(r.error())) break;
      std::this_thread::sleep_for(100ms);
    }
    return {};
  }
  void Record(int i, const Object& obj) {
    rvs_[i].emplace_back(ResourceVersionOf(obj));
    ++writes_;
  }
  void Fail(const char* what, int i, const Error& e) {
    std::lock_guard lock(mu_);
    failures_.push_back(std::string(what) + " " + Name(i) + ": " + e.ToString());
  }

  std::shared_ptr<Client> client_;
  std::string ns_;
  std::vector<std::vector<std::string>> rvs_;  // rvs_[i][v]: resourceVersion of version v
  std::vector<char> deleted_;
  std::atomic<int> writes_{0};
  std::mutex mu_;
  std::vector<std::string> failures_;
};

// Every handler call, per object key, in delivery order.
class Recorder {
 public:
  struct Seen {
    char kind;  // 'a'dd, 'u'pdate, 'd'elete
    int version;
    std::string rv;
    bool unknown = false;
  };

  EventHandler Handler() {
    EventHandler h;
    h.on_add = [this](const ObjectPtr& o) { Push('a', *o, false); };
    h.on_update = [this](const ObjectPtr&, const ObjectPtr& cur) { Push('u', *cur, false); };
    h.on_delete = [this](const ObjectPtr& last, bool unknown) { Push('d', *last, unknown); };
    return h;
  }
  std::vector<Seen> Of(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = seen_.find(key);
    return it == seen_.end() ? std::vector<Seen>{} : it->second;
  }
  int64_t calls() const { return calls_.load(); }

 private:
  void Push(char kind, const Object& o, bool unknown) {
    std::lock_guard lock(mu_);
    seen_[ObjectKey(o)].push_back(
        Seen{kind, VersionOf(o), std::string(ResourceVersionOf(o)), unknown});
    ++calls_;
  }
  std::mutex mu_;
  std::map<std::string, std::vector<Seen>> seen_;
  std::atomic<int64_t> calls_{0};
};

// True when the recorder has seen, for every object, its end state: the delete of a deleted
// object, the final version of a live one.
bool Converged(Workload& w, Recorder& rec, const std::string& ns) {
  for (int i = 0; i < w.size(); ++i) {
    if (w.rvs(i).empty()) continue;
    auto seen = rec.Of(ns + "/" + Name(i));
    if (seen.empty()) return false;
    if (w.deleted(i)) {
      if (seen.back().kind != 'd') return false;
    } else if (seen.back().version != static_cast<int>(w.rvs(i).size()) - 1) {
      return false;
    }
  }
  return true;
}

bool WaitConverged(Workload& w, Recorder& rec, const std::string& ns) {
  return testenv::Eventually([&] { return Converged(w, rec, ns); }, kConverge, 200ms);
}

// Checks every object's delivered sequence (see the file comment). `strict`: no relist happened,
// so every version must have been delivered exactly once. Returns the violations (at most 20).
std::vector<std::string> Verify(Workload& w, Recorder& rec, const std::string& ns, bool strict) {
  std::vector<std::string> bad;
  auto fail = [&](int i, const std::string& why) {
    if (bad.size() < 20) bad.push_back(Name(i) + ": " + why);
  };
  for (int i = 0; i < w.size(); ++i) {
    const auto& rvs = w.rvs(i);
    if (rvs.empty()) continue;
    const int final_version = static_cast<int>(rvs.size()) - 1;
    auto seen = rec.Of(ns + "/" + Name(i));
    if (seen.empty()) {
      fail(i, "never delivered");
      continue;
    }
    if (seen.front().kind != 'a') fail(i, "first notification is not an add");
    int prev = -1;
    std::vector<int> versions;
    for (size_t k = 0; k < seen.size(); ++k) {
      const auto& s = seen[k];
      if (s.kind == 'a' && k > 0) fail(i, "add after the first notification");
      if (s.kind == 'd') {
        if (k + 1 != seen.size()) fail(i, "notification after its delete");
        if (!w.deleted(i)) fail(i, "delete delivered for a live object");
        if (s.unknown) {
          if (strict) fail(i, "delete with unknown final state without a relist");
          if (s.version < prev) fail(i, "unknown-final-state delete went back in version");
          if (s.version < 0 || s.version > final_version || s.rv != rvs[s.version]) {
            fail(i, "unknown-final-state delete carries a state never written");
          }
        } else if (s.version != final_version) {
          fail(i, "delete carries version " + std::to_string(s.version) + ", final is " +
                      std::to_string(final_version));
        }
        continue;
      }
      if (s.version < 0 || s.version > final_version) {
        fail(i, "unknown version " + std::to_string(s.version));
        continue;
      }
      if (s.rv != rvs[s.version]) {
        fail(i, "version " + std::to_string(s.version) + " delivered with resourceVersion " + s.rv +
                    ", written as " + rvs[s.version]);
      }
      if (s.version < prev) {
        fail(i,
             "went back from version " + std::to_string(prev) + " to " + std::to_string(s.version));
      }
      prev = s.version;
      versions.push_back(s.version);
    }
    if (w.deleted(i) && seen.back().kind != 'd') fail(i, "delete never delivered");
    if (!w.deleted(i) && (versions.empty() || versions.back() != final_version)) {
      fail(i, "final version " + std::to_string(final_version) + " never delivered");
    }
    if (strict) {
      std::vector<int> all;
      for (int v = 0; v <= final_version; ++v) all.push_back(v);
      if (versions != all) fail(i, "not every version delivered exactly once, in order");
    }
  }
  return bad;
}

// The informer's cache against a fresh List: same keys, resourceVersions and contents.
void ExpectCacheEqualsList(const SharedInformer& informer, Client& client, const std::string& ns) {
  auto list = client.ListAll(resources::ConfigMaps(), ns, ListOptions{});
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  std::map<std::string, std::pair<std::string, int>> want, got;
  for (const auto& o : list->items) {
    want[ObjectKey(o)] = {std::string(ResourceVersionOf(o)), VersionOf(o)};
  }
  for (const auto& o : informer.store().List()) {
    got[ObjectKey(*o)] = {std::string(ResourceVersionOf(*o)), VersionOf(*o)};
  }
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "cache differs from a fresh list";
}

InformerOptions Options(const std::string& ns) {
  InformerOptions o;
  o.ns = ns;
  o.reflector.backoff.max = 2000ms;  // keep recovery quick in tests (default 30 s)
  return o;
}

std::string JoinFirst(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += "\n  " + x;
  return s;
}

int PortOf(const std::string& url) { return std::atoi(url.substr(url.rfind(':') + 1).c_str()); }

// A client of `cluster` that reaches its apiserver through a proxy of it (the tests cut and
// partition the proxy, never the apiserver's own port).
Result<std::shared_ptr<Client>> ClientVia(const testing::TcpProxy& proxy,
                                          const localcluster::LocalCluster& cluster) {
  Config via_proxy = cluster.AdminConfig();
  via_proxy.server = "https://127.0.0.1:" + std::to_string(proxy.port());
  return Client::Create(via_proxy);
}

// An informer on the namespace's ConfigMaps, started, whose every handler call `rec` records.
struct RecordedInformer {
  RecordedInformer(std::shared_ptr<Client> client, const std::string& ns)
      : informer(std::move(client), resources::ConfigMaps(), Options(ns)) {
    informer.AddEventHandler(rec.Handler());
    informer.Start();
  }
  Recorder rec;  // before the informer, which may call it until it stops
  SharedInformer informer;
};

class InformerIntegrationTest : public ::testing::Test {
 protected:
  // The shared cluster's admin client, a namespace of the test's own and a recorded informer on
  // it, synced; then every object of the workload created.
  void StartOnSharedCluster() {
    client_ = testenv::AdminClient();
    ASSERT_NE(client_, nullptr);
    ns_ = testenv::TestNamespace();
    recorded_ = std::make_unique<RecordedInformer>(client_, ns_);
    ASSERT_TRUE(recorded_->informer.WaitForCacheSync(60s));
    w_ = std::make_unique<Workload>(client_, ns_, kObjects);
    w_->ForEach([](int) { return true; }, [&](int i) { w_->Create(i); });
  }

  SharedInformer& informer() { return recorded_->informer; }
  Recorder& rec() { return recorded_->rec; }
  Workload& w() { return *w_; }

  std::shared_ptr<Client> client_;
  std::string ns_;
  std::unique_ptr<RecordedInformer> recorded_;
  std::unique_ptr<Workload> w_;
};

// Phases shared by the tests: 0 create all; 1 update all; 2 delete 4 of 5, update the fifth.
bool Live(int i) { return i % 5 == 0; }
void FinalStep(Workload& w, int i) {
  if (Live(i)) {
    w.Update(i);
  } else {
    w.Delete(i);
  }
}

TEST_F(InformerIntegrationTest, SeesEveryChangeOf5000ObjectsInOrder) {
  ASSERT_NO_FATAL_FAILURE(StartOnSharedCluster());
  w().ForEach([](int) { return true; }, [&](int i) { w().Update(i); });
  w().ForEach([](int) { return true; }, [&](int i) { FinalStep(w(), i); });
  ASSERT_EQ(w().failures(), std::vector<std::string>{});

  ASSERT_TRUE(WaitConverged(w(), rec(), ns_)) << "informer did not observe every end state";
  auto stats = informer().reflector_stats();
  EXPECT_EQ(stats.gone, 0);
  EXPECT_EQ(stats.lists, 1);
  auto bad = Verify(w(), rec(), ns_, /*strict=*/stats.lists == 1);
  EXPECT_TRUE(bad.empty()) << JoinFirst(bad);
  EXPECT_EQ(rec().calls(), 3 * kObjects);  // add, update, then a final update or the delete
  ExpectCacheEqualsList(informer(), *client_, ns_);
  EXPECT_EQ(informer().store().Size(), static_cast<size_t>(kObjects / 5));
  informer().Stop();
}

TEST_F(InformerIntegrationTest, NoLossWhileApiserverRestartsMidStream) {
  ASSERT_NO_FATAL_FAILURE(StartOnSharedCluster());
  // Restart the apiserver while the updates stream: writers retry through the outage.
  std::atomic<bool> restarted{false};
  std::thread restarter([&] {
    while (w().writes() < kObjects + kObjects / 3) std::this_thread::sleep_for(10ms);
    auto s = testenv::Cluster().RestartApiserver();
    EXPECT_TRUE(s.ok()) << s.error().ToString();
    restarted = true;
  });
  w().ForEach([](int) { return true; }, [&](int i) { w().Update(i); });
  restarter.join();
  ASSERT_TRUE(restarted);
  w().ForEach([](int) { return true; }, [&](int i) { FinalStep(w(), i); });
  ASSERT_EQ(w().failures(), std::vector<std::string>{});

  ASSERT_TRUE(WaitConverged(w(), rec(), ns_)) << "informer did not observe every end state";
  auto stats = informer().reflector_stats();
  // The restart really broke the watch (else this test would prove nothing).
  EXPECT_GE(stats.watch_errors + stats.gone, 1);
  std::printf("restart: lists=%lld watches=%lld watch_errors=%lld gone=%lld last_error=%s\n",
              static_cast<long long>(stats.lists), static_cast<long long>(stats.watches),
              static_cast<long long>(stats.watch_errors), static_cast<long long>(stats.gone),
              stats.last_error.ToString().c_str());
  auto bad = Verify(w(), rec(), ns_, /*strict=*/stats.lists == 1);
  EXPECT_TRUE(bad.empty()) << JoinFirst(bad);
  ExpectCacheEqualsList(informer(), *client_, ns_);
  informer().Stop();
}

// A cluster without the watch cache, so watches are served by etcd and compaction makes an old
// resourceVersion 410 Gone. The informer reaches the apiserver through a proxy that can partition
// it while the test writes directly, compacts etcd, then heals: the resumed watch gets 410 and the
// informer relists.
TEST_F(InformerIntegrationTest, RelistsAfter410GoneFromEtcdCompactionWithoutLoss) {
  auto own = testenv::StartOwnCluster({.watch_cache = false});
  ASSERT_TRUE(own.ok()) << own.error().ToString();
  localcluster::LocalCluster* cluster = own->cluster.get();
  std::shared_ptr<Client> direct = own->client;
  testing::TcpProxy proxy(PortOf(cluster->server_url()));
  auto proxied = ClientVia(proxy, *cluster);
  ASSERT_TRUE(proxied.ok()) << proxied.error().ToString();

  const std::string ns = "informer-gone";
  Object nso{
      {"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", boost::json::object{{"name", ns}}}};
  ASSERT_TRUE(direct->Create(resources::Namespaces(), "", nso).ok());

  RecordedInformer recorded(*proxied, ns);
  SharedInformer& informer = recorded.informer;
  Recorder& rec = recorded.rec;
  ASSERT_TRUE(informer.WaitForCacheSync(60s));

  Workload w(direct, ns, kObjects);
  w.ForEach([](int) { return true; }, [&](int i) { w.Create(i); });
  // Let the informer see the creates live, then cut it off.
  testenv::Eventually([&] { return informer.store().Size() >= static_cast<size_t>(kObjects); },
                      kConverge, 100ms);
  ASSERT_EQ(informer.store().Size(), static_cast<size_t>(kObjects));
  proxy.Partition();
  w.ForEach([](int) { return true; }, [&](int i) { w.Update(i); });
  w.ForEach([](int i) { return i % 2 == 0; }, [&](int i) { FinalStep(w, i); });
  auto compacted = cluster->CompactEtcd();
  ASSERT_TRUE(compacted.ok()) << compacted.error().ToString();
  proxy.Heal();
  w.ForEach([](int i) { return i % 2 == 1; }, [&](int i) { FinalStep(w, i); });
  ASSERT_EQ(w.failures(), std::vector<std::string>{});

  ASSERT_TRUE(WaitConverged(w, rec, ns)) << "informer did not observe every end state";
  auto stats = informer.reflector_stats();
  EXPECT_GE(stats.gone, 1) << "the resumed watch was not answered 410 Gone";
  EXPECT_GE(stats.lists, 2) << "no relist after 410";
  auto bad = Verify(w, rec, ns, /*strict=*/false);
  EXPECT_TRUE(bad.empty()) << JoinFirst(bad);
  // Objects deleted during the partition were never seen deleted: the relist delivered their
  // deletes with the last state the cache knew, which is version 0 (updates also happened while
  // partitioned).
  int unknown_deletes = 0;
  for (int i = 0; i < kObjects; i += 2) {
    if (Live(i)) continue;
    auto seen = rec.Of(ns + "/" + Name(i));
    ASSERT_FALSE(seen.empty());
    EXPECT_TRUE(seen.back().kind == 'd' && seen.back().unknown && seen.back().version == 0)
        << Name(i);
    ++unknown_deletes;
  }
  EXPECT_EQ(unknown_deletes, kObjects / 2 - kObjects / 10);
  ExpectCacheEqualsList(informer, *direct, ns);
  informer.Stop();
}

TEST_F(InformerIntegrationTest, WatchStreamCutMidObjectIsReportedAndRecovered) {
  auto direct = testenv::AdminClient();
  ASSERT_NE(direct, nullptr);
  testing::TcpProxy proxy(PortOf(testenv::Cluster().server_url()));
  auto proxied = ClientVia(proxy, testenv::Cluster());
  ASSERT_TRUE(proxied.ok()) << proxied.error().ToString();
  const std::string ns = testenv::TestNamespace();

  Workload w(direct, ns, 1);
  w.Create(0);
  RecordedInformer recorded(*proxied, ns);
  SharedInformer& informer = recorded.informer;
  Recorder& rec = recorded.rec;
  ASSERT_TRUE(informer.WaitForCacheSync(60s));
  ASSERT_EQ(rec.Of(ns + "/" + Name(0)).size(), 1u);
  // The cut applies to connections open at the time: wait until the watch stream is open (its
  // headers arrived), or a slow machine arms the cut before the watch exists and nothing is cut.
  testenv::Eventually([&] { return informer.reflector_stats().watches >= 1; }, 60s, 20ms);
  ASSERT_GE(informer.reflector_stats().watches, 1) << "the watch never opened";

  // The next event (a ~256 KiB object) is cut after 16 KiB reach the client.
  proxy.CutOpenConnectionsAfter(uint64_t{16} * 1024);
  Object big{
      {"apiVersion", "v1"},
      {"kind", "ConfigMap"},
      {"metadata",
       boost::json::object{
           {"name", Name(0)}, {"namespace", ns}, {"resourceVersion", w.rvs(0).back()}}},
      {"data", boost::json::object{{"v", "1"}, {"blob", std::string(size_t{256} * 1024, 'x')}}}};
  auto updated = direct->Update(resources::ConfigMaps(), ns, big);
  ASSERT_TRUE(updated.ok()) << updated.error().ToString();
  std::string want_rv(ResourceVersionOf(*updated));

  ObjectPtr cached;
  testenv::Eventually(
      [&] {
        cached = informer.store().Get(ns + "/" + Name(0));
        return cached && ResourceVersionOf(*cached) == want_rv;
      },
      kConverge, 50ms);
  ASSERT_TRUE(cached && ResourceVersionOf(*cached) == want_rv) << "update never arrived";
  EXPECT_GE(proxy.connections_cut(), 1u);
  auto stats = informer.reflector_stats();
  EXPECT_GE(stats.watch_errors, 1);
  EXPECT_NE(stats.last_error.code, Error::Code::kUnknown);
  EXPECT_FALSE(stats.last_error.message.empty());
  std::printf("cut mid-object: error reported: %s\n", stats.last_error.ToString().c_str());
  // Delivered exactly once, in order: add v0, update v1 — nothing partial, nothing twice.
  auto seen = rec.Of(ns + "/" + Name(0));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].kind, 'a');
  EXPECT_EQ(seen[1].kind, 'u');
  EXPECT_EQ(seen[1].version, 1);
  EXPECT_EQ(seen[1].rv, want_rv);
  informer.Stop();
}

}  // namespace
}  // namespace hyperslice::kube
