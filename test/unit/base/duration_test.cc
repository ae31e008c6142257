// The one duration syntax of every role's flags (src/base/duration.h).
#include "src/base/duration.h"

#include <gtest/gtest.h>

namespace hyperslice {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

TEST(ParseDuration, AcceptsMillisSecondsMinutesHoursDaysAndSums) {
  EXPECT_EQ(*ParseDuration("250ms"), milliseconds(250));
  EXPECT_EQ(*ParseDuration("45s"), seconds(45));
  EXPECT_EQ(*ParseDuration("5m"), minutes(5));
  EXPECT_EQ(*ParseDuration("2160h"), hours(2160));
  EXPECT_EQ(*ParseDuration("3650d"), hours(int64_t{3650} * 24));
  EXPECT_EQ(*ParseDuration("1h30m"), minutes(90));
  EXPECT_EQ(*ParseDuration("1m500ms"), milliseconds(60500));
  EXPECT_EQ(*ParseDuration("0"), Clock::Duration::zero());
  EXPECT_EQ(*ParseDuration("0s"), Clock::Duration::zero());
}

TEST(ParseDuration, RefusesMissingUnitsUnknownUnitsSignsFractionsAndEmptyText) {
  for (const char* bad : {"", "90", "9x", "h", "-5s", "1.5h", "5 m", "1h30", "5mss", "00",
                          "99999999999999999999s", "400000d"}) {
    Result<Clock::Duration> d = ParseDuration(bad);
    EXPECT_FALSE(d.ok()) << bad;
    if (!d.ok()) {
      EXPECT_EQ(d.error().code, Error::Code::kInvalidArgument) << bad;
    }
  }
}

}  // namespace
}  // namespace hyperslice
