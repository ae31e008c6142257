#include <grpcpp/support/status.h>

#include <string>

#include "src/runners/link/link.h"

namespace hyperslice::runners::link {

Error FromGrpc(const grpc::Status& s, const std::string& what) {
  Error::Code code = Error::Code::kUnknown;
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      code = Error::Code::kUnavailable;
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      code = Error::Code::kTimeout;
      break;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
      code = Error::Code::kInvalidArgument;
      break;
    case grpc::StatusCode::NOT_FOUND:
      code = Error::Code::kNotFound;
      break;
    case grpc::StatusCode::PERMISSION_DENIED:
      code = Error::Code::kForbidden;
      break;
    case grpc::StatusCode::UNAUTHENTICATED:
      code = Error::Code::kUnauthorized;
      break;
    case grpc::StatusCode::CANCELLED:
      code = Error::Code::kCancelled;
      break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      code = Error::Code::kTooManyRequests;
      break;
    default:
      code = Error::Code::kUnavailable;
  }
  // A refusal the link server names keeps its reason (link.h's kReason*); anything else says
  // which gRPC code it was.
  std::string reason = "grpc:" + std::to_string(static_cast<int>(s.error_code()));
  for (const char* named : {kReasonJoinTokenRefused, kReasonIdentityRefused}) {
    if (s.error_message().rfind(named, 0) == 0) reason = named;
  }
  return Error::Make(code, what + ": " + s.error_message(), reason);
}

}  // namespace hyperslice::runners::link
