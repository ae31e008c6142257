// The common HTTP status → Error::Code mapping and Retry-After parsing (src/net/status.h) that
// the Kubernetes and Compute Engine clients override per API.
#include "src/net/status.h"

#include <gtest/gtest.h>

namespace hyperslice::net {
namespace {

using C = Error::Code;

TEST(ErrorCodeForStatus, MapsEachClientAndServerStatus) {
  for (int s : {400, 405, 406, 413, 415, 422})
    EXPECT_EQ(ErrorCodeForStatus(s), C::kInvalidArgument) << s;
  EXPECT_EQ(ErrorCodeForStatus(401), C::kUnauthorized);
  EXPECT_EQ(ErrorCodeForStatus(403), C::kForbidden);
  EXPECT_EQ(ErrorCodeForStatus(404), C::kNotFound);
  EXPECT_EQ(ErrorCodeForStatus(409), C::kConflict);
  EXPECT_EQ(ErrorCodeForStatus(412), C::kConflict);
  EXPECT_EQ(ErrorCodeForStatus(410), C::kGone);
  EXPECT_EQ(ErrorCodeForStatus(429), C::kTooManyRequests);
  for (int s : {500, 502, 503, 504, 599}) EXPECT_EQ(ErrorCodeForStatus(s), C::kUnavailable) << s;
  for (int s : {0, 200, 302, 418, 499, 600}) EXPECT_EQ(ErrorCodeForStatus(s), C::kUnknown) << s;
}

TEST(RetryAfterSeconds, TakesDeltaSecondsOnly) {
  EXPECT_EQ(RetryAfterSeconds("0"), std::chrono::seconds(0));
  EXPECT_EQ(RetryAfterSeconds("120"), std::chrono::seconds(120));
  for (const char* bad : {"", "-1", "1.5", "12s", " 5", "Wed, 21 Oct 2015 07:28:00 GMT"}) {
    EXPECT_FALSE(RetryAfterSeconds(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace hyperslice::net
