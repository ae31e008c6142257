#include "src/kube/store.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include <gtest/gtest.h>
#include <boost/json/parse.hpp>

namespace hyperslice::kube {
namespace {

ObjectPtr Obj(std::string_view json) {
  return std::make_shared<const Object>(boost::json::parse(json).as_object());
}

ObjectPtr Pod(const std::string& ns, const std::string& name, const std::string& rv,
              const std::string& owner_uid = "") {
  Object o;
  auto& md = o["metadata"].emplace_object();
  md["namespace"] = ns;
  md["name"] = name;
  md["resourceVersion"] = rv;
  if (!owner_uid.empty()) {
    boost::json::array refs;
    refs.push_back(boost::json::object{{"uid", owner_uid}, {"kind", "ReplicaSet"}});
    md["ownerReferences"] = std::move(refs);
  }
  return std::make_shared<const Object>(std::move(o));
}

std::vector<std::string> Names(std::vector<ObjectPtr> objs) {
  std::vector<std::string> out;
  for (const auto& o : objs) out.emplace_back(ObjectKey(*o));
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ObjectKeyTest, NamespacedAndClusterScoped) {
  EXPECT_EQ(ObjectKey(*Pod("ns1", "a", "1")), "ns1/a");
  EXPECT_EQ(ObjectKey(*Obj(R"({"metadata":{"name":"node-1"}})")), "node-1");
  EXPECT_EQ(ObjectKey(*Obj(R"({"metadata":{}})")), "");
  EXPECT_EQ(ObjectKey(*Obj(R"({"kind":"X"})")), "");
}

TEST(StoreTest, UpsertGetRemoveReturnPreviousObject) {
  Store s;
  auto a1 = Pod("ns", "a", "1");
  auto a2 = Pod("ns", "a", "2");
  EXPECT_EQ(s.Upsert(a1), nullptr);
  EXPECT_EQ(s.Upsert(a2), a1);
  EXPECT_EQ(s.Get("ns/a"), a2);
  EXPECT_EQ(s.Size(), 1u);
  EXPECT_EQ(s.Remove("ns/a"), a2);
  EXPECT_EQ(s.Remove("ns/a"), nullptr);
  EXPECT_EQ(s.Get("ns/a"), nullptr);
  EXPECT_EQ(s.Upsert(Obj(R"({"metadata":{"namespace":"x"}})")), nullptr);  // no name: ignored
  EXPECT_EQ(s.Size(), 0u);
}

TEST(StoreTest, AnyOfStopsAtTheFirstMatch) {
  Store s;
  EXPECT_FALSE(s.AnyOf([](const Object&) { return true; }));  // empty
  for (int i = 0; i < 10; ++i) s.Upsert(Pod("ns", "p" + std::to_string(i), "1"));
  int calls = 0;
  EXPECT_TRUE(s.AnyOf([&](const Object&) { return ++calls > 0; }));
  EXPECT_EQ(calls, 1);
  calls = 0;
  EXPECT_FALSE(s.AnyOf([&](const Object& o) {
    ++calls;
    return ObjectKey(o) == "ns/none";
  }));
  EXPECT_EQ(calls, 10);
  EXPECT_TRUE(s.AnyOf([](const Object& o) { return ObjectKey(o) == "ns/p7"; }));
}

TEST(StoreTest, NamespaceAndOwnerIndexesFollowUpdatesAndDeletes) {
  Store s;
  s.Upsert(Pod("ns1", "a", "1", "owner-1"));
  s.Upsert(Pod("ns1", "b", "1", "owner-1"));
  s.Upsert(Pod("ns2", "c", "1", "owner-2"));
  EXPECT_EQ(Names(*s.ByIndex(std::string(kNamespaceIndex), "ns1")),
            (std::vector<std::string>{"ns1/a", "ns1/b"}));
  EXPECT_EQ(Names(*s.ByIndex(std::string(kOwnerUidIndex), "owner-1")),
            (std::vector<std::string>{"ns1/a", "ns1/b"}));
  // b changes owner: it leaves owner-1's entry and joins owner-2's.
  s.Upsert(Pod("ns1", "b", "2", "owner-2"));
  EXPECT_EQ(Names(*s.ByIndex(std::string(kOwnerUidIndex), "owner-1")),
            (std::vector<std::string>{"ns1/a"}));
  EXPECT_EQ(Names(*s.ByIndex(std::string(kOwnerUidIndex), "owner-2")),
            (std::vector<std::string>{"ns1/b", "ns2/c"}));
  s.Remove("ns1/a");
  EXPECT_TRUE(s.ByIndex(std::string(kOwnerUidIndex), "owner-1")->empty());
  auto values = *s.IndexValues(std::string(kOwnerUidIndex));
  std::sort(values.begin(), values.end());
  EXPECT_EQ(values, std::vector<std::string>{"owner-2"});
}

TEST(StoreTest, CustomIndexBuiltOverExistingContentAndMaintained) {
  Store s;
  s.Upsert(Obj(R"({"metadata":{"name":"n1","resourceVersion":"1"},
                   "spec":{"providerID":"gce://p/z/vm-1"}})"));
  s.Upsert(Obj(R"({"metadata":{"name":"n2","resourceVersion":"1"},"spec":{}})"));
  ASSERT_TRUE(s.AddIndex("providerID", FieldIndexFunc("spec.providerID")).ok());
  EXPECT_EQ(Names(*s.ByIndex("providerID", "gce://p/z/vm-1")), std::vector<std::string>{"n1"});
  s.Upsert(Obj(R"({"metadata":{"name":"n2","resourceVersion":"2"},
                   "spec":{"providerID":"gce://p/z/vm-2"}})"));
  EXPECT_EQ(Names(*s.ByIndex("providerID", "gce://p/z/vm-2")), std::vector<std::string>{"n2"});
  EXPECT_EQ(s.IndexValues("providerID")->size(), 2u);
  auto dup = s.AddIndex("providerID", FieldIndexFunc("spec.providerID"));
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error().code, Error::Code::kAlreadyExists);
  auto missing = s.ByIndex("nope", "x");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Error::Code::kNotFound);
}

TEST(StoreTest, ReplaceReportsAddsUpdatesAndDeletesAndKeepsUnchangedPointers) {
  Store s;
  auto a1 = Pod("ns", "a", "1");
  auto b1 = Pod("ns", "b", "1", "o");
  auto c1 = Pod("ns", "c", "1");
  s.Upsert(a1);
  s.Upsert(b1);
  s.Upsert(c1);
  auto a1_again = Pod("ns", "a", "1");  // same version, new allocation
  auto b2 = Pod("ns", "b", "2");        // changed, lost its owner
  auto d1 = Pod("ns", "d", "1");        // new
  auto changes = s.Replace({a1_again, b2, d1});
  ASSERT_EQ(changes.size(), 4u);
  EXPECT_EQ(changes[0].old, a1);
  EXPECT_EQ(changes[0].cur, a1);  // the cached pointer is kept
  EXPECT_EQ(changes[1].old, b1);
  EXPECT_EQ(changes[1].cur, b2);
  EXPECT_EQ(changes[2].old, nullptr);
  EXPECT_EQ(changes[2].cur, d1);
  EXPECT_EQ(changes[3].old, c1);  // c is gone: delete with its last known state
  EXPECT_EQ(changes[3].cur, nullptr);
  EXPECT_EQ(Names(s.List()), (std::vector<std::string>{"ns/a", "ns/b", "ns/d"}));
  EXPECT_TRUE(s.ByIndex(std::string(kOwnerUidIndex), "o")->empty());
  EXPECT_EQ(s.ByIndex(std::string(kNamespaceIndex), "ns")->size(), 3u);
}

TEST(StoreTest, ReplaceIsAtomicForConcurrentReaders) {
  Store s;
  std::vector<ObjectPtr> set_a, set_b;
  for (int i = 0; i < 200; ++i) {
    set_a.push_back(Pod("a", "p" + std::to_string(i), "1"));
    set_b.push_back(Pod("b", "p" + std::to_string(i), "1"));
  }
  s.Replace(set_a);
  std::atomic<bool> done{false};
  std::atomic<int> mixed{0};
  std::thread reader([&] {
    while (!done) {
      auto all = s.List();
      size_t in_a = std::count_if(all.begin(), all.end(), [](const ObjectPtr& o) {
        return MetaString(*o, "namespace") == "a";
      });
      if (all.size() != 200 || (in_a != 0 && in_a != 200)) ++mixed;
    }
  });
  for (int i = 0; i < 200; ++i) s.Replace(i % 2 == 0 ? set_b : set_a);
  done = true;
  reader.join();
  EXPECT_EQ(mixed.load(), 0);
}

}  // namespace
}  // namespace hyperslice::kube
