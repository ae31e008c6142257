// The remotecommand pieces of the kubelet API: protocol negotiation, the Status objects kubectl
// decodes, resize messages and the ExecSession's input queue.
#include "src/runners/kubeletapi/internal/remotecommand.h"

#include <thread>

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace hyperslice::runners::kubeletapi::internal {
namespace {

namespace bj = boost::json;
using namespace std::chrono_literals;

TEST(RemoteCommand, NegotiatesTheClientsFirstSupportedProtocol) {
  std::vector<std::string_view> server = {kProtocolV5, kProtocolV4, kProtocolV3, kProtocolV2};
  // The apiserver sends one header per protocol, v5 first.
  EXPECT_EQ(NegotiateProtocol({"v5.channel.k8s.io", "v4.channel.k8s.io"}, server),
            "v5.channel.k8s.io");
  EXPECT_EQ(NegotiateProtocol({"v9.channel.k8s.io, v4.channel.k8s.io"}, server),
            "v4.channel.k8s.io");
  EXPECT_EQ(NegotiateProtocol({"channel.k8s.io"}, server), "");
  EXPECT_EQ(NegotiateProtocol({}, server), "");
  EXPECT_EQ(ProtocolVersion("v3.channel.k8s.io"), 3);
  EXPECT_EQ(ProtocolVersion("base64.channel.k8s.io"), 0);
}

TEST(RemoteCommand, ExitCodeStatusIsWhatClientGoDecodes) {
  bj::value v = bj::parse(ExitCodeStatusJson(42));
  EXPECT_EQ(v.at("status"), "Failure");
  EXPECT_EQ(v.at("reason"), "NonZeroExitCode");
  const auto& cause = v.at("details").at("causes").at(0);
  EXPECT_EQ(cause.at("reason"), "ExitCode");
  EXPECT_EQ(cause.at("message"), "42");
  EXPECT_EQ(bj::parse(SuccessStatusJson()).at("status"), "Success");
}

TEST(RemoteCommand, ErrorStatusCarriesReasonCodeAndMessage) {
  Error e = Error::Make(Error::Code::kForbidden, "sealed runner");
  bj::value v = bj::parse(ErrorStatusJson(e));
  EXPECT_EQ(v.at("reason"), "Forbidden");
  EXPECT_EQ(v.at("code"), 403);
  EXPECT_EQ(v.at("message"), "sealed runner");
  EXPECT_EQ(HttpStatusFor(Error::Make(Error::Code::kNotFound, "x")), 404);
  EXPECT_EQ(HttpStatusFor(Error::Make(Error::Code::kInternal, "x")), 500);
}

TEST(RemoteCommand, ResizeMessagesMaySplitAndBatch) {
  std::string buf = "{\"Width\":80,\"Height\":24}\n{\"Width\":1";
  std::vector<TerminalSize> out;
  ParseResizes(buf, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].width, 80);
  EXPECT_EQ(out[0].height, 24);
  buf += "20,\"Height\":40}\n";
  ParseResizes(buf, out);
  ASSERT_EQ(out.size(), 2U);
  EXPECT_EQ(out[1].width, 120);
  EXPECT_TRUE(buf == "\n" || buf.empty());
}

TEST(ExecSession, InputArrivesInOrderAndGoneUnblocksReaders) {
  std::vector<std::pair<Channel, std::string>> sent;
  ExecRequest r;
  r.with_stdout = true;
  ExecSessionImpl s(r, [&](Channel c, std::string_view d) {
    sent.emplace_back(c, std::string(d));
    return true;
  });
  s.PushStdin("a");
  s.PushResize({10, 20});
  s.PushStdinEof();
  s.PushStdin("after eof is dropped");
  EXPECT_EQ(s.ReadInput(1ms).data, "a");
  EXPECT_EQ(s.ReadInput(1ms).size.height, 20);
  EXPECT_EQ(s.ReadInput(1ms).kind, ExecInput::Kind::kStdinEof);
  EXPECT_EQ(s.ReadInput(1ms).kind, ExecInput::Kind::kTimeout);
  EXPECT_TRUE(s.WriteStdout("out"));
  EXPECT_FALSE(s.WriteStderr("no stderr requested"));
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    s.SetGone();
  });
  EXPECT_EQ(s.ReadInput(10s).kind, ExecInput::Kind::kGone);
  t.join();
  EXPECT_FALSE(s.WriteStdout("late"));
  ASSERT_EQ(sent.size(), 1U);
  EXPECT_EQ(sent[0].second, "out");
}

TEST(ExecSession, TtyMergesStderrIntoStdout) {
  std::vector<Channel> channels;
  ExecRequest r;
  r.with_stdout = true;
  r.tty = true;
  ExecSessionImpl s(r, [&](Channel c, std::string_view) {
    channels.push_back(c);
    return true;
  });
  EXPECT_TRUE(s.WriteStderr("x"));
  ASSERT_EQ(channels.size(), 1U);
  EXPECT_EQ(channels[0], kStdout);
}

TEST(SendWindow, BlocksAtTheLimitAndCloseReleases) {
  SendWindow w(10);
  EXPECT_TRUE(w.Acquire(10));
  std::atomic<bool> returned{false};
  std::thread t([&] {
    EXPECT_FALSE(w.Acquire(1));
    returned = true;
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(returned.load());
  w.Close();
  t.join();
  EXPECT_TRUE(returned.load());
}

}  // namespace
}  // namespace hyperslice::runners::kubeletapi::internal
