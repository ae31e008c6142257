// The webhook's HTTPS server: routes, content checks, metrics, and the hand-off of admissions that
// need a live API read from the I/O threads to a small blocking pool.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "src/base/log.h"
#include "src/base/strings.h"
#include "src/net/server.h"
#include "src/webhook/webhook.h"

namespace hyperslice::webhook {
namespace {

using Clock = std::chrono::steady_clock;
using net::Headers;

// "application/json" with optional parameters ("; charset=utf-8"), any case.
bool IsJsonContentType(const std::string& value) {
  std::string v = AsciiLower(value);
  size_t semi = v.find(';');
  std::string media = v.substr(0, semi);
  while (!media.empty() && media.back() == ' ') media.pop_back();
  while (!media.empty() && media.front() == ' ') media.erase(media.begin());
  return media == "application/json";
}

// Metric names follow controller-runtime's webhook metrics so existing dashboards apply.
class Metrics {
 public:
  Metrics()
      : registry_(std::make_shared<prometheus::Registry>()),
        requests_(prometheus::BuildCounter()
                      .Name("controller_runtime_webhook_requests_total")
                      .Help("Admission requests by webhook path and HTTP status code")
                      .Register(*registry_)),
        latency_(prometheus::BuildHistogram()
                     .Name("controller_runtime_webhook_latency_seconds")
                     .Help("Time from receiving an admission request to answering it")
                     .Register(*registry_)),
        in_flight_(prometheus::BuildGauge()
                       .Name("controller_runtime_webhook_requests_in_flight")
                       .Help("Admission requests being handled")
                       .Register(*registry_)),
        admissions_(prometheus::BuildCounter()
                        .Name("hyperslice_webhook_admissions_total")
                        .Help("Admission decisions by webhook path and result "
                              "(allowed, patched, denied)")
                        .Register(*registry_)),
        rejections_(prometheus::BuildCounter()
                        .Name("hyperslice_webhook_rejections_total")
                        .Help("Denied admissions and refused requests by webhook path and reason")
                        .Register(*registry_)),
        mutate_pods_(MakeHook(kMutatePodsPath)),
        mutate_(MakeHook(kMutatePath)),
        validate_(MakeHook(kValidateNodeGroupsPath)),
        validate_tgp_(MakeHook(kValidateTgpPath)),
        validate_sealed_pods_(MakeHook(kValidateSealedPodsPath)) {}

  // The series every admission touches, resolved once per webhook path: Family::Add hashes its
  // label map under a lock, which the hot path should not pay five times per request.
  struct Hook {
    std::string path;
    prometheus::Gauge* in_flight;
    prometheus::Histogram* latency;
    prometheus::Counter* ok;  // code="200"
    prometheus::Counter* allowed;
    prometheus::Counter* patched;
    prometheus::Counter* denied;
  };
  // The series of an admission path (kMutatePodsPath, kMutatePath, kValidateNodeGroupsPath,
  // kValidateTgpPath or kValidateSealedPodsPath); nullptr for any other path.
  const Hook* For(const std::string& path) const {
    if (path == kMutatePodsPath) return &mutate_pods_;
    if (path == kMutatePath) return &mutate_;
    if (path == kValidateNodeGroupsPath) return &validate_;
    if (path == kValidateTgpPath) return &validate_tgp_;
    if (path == kValidateSealedPodsPath) return &validate_sealed_pods_;
    return nullptr;
  }

  static void Begin(const Hook& h) { h.in_flight->Increment(); }
  void End(const Hook& h, int code, Clock::duration elapsed) {
    h.in_flight->Decrement();
    if (code == 200) {
      h.ok->Increment();
    } else {
      requests_.Add({{"webhook", h.path}, {"code", std::to_string(code)}}).Increment();
    }
    h.latency->Observe(std::chrono::duration<double>(elapsed).count());
  }
  void Decision(const Hook& h, const ReviewResult& r) {
    if (r.http_status != 200) {
      rejections_.Add({{"webhook", h.path}, {"reason", r.reason}}).Increment();
      return;
    }
    (!r.allowed ? h.denied : r.patched ? h.patched : h.allowed)->Increment();
    if (!r.allowed) rejections_.Add({{"webhook", h.path}, {"reason", r.reason}}).Increment();
  }
  void Refused(const std::string& hook, const std::string& reason) {
    rejections_.Add({{"webhook", hook}, {"reason", reason}}).Increment();
  }
  std::string Expose() const {
    return prometheus::TextSerializer().Serialize(registry_->Collect());
  }

 private:
  Hook MakeHook(const std::string& hook) {
    static const prometheus::Histogram::BucketBoundaries kBuckets = {
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
        0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
    return Hook{hook,
                &in_flight_.Add({{"webhook", hook}}),
                &latency_.Add({{"webhook", hook}}, kBuckets),
                &requests_.Add({{"webhook", hook}, {"code", "200"}}),
                &admissions_.Add({{"webhook", hook}, {"result", "allowed"}}),
                &admissions_.Add({{"webhook", hook}, {"result", "patched"}}),
                &admissions_.Add({{"webhook", hook}, {"result", "denied"}})};
  }

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Family<prometheus::Gauge>& in_flight_;
  prometheus::Family<prometheus::Counter>& admissions_;
  prometheus::Family<prometheus::Counter>& rejections_;
  Hook mutate_pods_;
  Hook mutate_;
  Hook validate_;
  Hook validate_tgp_;
  Hook validate_sealed_pods_;
};

class ServerImpl : public Server {
 public:
  explicit ServerImpl(ServerOptions options)
      : options_(std::move(options)),
        pool_(std::make_unique<boost::asio::thread_pool>(
            static_cast<size_t>(std::max(1, options_.blocking_threads)))) {}
  ~ServerImpl() override { Stop(std::chrono::milliseconds(2000)); }

  Status Listen() {
    net::HttpServer::Options o;
    o.address = options_.address;
    o.port = options_.port;
    o.threads = std::max(1, options_.io_threads);
    o.tls = net::ServerTlsFiles{options_.tls_cert_file, options_.tls_key_file};
    o.max_body_bytes = options_.max_body_bytes;
    HS_ASSIGN_OR_RETURN(
        http_, net::HttpServer::Start(o, [this](const net::ServerRequest& req,
                                                const std::shared_ptr<net::Responder>& responder) {
          Handle(req, responder);
        }));
    return OkStatus();
  }

  uint16_t port() const override { return http_->port(); }
  int tls_generation() const override { return http_->tls_generation(); }
  std::string Metrics() const override { return metrics_.Expose(); }

  void Stop(std::chrono::milliseconds grace) override {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    // Finish the admissions already received while the listener still runs: net::HttpServer's
    // I/O threads leave once the acceptor is closed and no socket operation is pending, so an
    // answer completed later from the blocking pool would wait for the end of its grace period.
    Clock::time_point deadline = Clock::now() + grace;
    {
      std::unique_lock<std::mutex> l(inflight_mu_);
      inflight_cv_.wait_until(l, deadline, [&] { return inflight_ == 0; });
    }
    if (http_) {
      http_->Stop(
          std::max(std::chrono::milliseconds(0),
                   std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())));
    }
    pool_->join();
  }

 private:
  void Handle(const net::ServerRequest& req, const std::shared_ptr<net::Responder>& responder) {
    // "/" as well: gke-tpu-env-injector's chart probes it (seed 001), and answers 200 there.
    if (req.path == "/healthz" || req.path == "/readyz" || req.path == "/") {
      responder->Send(200, "ok\n", {{"Content-Type", "text/plain; charset=utf-8"}});
      return;
    }
    if (req.path == "/metrics") {
      responder->Send(200, metrics_.Expose(),
                      {{"Content-Type", "text/plain; version=0.0.4; charset=utf-8"}});
      return;
    }
    const Metrics::Hook* hook = metrics_.For(req.path);
    if (hook == nullptr) {
      responder->Send(404, "not found\n", {{"Content-Type", "text/plain; charset=utf-8"}});
      return;
    }
    Clock::time_point start = Clock::now();
    Metrics::Begin(*hook);
    {
      std::lock_guard<std::mutex> l(inflight_mu_);
      ++inflight_;
    }
    auto finish = [this, hook, start, responder](int status, std::string body,
                                                 const std::string& content_type,
                                                 Headers extra = {}) {
      // net::HttpServer answers application/json unless told otherwise: no header vector (and
      // no heap copy of the type) for the common answer.
      if (content_type != "application/json") extra.emplace_back("Content-Type", content_type);
      responder->Send(status, std::move(body), std::move(extra));
      metrics_.End(*hook, status, Clock::now() - start);
      std::lock_guard<std::mutex> l(inflight_mu_);
      if (--inflight_ == 0) inflight_cv_.notify_all();
    };
    if (req.method != "POST") {
      metrics_.Refused(hook->path, "MethodNotAllowed");
      finish(405, "admission reviews are POSTed\n", "text/plain; charset=utf-8",
             {{"Allow", "POST"}});
      return;
    }
    if (!IsJsonContentType(req.Header("content-type"))) {
      metrics_.Refused(hook->path, "UnsupportedMediaType");
      finish(415,
             "unsupported Content-Type \"" + req.Header("content-type") +
                 "\": AdmissionReview bodies are application/json\n",
             "text/plain; charset=utf-8");
      return;
    }
    ReviewResult r =
        Review(req.path, req.body, *options_.source, options_.admission, /*allow_live=*/false);
    if (!r.needs_live) {
      metrics_.Decision(*hook, r);
      finish(r.http_status, std::move(r.body), r.content_type);
      return;
    }
    // A live API read may block: off the I/O thread.
    boost::asio::post(*pool_, [this, hook, body = req.body, finish]() {
      ReviewResult live =
          Review(hook->path, body, *options_.source, options_.admission, /*allow_live=*/true);
      metrics_.Decision(*hook, live);
      finish(live.http_status, std::move(live.body), live.content_type);
    });
  }

  ServerOptions options_;
  std::unique_ptr<boost::asio::thread_pool> pool_;
  mutable class Metrics metrics_;
  std::unique_ptr<net::HttpServer> http_;
  std::mutex stop_mu_;
  bool stopped_ = false;
  std::mutex inflight_mu_;
  std::condition_variable inflight_cv_;
  int inflight_ = 0;  // admissions received and not answered yet
};

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "the webhook serves HTTPS only: set --tls-cert-file and --tls-key-file");
  }
  if (!options.source) {
    return Error::Make(Error::Code::kInvalidArgument, "webhook server needs an ObjectSource");
  }
  auto server = std::make_unique<ServerImpl>(std::move(options));
  HS_RETURN_IF_ERROR(server->Listen());
  log::Info("webhook serving", {{"port", static_cast<int64_t>(server->port())}});
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace hyperslice::webhook
