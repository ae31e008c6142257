#include "src/kube/mutation_cache.h"

#include <gtest/gtest.h>

#include <memory>
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

// A mutation cache over a store of the test's; Stored() is what the informer would have put there.
class MutationCacheTest : public ::testing::Test {
 protected:
  void Stored(const std::string& name, const std::string& rv, const std::string& phase) {
    store_.Upsert(std::make_shared<const Object>(Obj(name, rv, phase)));
  }

  Store store_;
  MutationCache cache_{&store_};
};

TEST_F(MutationCacheTest, OwnWriteWinsUntilTheStoreCatchesUp) {
  Stored("a", "10", "old");
  EXPECT_EQ(Phase(cache_.Get("ns/a")), "old");

  cache_.Mutated(Obj("a", "12", "mine"));
  EXPECT_EQ(Phase(cache_.Get("ns/a")), "mine");  // the store still has rv 10
  Stored("a", "11", "between");
  EXPECT_EQ(Phase(cache_.Get("ns/a")), "mine");  // 11 < 12: still older than our write
  EXPECT_EQ(cache_.PendingForTest(), 1U);

  Stored("a", "12", "mine");
  EXPECT_EQ(Phase(cache_.Get("ns/a")), "mine");
  EXPECT_EQ(cache_.PendingForTest(), 0U);  // caught up: the written copy is dropped
  Stored("a", "13", "theirs");
  EXPECT_EQ(Phase(cache_.Get("ns/a")), "theirs");
}

TEST_F(MutationCacheTest, NewerStoreCopyWins) {
  Stored("a", "20", "theirs");
  cache_.Mutated(Obj("a", "15", "mine"));
  EXPECT_EQ(Phase(cache_.Get("ns/a")), "theirs");
  EXPECT_EQ(cache_.PendingForTest(), 0U);
}

TEST_F(MutationCacheTest, AbsentFromTheStoreIsAbsent) {
  cache_.Mutated(Obj("gone", "30", "mine"));
  EXPECT_EQ(cache_.Get("ns/gone"), nullptr);
  EXPECT_EQ(cache_.PendingForTest(), 0U);
}

TEST_F(MutationCacheTest, UncomparableVersionsLeaveTheStoreCopy) {
  Stored("a", "abc", "theirs");
  cache_.Mutated(Obj("a", "99", "mine"));
  EXPECT_EQ(Phase(cache_.Get("ns/a")), "theirs");
  cache_.Mutated(Obj("a", "not-a-number", "mine"));  // never recorded
  EXPECT_EQ(cache_.PendingForTest(), 0U);
}

TEST_F(MutationCacheTest, ForgetDropsTheWrite) {
  Stored("a", "1", "theirs");
  cache_.Mutated(Obj("a", "2", "mine"));
  cache_.Forget("ns/a");
  EXPECT_EQ(Phase(cache_.Get("ns/a")), "theirs");
}

}  // namespace
}  // namespace hyperslice::kube
