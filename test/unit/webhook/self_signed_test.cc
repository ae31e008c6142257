// The duration syntax of the --self-signed-* flags.
#include "src/webhook/self_signed.h"

#include <gtest/gtest.h>

namespace hyperslice::webhook {
namespace {

using std::chrono::seconds;

TEST(ParseDuration, AcceptsSecondsMinutesHoursDaysAndSums) {
  EXPECT_EQ(*ParseDuration("45s"), seconds(45));
  EXPECT_EQ(*ParseDuration("5m"), seconds(300));
  EXPECT_EQ(*ParseDuration("2160h"), seconds(2160 * 3600));
  EXPECT_EQ(*ParseDuration("3650d"), seconds(int64_t{3650} * 86400));
  EXPECT_EQ(*ParseDuration("1h30m"), seconds(5400));
}

TEST(ParseDuration, RefusesMissingUnitsUnknownUnitsAndEmptyText) {
  for (const char* bad : {"", "90", "9x", "h", "-5s", "1.5h", "5 m"}) {
    Result<seconds> d = ParseDuration(bad);
    EXPECT_FALSE(d.ok()) << bad;
    if (!d.ok()) {
      EXPECT_EQ(d.error().code, Error::Code::kInvalidArgument) << bad;
    }
  }
}

}  // namespace
}  // namespace hyperslice::webhook
