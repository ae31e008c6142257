// RFC 3339 timestamps, the one formatter and parser for every API that writes or reads them
// (Kubernetes' metav1.Time and MicroTime, kubeconfig credentials, the cloud APIs the simulators
// speak, the log's "ts").
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace hyperslice {

// UTC with a "Z": "2006-01-02T15:04:05Z", or with `fraction_digits` (3 or 6; anything else is
// treated as 0) digits of the second: "2006-01-02T15:04:05.000Z", "…05.000000Z". Times before
// 1970 take the floor, so the fraction is never negative.
std::string FormatRfc3339(std::chrono::system_clock::time_point t, int fraction_digits = 0);

// Any RFC 3339 time: "…Z" (or "z") or a numeric offset ("+02:00"), with an optional fraction kept
// to the microsecond; times past 2191 are clamped (system_clock's range); nullopt when it does
// not parse.
std::optional<std::chrono::system_clock::time_point> ParseRfc3339(std::string_view text);

}  // namespace hyperslice
