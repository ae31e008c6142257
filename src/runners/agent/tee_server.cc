#include "src/runners/agent/tee_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <cstring>

#include "src/base/log.h"

namespace hyperslice::runners::agent {
namespace {

constexpr size_t kMaxRequest = size_t{16} * 1024;
constexpr int kReadTimeoutMs = 5000;

void WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

void Answer(int fd, int status, const std::string& reason, const std::string& body,
            const char* type = "text/plain") {
  WriteAll(fd, "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: " + type +
                   "\r\nContent-Length: " + std::to_string(body.size()) +
                   "\r\nConnection: close\r\n\r\n" + body);
}

int StatusOf(const Error& e) {
  switch (e.code) {
    case Error::Code::kInvalidArgument:
      return 400;
    case Error::Code::kForbidden:
    case Error::Code::kUnauthorized:
      return 403;
    default:
      return 503;
  }
}

}  // namespace

Result<TokenAsk> TeeServer::ParseAsk(std::string_view body) {
  namespace json = boost::json;
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) {
    return Error::Make(Error::Code::kInvalidArgument, "the body must be a JSON object");
  }
  TokenAsk ask;
  const json::object& o = v.as_object();
  if (const json::value* a = o.if_contains("audience"); a != nullptr && a->is_string()) {
    ask.audience = std::string(a->as_string());
  }
  if (ask.audience.empty() || ask.audience.size() > 512) {
    return Error::Make(Error::Code::kInvalidArgument, "audience: 1 to 512 bytes required");
  }
  if (const json::value* n = o.if_contains("nonces"); n != nullptr) {
    if (!n->is_array() || n->as_array().size() > 6) {
      return Error::Make(Error::Code::kInvalidArgument, "nonces: an array of at most 6");
    }
    for (const json::value& x : n->as_array()) {
      if (!x.is_string() || x.as_string().size() < 8 || x.as_string().size() > 74) {
        return Error::Make(Error::Code::kInvalidArgument, "nonces: strings of 8 to 74 bytes");
      }
      ask.nonces.emplace_back(x.as_string());
    }
  }
  if (const json::value* k = o.if_contains("tee_pubkey_sha256"); k != nullptr) {
    const bool hex64 = k->is_string() && k->as_string().size() == 64 &&
                       k->as_string().find_first_not_of("0123456789abcdef") == json::string::npos;
    if (!hex64) {
      return Error::Make(Error::Code::kInvalidArgument, "tee_pubkey_sha256: 64 lowercase hex");
    }
    ask.tee_pubkey_sha256 = std::string(k->as_string());
  }
  return ask;
}

Result<std::unique_ptr<TeeServer>> TeeServer::Start(std::string socket_path, Issue issue,
                                                    Relay relay) {
  sockaddr_un sa{};
  if (socket_path.size() >= sizeof(sa.sun_path)) {
    return Error::Make(Error::Code::kInternal, "socket path too long: " + socket_path);
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Error::Make(Error::Code::kInternal, "socket: " + std::string(strerror(errno)));
  ::unlink(socket_path.c_str());
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, socket_path.c_str(), socket_path.size() + 1);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || ::listen(fd, 16) != 0) {
    std::string why = strerror(errno);
    ::close(fd);
    return Error::Make(Error::Code::kInternal, "cannot listen on " + socket_path + ": " + why);
  }
  ::chmod(socket_path.c_str(), 0666);
  return std::unique_ptr<TeeServer>(
      new TeeServer(std::move(socket_path), std::move(issue), std::move(relay), fd));
}

TeeServer::TeeServer(std::string path, Issue issue, Relay relay, int fd)
    : path_(std::move(path)), issue_(std::move(issue)), relay_(std::move(relay)), fd_(fd) {
  thread_ = std::thread([this] { Loop(); });
}

TeeServer::~TeeServer() { Stop(); }

void TeeServer::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(path_.c_str());
  }
}

void TeeServer::Loop() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    // One at a time: a token costs a round trip to the link controller, and a workload that
    // floods its own socket only slows itself.
    Serve(conn);
    ::close(conn);
  }
}

void TeeServer::Serve(int conn) {
  std::string req;
  size_t header_end = std::string::npos;
  size_t want = 0;
  char buf[4096];
  while (req.size() < kMaxRequest) {
    pollfd p{conn, POLLIN, 0};
    if (::poll(&p, 1, kReadTimeoutMs) <= 0) return;
    ssize_t n = ::read(conn, buf, sizeof buf);
    if (n <= 0) break;
    req.append(buf, static_cast<size_t>(n));
    if (header_end == std::string::npos) {
      header_end = req.find("\r\n\r\n");
      if (header_end == std::string::npos) continue;
      std::string head = req.substr(0, header_end);
      for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      auto cl = head.find("\r\ncontent-length:");
      want = cl == std::string::npos ? 0 : std::strtoul(head.c_str() + cl + 17, nullptr, 10);
      if (want > kMaxRequest) return Answer(conn, 413, "Payload Too Large", "request too large\n");
    }
    if (req.size() >= header_end + 4 + want) break;
  }
  if (header_end == std::string::npos || req.size() < header_end + 4 + want) {
    return Answer(conn, 400, "Bad Request", "incomplete request\n");
  }
  constexpr std::string_view kKbs = "POST /kbs/v0/resource/";
  if (relay_ && req.rfind(kKbs, 0) == 0) {
    KbsAsk ask;
    ask.resource = req.substr(kKbs.size(), req.find(' ', kKbs.size()) - kKbs.size());
    std::string head = req.substr(0, header_end);
    std::string lower = head;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (auto at = lower.find("\r\nauthorization:"); at != std::string::npos) {
      size_t from = head.find_first_not_of(' ', at + 16);
      size_t to = head.find("\r\n", at + 2);
      if (from != std::string::npos && from < to) ask.authorization = head.substr(from, to - from);
    }
    ask.body = req.substr(header_end + 4, want);
    auto answer = relay_(ask);
    if (!answer.ok()) {
      return Answer(conn, StatusOf(answer.error()), "Refused", answer.error().message + "\n");
    }
    return Answer(conn, answer->status, "Relayed", answer->body, "application/json");
  }
  if (req.rfind("POST /v1/token ", 0) != 0) return Answer(conn, 404, "Not Found", "not found\n");
  auto ask = ParseAsk(std::string_view(req).substr(header_end + 4, want));
  if (!ask.ok()) return Answer(conn, 400, "Bad Request", ask.error().message + "\n");
  auto token = issue_(*ask);
  if (!token.ok()) {
    return Answer(conn, StatusOf(token.error()), "Refused", token.error().message + "\n");
  }
  Answer(conn, 200, "OK", *token);
}

}  // namespace hyperslice::runners::agent
