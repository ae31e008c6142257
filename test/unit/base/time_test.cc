// src/base/time.h: the RFC 3339 forms every API and the log write, and the round trip.
#include "src/base/time.h"

#include <chrono>

#include <gtest/gtest.h>

namespace hyperslice {
namespace {

using std::chrono::system_clock;

TEST(FormatRfc3339, WritesSecondsMillisecondsOrMicrosecondsInUtc) {
  const auto t = system_clock::from_time_t(1795000000) + std::chrono::microseconds(123456);
  EXPECT_EQ(FormatRfc3339(t), "2026-11-18T11:06:40Z");
  EXPECT_EQ(FormatRfc3339(t, 3), "2026-11-18T11:06:40.123Z");
  EXPECT_EQ(FormatRfc3339(t, 6), "2026-11-18T11:06:40.123456Z");
  EXPECT_EQ(FormatRfc3339(system_clock::from_time_t(1795000000), 3), "2026-11-18T11:06:40.000Z");
}

TEST(FormatRfc3339, TakesTheFloorBefore1970) {
  const auto t = system_clock::from_time_t(0) - std::chrono::microseconds(1);
  EXPECT_EQ(FormatRfc3339(t, 6), "1969-12-31T23:59:59.999999Z");
  EXPECT_EQ(FormatRfc3339(t), "1969-12-31T23:59:59Z");
}

TEST(ParseRfc3339, ReadsWhatFormatWrites) {
  const auto t = system_clock::from_time_t(1795000000) + std::chrono::microseconds(123456);
  EXPECT_EQ(ParseRfc3339(FormatRfc3339(t, 6)), t);
  EXPECT_EQ(ParseRfc3339(FormatRfc3339(t, 3)), t - std::chrono::microseconds(456));
  EXPECT_EQ(ParseRfc3339(FormatRfc3339(t)), system_clock::from_time_t(1795000000));
  EXPECT_EQ(ParseRfc3339("2026-11-18T11:06:40.123-00:00"), t - std::chrono::microseconds(456));
  EXPECT_FALSE(ParseRfc3339("2026-11-18 11:06:40Z"));
}

}  // namespace
}  // namespace hyperslice
