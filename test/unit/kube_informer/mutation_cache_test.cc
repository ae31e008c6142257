#include "src/kube/mutation_cache.h"

#include <gtest/gtest.h>

#include <string>

namespace hyperslice::kube {
namespace {

Object Obj(const std::string& name, const std::string& rv, const std::string& phase) {
  return Object{{"metadata",
                 boost::json::object{{"name", name}, {"namespace", "ns"}, {"resourceVersion", rv}}},
                {"status", boost::json::object{{"phase", phase}}}};
}
std::string Phase(const ObjectPtr& p) {
  return p ? std::string(p->at("status").at("phase").as_string()) : "<none>";
}

TEST(MutationCacheTest, OwnWriteWinsUntilTheStoreCatchesUp) {
  Store store;
  store.Upsert(std::make_shared<const Object>(Obj("a", "10", "old")));
  MutationCache cache(&store);
  EXPECT_EQ(Phase(cache.Get("ns/a")), "old");

  cache.Mutated(Obj("a", "12", "mine"));
  EXPECT_EQ(Phase(cache.Get("ns/a")), "mine");  // the store still has rv 10
  store.Upsert(std::make_shared<const Object>(Obj("a", "11", "between")));
  EXPECT_EQ(Phase(cache.Get("ns/a")), "mine");  // 11 < 12: still older than our write
  EXPECT_EQ(cache.PendingForTest(), 1U);

  store.Upsert(std::make_shared<const Object>(Obj("a", "12", "mine")));
  EXPECT_EQ(Phase(cache.Get("ns/a")), "mine");
  EXPECT_EQ(cache.PendingForTest(), 0U);  // caught up: the written copy is dropped
  store.Upsert(std::make_shared<const Object>(Obj("a", "13", "theirs")));
  EXPECT_EQ(Phase(cache.Get("ns/a")), "theirs");
}

TEST(MutationCacheTest, NewerStoreCopyWins) {
  Store store;
  store.Upsert(std::make_shared<const Object>(Obj("a", "20", "theirs")));
  MutationCache cache(&store);
  cache.Mutated(Obj("a", "15", "mine"));
  EXPECT_EQ(Phase(cache.Get("ns/a")), "theirs");
  EXPECT_EQ(cache.PendingForTest(), 0U);
}

TEST(MutationCacheTest, AbsentFromTheStoreIsAbsent) {
  Store store;
  MutationCache cache(&store);
  cache.Mutated(Obj("gone", "30", "mine"));
  EXPECT_EQ(cache.Get("ns/gone"), nullptr);
  EXPECT_EQ(cache.PendingForTest(), 0U);
}

TEST(MutationCacheTest, UncomparableVersionsLeaveTheStoreCopy) {
  Store store;
  store.Upsert(std::make_shared<const Object>(Obj("a", "abc", "theirs")));
  MutationCache cache(&store);
  cache.Mutated(Obj("a", "99", "mine"));
  EXPECT_EQ(Phase(cache.Get("ns/a")), "theirs");
  cache.Mutated(Obj("a", "not-a-number", "mine"));  // never recorded
  EXPECT_EQ(cache.PendingForTest(), 0U);
}

TEST(MutationCacheTest, ForgetDropsTheWrite) {
  Store store;
  store.Upsert(std::make_shared<const Object>(Obj("a", "1", "theirs")));
  MutationCache cache(&store);
  cache.Mutated(Obj("a", "2", "mine"));
  cache.Forget("ns/a");
  EXPECT_EQ(Phase(cache.Get("ns/a")), "theirs");
}

}  // namespace
}  // namespace hyperslice::kube
