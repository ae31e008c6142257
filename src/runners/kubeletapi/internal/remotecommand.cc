#include "src/runners/kubeletapi/internal/remotecommand.h"

#include <algorithm>

#include <boost/json.hpp>

#include "src/base/strings.h"

namespace hyperslice::runners::kubeletapi::internal {
namespace bj = boost::json;

namespace {}  // namespace

std::string NegotiateProtocol(const std::vector<std::string>& client,
                              const std::vector<std::string_view>& server) {
  for (const auto& value : client) {
    size_t start = 0;
    while (start <= value.size()) {
      size_t comma = value.find(',', start);
      if (comma == std::string::npos) comma = value.size();
      std::string p = TrimSpace(std::string_view(value).substr(start, comma - start));
      if (!p.empty() && std::find(server.begin(), server.end(), p) != server.end()) return p;
      start = comma + 1;
    }
  }
  return {};
}

int ProtocolVersion(std::string_view protocol) {
  if (protocol == kProtocolV5) return 5;
  if (protocol == kProtocolV4) return 4;
  if (protocol == kProtocolV3) return 3;
  if (protocol == kProtocolV2) return 2;
  return 0;
}

std::string SuccessStatusJson() {
  return bj::serialize(bj::object{{"metadata", bj::object{}}, {"status", "Success"}});
}

std::string ExitCodeStatusJson(int exit_code) {
  std::string code = std::to_string(exit_code);
  return bj::serialize(bj::object{
      {"metadata", bj::object{}},
      {"status", "Failure"},
      {"message", "command terminated with non-zero exit code: exit status " + code},
      {"reason", "NonZeroExitCode"},
      {"details",
       bj::object{{"causes", bj::array{bj::object{{"reason", "ExitCode"}, {"message", code}}}}}}});
}

std::string ReasonFor(const Error& error) {
  if (!error.reason.empty()) return error.reason;
  switch (error.code) {
    case Error::Code::kInvalidArgument:
      return "BadRequest";
    case Error::Code::kNotFound:
      return "NotFound";
    case Error::Code::kAlreadyExists:
      return "AlreadyExists";
    case Error::Code::kConflict:
      return "Conflict";
    case Error::Code::kUnauthorized:
      return "Unauthorized";
    case Error::Code::kForbidden:
      return "Forbidden";
    case Error::Code::kTimeout:
      return "Timeout";
    case Error::Code::kTooManyRequests:
      return "TooManyRequests";
    case Error::Code::kUnavailable:
      return "ServiceUnavailable";
    default:
      return "InternalError";
  }
}

int HttpStatusFor(const Error& error) {
  if (error.http_status >= 400 && error.http_status <= 599) return error.http_status;
  switch (error.code) {
    case Error::Code::kInvalidArgument:
      return 400;
    case Error::Code::kUnauthorized:
      return 401;
    case Error::Code::kForbidden:
      return 403;
    case Error::Code::kNotFound:
      return 404;
    case Error::Code::kAlreadyExists:
    case Error::Code::kConflict:
      return 409;
    case Error::Code::kTooManyRequests:
      return 429;
    case Error::Code::kUnavailable:
      return 503;
    case Error::Code::kTimeout:
      return 504;
    default:
      return 500;
  }
}

std::string ErrorStatusJson(const Error& error) {
  return bj::serialize(bj::object{{"kind", "Status"},
                                  {"apiVersion", "v1"},
                                  {"metadata", bj::object{}},
                                  {"status", "Failure"},
                                  {"message", error.message},
                                  {"reason", ReasonFor(error)},
                                  {"code", HttpStatusFor(error)}});
}

void ParseResizes(std::string& buffer, std::vector<TerminalSize>& out) {
  // Objects are flat; split at each closing brace and parse what came before.
  size_t start = 0;
  while (true) {
    size_t close = buffer.find('}', start);
    if (close == std::string::npos) break;
    boost::system::error_code ec;
    bj::value v = bj::parse(std::string_view(buffer).substr(start, close + 1 - start), ec);
    start = close + 1;
    if (ec || !v.is_object()) continue;
    auto field = [&](const char* name) -> uint16_t {
      const bj::value* f = v.as_object().if_contains(name);
      if (f == nullptr) return 0;
      auto n = f->to_number<int64_t>(ec);
      if (ec) return 0;
      return static_cast<uint16_t>(std::clamp<int64_t>(n, 0, UINT16_MAX));
    };
    out.push_back(TerminalSize{field("Width"), field("Height")});
  }
  buffer.erase(0, start);
  if (buffer.size() > 4096) buffer.clear();  // garbage without a closing brace
}

bool SendWindow::Acquire(size_t bytes) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return closed_ || queued_ < limit_; });
  if (closed_) return false;
  queued_ += bytes;
  return true;
}

void SendWindow::Release(size_t bytes) {
  std::lock_guard lock(mu_);
  queued_ -= std::min(queued_, bytes);
  cv_.notify_all();
}

void SendWindow::Close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  cv_.notify_all();
}

bool SendWindow::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

void ExecSessionImpl::PushStdin(std::string data) {
  std::lock_guard lock(mu_);
  if (stdin_eof_ || gone_) return;
  input_.push_back(ExecInput{ExecInput::Kind::kStdin, std::move(data), {}});
  cv_.notify_all();
}

void ExecSessionImpl::PushStdinEof() {
  std::lock_guard lock(mu_);
  if (stdin_eof_ || gone_) return;
  stdin_eof_ = true;
  input_.push_back(ExecInput{ExecInput::Kind::kStdinEof, {}, {}});
  cv_.notify_all();
}

void ExecSessionImpl::PushResize(TerminalSize size) {
  std::lock_guard lock(mu_);
  if (gone_) return;
  input_.push_back(ExecInput{ExecInput::Kind::kResize, {}, size});
  cv_.notify_all();
}

void ExecSessionImpl::SetGone() {
  std::lock_guard lock(mu_);
  gone_ = true;
  cv_.notify_all();
}

ExecInput ExecSessionImpl::ReadInput(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return gone_ || !input_.empty(); });
  if (!input_.empty()) {
    ExecInput in = std::move(input_.front());
    input_.pop_front();
    return in;
  }
  if (gone_) return ExecInput{ExecInput::Kind::kGone, {}, {}};
  return ExecInput{ExecInput::Kind::kTimeout, {}, {}};
}

bool ExecSessionImpl::WriteStdout(std::string_view data) {
  if (!request_.with_stdout || Cancelled()) return false;
  return data.empty() || send_(kStdout, data);
}

bool ExecSessionImpl::WriteStderr(std::string_view data) {
  if (request_.tty) return WriteStdout(data);
  if (!request_.with_stderr || Cancelled()) return false;
  return data.empty() || send_(kStderr, data);
}

bool ExecSessionImpl::Cancelled() const {
  std::lock_guard lock(mu_);
  return gone_;
}

}  // namespace hyperslice::runners::kubeletapi::internal
