#include "src/base/duration.h"

#include <chrono>
#include <cstdint>
#include <string>

namespace hyperslice {

Result<Clock::Duration> ParseDuration(std::string_view s) {
  if (s.empty()) return Error::Make(Error::Code::kInvalidArgument, "empty duration");
  if (s == "0") return Clock::Duration::zero();
  auto bad = [&s](const char* why) {
    return Error::Make(Error::Code::kInvalidArgument, std::string(why) + " \"" + std::string(s) +
                                                          "\"; use e.g. 30s, 10m, 1h30m, 90d");
  };
  // Counted in milliseconds, the smallest unit; the cap keeps the sum inside a nanosecond
  // steady_clock duration.
  constexpr int64_t kMaxMillis = int64_t{9} * 1000 * 1000 * 1000 * 1000;  // ~285 years
  int64_t total_ms = 0;
  size_t i = 0;
  while (i < s.size()) {
    int64_t n = 0;
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      n = n * 10 + (s[i] - '0');
      if (n > kMaxMillis) return bad("duration too long:");
      ++i;
    }
    if (i == start) return bad("bad duration");
    size_t unit_end = i;
    while (unit_end < s.size() && s[unit_end] >= 'a' && s[unit_end] <= 'z') ++unit_end;
    const std::string_view unit = s.substr(i, unit_end - i);
    int64_t ms_per_unit = unit == "ms"  ? 1
                          : unit == "s" ? 1000
                          : unit == "m" ? 60 * 1000
                          : unit == "h" ? 3600 * 1000
                          : unit == "d" ? 86400 * 1000
                                        : 0;
    if (ms_per_unit == 0) return bad(unit.empty() ? "missing unit in" : "unknown unit in");
    if (n > (kMaxMillis - total_ms) / ms_per_unit) return bad("duration too long:");
    total_ms += n * ms_per_unit;
    i = unit_end;
  }
  return std::chrono::duration_cast<Clock::Duration>(std::chrono::milliseconds(total_ms));
}

}  // namespace hyperslice
