// The Compute client's retry, requestId, auth, paging and waiting behaviour against a scripted
// loopback server, with the backoff sleep and clock injected so no test waits in real time.
#include <atomic>

#include <gtest/gtest.h>
#include <boost/json/parse.hpp>

#include "src/base/fake_clock.h"
#include "src/gce/compute.h"
#include "test/unit/gce/scripted_server.h"

namespace hyperslice::gce {
namespace {

using testing::Scripted;
using testing::ScriptedServer;
using namespace std::chrono_literals;

constexpr char kIgms[] = "/compute/v1/projects/p/zones/us-central1-a/instanceGroupManagers";

std::string Op(const std::string& name, const std::string& status, const std::string& extra = "") {
  return R"({"kind":"compute#operation","name":")" + name + R"(","status":")" + status +
         R"(","selfLink":"http://x/compute/v1/projects/p/zones/us-central1-a/operations/)" + name +
         "\"" + extra + "}";
}

std::string GoogleError(int code, const std::string& reason) {
  return R"({"error":{"code":)" + std::to_string(code) + R"(,"message":"scripted )" + reason +
         R"(","errors":[{"reason":")" + reason + R"(","domain":"global","message":"m"}]}})";
}

class CountingTokens final : public TokenSource {
 public:
  Result<std::string> Token() override { return "token-" + std::to_string(generation_.load()); }
  void Invalidate() override { ++generation_; }
  std::string Describe() const override { return "counting"; }
  std::atomic<int> generation_{0};
};

struct Fixture {
  ScriptedServer server;
  FakeClock clock;
  std::vector<std::chrono::milliseconds> sleeps;
  std::shared_ptr<CountingTokens> tokens = std::make_shared<CountingTokens>();
  std::unique_ptr<Compute> compute;

  explicit Fixture(int max_attempts = 5) {
    ComputeOptions o;
    o.endpoint = server.url() + "/compute/v1/";
    o.tokens = tokens;
    o.clock = &clock;
    o.retry.max_attempts = max_attempts;
    o.retry.random = [] { return 0.5; };
    o.retry.sleep = [this](std::chrono::milliseconds d) {
      sleeps.push_back(d);
      clock.Advance(d);
    };
    auto c = Compute::Create(o);
    EXPECT_TRUE(c.ok()) << c.error().ToString();
    compute = std::move(c).value();
  }
};

TEST(ComputeClient, RetriesUnavailableWithTheSameRequestIdAndJitteredBackoff) {
  Fixture f;
  f.server.Script("POST " + std::string(kIgms), {{503, GoogleError(503, "backendError")},
                                                 {429, GoogleError(429, "rateLimitExceeded")},
                                                 {403, GoogleError(403, "rateLimitExceeded")},
                                                 {200, Op("op-1", "PENDING")}});
  auto op = f.compute->InsertInstanceGroupManager("p", "us-central1-a",
                                                  boost::json::object{{"name", "m"}});
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  EXPECT_EQ(op->ref.name, "op-1");
  EXPECT_EQ(op->ref.scope, Scope::kZone);
  auto reqs = f.server.Requests("POST", kIgms);
  ASSERT_EQ(reqs.size(), 4u);
  const std::string id = reqs[0].Query("requestId");
  EXPECT_EQ(id.size(), 36u);
  for (const auto& r : reqs) {
    EXPECT_EQ(r.Query("requestId"), id);  // one logical call, one requestId
    EXPECT_EQ(boost::json::parse(r.body), boost::json::parse(R"({"name":"m"})"));
    EXPECT_EQ(r.Header("authorization"), "Bearer token-0");
    EXPECT_EQ(r.Header("content-type"), "application/json");
  }
  // random = 0.5 → half of 1s, 2s, 4s.
  EXPECT_EQ(f.sleeps, (std::vector<std::chrono::milliseconds>{500ms, 1000ms, 2000ms}));
  auto& c = f.compute->counters();
  EXPECT_EQ(c.Get("instanceGroupManagers.insert", "503"), 1u);
  EXPECT_EQ(c.Get("instanceGroupManagers.insert", "429"), 1u);
  EXPECT_EQ(c.Get("instanceGroupManagers.insert", "200"), 1u);
  EXPECT_EQ(c.Total("instanceGroupManagers.insert"), 4u);

  // A second logical insert gets a new requestId.
  f.server.Script("POST " + std::string(kIgms), {{200, Op("op-2", "PENDING")}});
  ASSERT_TRUE(f.compute->InsertInstanceGroupManager("p", "us-central1-a", {}).ok());
  EXPECT_NE(f.server.Requests("POST", kIgms).back().Query("requestId"), id);
}

TEST(ComputeClient, PermanentClientErrorsAreNotRetried) {
  for (auto [status, reason, code] : {std::tuple{400, "invalid", Error::Code::kInvalidArgument},
                                      std::tuple{404, "notFound", Error::Code::kNotFound},
                                      std::tuple{409, "alreadyExists", Error::Code::kAlreadyExists},
                                      std::tuple{412, "conditionNotMet", Error::Code::kConflict}}) {
    Fixture f;
    f.server.Script("POST " + std::string(kIgms), {{status, GoogleError(status, reason)}}, true);
    auto op = f.compute->InsertInstanceGroupManager("p", "us-central1-a", {});
    ASSERT_FALSE(op.ok());
    EXPECT_EQ(op.error().code, code) << status;
    EXPECT_EQ(op.error().reason, reason);
    EXPECT_EQ(op.error().http_status, status);
    EXPECT_EQ(f.server.Requests("POST", kIgms).size(), 1u) << status;
    EXPECT_TRUE(f.sleeps.empty());
  }
}

TEST(ComputeClient, GivesUpAfterMaxAttemptsAndHonoursRetryAfter) {
  Fixture f(3);
  f.server.Script("GET " + std::string(kIgms) + "/m",
                  {{503, GoogleError(503, "backendError"), {{"Retry-After", "9"}}}}, true);
  auto got = f.compute->GetInstanceGroupManager("p", "us-central1-a", "m");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, Error::Code::kUnavailable);
  EXPECT_NE(got.error().message.find("gave up after 3 attempts"), std::string::npos);
  EXPECT_EQ(f.server.Requests("GET", std::string(kIgms) + "/m").size(), 3u);
  EXPECT_EQ(f.sleeps, (std::vector<std::chrono::milliseconds>{9000ms, 9000ms}));
}

TEST(ComputeClient, ElapsedTimeBoundStopsRetries) {
  ScriptedServer server;
  FakeClock clock;
  std::vector<std::chrono::milliseconds> sleeps;
  ComputeOptions o;
  o.endpoint = server.url() + "/compute/v1/";
  o.tokens = StaticTokenSource("t");
  o.clock = &clock;
  o.retry.max_attempts = 100;
  o.retry.max_elapsed = 10s;
  o.retry.random = [] { return 0.999; };
  o.retry.sleep = [&](std::chrono::milliseconds d) {
    sleeps.push_back(d);
    clock.Advance(d);
  };
  auto compute = Compute::Create(o).value();
  server.Script("GET " + std::string(kIgms) + "/m", {{500, GoogleError(500, "internalError")}},
                true);
  auto got = compute->GetInstanceGroupManager("p", "us-central1-a", "m");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.error().message.find("out of time"), std::string::npos);
  // 0.999 s + 1.998 s + 3.996 s = 6.993 s slept; the next (7.992 s) would pass 10 s.
  EXPECT_EQ(sleeps.size(), 3u);
}

TEST(ComputeClient, UnauthorizedFetchesANewTokenOnce) {
  Fixture f;
  const std::string path = "/compute/v1/projects/p/global/instanceTemplates/t";
  f.server.Script("GET " + path, {{401, GoogleError(401, "authError")}, {200, R"({"name":"t"})"}});
  auto got = f.compute->GetInstanceTemplate("p", "t");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  auto reqs = f.server.Requests("GET", path);
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].Header("authorization"), "Bearer token-0");
  EXPECT_EQ(reqs[1].Header("authorization"), "Bearer token-1");

  // Two 401s in a row: the second is returned.
  f.server.Script("GET " + path, {{401, GoogleError(401, "authError")}}, true);
  auto denied = f.compute->GetInstanceTemplate("p", "t");
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.error().code, Error::Code::kUnauthorized);
}

TEST(ComputeClient, ListFollowsNextPageTokenAndPassesFilter) {
  Fixture f;
  const std::string path = "/compute/v1/projects/p/zones/us-central1-a/instances";
  f.server.Fallback([&](const net::ServerRequest& req) -> Scripted {
    auto token = req.Query("pageToken");
    if (token.empty())
      return {200, R"({"items":[{"name":"a"},{"name":"b"}],"nextPageToken":"t1"})"};
    if (token == "t1") return {200, R"({"items":[{"name":"c"}],"nextPageToken":"t2"})"};
    return {200, R"({"kind":"compute#instanceList"})"};  // last page without items
  });
  ListOptions lo;
  lo.filter = R"(labels.owner="ns.g")";
  lo.page_size = 2;
  auto items = f.compute->ListInstances("p", "us-central1-a", lo);
  ASSERT_TRUE(items.ok()) << items.error().ToString();
  ASSERT_EQ(items->size(), 3u);
  EXPECT_EQ((*items)[2].at("name"), "c");
  auto reqs = f.server.Requests("GET", path);
  ASSERT_EQ(reqs.size(), 3u);
  for (const auto& r : reqs) {
    EXPECT_EQ(r.Query("filter"), R"(labels.owner="ns.g")");
    EXPECT_EQ(r.Query("maxResults"), "2");
    EXPECT_TRUE(r.Query("requestId").empty());  // reads carry no requestId
  }
  EXPECT_EQ(reqs[2].Query("pageToken"), "t2");
}

TEST(ComputeClient, ListManagedInstancesIsAPagedPost) {
  Fixture f;
  const std::string path = std::string(kIgms) + "/m/listManagedInstances";
  f.server.Script("POST " + path,
                  {{200, R"({"managedInstances":[{"instance":"i1"}],"nextPageToken":"n"})"},
                   {200, R"({"managedInstances":[{"instance":"i2"}]})"}});
  auto mis = f.compute->ListManagedInstances("p", "us-central1-a", "m", {});
  ASSERT_TRUE(mis.ok()) << mis.error().ToString();
  ASSERT_EQ(mis->size(), 2u);
  EXPECT_EQ((*mis)[1].at("instance"), "i2");
  auto reqs = f.server.Requests("POST", path);
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_TRUE(reqs[0].Query("requestId").empty());
  EXPECT_EQ(reqs[1].Query("pageToken"), "n");
}

TEST(ComputeClient, WaitNeverTightPollsAServerThatAnswersAtOnce) {
  Fixture f;
  const std::string path = "/compute/v1/projects/p/zones/us-central1-a/operations/op-1/wait";
  f.server.Script("POST " + path, {{200, Op("op-1", "RUNNING")}}, true);
  OperationRef ref{"p", Scope::kZone, "us-central1-a", "op-1"};
  auto done = f.compute->Wait(ref, 10s);
  ASSERT_FALSE(done.ok());
  EXPECT_EQ(done.error().code, Error::Code::kTimeout);
  EXPECT_EQ(done.error().reason, "operationNotDone");
  // One wait per min_wait_interval (1 s) of the 10 s: calls at t = 0..9 s.
  EXPECT_EQ(f.server.Requests("POST", path).size(), 10u);
  for (auto d : f.sleeps) EXPECT_EQ(d, 1000ms);
}

TEST(ComputeClient, WaitReturnsTheOperationsErrorWhenItFailed) {
  Fixture f;
  const std::string path = "/compute/v1/projects/p/zones/us-central1-a/operations/op-1/wait";
  f.server.Script(
      "POST " + path,
      {{200, Op("op-1", "RUNNING")},
       {200,
        Op("op-1", "DONE",
           R"(,"error":{"errors":[{"code":"ZONE_RESOURCE_POOL_EXHAUSTED","message":"none left"}]})")}});
  auto done = f.compute->Wait({"p", Scope::kZone, "us-central1-a", "op-1"}, 1h);
  ASSERT_FALSE(done.ok());
  EXPECT_EQ(done.error().reason, "ZONE_RESOURCE_POOL_EXHAUSTED");
  EXPECT_NE(done.error().message.find("none left"), std::string::npos);
  EXPECT_EQ(f.server.Requests("POST", path).size(), 2u);

  f.server.Script("POST " + path, {{200, Op("op-1", "DONE")}});
  auto ok = f.compute->Wait({"p", Scope::kZone, "us-central1-a", "op-1"}, 1h);
  ASSERT_TRUE(ok.ok()) << ok.error().ToString();
  EXPECT_TRUE(ok->done());
}

TEST(ComputeClient, UpdateInstanceMetadataRereadsOnStaleFingerprint) {
  Fixture f;
  const std::string inst = "/compute/v1/projects/p/zones/us-central1-a/instances/vm-0";
  f.server.Script(
      "GET " + inst,
      {{200,
        R"({"name":"vm-0","metadata":{"fingerprint":"fp1","items":[{"key":"a","value":"1"}]}})"},
       {200,
        R"({"name":"vm-0","metadata":{"fingerprint":"fp2","items":[{"key":"a","value":"1"},{"key":"other","value":"x"}]}})"}});
  f.server.Script("POST " + inst + "/setMetadata",
                  {{412, GoogleError(412, "conditionNotMet")}, {200, Op("op-md", "PENDING")}});
  int calls = 0;
  auto op =
      f.compute->UpdateInstanceMetadata("p", "us-central1-a", "vm-0", [&](MetadataItems& items) {
        ++calls;
        items["kube-labels"] = "a=b";
        return true;
      });
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  ASSERT_TRUE(op->has_value());
  EXPECT_EQ(calls, 2);
  auto posts = f.server.Requests("POST", inst + "/setMetadata");
  ASSERT_EQ(posts.size(), 2u);
  EXPECT_EQ(boost::json::parse(posts[1].body),
            boost::json::parse(R"({"fingerprint":"fp2","items":[{"key":"a","value":"1"},
                {"key":"kube-labels","value":"a=b"},{"key":"other","value":"x"}]})"));
  EXPECT_NE(posts[0].Query("requestId"), posts[1].Query("requestId"));  // two logical calls

  // Nothing to change: no setMetadata call.
  f.server.Script("GET " + inst, {{200, R"({"name":"vm-0","metadata":{"fingerprint":"fp3"}})"}});
  auto noop = f.compute->UpdateInstanceMetadata("p", "us-central1-a", "vm-0",
                                                [](MetadataItems&) { return false; });
  ASSERT_TRUE(noop.ok());
  EXPECT_FALSE(noop->has_value());
  EXPECT_EQ(f.server.Requests("POST", inst + "/setMetadata").size(), 2u);
}

TEST(ComputeClient, TransportFailureIsRetriedThenReported) {
  FakeClock clock;
  ComputeOptions o;
  o.endpoint = "http://127.0.0.1:1/compute/v1/";  // nothing listens on port 1
  o.tokens = StaticTokenSource("t");
  o.clock = &clock;
  o.retry.max_attempts = 2;
  int slept = 0;
  o.retry.sleep = [&](std::chrono::milliseconds) { ++slept; };
  auto compute = Compute::Create(o).value();
  auto got = compute->GetReservation("p", "z", "r");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, Error::Code::kUnavailable);
  EXPECT_EQ(slept, 1);
  EXPECT_EQ(compute->counters().Get("reservations.get", "error"), 2u);
}

}  // namespace
}  // namespace hyperslice::gce
