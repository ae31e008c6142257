// Errors as values at module boundaries.
//
// `Error` carries a machine-readable `reason` (Kubernetes' status reason such as "NotFound", or
// GCE's error reason such as "ZONE_RESOURCE_POOL_EXHAUSTED"), the HTTP code when one exists, and a
// message a user can act on. `Result<T>` is a value or an Error; `Status` is `Result<void>`.
//
// Written by hand because std::expected is C++23 and GCC 12 (Debian 12) does not ship it; the
// shape follows std::expected so the switch is mechanical later.
#pragma once

#include <cassert>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace hyperslice {

struct Error {
  // Broad category used for control flow (retry or not, not-found handling).
  enum class Code {
    kUnknown,
    kInvalidArgument,  // bad input from a user or a file; not retryable
    kNotFound,
    kAlreadyExists,
    kConflict,     // optimistic concurrency failure or precondition (412) mismatch
    kGone,         // resourceVersion too old (Kubernetes 410)
    kUnavailable,  // transport failure, 5xx, connection refused: retryable
    kTimeout,
    kTooManyRequests,
    kUnauthorized,
    kForbidden,
    kCancelled,
    kInternal,
  };

  Code code = Code::kUnknown;
  std::string reason;   // machine-readable reason from the remote API when it gave one
  std::string message;  // human-readable, never contains credentials
  int http_status = 0;  // 0 when the error did not come from an HTTP response
  std::optional<std::chrono::milliseconds> retry_after;

  static Error Make(Code code, std::string message, std::string reason = {}, int http = 0) {
    Error e;
    e.code = code;
    e.message = std::move(message);
    e.reason = std::move(reason);
    e.http_status = http;
    return e;
  }
  bool Retryable() const {
    return code == Code::kUnavailable || code == Code::kTimeout || code == Code::kTooManyRequests;
  }
  std::string ToString() const;
};

const char* CodeName(Error::Code code);

// Tag for constructing a Result in the error state: `return Unexpected(err);`.
struct Unexpected {
  explicit Unexpected(Error e) : error(std::move(e)) {}
  Error error;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Unexpected u) : v_(std::in_place_index<1>, std::move(u.error)) {}  // NOLINT
  Result(Error e) : v_(std::in_place_index<1>, std::move(e)) {}             // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Unexpected u) : err_(std::move(u.error)) {}  // NOLINT
  Result(Error e) : err_(std::move(e)) {}             // NOLINT
  bool ok() const { return !err_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const {
    assert(!ok());
    return *err_;
  }

 private:
  std::optional<Error> err_;
};

using Status = Result<void>;
inline Status OkStatus() { return {}; }

}  // namespace hyperslice

// Propagates an error from an expression yielding a Result/Status.
#define HS_RETURN_IF_ERROR(expr)                                               \
  do {                                                                         \
    auto hs_status_ = (expr);                                                  \
    if (!hs_status_.ok()) return ::hyperslice::Unexpected(hs_status_.error()); \
  } while (0)

#define HS_CONCAT_INNER_(a, b) a##b
#define HS_CONCAT_(a, b) HS_CONCAT_INNER_(a, b)
// `HS_ASSIGN_OR_RETURN(auto x, Foo());` binds the value or returns the error.
#define HS_ASSIGN_OR_RETURN(lhs, expr) \
  HS_ASSIGN_OR_RETURN_IMPL_(HS_CONCAT_(hs_result_, __LINE__), lhs, expr)
#define HS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)                           \
  auto tmp = (expr);                                           /* NOLINT */ \
  if (!tmp.ok()) return ::hyperslice::Unexpected(tmp.error()); /* NOLINT */ \
  lhs = std::move(tmp).value()  // NOLINT(bugprone-macro-parentheses): lhs is a declaration
