// The sealed agent's token socket: HTTP over a unix socket, one request per connection.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "src/runners/agent/tee_server.h"

namespace hyperslice::runners::agent {
namespace {

// Sends `request` and reads the whole answer (the server closes the connection).
std::string Exchange(const std::string& path, const std::string& request) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, path.c_str(), sizeof(sa.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    ::close(fd);
    return "connect failed";
  }
  (void)!::write(fd, request.data(), request.size());
  std::string out;
  char buf[1024];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

std::string Post(const std::string& body, const std::string& path = "/v1/token") {
  return "POST " + path +
         " HTTP/1.1\r\nHost: localhost\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

class TeeServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hs-tee-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/teeserver.sock";
    auto s = TeeServer::Start(path_, [this](const TokenAsk& ask) -> Result<std::string> {
      asks_.push_back(ask);
      if (ask.audience == "refused") {
        return Error::Make(Error::Code::kForbidden, "AttestationRefused: not trusted");
      }
      return std::string("jwt-for-") + ask.audience;
    });
    ASSERT_TRUE(s.ok()) << s.error().message;
    server_ = std::move(*s);
  }
  void TearDown() override {
    server_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_, path_;
  std::vector<TokenAsk> asks_;
  std::unique_ptr<TeeServer> server_;
};

TEST_F(TeeServerTest, AnswersATokenForTheAudienceAndNonces) {
  std::string r = Exchange(path_, Post(R"({"audience":"https://kbs","nonces":["0123456789"]})"));
  EXPECT_EQ(r.substr(0, 15), "HTTP/1.1 200 OK") << r;
  EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), "jwt-for-https://kbs");
  ASSERT_EQ(asks_.size(), 1u);
  EXPECT_EQ(asks_[0].nonces, std::vector<std::string>{"0123456789"});
}

TEST_F(TeeServerTest, RefusesBadRequestsWithAReason) {
  EXPECT_NE(Exchange(path_, Post("not json")).find("HTTP/1.1 400"), std::string::npos);
  EXPECT_NE(Exchange(path_, Post(R"({"nonces":[]})")).find("audience"), std::string::npos);
  EXPECT_NE(Exchange(path_, Post(R"({"audience":"a","nonces":["short"]})")).find("HTTP/1.1 400"),
            std::string::npos);
  EXPECT_NE(Exchange(path_, Post(R"({"audience":"a"})", "/v1/other")).find("HTTP/1.1 404"),
            std::string::npos);
  std::string refused = Exchange(path_, Post(R"({"audience":"refused"})"));
  EXPECT_NE(refused.find("HTTP/1.1 403"), std::string::npos) << refused;
  EXPECT_NE(refused.find("AttestationRefused"), std::string::npos) << refused;
  EXPECT_EQ(asks_.size(), 1u) << "only the well-formed request reaches the issuer";
}

TEST_F(TeeServerTest, ParseAskLimits) {
  EXPECT_TRUE(TeeServer::ParseAsk(R"({"audience":"a","nonces":["12345678"]})").ok());
  std::string seven = R"({"audience":"a","nonces":[)";
  for (int i = 0; i < 7; ++i) seven += std::string(i ? "," : "") + "\"12345678\"";
  EXPECT_FALSE(TeeServer::ParseAsk(seven + "]}").ok());
  EXPECT_FALSE(
      TeeServer::ParseAsk(R"({"audience":"a","nonces":[")" + std::string(75, 'x') + "\"]}").ok());
  EXPECT_FALSE(TeeServer::ParseAsk(R"({"audience":")" + std::string(513, 'x') + "\"}").ok());
  auto bound = TeeServer::ParseAsk(R"({"audience":"a","tee_pubkey_sha256":")" +
                                   std::string(64, 'e') + "\"}");
  ASSERT_TRUE(bound.ok()) << bound.error().message;
  EXPECT_EQ(bound->tee_pubkey_sha256, std::string(64, 'e'));
  EXPECT_FALSE(TeeServer::ParseAsk(R"({"audience":"a","tee_pubkey_sha256":"ABC"})").ok());
}

TEST_F(TeeServerTest, StopRemovesTheSocket) {
  EXPECT_TRUE(std::filesystem::exists(path_));
  server_->Stop();
  EXPECT_FALSE(std::filesystem::exists(path_));
}

// The key broker's path: forwarded with its Authorization header and body, answered with the
// broker's status and body; absent without a relay.
TEST_F(TeeServerTest, RelaysKeyBrokerRequestsAsTheyCame) {
  const std::string ask =
      "POST /kbs/v0/resource/model-key HTTP/1.1\r\nHost: localhost\r\n"
      "authorization: Bearer the.jwt.sig\r\nContent-Length: 15\r\n\r\n"
      R"({"publicKey":1})";
  EXPECT_NE(Exchange(path_, ask).find("HTTP/1.1 404"), std::string::npos) << "no relay here";
  std::vector<KbsAsk> relayed;
  auto relay = TeeServer::Start(
      dir_ + "/relay.sock", [](const TokenAsk&) -> Result<std::string> { return std::string(); },
      [&relayed](const KbsAsk& a) -> Result<KbsAnswer> {
        relayed.push_back(a);
        if (a.resource == "down") return Error::Make(Error::Code::kUnavailable, "no broker");
        return KbsAnswer{403, R"({"error":"SecretPolicy"})"};
      });
  ASSERT_TRUE(relay.ok()) << relay.error().message;
  std::string r = Exchange(dir_ + "/relay.sock", ask);
  EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 403") << r;
  EXPECT_NE(r.find("Content-Type: application/json"), std::string::npos) << r;
  EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), R"({"error":"SecretPolicy"})");
  ASSERT_EQ(relayed.size(), 1u);
  EXPECT_EQ(relayed[0].resource, "model-key");
  EXPECT_EQ(relayed[0].authorization, "Bearer the.jwt.sig");
  EXPECT_EQ(relayed[0].body, R"({"publicKey":1})");
  std::string down = Exchange(dir_ + "/relay.sock", Post("{}", "/kbs/v0/resource/down"));
  EXPECT_NE(down.find("HTTP/1.1 503"), std::string::npos) << down;
  EXPECT_EQ(relayed.back().authorization, "") << "no header, none forwarded";
}

// The relay goes nowhere before the link controller issued a token, and only to names.
TEST(KbsRelayTest, NeedsAnIssuerAndAPlainResourceName) {
  KbsRelay relay("");
  auto early = relay.Forward({"model-key", "Bearer x", "{}"});
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.error().code, Error::Code::kUnavailable);
  relay.LearnIssuer("not a jwt");
  EXPECT_EQ(relay.Forward({"model-key", "", "{}"}).error().code, Error::Code::kUnavailable);
  for (const char* bad : {"", "../jwks", "a/b", "a?b", "a b"}) {
    auto r = relay.Forward({bad, "", "{}"});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, Error::Code::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace hyperslice::runners::agent
