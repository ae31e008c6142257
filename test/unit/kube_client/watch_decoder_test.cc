#include "src/kube/internal/watch_decoder.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <boost/json/serialize.hpp>

namespace hyperslice::kube {
namespace {

// A stream as the apiserver writes it: one object per line, including a bookmark and an ERROR
// event carrying a 410 Status.
const std::string kStream =
    R"js({"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"101"},"data":{"k":"v with \"quotes\" and \n newline and \u00e9"}}})js"
    "\n"
    R"js({"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"102"},"data":{"n":[1,2.5,-3e2,true,false,null]}}})js"
    "\n"
    R"js({"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"150","annotations":{"k8s.io/initial-events-end":"true"}}}})js"
    "\n"
    R"js({"type":"DELETED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"151"}}})js"
    "\n"
    R"js({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (151)","reason":"Expired","code":410}})js"
    "\n";

std::vector<WatchEvent> Drain(WatchDecoder& d) {
  std::vector<WatchEvent> out;
  while (auto ev = d.Pop()) out.push_back(std::move(*ev));
  return out;
}

void ExpectFullStream(const std::vector<WatchEvent>& evs) {
  ASSERT_EQ(evs.size(), 5u);
  EXPECT_EQ(evs[0].type, WatchEvent::Type::kAdded);
  EXPECT_EQ(evs[0].object.at("metadata").at("resourceVersion").as_string(), "101");
  EXPECT_EQ(evs[0].object.at("data").at("k").as_string(),
            "v with \"quotes\" and \n newline and \xc3\xa9");
  EXPECT_EQ(evs[1].type, WatchEvent::Type::kModified);
  EXPECT_EQ(evs[1].object.at("data").at("n").as_array().size(), 6u);
  EXPECT_EQ(evs[2].type, WatchEvent::Type::kBookmark);
  EXPECT_EQ(evs[2].object.at("metadata").at("resourceVersion").as_string(), "150");
  EXPECT_EQ(evs[3].type, WatchEvent::Type::kDeleted);
  EXPECT_EQ(evs[4].type, WatchEvent::Type::kError);
  EXPECT_EQ(evs[4].object.at("code").as_int64(), 410);
  EXPECT_EQ(evs[4].object.at("reason").as_string(), "Expired");
}

TEST(WatchDecoderTest, DecodesWholeStreamInOneChunk) {
  WatchDecoder d;
  ASSERT_TRUE(d.Feed(kStream).ok());
  EXPECT_FALSE(d.InObject());
  ASSERT_TRUE(d.Finish().ok());
  ExpectFullStream(Drain(d));
  EXPECT_EQ(d.events_decoded(), 5u);
}

TEST(WatchDecoderTest, SplitAtEveryByteBoundaryGivesTheSameEvents) {
  for (size_t cut = 0; cut <= kStream.size(); ++cut) {
    WatchDecoder d;
    ASSERT_TRUE(d.Feed(std::string_view(kStream).substr(0, cut)).ok()) << cut;
    ASSERT_TRUE(d.Feed(std::string_view(kStream).substr(cut)).ok()) << cut;
    ASSERT_TRUE(d.Finish().ok()) << cut;
    ExpectFullStream(Drain(d));
  }
}

TEST(WatchDecoderTest, OneByteAtATime) {
  WatchDecoder d;
  std::vector<WatchEvent> evs;
  for (char c : kStream) {
    ASSERT_TRUE(d.Feed(std::string_view(&c, 1)).ok());
    for (auto& e : Drain(d)) evs.push_back(std::move(e));
  }
  ASSERT_TRUE(d.Finish().ok());
  ExpectFullStream(evs);
}

TEST(WatchDecoderTest, EventsAvailableAsSoonAsTheirObjectCloses) {
  WatchDecoder d;
  size_t first_end = kStream.find('\n');
  // Everything up to (not including) the final '}' of the first event: nothing yet.
  ASSERT_TRUE(d.Feed(std::string_view(kStream).substr(0, first_end - 1)).ok());
  EXPECT_EQ(d.ready(), 0u);
  EXPECT_TRUE(d.InObject());
  ASSERT_TRUE(d.Feed(std::string_view(kStream).substr(first_end - 1, 1)).ok());
  EXPECT_EQ(d.ready(), 1u);
  EXPECT_FALSE(d.InObject());
}

TEST(WatchDecoderTest, ObjectsWithoutNewlinesAndWithExtraWhitespace) {
  WatchDecoder d;
  std::string s =
      " \r\n\t{\"type\":\"ADDED\",\"object\":{}}{\"type\":\"DELETED\",\"object\":{\"a\":1}}\n\n";
  ASSERT_TRUE(d.Feed(s).ok());
  ASSERT_TRUE(d.Finish().ok());
  auto evs = Drain(d);
  ASSERT_EQ(evs.size(), 2u);
  EXPECT_EQ(evs[1].type, WatchEvent::Type::kDeleted);
  EXPECT_EQ(evs[1].object.at("a").as_int64(), 1);
}

TEST(WatchDecoderTest, EmptyBodyIsACleanEnd) {
  WatchDecoder d;
  ASSERT_TRUE(d.Feed("").ok());
  ASSERT_TRUE(d.Feed("\n").ok());
  EXPECT_TRUE(d.Finish().ok());
  EXPECT_FALSE(d.Pop().has_value());
}

TEST(WatchDecoderTest, StreamCutMidObjectIsUnavailableAtEveryCut) {
  // Cut inside the second event at every position: the first event is still delivered, and
  // Finish() reports the truncation.
  size_t first_end = kStream.find('\n') + 1;
  size_t second_end = kStream.find('\n', first_end);
  for (size_t cut = first_end + 1; cut < second_end; ++cut) {
    WatchDecoder d;
    ASSERT_TRUE(d.Feed(std::string_view(kStream).substr(0, cut)).ok()) << cut;
    auto st = d.Finish();
    ASSERT_FALSE(st.ok()) << cut;
    EXPECT_EQ(st.error().code, Error::Code::kUnavailable);
    EXPECT_NE(st.error().message.find("mid-object"), std::string::npos) << st.error().message;
    auto evs = Drain(d);
    ASSERT_EQ(evs.size(), 1u);
    EXPECT_EQ(evs[0].type, WatchEvent::Type::kAdded);
  }
}

TEST(WatchDecoderTest, MalformedJsonIsInvalidArgumentAndSticky) {
  WatchDecoder d;
  auto st = d.Feed("{\"type\":\"ADDED\",\"object\":{]}\n");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Error::Code::kInvalidArgument);
  EXPECT_NE(st.error().message.find("malformed"), std::string::npos) << st.error().message;
  // Stays failed even for good input afterwards.
  auto again = d.Feed("{\"type\":\"ADDED\",\"object\":{}}");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, Error::Code::kInvalidArgument);
  EXPECT_FALSE(d.Finish().ok());
}

TEST(WatchDecoderTest, NonObjectTopLevelValuesAreRejected) {
  for (std::string bad : {"[1,2]", "\"ADDED\"", "42", "null", "x", "}"}) {
    WatchDecoder d;
    auto st = d.Feed(bad);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.error().code, Error::Code::kInvalidArgument) << bad;
  }
}

TEST(WatchDecoderTest, EventsWithoutKnownTypeOrObjectAreRejected) {
  for (std::string bad :
       {R"({"object":{}})", R"({"type":"ADDED"})", R"({"type":"NOPE","object":{}})",
        R"({"type":1,"object":{}})", R"({"type":"ADDED","object":"str"})"}) {
    WatchDecoder d;
    auto st = d.Feed(bad);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.error().code, Error::Code::kInvalidArgument) << bad;
  }
}

TEST(WatchDecoderTest, InvalidUtf8IsRejected) {
  WatchDecoder d;
  auto st = d.Feed("{\"type\":\"ADDED\",\"object\":{\"a\":\"\xff\xfe\"}}");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Error::Code::kInvalidArgument);
}

TEST(WatchDecoderTest, EventLargerThanTheLimitIsRejectedWithBoundedBuffering) {
  WatchDecoder d(/*max_event_bytes=*/1024);
  std::string big = "{\"type\":\"ADDED\",\"object\":{\"data\":\"" + std::string(4096, 'x') + "\"}}";
  // Small events under the limit pass.
  ASSERT_TRUE(d.Feed("{\"type\":\"ADDED\",\"object\":{}}\n").ok());
  auto st = d.Feed(big);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Error::Code::kInvalidArgument);
  EXPECT_NE(st.error().message.find("larger than 1024"), std::string::npos) << st.error().message;
  EXPECT_EQ(Drain(d).size(), 1u);

  // The same limit holds when the big event arrives in small pieces.
  WatchDecoder d2(1024);
  Status last;
  for (size_t i = 0; i < big.size() && last.ok(); i += 100) {
    last = d2.Feed(std::string_view(big).substr(i, 100));
  }
  ASSERT_FALSE(last.ok());
  EXPECT_EQ(last.error().code, Error::Code::kInvalidArgument);
}

TEST(WatchDecoderTest, DeepNestingWithinLimitIsAcceptedBeyondItRejected) {
  auto nested = [](int depth) {
    std::string s = "{\"type\":\"ADDED\",\"object\":";
    for (int i = 0; i < depth; ++i) s += "{\"a\":";
    s += "1";
    for (int i = 0; i < depth; ++i) s += "}";
    return s + "}";
  };
  WatchDecoder ok;
  EXPECT_TRUE(ok.Feed(nested(100)).ok());
  EXPECT_EQ(ok.ready(), 1u);
  WatchDecoder deep;
  auto st = deep.Feed(nested(100000));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Error::Code::kInvalidArgument);
}

}  // namespace
}  // namespace hyperslice::kube
