// The REST client against a real kube-apiserver (test/testenv): verbs, typed errors, paging,
// server-side apply, status subresource on a CRD, watch.
#include <atomic>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "src/kube/client.h"
#include "src/kube/internal/rest_metrics.h"
#include "test/testenv/namespaced_test.h"
#include "test/testenv/own_cluster.h"
#include "test/testenv/testenv.h"

namespace hyperslice::kube {
namespace {

namespace json = boost::json;

Object ConfigMap(const std::string& name, json::object data, json::object labels = json::object()) {
  json::object md{{"name", name}};
  if (!labels.empty()) md["labels"] = std::move(labels);
  return Object{{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", md}, {"data", data}};
}

std::string Rv(const Object& o) {
  return std::string(o.at("metadata").at("resourceVersion").as_string());
}

class ClientTest : public testenv::NamespacedTest {};

TEST_F(ClientTest, ConfigMapCreateGetUpdateDeleteWithTypedErrors) {
  const auto& cm = resources::ConfigMaps();
  auto created = client_->Create(cm, ns_, ConfigMap("one", {{"k", "v1"}}));
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  EXPECT_EQ(created->at("metadata").at("namespace").as_string(), ns_);

  auto again = client_->Create(cm, ns_, ConfigMap("one", {{"k", "v1"}}));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, Error::Code::kAlreadyExists);
  EXPECT_EQ(again.error().reason, "AlreadyExists");
  EXPECT_EQ(again.error().http_status, 409);

  auto got = client_->Get(cm, ns_, "one");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(got->at("data").at("k").as_string(), "v1");

  Object upd = *got;
  upd["data"].as_object()["k"] = "v2";
  auto updated = client_->Update(cm, ns_, upd);
  ASSERT_TRUE(updated.ok()) << updated.error().ToString();
  EXPECT_EQ(updated->at("data").at("k").as_string(), "v2");
  EXPECT_NE(Rv(*updated), Rv(*got));

  // The same update again carries the old resourceVersion: optimistic concurrency fails.
  upd["data"].as_object()["k"] = "v3";
  auto stale = client_->Update(cm, ns_, upd);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error().code, Error::Code::kConflict);
  EXPECT_EQ(stale.error().reason, "Conflict");
  EXPECT_NE(stale.error().message.find("modified"), std::string::npos) << stale.error().message;

  ASSERT_TRUE(client_->Delete(cm, ns_, "one").ok());
  auto gone = client_->Get(cm, ns_, "one");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, Error::Code::kNotFound);
  EXPECT_EQ(gone.error().reason, "NotFound");
  auto del_again = client_->Delete(cm, ns_, "one");
  ASSERT_FALSE(del_again.ok());
  EXPECT_EQ(del_again.error().code, Error::Code::kNotFound);

  // Invalid object: a name that is not a DNS subdomain.
  auto invalid = client_->Create(cm, ns_, ConfigMap("Not_Valid", {}));
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.error().code, Error::Code::kInvalidArgument);
  EXPECT_EQ(invalid.error().reason, "Invalid");
}

TEST_F(ClientTest, PatchMergeJsonPatchAndApply) {
  const auto& cm = resources::ConfigMaps();
  ASSERT_TRUE(client_->Create(cm, ns_, ConfigMap("p", {{"a", "1"}, {"b", "2"}})).ok());

  auto merged = client_->Patch(cm, ns_, "p", PatchType::kMerge, R"({"data":{"a":"10","b":null}})");
  ASSERT_TRUE(merged.ok()) << merged.error().ToString();
  EXPECT_EQ(merged->at("data").at("a").as_string(), "10");
  EXPECT_FALSE(merged->at("data").as_object().contains("b"));

  auto jp = client_->Patch(cm, ns_, "p", PatchType::kJson,
                           R"([{"op":"add","path":"/data/c","value":"3"},)"
                           R"({"op":"test","path":"/data/a","value":"10"}])");
  ASSERT_TRUE(jp.ok()) << jp.error().ToString();
  EXPECT_EQ(jp->at("data").at("c").as_string(), "3");

  auto failed_test = client_->Patch(cm, ns_, "p", PatchType::kJson,
                                    R"([{"op":"test","path":"/data/a","value":"nope"}])");
  ASSERT_FALSE(failed_test.ok());
  EXPECT_EQ(failed_test.error().code, Error::Code::kInvalidArgument)
      << failed_test.error().ToString();

  auto smp = client_->Patch(cm, ns_, "p", PatchType::kStrategicMerge, R"({"data":{"d":"4"}})");
  ASSERT_TRUE(smp.ok()) << smp.error().ToString();
  EXPECT_EQ(smp->at("data").at("d").as_string(), "4");

  auto missing = client_->Patch(cm, ns_, "nope", PatchType::kMerge, R"({"data":{}})");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Error::Code::kNotFound);
}

TEST_F(ClientTest, ServerSideApplyConflictsWithoutForce) {
  const auto& cm = resources::ConfigMaps();
  std::string body =
      R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ssa"},"data":{"owned":"by-a"}})";
  PatchOptions a{.field_manager = "manager-a"};
  auto applied = client_->Patch(cm, ns_, "ssa", PatchType::kApply, body, a);
  ASSERT_TRUE(applied.ok()) << applied.error().ToString();
  EXPECT_EQ(applied->at("data").at("owned").as_string(), "by-a");
  bool found = false;
  for (const auto& mf : applied->at("metadata").at("managedFields").as_array()) {
    if (mf.at("manager").as_string() == "manager-a" && mf.at("operation").as_string() == "Apply") {
      found = true;
    }
  }
  EXPECT_TRUE(found);

  // YAML is accepted too (the content type is apply-patch+yaml).
  std::string body_b =
      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  owned: by-b\n";
  PatchOptions b{.field_manager = "manager-b"};
  auto conflict = client_->Patch(cm, ns_, "ssa", PatchType::kApply, body_b, b);
  ASSERT_FALSE(conflict.ok());
  EXPECT_EQ(conflict.error().code, Error::Code::kConflict);
  EXPECT_NE(conflict.error().message.find("manager-a"), std::string::npos)
      << conflict.error().message;

  b.force = true;
  auto forced = client_->Patch(cm, ns_, "ssa", PatchType::kApply, body_b, b);
  ASSERT_TRUE(forced.ok()) << forced.error().ToString();
  EXPECT_EQ(forced->at("data").at("owned").as_string(), "by-b");

  auto no_manager = client_->Patch(cm, ns_, "ssa", PatchType::kApply, body, {});
  ASSERT_FALSE(no_manager.ok());
  EXPECT_EQ(no_manager.error().code, Error::Code::kInvalidArgument);
}

TEST_F(ClientTest, PagedListSeesEveryObjectAcrossThreePages) {
  const auto& cm = resources::ConfigMaps();
  for (int i = 0; i < 25; ++i) {
    auto r = client_->Create(
        cm, ns_,
        ConfigMap("paged-" + std::to_string(i), {{"i", std::to_string(i)}}, {{"set", "paged"}}));
    ASSERT_TRUE(r.ok()) << r.error().ToString();
  }
  ASSERT_TRUE(client_->Create(cm, ns_, ConfigMap("unlabelled", {})).ok());

  ListOptions opts;
  opts.label_selector = "set=paged";
  opts.limit = 10;
  std::set<std::string> seen;
  int pages = 0;
  std::string first_rv;
  while (true) {
    auto page = client_->List(cm, ns_, opts);
    ASSERT_TRUE(page.ok()) << page.error().ToString();
    ++pages;
    if (pages == 1) first_rv = page->resource_version;
    EXPECT_LE(page->items.size(), 10u);
    for (const auto& item : page->items) {
      EXPECT_EQ(item.at("kind").as_string(), "ConfigMap");  // filled in for list items
      EXPECT_EQ(item.at("apiVersion").as_string(), "v1");
      seen.insert(std::string(item.at("metadata").at("name").as_string()));
    }
    if (page->continue_token.empty()) break;
    opts.continue_token = page->continue_token;
    ASSERT_LT(pages, 10);
  }
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen.size(), 25u);
  EXPECT_FALSE(first_rv.empty());

  ListOptions all_opts;
  all_opts.label_selector = "set=paged";
  all_opts.limit = 10;
  auto all = client_->ListAll(cm, ns_, all_opts);
  ASSERT_TRUE(all.ok()) << all.error().ToString();
  EXPECT_EQ(all->items.size(), 25u);
  EXPECT_TRUE(all->continue_token.empty());
  EXPECT_FALSE(all->resource_version.empty());
}

TEST_F(ClientTest, DeleteHonoursPreconditions) {
  const auto& cm = resources::ConfigMaps();
  auto created = client_->Create(cm, ns_, ConfigMap("pre", {}));
  ASSERT_TRUE(created.ok());
  std::string uid(created->at("metadata").at("uid").as_string());

  DeleteOptions wrong_uid;
  wrong_uid.precondition_uid = "00000000-0000-0000-0000-000000000000";
  auto st = client_->Delete(cm, ns_, "pre", wrong_uid);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Error::Code::kConflict);
  EXPECT_NE(st.error().message.find("recondition"), std::string::npos) << st.error().message;

  DeleteOptions wrong_rv;
  wrong_rv.precondition_resource_version = "1";
  st = client_->Delete(cm, ns_, "pre", wrong_rv);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Error::Code::kConflict);

  DeleteOptions right;
  right.precondition_uid = uid;
  right.precondition_resource_version = Rv(*created);
  right.propagation_policy = "Background";
  right.grace_period_seconds = 0;
  st = client_->Delete(cm, ns_, "pre", right);
  ASSERT_TRUE(st.ok()) << st.error().ToString();
  auto gone = client_->Get(cm, ns_, "pre");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, Error::Code::kNotFound);
}

// A CRD with a status subresource, created by the test and waited on until Established.
class CrdTest : public ClientTest {
 protected:
  static void SetUpTestSuite() {
    auto client = testenv::AdminClient();
    ASSERT_NE(client, nullptr);
    Object crd = json::parse(R"({
      "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
      "metadata": {"name": "widgets.kubeclient.test.hyperslice.dev"},
      "spec": {
        "group": "kubeclient.test.hyperslice.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [{
          "name": "v1", "served": true, "storage": true,
          "subresources": {"status": {}},
          "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"size": {"type": "integer", "minimum": 0}}},
            "status": {"type": "object", "properties": {"phase": {"type": "string"},
                                                        "observedGeneration": {"type": "integer"}}}
          }}}
        }]
      }})")
                     .as_object();
    auto created = client->Create(resources::CustomResourceDefinitions(), "", crd);
    ASSERT_TRUE(created.ok() || created.error().code == Error::Code::kAlreadyExists)
        << created.error().ToString();
    // Established is set by the apiextensions controller; poll (bounded) until it is.
    bool established = false;
    for (int i = 0; i < 300 && !established; ++i) {
      auto got = client->Get(resources::CustomResourceDefinitions(), "",
                             "widgets.kubeclient.test.hyperslice.dev");
      ASSERT_TRUE(got.ok()) << got.error().ToString();
      if (auto* st = got->if_contains("status"); st != nullptr && st->is_object()) {
        if (auto* conds = st->as_object().if_contains("conditions"); conds && conds->is_array()) {
          for (const auto& c : conds->as_array()) {
            if (c.at("type").as_string() == "Established" && c.at("status").as_string() == "True") {
              established = true;
            }
          }
        }
      }
      if (!established) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(established) << "CRD never became Established";
    // Discovery of a fresh CRD can lag Established by a moment: wait until its list answers.
    for (int i = 0; i < 100; ++i) {
      if (client->List(Widgets(), "default").ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  static const Resource& Widgets() {
    static const Resource r{"kubeclient.test.hyperslice.dev", "v1", "widgets", "Widget", true};
    return r;
  }
};

TEST_F(CrdTest, CustomResourceVerbsAndStatusSubresource) {
  Object w = json::parse(R"({"metadata":{"name":"w1"},"spec":{"size":1}})").as_object();
  auto created = client_->Create(Widgets(), ns_, w);
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  EXPECT_EQ(created->at("apiVersion").as_string(), "kubeclient.test.hyperslice.dev/v1");
  EXPECT_EQ(created->at("kind").as_string(), "Widget");
  EXPECT_EQ(created->at("metadata").at("generation").as_int64(), 1);

  // Schema validation surfaces as Invalid.
  Object bad = json::parse(R"({"metadata":{"name":"w-bad"},"spec":{"size":-1}})").as_object();
  auto invalid = client_->Create(Widgets(), ns_, bad);
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.error().code, Error::Code::kInvalidArgument);

  // Status through the subresource; the main resource ignores status and vice versa.
  Object with_status = *created;
  with_status["status"] = json::object{{"phase", "Ready"}, {"observedGeneration", 1}};
  with_status["spec"].as_object()["size"] = 99;  // ignored by the status endpoint
  auto st = client_->Update(Widgets(), ns_, with_status, "status");
  ASSERT_TRUE(st.ok()) << st.error().ToString();
  EXPECT_EQ(st->at("status").at("phase").as_string(), "Ready");
  EXPECT_EQ(st->at("spec").at("size").as_int64(), 1);
  EXPECT_EQ(st->at("metadata").at("generation").as_int64(), 1);  // status does not bump it

  auto via_get = client_->Get(Widgets(), ns_, "w1", "status");
  ASSERT_TRUE(via_get.ok()) << via_get.error().ToString();
  EXPECT_EQ(via_get->at("status").at("phase").as_string(), "Ready");

  PatchOptions status_patch;
  status_patch.subresource = "status";
  auto patched = client_->Patch(Widgets(), ns_, "w1", PatchType::kMerge,
                                R"({"status":{"phase":"Degraded"}})", status_patch);
  ASSERT_TRUE(patched.ok()) << patched.error().ToString();
  EXPECT_EQ(patched->at("status").at("phase").as_string(), "Degraded");

  // Spec changes through the main resource bump the generation and leave status alone.
  auto spec = client_->Patch(Widgets(), ns_, "w1", PatchType::kMerge,
                             R"({"spec":{"size":2},"status":{"phase":"Ignored"}})");
  ASSERT_TRUE(spec.ok()) << spec.error().ToString();
  EXPECT_EQ(spec->at("metadata").at("generation").as_int64(), 2);
  EXPECT_EQ(spec->at("status").at("phase").as_string(), "Degraded");

  // Apply on a custom resource (merge patch of JSON is not supported for SMP on CRs: kInvalid).
  PatchOptions apply{.field_manager = "crd-test", .force = true};
  auto applied = client_->Patch(
      Widgets(), ns_, "w2", PatchType::kApply,
      R"({"apiVersion":"kubeclient.test.hyperslice.dev/v1","kind":"Widget","metadata":{"name":"w2"},"spec":{"size":5}})",
      apply);
  ASSERT_TRUE(applied.ok()) << applied.error().ToString();
  EXPECT_EQ(applied->at("spec").at("size").as_int64(), 5);
  auto smp =
      client_->Patch(Widgets(), ns_, "w2", PatchType::kStrategicMerge, R"({"spec":{"size":6}})");
  ASSERT_FALSE(smp.ok());
  EXPECT_EQ(smp.error().code, Error::Code::kInvalidArgument) << smp.error().ToString();

  // Stale update, list, delete on the custom resource.
  Object stale = *created;
  stale["spec"].as_object()["size"] = 3;
  auto conflict = client_->Update(Widgets(), ns_, stale);
  ASSERT_FALSE(conflict.ok());
  EXPECT_EQ(conflict.error().code, Error::Code::kConflict);
  auto list = client_->ListAll(Widgets(), ns_);
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  EXPECT_EQ(list->items.size(), 2u);
  for (const auto& item : list->items) EXPECT_EQ(item.at("kind").as_string(), "Widget");
  ASSERT_TRUE(client_->Delete(Widgets(), ns_, "w1").ok());
  ASSERT_TRUE(client_->Delete(Widgets(), ns_, "w2").ok());
  EXPECT_EQ(client_->Get(Widgets(), ns_, "w1").error().code, Error::Code::kNotFound);
}

TEST_F(ClientTest, WatchDeliversAddModifyDeleteInOrderAndEndsOnTimeout) {
  const auto& cm = resources::ConfigMaps();
  auto list = client_->List(cm, ns_);
  ASSERT_TRUE(list.ok());
  ListOptions opts;
  opts.resource_version = list->resource_version;
  opts.allow_watch_bookmarks = true;
  opts.timeout_seconds = 3;
  auto watch = client_->Watch(cm, ns_, opts);
  ASSERT_TRUE(watch.ok()) << watch.error().ToString();

  ASSERT_TRUE(client_->Create(cm, ns_, ConfigMap("w", {{"k", "1"}})).ok());
  ASSERT_TRUE(client_->Patch(cm, ns_, "w", PatchType::kMerge, R"({"data":{"k":"2"}})").ok());
  ASSERT_TRUE(client_->Delete(cm, ns_, "w").ok());

  std::vector<WatchEvent::Type> types;
  std::string last_rv;
  while (true) {
    auto ev = (*watch)->Next();
    ASSERT_TRUE(ev.ok()) << ev.error().ToString();
    if (!ev->has_value()) break;  // timeoutSeconds elapsed: clean end
    if ((*ev)->type == WatchEvent::Type::kBookmark) continue;
    types.push_back((*ev)->type);
    EXPECT_EQ((*ev)->object.at("metadata").at("name").as_string(), "w");
    std::string rv = Rv((*ev)->object);
    EXPECT_GT(std::stoll(rv), last_rv.empty() ? 0 : std::stoll(last_rv));
    last_rv = rv;
  }
  ASSERT_EQ(types.size(), 3u);
  EXPECT_EQ(types[0], WatchEvent::Type::kAdded);
  EXPECT_EQ(types[1], WatchEvent::Type::kModified);
  EXPECT_EQ(types[2], WatchEvent::Type::kDeleted);
}

TEST_F(ClientTest, WatchListSendsInitialEventsThenABookmark) {
  const auto& cm = resources::ConfigMaps();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client_->Create(cm, ns_, ConfigMap("init-" + std::to_string(i), {})).ok());
  }
  ListOptions opts;
  opts.send_initial_events = true;
  opts.resource_version_match = "NotOlderThan";
  opts.allow_watch_bookmarks = true;
  opts.timeout_seconds = 30;
  auto watch = client_->Watch(cm, ns_, opts);
  ASSERT_TRUE(watch.ok()) << watch.error().ToString();
  std::set<std::string> added;
  bool end_bookmark = false;
  while (!end_bookmark) {
    auto ev = (*watch)->Next();
    ASSERT_TRUE(ev.ok()) << ev.error().ToString();
    ASSERT_TRUE(ev->has_value()) << "stream ended before the initial-events bookmark";
    if ((*ev)->type == WatchEvent::Type::kAdded) {
      added.insert(std::string((*ev)->object.at("metadata").at("name").as_string()));
    } else if ((*ev)->type == WatchEvent::Type::kBookmark) {
      const auto& md = (*ev)->object.at("metadata").as_object();
      auto* ann = md.if_contains("annotations");
      end_bookmark = ann != nullptr && ann->as_object().contains("k8s.io/initial-events-end");
    }
  }
  // kube-root-ca.crt may also be in the namespace when a controller manager runs.
  EXPECT_TRUE(added.count("init-0") && added.count("init-1") && added.count("init-2"));
  (*watch)->Cancel();
  auto after = (*watch)->Next();
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.error().code, Error::Code::kCancelled);
}

// The shared cluster serves watches from the watch cache, which keeps history since it started;
// a cluster without it sends watches to etcd, where compaction makes old versions Gone.
TEST(WatchGoneTest, WatchFromACompactedVersionIsGone) {
  auto own = testenv::StartOwnCluster({.watch_cache = false});
  ASSERT_TRUE(own.ok()) << own.error().ToString();
  Client& client = *own->client;
  const auto& cm = resources::ConfigMaps();
  auto first = client.Create(cm, "default", ConfigMap("old", {}));
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(client
                    .Patch(cm, "default", "old", PatchType::kMerge,
                           R"({"data":{"i":")" + std::to_string(i) + R"("}})")
                    .ok());
  }
  ASSERT_TRUE(own->cluster->CompactEtcd().ok());
  ListOptions opts;
  opts.resource_version = Rv(*first);
  opts.timeout_seconds = 10;
  auto watch = client.Watch(cm, "default", opts);
  // Either the request fails with 410, or the stream starts with an ERROR event carrying a 410
  // Expired Status.
  if (!watch.ok()) {
    EXPECT_EQ(watch.error().code, Error::Code::kGone) << watch.error().ToString();
    return;
  }
  auto ev = (*watch)->Next();
  ASSERT_TRUE(ev.ok()) << ev.error().ToString();
  ASSERT_TRUE(ev->has_value());
  ASSERT_EQ((*ev)->type, WatchEvent::Type::kError) << json::serialize((*ev)->object);
  EXPECT_EQ((*ev)->object.at("code").as_int64(), 410);
  EXPECT_EQ((*ev)->object.at("kind").as_string(), "Status");

  // A paged list whose continue token outlived a compaction falls back to one full list.
  ListOptions paged;
  paged.limit = 1;
  auto all = client.ListAll(resources::Namespaces(), "", paged);
  ASSERT_TRUE(all.ok()) << all.error().ToString();
  EXPECT_GE(all->items.size(), 4u);  // default, kube-system, kube-public, kube-node-lease
}

// One client shared by many threads (as informers and controllers share it), with the client-side
// rate limiter on: every request completes and each object is seen exactly once.
TEST_F(ClientTest, ConcurrentRequestsShareOneRateLimitedClient) {
  Config cfg = testenv::Cluster().AdminConfig();
  cfg.qps = 200;
  cfg.burst = 10;
  auto client = Client::Create(cfg);
  ASSERT_TRUE(client.ok()) << client.error().ToString();
  const auto& cm = resources::ConfigMaps();
  constexpr int kThreads = 6, kPerThread = 10;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::string name = "conc-" + std::to_string(t) + "-" + std::to_string(i);
        auto c = (*client)->Create(cm, ns_,
                                   ConfigMap(name, {{"t", std::to_string(t)}}, {{"set", "conc"}}));
        auto g = (*client)->Get(cm, ns_, name);
        if (!c.ok() || !g.ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  ListOptions opts;
  opts.label_selector = "set=conc";
  auto list = (*client)->ListAll(cm, ns_, opts);
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  EXPECT_EQ(list->items.size(), static_cast<size_t>(kThreads * kPerThread));
}

TEST_F(ClientTest, RawReachesNonResourcePathsAndMetricsCountRequests) {
  auto before = RestMetrics::Take();
  auto version = client_->Raw("GET", "/version");
  ASSERT_TRUE(version.ok()) << version.error().ToString();
  EXPECT_EQ(version->status, 200);
  EXPECT_NE(version->body.find("gitVersion"), std::string::npos);
  auto missing = client_->Get(resources::ConfigMaps(), ns_, "does-not-exist");
  ASSERT_FALSE(missing.ok());
  auto after = RestMetrics::Take();
  auto count = [](const RestMetrics::Snapshot& s, const std::string& code) {
    uint64_t n = 0;
    for (const auto& r : s.requests) {
      if (r.code == code && r.method == "GET") n += r.count;
    }
    return n;
  };
  EXPECT_GE(count(after, "200"), count(before, "200") + 1);
  EXPECT_EQ(count(after, "404"), count(before, "404") + 1);
  ASSERT_FALSE(after.latencies.empty());
  EXPECT_EQ(after.latencies[0].bucket_counts.size(), RestMetrics::Buckets().size());
}

}  // namespace
}  // namespace hyperslice::kube
