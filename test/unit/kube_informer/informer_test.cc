#include "src/kube/informer.h"

#include <thread>

#include <gtest/gtest.h>

#include "test/testenv/line_log.h"
#include "test/unit/kube_informer/fake_client.h"

namespace hyperslice::kube {
namespace {

using namespace std::chrono_literals;
using testing::BlockUntilCancelled;
using testing::Event;
using testing::GoneEvent;
using testing::MakeList;
using testing::MakeObject;
using testing::ScriptedClient;
using Type = WatchEvent::Type;

// Records handler calls as "add ns/a@1", "update ns/a@1->2", "delete ns/a@2" (+ " unknown").
class Recorder : public testenv::LineLog {
 public:
  EventHandler Handler() {
    EventHandler h;
    h.on_add = [this](const ObjectPtr& o) { Push("add " + Id(o)); };
    h.on_update = [this](const ObjectPtr& old, const ObjectPtr& cur) {
      Push("update " + Id(old) + "->" + std::string(ResourceVersionOf(*cur)));
    };
    h.on_delete = [this](const ObjectPtr& last, bool unknown) {
      Push("delete " + Id(last) + (unknown ? " unknown" : ""));
    };
    return h;
  }

 private:
  static std::string Id(const ObjectPtr& o) {
    return ObjectKey(*o) + "@" + std::string(ResourceVersionOf(*o));
  }
};

InformerOptions Fast() {
  InformerOptions o;
  o.reflector.backoff.initial = 1ms;
  o.reflector.backoff.max = 1ms;
  o.reflector.backoff.jitter = 0;
  return o;
}

TEST(SharedInformerTest, DeliversListThenWatchInOrderAndSyncsAfterInitialAdds) {
  auto client = std::make_shared<ScriptedClient>();
  client->PushList(MakeList({MakeObject("ns", "a", "1"), MakeObject("ns", "b", "2")}, "2"));
  client->PushWatch({Event(Type::kModified, MakeObject("ns", "a", "3")),
                     Event(Type::kAdded, MakeObject("ns", "c", "4")),
                     Event(Type::kDeleted, MakeObject("ns", "b", "5")), BlockUntilCancelled{}});
  SharedInformer informer(client, resources::ConfigMaps(), Fast());
  Recorder rec;
  informer.AddEventHandler(rec.Handler());
  EXPECT_FALSE(informer.HasSynced());
  informer.Start();
  ASSERT_TRUE(informer.WaitForCacheSync(10s));
  ASSERT_TRUE(rec.WaitFor(5));
  EXPECT_EQ(rec.lines(), (std::vector<std::string>{"add ns/a@1", "add ns/b@2", "update ns/a@1->3",
                                                   "add ns/c@4", "delete ns/b@5"}));
  EXPECT_EQ(informer.store().Size(), 2u);
  EXPECT_EQ(ResourceVersionOf(*informer.store().Get("ns/a")), "3");
  informer.Stop();
}

TEST(SharedInformerTest, RelistAfterGoneSynthesizesUpdatesAndUnknownFinalStateDeletes) {
  auto client = std::make_shared<ScriptedClient>();
  client->PushList(MakeList(
      {MakeObject("ns", "a", "1"), MakeObject("ns", "b", "2"), MakeObject("ns", "c", "3")}, "3"));
  client->PushWatch({GoneEvent()});
  // While disconnected: a changed, b deleted, c unchanged, d created.
  client->PushList(MakeList(
      {MakeObject("ns", "a", "7"), MakeObject("ns", "c", "3"), MakeObject("ns", "d", "8")}, "9"));
  client->PushWatch({BlockUntilCancelled{}});
  SharedInformer informer(client, resources::ConfigMaps(), Fast());
  Recorder rec;
  informer.AddEventHandler(rec.Handler());
  informer.Start();
  ASSERT_TRUE(rec.WaitFor(7));
  EXPECT_EQ(rec.lines(),
            (std::vector<std::string>{"add ns/a@1", "add ns/b@2", "add ns/c@3", "update ns/a@1->7",
                                      "update ns/c@3->3", "add ns/d@8", "delete ns/b@2 unknown"}));
  // Handlers may run before the reflector records the list's version: wait for it.
  for (int i = 0; i < 1000 && informer.LastSyncResourceVersion() != "9"; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(informer.LastSyncResourceVersion(), "9");
  EXPECT_EQ(informer.reflector_stats().gone, 1);
}

TEST(SharedInformerTest, LateHandlerGetsCacheAsAddsThenOnlyNewerEvents) {
  auto client = std::make_shared<ScriptedClient>();
  client->PushList(MakeList({MakeObject("ns", "a", "1")}, "1"));
  client->PushWatch({BlockUntilCancelled{}});
  SharedInformer informer(client, resources::ConfigMaps(), Fast());
  Recorder early;
  informer.AddEventHandler(early.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForCacheSync(10s));
  Recorder late;
  informer.AddEventHandler(late.Handler());
  ASSERT_TRUE(late.WaitFor(1));
  EXPECT_EQ(late.lines(), std::vector<std::string>{"add ns/a@1"});
  EXPECT_EQ(early.lines(), std::vector<std::string>{"add ns/a@1"});
}

TEST(SharedInformerTest, IndexesBeforeStartOnlyAndQueryableAfterSync) {
  auto client = std::make_shared<ScriptedClient>();
  Object node = MakeObject("", "node-1", "1");
  node["spec"] = boost::json::object{{"providerID", "gce://p/z/vm-1"}};
  client->PushList(MakeList({node}, "1"));
  client->PushWatch({BlockUntilCancelled{}});
  SharedInformer informer(client, resources::Nodes(), Fast());
  ASSERT_TRUE(informer.AddIndex("providerID", FieldIndexFunc("spec.providerID")).ok());
  informer.Start();
  EXPECT_FALSE(informer.AddIndex("late", FieldIndexFunc("spec.x")).ok());
  ASSERT_TRUE(informer.WaitForCacheSync(10s));
  auto found = informer.store().ByIndex("providerID", "gce://p/z/vm-1");
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ(MetaString(*found->front(), "name"), "node-1");
}

TEST(SharedInformerTest, DropsManagedFieldsAndAppliesTransform) {
  auto client = std::make_shared<ScriptedClient>();
  Object o = MakeObject("ns", "a", "1");
  o["metadata"].as_object()["managedFields"] =
      boost::json::array{boost::json::object{{"manager", "x"}}};
  o["data"] = boost::json::object{{"big", "payload"}};
  client->PushList(MakeList({o}, "1"));
  client->PushWatch({BlockUntilCancelled{}});
  auto opts = Fast();
  opts.transform = [](Object& obj) { obj.erase("data"); };
  SharedInformer informer(client, resources::ConfigMaps(), opts);
  informer.Start();
  ASSERT_TRUE(informer.WaitForCacheSync(10s));
  auto cached = informer.store().Get("ns/a");
  ASSERT_NE(cached, nullptr);
  EXPECT_EQ(cached->at("metadata").as_object().if_contains("managedFields"), nullptr);
  EXPECT_EQ(cached->if_contains("data"), nullptr);
}

TEST(SharedInformerTest, HandlerExceptionIsContainedAndDeliveryContinues) {
  auto client = std::make_shared<ScriptedClient>();
  client->PushList(MakeList({MakeObject("ns", "a", "1"), MakeObject("ns", "b", "2")}, "2"));
  client->PushWatch({BlockUntilCancelled{}});
  SharedInformer informer(client, resources::ConfigMaps(), Fast());
  EventHandler throwing;
  throwing.on_add = [](const ObjectPtr&) { throw std::runtime_error("handler bug"); };
  informer.AddEventHandler(throwing);
  Recorder rec;
  informer.AddEventHandler(rec.Handler());
  informer.Start();
  ASSERT_TRUE(rec.WaitFor(2));
  EXPECT_EQ(rec.lines(), (std::vector<std::string>{"add ns/a@1", "add ns/b@2"}));
}

TEST(InformerFactoryTest, SharesOneInformerPerResourceNamespaceAndSelector) {
  auto client = std::make_shared<ScriptedClient>();
  InformerFactory factory(client, Fast());
  auto a = factory.For(resources::ConfigMaps());
  auto b = factory.For(resources::ConfigMaps());
  InformerOptions other = Fast();
  other.label_selector = "app=x";
  auto c = factory.For(resources::ConfigMaps(), &other);
  auto d = factory.For(resources::Secrets());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  factory.Shutdown();
}

}  // namespace
}  // namespace hyperslice::kube
