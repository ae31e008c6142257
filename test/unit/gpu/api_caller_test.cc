// ApiCaller's rules against a real loopback server: retries honour Retry-After, a create is never
// sent twice, a lost answer is ambiguous, a refused connection is not, the rate limit holds.
#include "src/gpu/internal/api_caller.h"

#include <atomic>
#include <deque>
#include <mutex>

#include <gtest/gtest.h>

#include "src/kube/metrics.h"
#include "src/net/server.h"

namespace hyperslice::gpu::internal {
namespace {

using Ms = std::chrono::milliseconds;

// What the server does with each request, in order; the last one repeats.
struct Script {
  enum Kind { kOk, kStatus, kAbort };
  struct Step {
    Kind kind = kOk;
    int status = 200;
    net::Headers headers = {};
  };
  std::mutex mu;
  std::deque<Step> steps;
  std::atomic<int> requests{0};
};

class ScriptedServer {
 public:
  ScriptedServer(std::initializer_list<Script::Step> steps) {
    script_.steps.assign(steps.begin(), steps.end());
    auto s = net::HttpServer::Start(
        {}, [this](const net::ServerRequest&, std::shared_ptr<net::Responder> out) {
          script_.requests++;
          Script::Step step;
          {
            std::lock_guard lock(script_.mu);
            step = script_.steps.front();
            if (script_.steps.size() > 1) script_.steps.pop_front();
          }
          if (step.kind == Script::kAbort) return out->Abort();
          out->Send(step.status, "{}", step.headers);
        });
    EXPECT_TRUE(s.ok());
    server_ = std::move(*s);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }
  int requests() const { return script_.requests.load(); }

 private:
  Script script_;
  std::unique_ptr<net::HttpServer> server_;
};

class CountingCredential final : public CredentialSource {
 public:
  Result<std::string> Get() override { return std::string("k"); }
  void Invalidate() override { invalidated++; }
  std::atomic<int> invalidated{0};
};

Error Decode(const net::Response& r) {
  if (r.status == 429) return MakeError(ErrorKind::kRateLimited, "slow down", r.status);
  if (r.status == 401) return MakeError(ErrorKind::kUnauthorized, "bad key", r.status);
  if (r.status >= 500) return MakeError(ErrorKind::kTransient, "server", r.status);
  return MakeError(ErrorKind::kInvalid, "bad request", r.status);
}

struct Fixture {
  explicit Fixture(std::string url, bool fast = true) {
    config.name = "test";
    config.endpoint = std::move(url);
    config.credentials = creds;
    config.metrics = &registry;
    config.seed = 7;
    if (fast) {
      config.retry.initial_backoff = Ms(5);
      config.retry.max_backoff = Ms(20);
    }
    caller = ApiCaller::Create(config, "http://unused", 1000, 100).value();
  }
  Result<net::Response> Call(bool idempotent) {
    ApiCaller::Call c;
    c.method = "m";
    c.request.method = idempotent ? "GET" : "POST";
    c.request.target = "/x";
    c.idempotent = idempotent;
    return caller->Do(c, Decode);
  }
  double Count(const std::string& code) {
    return registry
        .GetCounter("hyperslice_gpu_provider_requests_total", "",
                    {{"provider", "test"}, {"method", "m"}, {"code", code}})
        .Value();
  }
  std::shared_ptr<CountingCredential> creds = std::make_shared<CountingCredential>();
  kube::metrics::Registry registry;
  ProviderConfig config;
  std::unique_ptr<ApiCaller> caller;
};

TEST(ApiCaller, RateLimitedWaitsAsTold) {
  ScriptedServer server({{Script::kStatus, 429, {{"Retry-After", "1"}}}, {Script::kOk}});
  Fixture f(server.url());
  auto t0 = std::chrono::steady_clock::now();
  auto r = f.Call(/*idempotent=*/false);  // a 429 was not acted on: even a create is retried
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, Ms(1000));
  EXPECT_EQ(server.requests(), 2);
  EXPECT_EQ(f.Count("429"), 1);
  EXPECT_EQ(f.Count("200"), 1);
}

TEST(ApiCaller, RetryAfterBeyondTheBoundIsReturned) {
  ScriptedServer server({{Script::kStatus, 429, {{"Retry-After", "3600"}}}});
  Fixture f(server.url());
  auto r = f.Call(true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KindOf(r.error()), ErrorKind::kRateLimited);
  ASSERT_TRUE(r.error().retry_after);
  EXPECT_EQ(*r.error().retry_after, Ms(3600 * 1000));
  EXPECT_EQ(server.requests(), 1);
}

TEST(ApiCaller, LostAnswerToACreateIsAmbiguousAndNotResent) {
  ScriptedServer server({{Script::kAbort}, {Script::kOk}});
  Fixture f(server.url());
  auto r = f.Call(/*idempotent=*/false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KindOf(r.error()), ErrorKind::kAmbiguous) << r.error().ToString();
  EXPECT_EQ(server.requests(), 1);
}

TEST(ApiCaller, LostAnswerToAReadIsRetried) {
  ScriptedServer server({{Script::kAbort}, {Script::kOk}});
  Fixture f(server.url());
  auto r = f.Call(true);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(server.requests(), 2);
  EXPECT_EQ(f.Count("error"), 1);
}

TEST(ApiCaller, ServerErrorsOnACreate) {
  {  // 503: the provider says it did not act; retried.
    ScriptedServer server({{Script::kStatus, 503}, {Script::kOk}});
    Fixture f(server.url());
    ASSERT_TRUE(f.Call(false).ok());
    EXPECT_EQ(server.requests(), 2);
  }
  {  // 500/502: it may have acted; ambiguous, never re-sent.
    ScriptedServer server({{Script::kStatus, 502}, {Script::kOk}});
    Fixture f(server.url());
    auto r = f.Call(false);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(KindOf(r.error()), ErrorKind::kAmbiguous);
    EXPECT_EQ(r.error().http_status, 502);
    EXPECT_EQ(server.requests(), 1);
  }
}

TEST(ApiCaller, UnauthorizedIsNotRetriedAndDropsCachedCredentials) {
  ScriptedServer server({{Script::kStatus, 401}});
  Fixture f(server.url());
  auto r = f.Call(true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KindOf(r.error()), ErrorKind::kUnauthorized);
  EXPECT_EQ(server.requests(), 1);
  EXPECT_EQ(f.creds->invalidated.load(), 1);
  EXPECT_EQ(f.registry
                .GetCounter("hyperslice_gpu_provider_errors_total", "",
                            {{"provider", "test"}, {"method", "m"}, {"kind", "unauthorized"}})
                .Value(),
            1);
}

TEST(ApiCaller, RefusedConnectionIsTransientNotAmbiguous) {
  std::string url;
  {
    ScriptedServer gone({{Script::kOk}});
    url = gone.url();
  }  // stopped: the port now refuses connections
  Fixture f(url);
  f.config.retry.max_attempts = 2;
  auto r = f.Call(false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KindOf(r.error()), ErrorKind::kTransient) << r.error().ToString();
}

TEST(ApiCaller, ClientSideRateLimit) {
  ScriptedServer server({{Script::kOk}});
  Fixture f(server.url());
  f.config.requests_per_second = 10;
  f.config.burst = 1;
  auto caller = ApiCaller::Create(f.config, "http://unused", 1, 1).value();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 6; ++i) {
    ApiCaller::Call c;
    c.method = "m";
    c.request.target = "/x";
    ASSERT_TRUE(caller->Do(c, Decode).ok());
  }
  // One token at once, then one per 100 ms: five waits.
  EXPECT_GE(std::chrono::steady_clock::now() - t0, Ms(450));
  EXPECT_EQ(server.requests(), 6);
}

}  // namespace
}  // namespace hyperslice::gpu::internal
