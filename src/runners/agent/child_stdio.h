// ChildStdio: the posix_spawn file actions of a process the agent starts (the container shim,
// the runtime, `runc exec`): its stdin, stdout and stderr as the caller sets them, in that order,
// and no other descriptor. The shim outlives the agent and the runtime starts the container's
// init: a socket or pipe of the agent's inherited by them would stay open with them (a listener
// still bound after the agent's restart).
#pragma once

#include <spawn.h>
#include <sys/types.h>

#include <string>

namespace hyperslice::runners::agent {

class ChildStdio {
 public:
  ChildStdio() { posix_spawn_file_actions_init(&actions_); }
  ~ChildStdio() { posix_spawn_file_actions_destroy(&actions_); }
  ChildStdio(const ChildStdio&) = delete;
  ChildStdio& operator=(const ChildStdio&) = delete;

  // The child's descriptor `target` (0, 1 or 2) is a copy of our `fd`.
  ChildStdio& Dup(int fd, int target) {
    posix_spawn_file_actions_adddup2(&actions_, fd, target);
    return *this;
  }
  // The child's descriptor `target` is `path` opened with `flags` (glibc copies the path).
  ChildStdio& Open(int target, const std::string& path, int flags, mode_t mode = 0) {
    posix_spawn_file_actions_addopen(&actions_, target, path.c_str(), flags, mode);
    return *this;
  }
  // For posix_spawn, once the three are set: every descriptor above stderr is closed last.
  const posix_spawn_file_actions_t* StdioOnly() {
    if (!closed_) posix_spawn_file_actions_addclosefrom_np(&actions_, 3);
    closed_ = true;
    return &actions_;
  }

 private:
  posix_spawn_file_actions_t actions_;
  bool closed_ = false;
};

}  // namespace hyperslice::runners::agent
