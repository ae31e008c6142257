#include "src/gpu/internal/api_caller.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <thread>

#include <boost/json/parse.hpp>

#include "src/base/log.h"
#include "src/gpu/provider.h"
#include "src/kube/metrics.h"

namespace hyperslice::gpu::internal {

namespace json = boost::json;

namespace {

using Ms = std::chrono::milliseconds;

// Retry-After in seconds (the only form the four providers send); "" or unparsable: nullopt.
std::optional<Ms> ParseRetryAfter(std::string_view v) {
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  double seconds = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), seconds);
  if (ec != std::errc() || p == v.data() || seconds < 0) return std::nullopt;
  return Ms(static_cast<int64_t>(seconds * 1000));
}

kube::metrics::Registry& Metrics(const ProviderConfig& c) {
  return c.metrics ? *c.metrics : kube::metrics::Registry::Default();
}

}  // namespace

Result<std::unique_ptr<ApiCaller>> ApiCaller::Create(const ProviderConfig& config,
                                                     std::string_view default_endpoint,
                                                     double default_rps, int default_burst) {
  net::HttpClient::Options o;
  o.base_url = config.endpoint.empty() ? std::string(default_endpoint) : config.endpoint;
  o.tls.ca_pem = config.ca_pem;
  o.user_agent = "hyperslice-gpu";
  auto http = net::HttpClient::Create(o);
  if (!http.ok()) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "provider " + config.name + ": endpoint: " + http.error().message);
  }
  double rps = config.requests_per_second.value_or(default_rps);
  int burst = config.burst.value_or(default_burst);
  if (rps <= 0 || burst < 1) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "provider " + config.name + ": rate limit must be positive");
  }
  return std::unique_ptr<ApiCaller>(new ApiCaller(config, *http, rps, burst));
}

ApiCaller::ApiCaller(const ProviderConfig& config, std::shared_ptr<net::HttpClient> http,
                     double rps, int burst)
    : config_(config),
      credentials_(config.credentials),
      http_(std::move(http)),
      rps_(rps),
      burst_(burst),
      tokens_(burst),
      refilled_(config.clock->Now()),
      rng_(config.seed ? config.seed : std::random_device{}()) {}

ApiCaller::~ApiCaller() = default;

void ApiCaller::Admit() {
  std::unique_lock lock(mu_);
  while (true) {
    auto now = config_.clock->Now();
    double elapsed = std::chrono::duration<double>(now - refilled_).count();
    tokens_ = std::min(burst_, tokens_ + elapsed * rps_);
    refilled_ = now;
    if (tokens_ >= 1) {
      tokens_ -= 1;
      return;
    }
    auto wait = std::chrono::duration_cast<Clock::Duration>(
        std::chrono::duration<double>((1 - tokens_) / rps_));
    config_.clock->Register(&cv_);
    config_.clock->WaitUntil(cv_, lock, now + wait);
    config_.clock->Unregister(&cv_);
  }
}

Ms ApiCaller::Backoff(int retry) {
  const auto& r = config_.retry;
  double cap = static_cast<double>(r.initial_backoff.count()) * std::pow(2.0, retry);
  cap = std::min(cap, static_cast<double>(r.max_backoff.count()));
  std::lock_guard lock(mu_);
  return Ms(static_cast<int64_t>(std::uniform_real_distribution<double>(0, cap)(rng_)));
}

void ApiCaller::RecordError(std::string_view method, const Error& error) {
  Metrics(config_)
      .GetCounter("hyperslice_gpu_provider_errors_total",
                  "Provider calls that failed, by provider, method and error kind.",
                  {{"provider", config_.name},
                   {"method", std::string(method)},
                   {"kind", KindName(KindOf(error))}})
      .Inc();
}

Result<json::object> ParseAnswerObject(std::string_view api, std::string_view what,
                                       std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return BadAnswer(api, what, "answer is not JSON: " + ec.message());
  auto* o = v.if_object();
  if (o == nullptr) return BadAnswer(api, what, "answer is not a JSON object");
  return std::move(*o);
}

Error BadAnswer(std::string_view api, std::string_view what, std::string_view why) {
  return MakeError(ErrorKind::kInternal,
                   std::string(api) + " " + std::string(what) + ": " + std::string(why));
}

ErrorKind KindOfHttpStatus(int status) {
  if (status == 401 || status == 403) return ErrorKind::kUnauthorized;
  if (status == 404) return ErrorKind::kNotFound;
  if (status == 429) return ErrorKind::kRateLimited;
  if (status == 400 || status == 409 || status == 422) return ErrorKind::kInvalid;
  if (status >= 500) return ErrorKind::kTransient;
  return ErrorKind::kInternal;
}

std::string Redact(std::string text, const std::string& secret) {
  if (secret.size() < 4) return text;
  for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at)) {
    text.replace(at, secret.size(), "<redacted>");
  }
  return text;
}

ApiCaller::Call ApiCaller::BearerJson(std::string_view method, std::string verb, std::string target,
                                      const std::string& token, std::string body, bool idempotent) {
  Call call;
  call.method = method;
  call.request.method = std::move(verb);
  call.request.target = std::move(target);
  call.request.headers = {{"Authorization", "Bearer " + token}, {"Accept", "application/json"}};
  if (!body.empty()) {
    call.request.headers.emplace_back("Content-Type", "application/json");
    call.request.body = std::move(body);
  }
  call.idempotent = idempotent;
  return call;
}

Result<net::Response> ApiCaller::Do(Call call, const ErrorDecoder& decode) {
  auto& reg = Metrics(config_);
  std::string method(call.method);
  auto& duration = reg.GetHistogram("hyperslice_gpu_provider_request_duration_seconds",
                                    "Latency of provider API requests, by provider and method.",
                                    {{"provider", config_.name}, {"method", method}},
                                    kube::metrics::DefaultBuckets());
  auto count = [&](const std::string& code) {
    reg.GetCounter("hyperslice_gpu_provider_requests_total",
                   "Provider API requests, by provider, method and HTTP status (\"error\": no "
                   "answer).",
                   {{"provider", config_.name}, {"method", method}, {"code", code}})
        .Inc();
  };
  if (!call.idempotent) call.request.fresh_connection = true;
  call.request.timeout = config_.request_timeout;
  auto start = config_.clock->Now();
  Error last;
  for (int attempt = 0; attempt < std::max(1, config_.retry.max_attempts); ++attempt) {
    if (attempt > 0 && config_.clock->Now() - start > config_.retry.max_elapsed) break;
    Admit();
    auto t0 = std::chrono::steady_clock::now();
    auto res = http_->Do(call.request);
    duration.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::optional<Ms> wait;
    if (!res.ok()) {
      count("error");
      // Connecting failed: nothing was sent. Otherwise the provider may have acted on it.
      bool sent = res.error().reason != net::kReasonConnectFailed;
      if (sent && !call.idempotent) {
        last = MakeError(ErrorKind::kAmbiguous, config_.name + " " + method + ": no answer (" +
                                                    res.error().message +
                                                    "); the request may have taken effect");
        RecordError(method, last);
        return last;
      }
      last = MakeError(ErrorKind::kTransient,
                       config_.name + " " + method + ": " + res.error().message);
    } else {
      count(std::to_string(res->status));
      if (res->status >= 200 && res->status < 300) return std::move(*res);
      last = decode(*res);
      auto kind = KindOf(last);
      if (!last.retry_after) last.retry_after = ParseRetryAfter(res->Header("retry-after"));
      if (kind == ErrorKind::kRateLimited) {
        wait = last.retry_after;
        if (wait && *wait > config_.retry.max_retry_after) {
          RecordError(method, last);
          return last;
        }
      } else if (kind == ErrorKind::kTransient) {
        if (!call.idempotent && res->status != 503) {
          last = MakeError(ErrorKind::kAmbiguous,
                           config_.name + " " + method + ": " + last.message + " (HTTP " +
                               std::to_string(res->status) + "; the request may have taken effect)",
                           res->status);
          RecordError(method, last);
          return last;
        }
      } else {
        if (kind == ErrorKind::kUnauthorized) credentials_->Invalidate();
        RecordError(method, last);
        return last;
      }
    }
    if (attempt + 1 >= config_.retry.max_attempts) break;
    Ms delay = wait.value_or(Backoff(attempt));
    log::Debug("provider call retried", {{"provider", config_.name},
                                         {"method", method},
                                         {"attempt", attempt + 1},
                                         {"delayMs", delay.count()},
                                         {"error", last.message}});
    std::mutex m;
    std::condition_variable cv;
    std::unique_lock lock(m);
    config_.clock->Register(&cv);
    auto until = config_.clock->Now() + delay;
    while (!config_.clock->WaitUntil(cv, lock, until)) {
    }
    config_.clock->Unregister(&cv);
  }
  RecordError(method, last);
  return last;
}

}  // namespace hyperslice::gpu::internal
