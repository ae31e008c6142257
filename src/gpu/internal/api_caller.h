// ApiCaller: what every provider client does around one HTTP exchange — client-side rate limit,
// retries with full-jitter backoff honouring the provider's Retry-After, the ambiguity rule for
// requests that must not be sent twice, and a counter and latency histogram per call.
//
// Retry rules (the provider's error decoder classifies a non-2xx answer first):
//   kRateLimited — retried after Retry-After (or backoff), for every call: the provider did not
//                  act on it;
//   kTransient   — 5xx and transport failures: retried when the call is idempotent; for a call
//                  that is not (a create), a failure after the request may have been sent is
//                  returned as kAmbiguous and never re-sent; 503 is taken as "not acted on";
//   everything else — returned at once.
// Metrics (names documented in src/gpu/README.md):
//   hyperslice_gpu_provider_requests_total{provider,method,code}     code: HTTP status or "error"
//   hyperslice_gpu_provider_request_duration_seconds{provider,method}
//   hyperslice_gpu_provider_errors_total{provider,method,kind}
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/gpu/providers.h"
#include "src/net/http.h"

namespace hyperslice::gpu::internal {

// A 2xx answer's body as a JSON object; anything else is kInternal "<api> <what>: answer is not
// JSON: …" or "… answer is not a JSON object" (the API broke its documented shape).
Result<boost::json::object> ParseAnswerObject(std::string_view api, std::string_view what,
                                              std::string_view body);
// kInternal "<api> <what>: <why>": a 2xx answer that does not say what the API documents.
Error BadAnswer(std::string_view api, std::string_view what, std::string_view why);

// The kind of a non-2xx answer whose body says nothing more: 401/403 unauthorized, 404 not found,
// 429 rate limited, 400/409/422 invalid, other 5xx transient (a proxy in front of the API, or no
// body), anything else internal. An API that means more by a status checks it first.
ErrorKind KindOfHttpStatus(int status);

// `text` with every occurrence of `secret` replaced by "<redacted>": a server that echoed a
// credential back into an error message must not carry it into a status or a log line. A secret
// shorter than 4 characters is left alone (it would match ordinary text).
std::string Redact(std::string text, const std::string& secret);

// The transport settings a tailnet admin's config (HeadscaleConfig, TailscaleConfig in
// src/gpu/tailnet.h) shares with a provider's: retries, timeout, CA bundle, clock, metrics, seed.
template <typename TailnetConfig>
void CopyTransport(const TailnetConfig& from, ProviderConfig& to) {
  to.retry = from.retry;
  to.request_timeout = from.request_timeout;
  to.ca_pem = from.ca_pem;
  to.clock = from.clock;
  to.metrics = from.metrics;
  to.seed = from.seed;
}

// Maps a non-2xx response to an Error made with MakeError (provider-specific body shapes).
using ErrorDecoder = std::function<Error(const net::Response&)>;

class ApiCaller {
 public:
  // `default_rps`/`default_burst`: the provider's documented limit, used unless the config sets
  // one.
  static Result<std::unique_ptr<ApiCaller>> Create(const ProviderConfig& config,
                                                   std::string_view default_endpoint,
                                                   double default_rps, int default_burst);
  ~ApiCaller();

  struct Call {
    std::string_view method;  // metric label, e.g. "launch", "instances.list"
    net::Request request;     // target relative to the endpoint's path
    bool idempotent = true;
  };
  // The call every JSON API with a bearer token makes: Authorization: Bearer <token>, Accept:
  // application/json, and Content-Type: application/json with a non-empty body.
  static Call BearerJson(std::string_view method, std::string verb, std::string target,
                         const std::string& token, std::string body, bool idempotent);
  // A 2xx response, or the decoded error. A 2xx whose body the caller then finds to be an error
  // (GraphQL errors in a 200) is the caller's to report with Record().
  Result<net::Response> Do(Call call, const ErrorDecoder& decode);

  // Counts an error found in a 2xx body (so errors_total stays true).
  void RecordError(std::string_view method, const Error& error);

  CredentialSource& credentials() { return *credentials_; }
  const ProviderConfig& config() const { return config_; }
  Clock& clock() { return *config_.clock; }

 private:
  ApiCaller(const ProviderConfig& config, std::shared_ptr<net::HttpClient> http, double rps,
            int burst);
  // Blocks until the token bucket grants one request.
  void Admit();
  std::chrono::milliseconds Backoff(int retry);

  ProviderConfig config_;
  std::shared_ptr<CredentialSource> credentials_;
  std::shared_ptr<net::HttpClient> http_;
  double rps_;
  double burst_;
  std::mutex mu_;
  std::condition_variable cv_;
  double tokens_;
  Clock::TimePoint refilled_;
  std::mt19937_64 rng_;
};

}  // namespace hyperslice::gpu::internal
