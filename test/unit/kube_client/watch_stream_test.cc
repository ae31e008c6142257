// WatchStream over a scripted response body: how cut connections, bodies ending mid-object,
// malformed bodies and Cancel() surface to the caller.
#include <deque>
#include <thread>

#include <gtest/gtest.h>

#include "src/kube/internal/watch_decoder.h"

namespace hyperslice::kube {
namespace {

// Replays a fixed sequence of Next() results; then blocks until cancelled if asked to.
class ScriptedBody : public net::ResponseStream {
 public:
  explicit ScriptedBody(std::deque<Result<std::string>> script, bool block_at_end = false)
      : script_(std::move(script)), block_at_end_(block_at_end) {}
  int status() const override { return 200; }
  const net::Headers& headers() const override { return headers_; }
  Result<std::string> Next() override {
    if (!script_.empty()) {
      auto r = std::move(script_.front());
      script_.pop_front();
      return r;
    }
    if (block_at_end_) {
      while (!cancelled_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return Error::Make(Error::Code::kCancelled, "stream cancelled");
    }
    return std::string();
  }
  void Cancel() override { cancelled_ = true; }

 private:
  std::deque<Result<std::string>> script_;
  bool block_at_end_;
  std::atomic<bool> cancelled_{false};
  net::Headers headers_;
};

const char* kEvent = R"({"type":"ADDED","object":{"metadata":{"name":"a"}}})";

TEST(WatchStreamTest, EventsSplitAcrossReadsThenCleanEnd) {
  std::string ev = std::string(kEvent) + "\n";
  std::deque<Result<std::string>> script = {ev.substr(0, 10), ev.substr(10) + ev.substr(0, 3),
                                            ev.substr(3)};
  auto s = NewWatchStream(std::make_unique<ScriptedBody>(std::move(script)));
  for (int i = 0; i < 2; ++i) {
    auto r = s->Next();
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    ASSERT_TRUE(r->has_value());
    EXPECT_EQ((*r)->type, WatchEvent::Type::kAdded);
  }
  auto end = s->Next();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
  end = s->Next();  // stays ended
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
}

TEST(WatchStreamTest, BodyEndingMidObjectIsUnavailable) {
  std::string ev = std::string(kEvent) + "\n";
  std::deque<Result<std::string>> script = {ev + ev.substr(0, 20)};
  auto s = NewWatchStream(std::make_unique<ScriptedBody>(std::move(script)));
  auto first = s->Next();
  ASSERT_TRUE(first.ok() && first->has_value());
  auto cut = s->Next();
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().code, Error::Code::kUnavailable);
  EXPECT_NE(cut.error().message.find("mid-object"), std::string::npos) << cut.error().message;
}

TEST(WatchStreamTest, ConnectionBrokenMidObjectIsUnavailable) {
  std::deque<Result<std::string>> script = {
      std::string(kEvent).substr(0, 15),
      Error::Make(Error::Code::kUnavailable, "connection reset by peer")};
  auto s = NewWatchStream(std::make_unique<ScriptedBody>(std::move(script)));
  auto r = s->Next();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Error::Code::kUnavailable);
  EXPECT_NE(r.error().message.find("connection reset"), std::string::npos) << r.error().message;
}

TEST(WatchStreamTest, IdleTimeoutIsReportedAsUnavailable) {
  std::deque<Result<std::string>> script = {Error::Make(Error::Code::kTimeout, "read: timed out")};
  auto s = NewWatchStream(std::make_unique<ScriptedBody>(std::move(script)));
  auto r = s->Next();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Error::Code::kUnavailable);
}

TEST(WatchStreamTest, MalformedBodyIsInvalidArgument) {
  std::deque<Result<std::string>> script = {std::string("<html>502 Bad Gateway</html>")};
  auto s = NewWatchStream(std::make_unique<ScriptedBody>(std::move(script)));
  auto r = s->Next();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Error::Code::kInvalidArgument);
}

TEST(WatchStreamTest, OversizedEventIsRejected) {
  std::string big = R"({"type":"ADDED","object":{"data":")" + std::string(10000, 'x') + "\"}}";
  std::deque<Result<std::string>> script = {big};
  auto s = NewWatchStream(std::make_unique<ScriptedBody>(std::move(script)), 1000);
  auto r = s->Next();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Error::Code::kInvalidArgument);
}

TEST(WatchStreamTest, CancelFromAnotherThreadUnblocksNext) {
  auto s = NewWatchStream(std::make_unique<ScriptedBody>(std::deque<Result<std::string>>{}, true));
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s->Cancel();
  });
  auto r = s->Next();
  canceller.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Error::Code::kCancelled);
}

}  // namespace
}  // namespace hyperslice::kube
