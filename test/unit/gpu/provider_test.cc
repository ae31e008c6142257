#include "src/gpu/provider.h"

#include <gtest/gtest.h>

namespace hyperslice::gpu {
namespace {

TEST(Usd, ParseAndFormat) {
  EXPECT_EQ(*ParseUsd("2.0"), 2000000);
  EXPECT_EQ(*ParseUsd("50.0"), 50000000);
  EXPECT_EQ(*ParseUsd("0.69"), 690000);
  EXPECT_EQ(*ParseUsd("7"), 7000000);
  EXPECT_EQ(*ParseUsd("0.3466666"), 346667);  // the 7th digit rounds
  EXPECT_EQ(*ParseUsd("0.3466664"), 346666);
  for (const char* bad : {"", ".5", "5.", "-1", "1e3", "abc", "1.2.3", "$2", " 2"}) {
    EXPECT_FALSE(ParseUsd(bad).ok()) << bad;
  }
  EXPECT_EQ(FormatUsd(690000), "0.69");
  EXPECT_EQ(FormatUsd(2000000), "2.00");
  EXPECT_EQ(FormatUsd(346667), "0.346667");
  EXPECT_EQ(FormatUsd(0), "0.00");
  EXPECT_EQ(UsdFromDouble(0.44), 440000);
  EXPECT_EQ(UsdFromDouble(1.0 / 3), 333333);
}

TEST(ErrorKinds, RoundTripThroughReason) {
  for (auto k : {ErrorKind::kUnauthorized, ErrorKind::kCapacity, ErrorKind::kRateLimited,
                 ErrorKind::kInvalid, ErrorKind::kNotFound, ErrorKind::kTransient,
                 ErrorKind::kAmbiguous, ErrorKind::kInternal}) {
    Error e = MakeError(k, "m", 400);
    EXPECT_EQ(KindOf(e), k) << KindName(k);
    // A copy carried as (reason, message) in a status condition keeps its kind.
    Error copy;
    copy.reason = e.reason;
    EXPECT_EQ(KindOf(copy), k);
  }
  EXPECT_TRUE(MakeError(ErrorKind::kRateLimited, "").Retryable());
  EXPECT_TRUE(MakeError(ErrorKind::kTransient, "").Retryable());
  EXPECT_FALSE(MakeError(ErrorKind::kAmbiguous, "").Retryable());
  EXPECT_EQ(KindOf(Error::Make(Error::Code::kTimeout, "t")), ErrorKind::kTransient);
}

TEST(Instance, ProviderId) {
  Instance i;
  i.provider = kLambda;
  i.id = "0920582c7ff041399e34823a0be62549";
  EXPECT_EQ(i.ProviderId(), "lambdalabs://0920582c7ff041399e34823a0be62549");
}

}  // namespace
}  // namespace hyperslice::gpu
