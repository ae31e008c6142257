// Child processes that cannot outlive their owner.
//
// Every child is forked by ONE dedicated spawner thread that lives until the process exits, and
// sets prctl(PR_SET_PDEATHSIG, SIGKILL) before exec. PDEATHSIG fires when the *thread* that forked
// the child exits, not the process; forking from whichever thread called Start() (a gtest worker,
// a short-lived helper thread) would kill the child when that thread ends. With a spawner thread
// that never exits, the signal fires exactly when the owning process dies — including kill -9.
// Each child also runs in its own process group (setpgid), so a terminal's Ctrl-C reaches only
// the owner, which then stops its children in order.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::localcluster::internal {

struct ProcessSpec {
  std::string path;               // absolute path of the executable
  std::vector<std::string> args;  // argv[1..]
  std::string log_path;           // stdout and stderr are appended here
};

// A running child. Not thread-safe; owned by one LocalCluster.
class Process {
 public:
  Process() = default;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();  // Stop() with a short grace period

  Status Start(const ProcessSpec& spec);
  // True while the child has not exited (reaps it when it has).
  bool Running();
  // SIGTERM to its process group, up to `grace` for it to exit, then SIGKILL; always reaps.
  void Stop(std::chrono::milliseconds grace = std::chrono::seconds(10));

  pid_t pid() const { return pid_; }
  const ProcessSpec& spec() const { return spec_; }
  // Human-readable exit description after it stopped ("exit 1", "signal 9").
  std::string ExitDescription() const;
  // The last `lines` lines of its log.
  std::string LogTail(int lines = 30) const;

 private:
  ProcessSpec spec_;
  pid_t pid_ = -1;
  int wait_status_ = 0;
  bool exited_ = false;
};

// Reads the last `lines` lines of a file ("" when it cannot be read).
std::string TailFile(const std::string& path, int lines);

}  // namespace hyperslice::localcluster::internal
