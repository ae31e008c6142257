#include "test/testenv/child_process.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/testenv/eventually.h"
#include "test/testenv/files.h"

namespace hyperslice::testenv {

void ChildProcess::Start(std::vector<std::string> argv, std::string log_path) {
  if (pid_ > 0) return;
  argv_ = std::move(argv);
  log_path_ = std::move(log_path);
  Start();
}

void ChildProcess::Start() {
  if (pid_ > 0 || argv_.empty()) return;
  std::vector<std::string> argv = argv_;
  pid_ = fork();
  if (pid_ == 0) {
    int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  ++starts_;
}

int ChildProcess::Stop(int signal) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::optional<int> ChildProcess::Wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  int status = 0;
  bool exited = Eventually([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout,
                           std::chrono::milliseconds(50));
  if (!exited) return std::nullopt;
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool ChildProcess::Alive() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

std::string ChildProcess::Log() const { return ReadFile(log_path_); }

std::string ChildProcess::Tail(size_t n) const {
  std::string all = Log();
  size_t pos = all.size();
  for (size_t i = 0; i <= n && pos != std::string::npos && pos > 0; ++i) {
    pos = all.rfind('\n', pos - 1);
  }
  return pos == std::string::npos ? all : all.substr(pos + 1);
}

}  // namespace hyperslice::testenv
