// A program under test as a child process (`hyperslice operator`, as deployed), its stdout and
// stderr appended to one log file over restarts, so a test can kill it at any point and read what
// it said. One instead of a copy per e2e harness and benchmark.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <optional>
#include <string>
#include <vector>

namespace hyperslice::testenv {

class ChildProcess {
 public:
  ChildProcess() = default;
  // What Start() runs.
  ChildProcess(std::vector<std::string> argv, std::string log_path)
      : argv_(std::move(argv)), log_path_(std::move(log_path)) {}
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { Kill(); }

  // Runs argv[0] with `argv`, its output appended to `log_path`; later Start() calls run them
  // again. Nothing while it runs.
  void Start(std::vector<std::string> argv, std::string log_path);
  void Start();
  // Sends `signal` and waits for the exit; its exit code, -1 when it died of a signal or was not
  // running.
  int Stop(int signal);
  // SIGKILL: no shutdown path runs (no status written, no connection closed politely).
  void Kill() { (void)Stop(SIGKILL); }
  // Waits up to `timeout` for the child to exit by itself: its exit code (-1 when it died of a
  // signal or was not running), or nullopt while it still runs.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // True while the child has not exited by itself.
  bool Alive();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // How often Start started it.
  int starts() const { return starts_; }
  // The whole log, and its last `n` lines.
  std::string Log() const;
  std::string Tail(size_t n = 40) const;

 private:
  std::vector<std::string> argv_;
  std::string log_path_;
  pid_t pid_ = -1;
  int starts_ = 0;
};

}  // namespace hyperslice::testenv
