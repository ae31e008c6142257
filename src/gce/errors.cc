#include <string>

#include <boost/json/parse.hpp>

#include "src/base/json.h"
#include "src/gce/internal/errors.h"
#include "src/net/status.h"

namespace hyperslice::gce::internal {
namespace {

using jsonfield::StringField;

bool IsRateLimitReason(std::string_view reason) {
  return reason == "rateLimitExceeded" || reason == "userRateLimitExceeded" ||
         reason == "RATE_LIMIT_EXCEEDED";
}

bool IsStockout(std::string_view reason) {
  return reason.starts_with("ZONE_RESOURCE_POOL_EXHAUSTED");
}

}  // namespace

Error::Code CodeFor(int http_status, std::string_view reason) {
  using C = Error::Code;
  if (IsRateLimitReason(reason)) return C::kTooManyRequests;
  // A stockout is capacity that may appear later: retryable by the caller, not by the client.
  if (IsStockout(reason)) return C::kUnavailable;
  // Google's overrides of the common mapping: a 409 is kAlreadyExists unless its reason says
  // otherwise, and statuses Compute Engine does not answer with stay kUnknown.
  switch (http_status) {
    case 409:
      return reason.empty() || reason == "alreadyExists" || reason == "RESOURCE_ALREADY_EXISTS"
                 ? C::kAlreadyExists
                 : C::kConflict;
    case 405:
    case 406:
    case 410:
    case 413:
    case 415:
    case 422:
      break;
    default:
      if (Error::Code c = net::ErrorCodeForStatus(http_status); c != C::kUnknown) return c;
  }
  if (reason == "RESOURCE_NOT_FOUND") return C::kNotFound;
  if (reason == "RESOURCE_ALREADY_EXISTS") return C::kAlreadyExists;
  if (reason == "CONDITION_NOT_MET") return C::kConflict;
  return C::kUnknown;
}

Error ErrorFromResponse(int http_status, std::string_view body, std::string_view retry_after) {
  Error e;
  e.http_status = http_status;
  boost::system::error_code ec;
  auto parsed = boost::json::parse(body, ec);
  const boost::json::object* err = nullptr;
  if (!ec && parsed.is_object()) {
    if (const auto* v = parsed.as_object().if_contains("error"); v != nullptr && v->is_object()) {
      err = &v->as_object();
    }
  }
  if (err != nullptr) {
    e.message = StringField(*err, "message");
    if (const auto* errs = err->if_contains("errors"); errs != nullptr && errs->is_array() &&
                                                       !errs->as_array().empty() &&
                                                       errs->as_array()[0].is_object()) {
      e.reason = StringField(errs->as_array()[0].as_object(), "reason");
    }
    if (e.reason.empty()) e.reason = StringField(*err, "status");  // e.g. "NOT_FOUND"
  } else {
    constexpr size_t kMaxEcho = 200;
    e.message = std::string(body.substr(0, kMaxEcho));
    if (e.message.empty()) e.message = "HTTP " + std::to_string(http_status);
  }
  e.code = CodeFor(http_status, e.reason);
  // Google's override: a Retry-After of an hour or more is not waited for.
  if (auto seconds = net::RetryAfterSeconds(retry_after);
      seconds && *seconds < std::chrono::hours(1)) {
    e.retry_after = *seconds;
  }
  return e;
}

Error ErrorFromOperation(const boost::json::object& operation) {
  Error e;
  if (const auto* code = operation.if_contains("httpErrorStatusCode");
      code != nullptr && code->is_number()) {
    boost::system::error_code ec;
    auto n = code->to_number<int64_t>(ec);
    if (!ec) e.http_status = static_cast<int>(n);
  }
  if (const auto* err = operation.if_contains("error"); err != nullptr && err->is_object()) {
    if (const auto* errs = err->as_object().if_contains("errors");
        errs != nullptr && errs->is_array() && !errs->as_array().empty() &&
        errs->as_array()[0].is_object()) {
      const auto& first = errs->as_array()[0].as_object();
      e.reason = StringField(first, "code");
      e.message = StringField(first, "message");
    }
  }
  if (e.message.empty()) e.message = StringField(operation, "httpErrorMessage");
  if (e.message.empty()) e.message = "operation failed";
  const std::string name(StringField(operation, "name"));
  if (!name.empty()) e.message = "operation " + name + ": " + e.message;
  e.code = CodeFor(e.http_status, e.reason);
  return e;
}

}  // namespace hyperslice::gce::internal
