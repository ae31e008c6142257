// base64url (src/base/base64.h), the JWS/JWK encoding of the GCE client's assertions, the
// attestation tokens and the simulators' checks.
#include <string>

#include <gtest/gtest.h>

#include "src/base/base64.h"

namespace hyperslice {
namespace {

TEST(Base64Url, RoundTripsEveryLengthWithoutPadding) {
  std::string data;
  for (int i = 0; i < 70; ++i) {
    auto enc = Base64UrlEncode(data);
    EXPECT_EQ(enc.find_first_of("+/="), std::string::npos) << enc;
    auto dec = Base64UrlDecode(enc);
    ASSERT_TRUE(dec.ok());
    EXPECT_EQ(*dec, data);
    data += static_cast<char>(i * 37 + 250);
  }
  EXPECT_EQ(Base64UrlEncode("\xfb\xff"), "-_8");
  EXPECT_EQ(Base64Encode("\xfb\xff"), "+/8=");
}

TEST(Base64Url, DecodesPaddedAndStandardAlphabetAndRefusesOtherCharacters) {
  EXPECT_EQ(*Base64UrlDecode("-_8"), "\xfb\xff");
  EXPECT_EQ(*Base64UrlDecode("-_8="), "\xfb\xff");
  EXPECT_EQ(*Base64UrlDecode("+/8"), "\xfb\xff");
  for (const char* bad : {"ab$d", "ab=d", "a.b"}) {
    auto d = Base64UrlDecode(bad, "the signature");
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.error().code, Error::Code::kInvalidArgument);
    EXPECT_NE(d.error().message.find("the signature"), std::string::npos);
  }
}

}  // namespace
}  // namespace hyperslice
