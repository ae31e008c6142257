#include "src/gpu/provider.h"

#include <cmath>
#include <cstdlib>

namespace hyperslice::gpu {

Result<MicroUsd> ParseUsd(std::string_view s) {
  auto bad = [&] {
    return Error::Make(Error::Code::kInvalidArgument,
                       "\"" + std::string(s) + "\" is not a price in dollars (e.g. \"2.50\")");
  };
  if (s.empty() || s.size() > 24) return bad();
  MicroUsd whole = 0;
  size_t i = 0;
  for (; i < s.size() && s[i] != '.'; ++i) {
    if (s[i] < '0' || s[i] > '9') return bad();
    whole = whole * 10 + (s[i] - '0');
    if (whole > 1'000'000'000) return bad();  // a billion dollars an hour is a typo
  }
  if (i == 0) return bad();
  MicroUsd frac = 0;
  int digits = 0;
  bool round_up = false;
  if (i < s.size()) {
    ++i;  // '.'
    if (i == s.size()) return bad();
    for (; i < s.size(); ++i) {
      if (s[i] < '0' || s[i] > '9') return bad();
      if (digits < 6) {
        frac = frac * 10 + (s[i] - '0');
        digits++;
      } else if (digits == 6) {
        round_up = s[i] >= '5';
        digits++;
      }
    }
  }
  for (int d = std::min(digits, 6); d < 6; ++d) frac *= 10;
  return whole * 1'000'000 + frac + (round_up ? 1 : 0);
}

std::string FormatUsd(MicroUsd value) {
  bool neg = value < 0;
  uint64_t v = neg ? static_cast<uint64_t>(-value) : static_cast<uint64_t>(value);
  std::string frac = std::to_string(v % 1'000'000);
  frac.insert(0, 6 - frac.size(), '0');
  while (frac.size() > 2 && frac.back() == '0') frac.pop_back();
  return (neg ? "-" : "") + std::to_string(v / 1'000'000) + "." + frac;
}

MicroUsd UsdFromDouble(double dollars) {
  if (!std::isfinite(dollars)) return 0;
  return static_cast<MicroUsd>(std::llround(dollars * 1e6));
}

const char* StateName(InstanceState state) {
  switch (state) {
    case InstanceState::kPending:
      return "Pending";
    case InstanceState::kRunning:
      return "Running";
    case InstanceState::kStopping:
      return "Stopping";
    case InstanceState::kTerminated:
      return "Terminated";
    case InstanceState::kUnknown:
      return "Unknown";
  }
  return "Unknown";
}

namespace {

struct KindInfo {
  ErrorKind kind;
  const char* reason;
  Error::Code code;
  const char* name;
};

constexpr KindInfo kKinds[] = {
    {ErrorKind::kUnauthorized, kReasonUnauthorized, Error::Code::kUnauthorized, "unauthorized"},
    {ErrorKind::kCapacity, kReasonCapacity, Error::Code::kUnavailable, "capacity"},
    {ErrorKind::kRateLimited, kReasonRateLimited, Error::Code::kTooManyRequests, "rate_limited"},
    {ErrorKind::kInvalid, kReasonInvalid, Error::Code::kInvalidArgument, "invalid"},
    {ErrorKind::kNotFound, kReasonNotFound, Error::Code::kNotFound, "not_found"},
    {ErrorKind::kTransient, kReasonTransient, Error::Code::kUnavailable, "transient"},
    {ErrorKind::kAmbiguous, kReasonAmbiguous, Error::Code::kUnknown, "ambiguous"},
    {ErrorKind::kInternal, kReasonInternal, Error::Code::kInternal, "internal"},
};

const KindInfo& Info(ErrorKind kind) {
  for (const auto& k : kKinds) {
    if (k.kind == kind) return k;
  }
  return kKinds[7];
}

}  // namespace

Error MakeError(ErrorKind kind, std::string message, int http_status,
                std::optional<std::chrono::milliseconds> retry_after) {
  const auto& info = Info(kind);
  Error e = Error::Make(info.code, std::move(message), info.reason, http_status);
  e.retry_after = retry_after;
  return e;
}

ErrorKind KindOf(const Error& error) {
  for (const auto& k : kKinds) {
    if (error.reason == k.reason) return k.kind;
  }
  // Errors that did not come from a provider decoder (transport, credentials lookups).
  switch (error.code) {
    case Error::Code::kUnauthorized:
    case Error::Code::kForbidden:
      return ErrorKind::kUnauthorized;
    case Error::Code::kTooManyRequests:
      return ErrorKind::kRateLimited;
    case Error::Code::kInvalidArgument:
      return ErrorKind::kInvalid;
    case Error::Code::kNotFound:
      return ErrorKind::kNotFound;
    case Error::Code::kUnavailable:
    case Error::Code::kTimeout:
      return ErrorKind::kTransient;
    default:
      return ErrorKind::kInternal;
  }
}

const char* KindName(ErrorKind kind) { return Info(kind).name; }

}  // namespace hyperslice::gpu
