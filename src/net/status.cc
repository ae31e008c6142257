#include "src/net/status.h"

#include <charconv>
#include <cstdint>

namespace hyperslice::net {

Error::Code ErrorCodeForStatus(int http_status) {
  using C = Error::Code;
  switch (http_status) {
    case 400:
    case 405:
    case 406:
    case 413:
    case 415:
    case 422:
      return C::kInvalidArgument;
    case 401:
      return C::kUnauthorized;
    case 403:
      return C::kForbidden;
    case 404:
      return C::kNotFound;
    case 409:
    case 412:
      return C::kConflict;
    case 410:
      return C::kGone;
    case 429:
      return C::kTooManyRequests;
    default:
      return http_status >= 500 && http_status <= 599 ? C::kUnavailable : C::kUnknown;
  }
}

std::optional<std::chrono::seconds> RetryAfterSeconds(std::string_view header) {
  int64_t seconds = 0;
  const char* end = header.data() + header.size();
  auto [p, rc] = std::from_chars(header.data(), end, seconds);
  if (header.empty() || rc != std::errc() || p != end || seconds < 0) return std::nullopt;
  return std::chrono::seconds(seconds);
}

}  // namespace hyperslice::net
