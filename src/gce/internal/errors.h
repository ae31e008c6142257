// Google API error bodies and failed operations → hyperslice::Error.
#pragma once

#include <string_view>

#include <boost/json/object.hpp>

#include "src/base/result.h"

namespace hyperslice::gce::internal {

// Maps an HTTP status (and Google's reason, which can override it: a 403 rateLimitExceeded is
// kTooManyRequests so that Error::Retryable() holds) to an Error code.
Error::Code CodeFor(int http_status, std::string_view reason);

// Parses {error:{code,message,errors[{reason,message,domain}],status,details}}. A body that is not
// this shape still yields an Error (code from the status, message from the body's start).
// `retry_after` is the Retry-After header value (seconds) or "".
Error ErrorFromResponse(int http_status, std::string_view body, std::string_view retry_after);

// The error of an Operation DONE with error ({error:{errors:[{code,message}]},
// httpErrorStatusCode, httpErrorMessage}): reason = the first error's code.
Error ErrorFromOperation(const boost::json::object& operation);

}  // namespace hyperslice::gce::internal
