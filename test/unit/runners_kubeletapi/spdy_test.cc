// SPDY/3.1 framing and header blocks as src/runners/kubeletapi speaks them with the apiserver's
// spdystream client.
#include "src/runners/kubeletapi/internal/spdy.h"

#include <gtest/gtest.h>

namespace hyperslice::runners::kubeletapi::internal::spdy {
namespace {

RawFrame ParseOne(const std::string& bytes) {
  FrameParser p;
  p.Feed(bytes);
  auto f = p.Next();
  EXPECT_TRUE(f.ok());
  EXPECT_TRUE(f.ok() && f->has_value());
  EXPECT_EQ(p.buffered(), 0U);
  return f.ok() && f->has_value() ? **f : RawFrame{};
}

TEST(SpdyHeaderBlock, EncodeDecodeRoundTrip) {
  HeaderBlock h = {{"streamtype", "stdout"}, {"x-multi", std::string("a\0b", 3)}, {"empty", ""}};
  auto back = DecodeHeaderBlock(EncodeHeaderBlock(h));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, h);
  EXPECT_EQ(HeaderValue(h, "StreamType"), "stdout");
  EXPECT_EQ(HeaderValue(h, "x-multi"), "a");
  EXPECT_EQ(HeaderValue(h, "absent"), "");
}

TEST(SpdyHeaderBlock, NamesAreLowerCasedOnTheWireAndUpperCaseIsRefused) {
  auto enc = EncodeHeaderBlock({{"StreamType", "error"}});
  EXPECT_NE(enc.find("streamtype"), std::string::npos);
  std::string bad = enc;
  bad[8] = 'S';
  EXPECT_FALSE(DecodeHeaderBlock(bad).ok());
}

TEST(SpdyHeaderBlock, TruncatedOrLyingBlocksAreErrors) {
  std::string enc = EncodeHeaderBlock({{"a", "b"}});
  for (size_t n = 0; n < enc.size(); ++n) {
    EXPECT_FALSE(DecodeHeaderBlock(enc.substr(0, n)).ok()) << n;
  }
  EXPECT_FALSE(DecodeHeaderBlock(enc + "x").ok());
  std::string huge_count = enc;
  huge_count[0] = '\x7f';
  EXPECT_FALSE(DecodeHeaderBlock(huge_count).ok());
  std::string huge_len = enc;
  huge_len[4] = '\x7f';
  EXPECT_FALSE(DecodeHeaderBlock(huge_len).ok());
}

TEST(SpdyHeaderCompression, BlocksShareOneContextPerDirection) {
  HeaderCompressor out;
  HeaderDecompressor in;
  for (const char* type : {"error", "stdin", "stdout", "stderr", "resize", "stdout"}) {
    HeaderBlock h = {{"streamtype", type}};
    auto c = out.Compress(h);
    ASSERT_TRUE(c.ok());
    auto d = in.Decompress(*c);
    ASSERT_TRUE(d.ok()) << d.error().message;
    EXPECT_EQ(*d, h);
  }
  // An empty block (what SYN_REPLY carries) round-trips too.
  auto c = out.Compress({});
  ASSERT_TRUE(c.ok());
  auto d = in.Decompress(*c);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->empty());
}

TEST(SpdyHeaderCompression, UsesTheSpdy3DictionaryId) {
  HeaderCompressor out;
  auto c = out.Compress({{"streamtype", "error"}});
  ASSERT_TRUE(c.ok());
  ASSERT_GE(c->size(), 6U);
  EXPECT_NE(static_cast<uint8_t>((*c)[1]) & 0x20, 0) << "FDICT flag";
  std::string dictid = c->substr(2, 4);
  EXPECT_EQ(dictid, std::string("\xe3\xc6\xa7\xc2", 4));
}

TEST(SpdyHeaderCompression, GarbageBreaksTheContextForGood) {
  HeaderDecompressor in;
  EXPECT_FALSE(in.Decompress("definitely not zlib").ok());
  HeaderCompressor out;
  auto c = out.Compress({{"a", "b"}});
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(in.Decompress(*c).ok());
}

TEST(SpdyHeaderCompression, InflationBeyondTheLimitIsRefused) {
  HeaderCompressor out;
  HeaderDecompressor in(/*max_output=*/1024);
  auto c = out.Compress({{"big", std::string(100000, 'x')}});
  ASSERT_TRUE(c.ok());
  EXPECT_LT(c->size(), 2000U);
  EXPECT_FALSE(in.Decompress(*c).ok());
}

TEST(SpdyFrames, SynStreamRoundTripAcrossArbitrarySplits) {
  HeaderCompressor out;
  auto block = out.Compress({{"streamtype", "stdin"}});
  ASSERT_TRUE(block.ok());
  std::string wire = SynStreamFrame(3, *block, kFlagFin) + DataFrame(3, "hello", false) +
                     DataFrame(3, "", true) + PingFrame(1) + GoAwayFrame(3, 0) +
                     RstStreamFrame(5, RstStatus::kCancel) + WindowUpdateFrame(3, 1000);
  for (size_t step : {size_t{1}, size_t{3}, size_t{7}, wire.size()}) {
    FrameParser p;
    HeaderDecompressor in;
    std::vector<RawFrame> frames;
    for (size_t i = 0; i < wire.size(); i += step) {
      p.Feed(std::string_view(wire).substr(i, step));
      while (true) {
        auto f = p.Next();
        ASSERT_TRUE(f.ok());
        if (!f->has_value()) break;
        frames.push_back(std::move(**f));
      }
    }
    ASSERT_EQ(frames.size(), 7U) << "step " << step;
    auto syn = ParseSynStream(frames[0], in);
    ASSERT_TRUE(syn.ok()) << syn.error().message;
    EXPECT_EQ(syn->stream_id, 3U);
    EXPECT_EQ(syn->flags, kFlagFin);
    EXPECT_EQ(HeaderValue(syn->headers, "streamtype"), "stdin");
    EXPECT_FALSE(frames[1].control);
    EXPECT_EQ(frames[1].stream_id, 3U);
    EXPECT_EQ(frames[1].payload, "hello");
    EXPECT_EQ(frames[2].flags, kFlagFin);
    EXPECT_TRUE(frames[2].payload.empty());
    EXPECT_EQ(*ParsePing(frames[3]), 1U);
    EXPECT_EQ(ParseGoAway(frames[4])->last_good_stream_id, 3U);
    EXPECT_EQ(ParseRstStream(frames[5])->status, static_cast<uint32_t>(RstStatus::kCancel));
    EXPECT_EQ(ParseWindowUpdate(frames[6])->delta, 1000U);
  }
}

TEST(SpdyFrames, SynReplyCarriesTheStreamAndHeaders) {
  HeaderCompressor out;
  HeaderDecompressor in;
  auto block = out.Compress({});
  ASSERT_TRUE(block.ok());
  RawFrame f = ParseOne(SynReplyFrame(7, *block, false));
  EXPECT_TRUE(f.control);
  EXPECT_EQ(f.version, kVersion);
  EXPECT_EQ(f.type, static_cast<uint16_t>(ControlType::kSynReply));
  auto h = ParseHeaders(f, in);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->first, 7U);
  EXPECT_TRUE(h->second.empty());
}

TEST(SpdyFrames, WireLayoutMatchesSpdy3) {
  EXPECT_EQ(PingFrame(0x01020304),
            std::string("\x80\x03\x00\x06\x00\x00\x00\x04\x01\x02\x03\x04", 12));
  EXPECT_EQ(DataFrame(5, "ab", true), std::string("\x00\x00\x00\x05\x01\x00\x00\x02"
                                                  "ab",
                                                  10));
}

TEST(SpdyFrames, OversizedControlFramesAndOtherVersionsAreRefused) {
  std::string big("\x80\x03\x00\x01\x00\x7f\xff\xff", 8);
  FrameParser p;
  p.Feed(big);
  EXPECT_FALSE(p.Next().ok());
  std::string v2("\x80\x02\x00\x06\x00\x00\x00\x04\x00\x00\x00\x01", 12);
  FrameParser q;
  q.Feed(v2);
  EXPECT_FALSE(q.Next().ok());
}

TEST(SpdyFrames, MalformedControlBodiesAreErrors) {
  RawFrame f;
  f.control = true;
  f.payload = "abc";
  HeaderDecompressor in;
  EXPECT_FALSE(ParseSynStream(f, in).ok());
  EXPECT_FALSE(ParsePing(f).ok());
  EXPECT_FALSE(ParseRstStream(f).ok());
  EXPECT_FALSE(ParseGoAway(f).ok());
  EXPECT_FALSE(ParseWindowUpdate(f).ok());
  EXPECT_FALSE(ParseHeaders(f, in).ok());
}

}  // namespace
}  // namespace hyperslice::runners::kubeletapi::internal::spdy
