// The webhook's HTTPS server over a real loopback socket: content checks, TLS only, certificate
// rotation with a request in flight, graceful shutdown, metrics.
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "src/net/http.h"
#include "src/net/pki.h"
#include "src/webhook/webhook.h"
#include "test/testenv/raw_exchange.h"
#include "test/testenv/serving_pair.h"
#include "test/testenv/test_dir.h"
#include "test/unit/webhook/review_fixtures.h"

namespace hyperslice::webhook {
namespace {

using namespace std::chrono_literals;
using namespace testing;  // NOLINT: the fixtures

// Serves from a StaticObjectSource, but only on live reads, which wait for Release(): lets a test
// hold an admission in flight.
class GatedSource : public ObjectSource {
 public:
  explicit GatedSource(std::shared_ptr<StaticObjectSource> inner) : inner_(std::move(inner)) {}
  Result<ObjectPtr> Get(const kube::Resource& r, const std::string& ns, const std::string& name,
                        Mode mode) override {
    if (mode == Mode::kCachedOnly) {
      return Error::Make(Error::Code::kUnavailable, "no cache", kNotCached);
    }
    std::unique_lock<std::mutex> lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
    return inner_->Get(r, ns, name, mode);
  }
  bool WaitForWaiter(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return waiting_ > 0; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::shared_ptr<StaticObjectSource> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool released_ = false;
};

class WebhookServer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testenv::TestDir("hs-webhook");
    ca_ = *net::pki::MakeCa("webhook-test-ca");
    other_ca_ = *net::pki::MakeCa("webhook-rotated-ca");
    WritePair(Issue(ca_));
    objects_ = std::make_shared<StaticObjectSource>();
    objects_->Put(kube::resources::StatefulSets(),
                  StatefulSet("ns1", "web", "sts-uid", 3, "nginx"));
    pod_ = Pod("ns1", "web-1", {Container("main", 4)});
    SetOwner(pod_, "apps/v1", "StatefulSet", "web", "sts-uid");
  }
  void TearDown() override {
    if (server_) server_->Stop(1s);
    std::filesystem::remove_all(dir_);
  }
  static net::pki::KeyPair Issue(const net::pki::KeyPair& ca) {
    return *testenv::IssueLoopbackServing(ca);
  }
  void WritePair(const net::pki::KeyPair& kp) {
    testenv::WriteServingPair(dir_, kp.cert_pem, kp.key_pem);
  }
  void Start(std::shared_ptr<ObjectSource> source = nullptr, size_t max_body = 3 << 20) {
    ServerOptions o;
    o.tls_cert_file = (dir_ / "tls.crt").string();
    o.tls_key_file = (dir_ / "tls.key").string();
    o.max_body_bytes = max_body;
    o.source = source ? std::move(source) : objects_;
    auto s = Server::Start(std::move(o));
    ASSERT_TRUE(s.ok()) << s.error().ToString();
    server_ = std::move(*s);
  }
  std::shared_ptr<net::HttpClient> Client(const net::pki::KeyPair& ca) {
    net::HttpClient::Options o;
    o.base_url = "https://127.0.0.1:" + std::to_string(server_->port());
    o.tls.ca_pem = ca.cert_pem;
    return *net::HttpClient::Create(o);
  }
  static Result<net::Response> Post(net::HttpClient& c, const std::string& path,
                                    const std::string& body,
                                    const std::string& content_type = "application/json") {
    net::Request req;
    req.method = "POST";
    req.target = path;
    req.headers = {{"Content-Type", content_type}};
    req.body = body;
    req.timeout = 20s;
    return c.Do(req);
  }
  static Result<net::Response> Get(net::HttpClient& c, const std::string& target) {
    net::Request req;
    req.target = target;
    return c.Do(req);
  }
  // Starts the server on a gated source and sends it pod_'s admission (uid `uid`) from a client
  // that trusts ca_; the server holds it until gated_->Release().
  std::future<Result<net::Response>> StartWithHeldAdmission(const std::string& uid) {
    gated_ = std::make_shared<GatedSource>(objects_);
    Start(gated_);
    held_client_ = Client(ca_);
    return std::async(std::launch::async, [this, uid] {
      return Post(*held_client_, kMutatePodsPath, testing::Review(pod_, uid));
    });
  }

  std::filesystem::path dir_;
  net::pki::KeyPair ca_, other_ca_;
  std::shared_ptr<StaticObjectSource> objects_;
  json::object pod_;
  std::unique_ptr<Server> server_;
  std::shared_ptr<GatedSource> gated_;
  std::shared_ptr<net::HttpClient> held_client_;
};

TEST_F(WebhookServer, MutatesPodOverTls) {
  Start();
  auto client = Client(ca_);
  auto res = Post(*client, kMutatePodsPath, testing::Review(pod_, "uid-42"));
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  ASSERT_EQ(res->status, 200) << res->body;
  json::object resp = ResponseOf(res->body);
  EXPECT_EQ(resp.at("uid").as_string(), "uid-42");
  EXPECT_THAT(EnvAfter(pod_, resp),
              ::testing::ElementsAre("TPU_WORKER_HOSTNAMES=web-0.nginx,web-1.nginx,web-2.nginx",
                                     "TPU_WORKER_ID=1"));
}

TEST_F(WebhookServer, ServesUpstreamPathForStatefulSetsAndPods) {
  Start();
  auto client = Client(ca_);
  json::object sts = StatefulSet("ns1", "web", "sts-uid", 3, "nginx");
  sts["spec"].as_object()["template"] = json::object{
      {"metadata", json::object{{"labels", json::object{{kCompatInjectLabel, "enabled"}}}}},
      {"spec", json::object{{"containers", json::array{Container("nginx", 0, {{"FOO", "BAR"}})}}}}};
  // gke-tpu-env-injector's chart lists [v1beta1, v1]: the apiserver sends v1beta1.
  auto res = Post(*client, kMutatePath,
                  testing::Review(sts, "sts-1", "CREATE", nullptr, "admission.k8s.io/v1beta1"));
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body).at("apiVersion").as_string(), "admission.k8s.io/v1beta1");
  EXPECT_THAT(EnvAfter(sts, ResponseOf(res->body), 0, "spec/template/spec"),
              ::testing::ElementsAre("FOO=BAR",
                                     "TPU_WORKER_HOSTNAMES=web-0.nginx,web-1.nginx,web-2.nginx"));
  res = Post(*client, kMutatePath, testing::Review(pod_, "pod-1"));
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_THAT(EnvAfter(pod_, ResponseOf(res->body)),
              ::testing::ElementsAre("TPU_WORKER_HOSTNAMES=web-0.nginx,web-1.nginx,web-2.nginx",
                                     "TPU_WORKER_ID=1"));
  res = Post(*client, "/mutate-everything", testing::Review(pod_, "pod-2"));
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 404);

  auto root = Get(*client, "/");  // upstream's chart's liveness and readiness probes
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->status, 200);
  auto m = Get(*client, "/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(m->body,
              ::testing::HasSubstr(
                  R"(hyperslice_webhook_admissions_total{result="patched",webhook="/mutate"} 2)"));
}

TEST_F(WebhookServer, MalformedBodyIsBadRequest) {
  Start();
  auto client = Client(ca_);
  for (const char* body : {"not json", R"({"apiVersion":"v1","kind":"Pod"})", "{}"}) {
    auto res = Post(*client, kMutatePodsPath, body);
    ASSERT_TRUE(res.ok());
    EXPECT_EQ(res->status, 400) << body;
    EXPECT_NE(res->body.find("malformed AdmissionReview"), std::string::npos) << res->body;
  }
}

TEST_F(WebhookServer, WrongContentTypeIs415AndWrongMethodIs405) {
  Start();
  auto client = Client(ca_);
  auto res = Post(*client, kMutatePodsPath, testing::Review(pod_), "application/yaml");
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 415);
  auto ok =
      Post(*client, kMutatePodsPath, testing::Review(pod_), "Application/JSON; charset=utf-8");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200);
  auto got = Get(*client, kMutatePodsPath);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->status, 405);
  std::string metrics = server_->Metrics();
  EXPECT_NE(
      metrics.find(
          R"(hyperslice_webhook_rejections_total{reason="UnsupportedMediaType",webhook="/mutate-pods"} 1)"),
      std::string::npos)
      << metrics;
}

TEST_F(WebhookServer, OversizedBodyIs413) {
  // Just over the limit: the whole request is written before the server answers, so the client
  // reads the 413 instead of failing its write on the closed connection.
  Start(nullptr, size_t{8} * 1024);
  auto client = Client(ca_);
  json::object big = pod_;
  SetAnnotation(big, "padding", std::string(size_t{9} * 1024, 'x'));
  auto res = Post(*client, kMutatePodsPath, testing::Review(big));
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  EXPECT_EQ(res->status, 413);
  // The server keeps serving.
  auto after = Client(ca_);
  auto ok = Post(*after, kMutatePodsPath, testing::Review(pod_));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200);
}

std::string PlainExchange(uint16_t port, const std::string& bytes) {
  return testenv::RawExchange(port, bytes, 3s).bytes;
}

TEST_F(WebhookServer, PlainHttpIsRefused) {
  Start();
  std::string body = testing::Review(pod_);
  std::string out =
      PlainExchange(server_->port(),
                    "POST /mutate-pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    "Content-Length: " +
                        std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_EQ(out.find("HTTP/1.1 200"), std::string::npos) << out;
  EXPECT_EQ(out.find("TPU_WORKER"), std::string::npos);
  auto client = Client(ca_);
  auto ok = Post(*client, kMutatePodsPath, testing::Review(pod_));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200);
}

TEST_F(WebhookServer, NoCertificateNoServer) {
  ServerOptions o;
  o.source = objects_;
  auto s = Server::Start(std::move(o));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("--tls-cert-file"), std::string::npos);
}

TEST_F(WebhookServer, RotatedCertificateIsPickedUpWithoutDroppingInFlightRequest) {
  auto in_flight = StartWithHeldAdmission("in-flight");
  ASSERT_TRUE(gated_->WaitForWaiter(10s));
  EXPECT_EQ(server_->tls_generation(), 1);

  std::this_thread::sleep_for(1100ms);  // mtime granularity and the server's 1 s check interval
  WritePair(Issue(other_ca_));
  std::this_thread::sleep_for(1100ms);
  auto new_client = Client(other_ca_);
  net::Request health;
  health.target = "/healthz";
  auto h = new_client->Do(health);
  ASSERT_TRUE(h.ok()) << h.error().ToString();
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(server_->tls_generation(), 2);
  // New connections trusting only the old CA are refused now.
  auto stale = Client(ca_);
  EXPECT_FALSE(stale->Do(health).ok());

  gated_->Release();
  auto res = in_flight.get();
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  ASSERT_EQ(res->status, 200) << res->body;
  json::object resp = ResponseOf(res->body);
  EXPECT_EQ(resp.at("uid").as_string(), "in-flight");
  EXPECT_EQ(EnvAfter(pod_, resp).size(), 2u);
}

TEST_F(WebhookServer, StopAnswersInFlightAdmissionBeforeClosing) {
  auto in_flight = StartWithHeldAdmission("draining");
  ASSERT_TRUE(gated_->WaitForWaiter(10s));
  auto stopper = std::async(std::launch::async, [&] { server_->Stop(10s); });
  std::this_thread::sleep_for(200ms);
  gated_->Release();
  auto res = in_flight.get();
  stopper.get();
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(ResponseOf(res->body).at("uid").as_string(), "draining");
}

TEST_F(WebhookServer, HealthAndMetrics) {
  Start();
  auto client = Client(ca_);
  ASSERT_TRUE(Post(*client, kMutatePodsPath, testing::Review(pod_)).ok());
  json::object invalid = NodeGroup("ns1", "g", "2x2x2", "tpu7x-standard-4t", 3);
  auto denied = Post(*client, kValidateNodeGroupsPath, testing::Review(invalid));
  ASSERT_TRUE(denied.ok());
  EXPECT_FALSE(ResponseOf(denied->body).at("allowed").as_bool());
  auto h = Get(*client, "/healthz");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->status, 200);
  auto m = Get(*client, "/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(
      m->body.find(
          R"(controller_runtime_webhook_requests_total{code="200",webhook="/mutate-pods"} 1)"),
      std::string::npos)
      << m->body;
  EXPECT_NE(
      m->body.find(
          R"(hyperslice_webhook_admissions_total{result="patched",webhook="/mutate-pods"} 1)"),
      std::string::npos);
  EXPECT_NE(
      m->body.find(
          R"(hyperslice_webhook_rejections_total{reason="Invalid",webhook="/validate-tpunodegroups"} 1)"),
      std::string::npos);
  EXPECT_NE(m->body.find("controller_runtime_webhook_latency_seconds_bucket"), std::string::npos);
}

}  // namespace
}  // namespace hyperslice::webhook
