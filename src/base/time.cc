#include "src/base/time.h"

#include <cstdint>
#include <cstdio>
#include <ctime>

// Written by hand: libstdc++ 12 (Debian's) has neither std::chrono::parse nor chrono formatting,
// and Boost.DateTime's ISO parser takes no numeric offset ("+02:00").
namespace hyperslice {

std::string FormatRfc3339(std::chrono::system_clock::time_point t, int fraction_digits) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  auto secs = us / 1000000, micros = us % 1000000;
  if (micros < 0) {  // before 1970: floor, not truncate
    micros += 1000000;
    --secs;
  }
  std::time_t tt = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                        tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  if (fraction_digits == 3) {
    std::snprintf(buf + n, sizeof buf - n, ".%03lldZ", static_cast<long long>(micros / 1000));
  } else if (fraction_digits == 6) {
    std::snprintf(buf + n, sizeof buf - n, ".%06lldZ", static_cast<long long>(micros));
  } else {
    std::snprintf(buf + n, sizeof buf - n, "Z");
  }
  return buf;
}

std::optional<std::chrono::system_clock::time_point> ParseRfc3339(std::string_view text) {
  if (text.size() < 20) return std::nullopt;
  std::tm tm{};
  std::string head(text.substr(0, 19));
  const char* end = strptime(head.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  const time_t seconds = timegm(&tm);
  if (seconds == static_cast<time_t>(-1)) return std::nullopt;
  std::string_view rest = text.substr(19);
  int64_t micros = 0;
  if (!rest.empty() && rest.front() == '.') {
    rest.remove_prefix(1);
    int digits = 0;
    while (!rest.empty() && rest.front() >= '0' && rest.front() <= '9') {
      if (digits < 6) {
        micros = micros * 10 + (rest.front() - '0');
        ++digits;
      }
      rest.remove_prefix(1);
    }
    for (; digits < 6; ++digits) micros *= 10;
  }
  int64_t offset = 0;  // seconds east of UTC
  if (rest == "Z" || rest == "z") {
    offset = 0;
  } else if (rest.size() == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':') {
    auto two = [&](size_t i) -> int {
      if (rest[i] < '0' || rest[i] > '9' || rest[i + 1] < '0' || rest[i + 1] > '9') return -1;
      return (rest[i] - '0') * 10 + (rest[i + 1] - '0');
    };
    const int hh = two(1);
    const int mm = two(4);
    if (hh < 0 || mm < 0 || hh > 23 || mm > 59) return std::nullopt;
    offset = (rest[0] == '+' ? 1 : -1) * (int64_t{hh} * 3600 + int64_t{mm} * 60);
  } else {
    return std::nullopt;
  }
  // system_clock counts nanoseconds in 64 bits (up to year 2262): clamp far-future times (a
  // kubeconfig credential "expiring" in 9999) instead of overflowing.
  constexpr time_t kMaxTime = 7'000'000'000;  // year 2191
  const time_t utc = static_cast<time_t>(seconds - offset);
  if (utc >= kMaxTime) return std::chrono::system_clock::from_time_t(kMaxTime);
  return std::chrono::system_clock::from_time_t(utc) + std::chrono::microseconds(micros);
}

}  // namespace hyperslice
