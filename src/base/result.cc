#include "src/base/result.h"

namespace hyperslice {

const char* CodeName(Error::Code code) {
  switch (code) {
    case Error::Code::kUnknown:
      return "Unknown";
    case Error::Code::kInvalidArgument:
      return "InvalidArgument";
    case Error::Code::kNotFound:
      return "NotFound";
    case Error::Code::kAlreadyExists:
      return "AlreadyExists";
    case Error::Code::kConflict:
      return "Conflict";
    case Error::Code::kGone:
      return "Gone";
    case Error::Code::kUnavailable:
      return "Unavailable";
    case Error::Code::kTimeout:
      return "Timeout";
    case Error::Code::kTooManyRequests:
      return "TooManyRequests";
    case Error::Code::kUnauthorized:
      return "Unauthorized";
    case Error::Code::kForbidden:
      return "Forbidden";
    case Error::Code::kCancelled:
      return "Cancelled";
    case Error::Code::kInternal:
      return "Internal";
  }
  return "Unknown";
}

std::string Error::ToString() const {
  std::string s = CodeName(code);
  if (!reason.empty() && reason != s) s += " (" + reason + ")";
  if (http_status != 0) s += " [HTTP " + std::to_string(http_status) + "]";
  if (!message.empty()) s += ": " + message;
  return s;
}

}  // namespace hyperslice
