// HTTP status → Error::Code: the one mapping every API client starts from. An API whose error
// bodies say more (Kubernetes' Status reason, Google's errors[].reason) decides from that first
// and falls back to this; what it decides differently for a status is its own override, written
// where that API's errors are parsed (src/kube/client.cc, src/gce/errors.cc).
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

#include "src/base/result.h"

namespace hyperslice::net {

// 400, 405, 406, 413, 415, 422 kInvalidArgument; 401 kUnauthorized; 403 kForbidden; 404 kNotFound;
// 409, 412 kConflict; 410 kGone; 429 kTooManyRequests; 5xx kUnavailable; anything else kUnknown.
Error::Code ErrorCodeForStatus(int http_status);

// A Retry-After header in its delta-seconds form ("120"); nullopt for anything else (an HTTP
// date, a sign, trailing text, empty).
std::optional<std::chrono::seconds> RetryAfterSeconds(std::string_view header);

}  // namespace hyperslice::net
