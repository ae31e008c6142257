// Text and file helpers shared by every module (src/base/strings.h, src/base/files.h).
#include "src/base/strings.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "src/base/files.h"

namespace hyperslice {
namespace {

TEST(TrimSpace, DropsWhiteSpaceAtBothEndsOnly) {
  EXPECT_EQ(TrimSpace(" \t token \r\n"), "token");
  EXPECT_EQ(TrimSpace("a b"), "a b");
  EXPECT_EQ(TrimSpace(" \n "), "");
  EXPECT_EQ(TrimSpace(""), "");
}

TEST(SplitKeyValue, SplitsAtTheFirstEqualsWhenBothSidesAreThere) {
  auto kv = SplitKeyValue("runpod=https://x/?a=b");
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->first, "runpod");
  EXPECT_EQ(kv->second, "https://x/?a=b");
  for (const char* bad : {"", "runpod", "=x", "runpod="}) {
    EXPECT_FALSE(SplitKeyValue(bad).has_value()) << bad;
  }
}

TEST(ReadFile, ReadsBytesAsTheyAreAndNamesAMissingFile) {
  char dir[] = "/tmp/hs-files-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/f";
  const std::string bytes("a\0b\r\n", 5);
  std::ofstream(path, std::ios::binary) << bytes;
  auto got = ReadFile(path);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, bytes);
  std::ofstream(path, std::ios::trunc).close();
  EXPECT_EQ(*ReadFile(path), "");
  std::remove(path.c_str());
  auto missing = ReadFile(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Error::Code::kNotFound);
  EXPECT_NE(missing.error().message.find(path), std::string::npos);
  rmdir(dir);
}

TEST(Split, KeepsEveryPieceIncludingEmptyOnes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Split("projects/p/zones/z", '/'), (V{"projects", "p", "zones", "z"}));
  EXPECT_EQ(Split("a//b/", '/'), (V{"a", "", "b", ""}));
  EXPECT_EQ(Split("", '/'), (V{""}));
  EXPECT_EQ(Split("a.b", '/'), (V{"a.b"}));
}

TEST(SplitNonEmpty, DropsTheEmptyPieces) {
  using V = std::vector<std::string>;
  EXPECT_EQ(SplitNonEmpty("/a//b/", '/'), (V{"a", "b"}));
  EXPECT_EQ(SplitNonEmpty("a, b,", ','), (V{"a", " b"}));
  EXPECT_EQ(SplitNonEmpty("", ':'), V{});
  EXPECT_EQ(SplitNonEmpty(":::", ':'), V{});
}

TEST(AsciiLower, LowersAsciiLettersOnly) {
  EXPECT_EQ(AsciiLower("Content-Type"), "content-type");
  EXPECT_EQ(AsciiLower("X-\xC3\x89t\xC3\xA9"), "x-\xC3\x89t\xC3\xA9");  // UTF-8 bytes kept
  EXPECT_EQ(AsciiLower(""), "");
}

TEST(QuoteForMessage, EscapesWhatAMessageMustNotCarryAndCutsAt80) {
  EXPECT_EQ(QuoteForMessage("tag:gpu"), "\"tag:gpu\"");
  EXPECT_EQ(QuoteForMessage("a\"b\\c\n\xff"), "\"a\\x22b\\x5cc\\x0a\\xff\"");
  const std::string long_text(81, 'x');
  EXPECT_EQ(QuoteForMessage(long_text), "\"" + std::string(80, 'x') + "...\"");
  EXPECT_EQ(QuoteForMessage(std::string(80, 'y')), "\"" + std::string(80, 'y') + "\"");
}

}  // namespace
}  // namespace hyperslice
