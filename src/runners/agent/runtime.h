// The OCI runtime (runc, or crun where it works) driven through its CLI, and the per-container
// shim that survives the agent: the shim is the containers' subreaper, so it gets their exit
// status; it writes their output to the log file in the kubelet's CRI format and records start
// and exit in files the agent reads, after a restart too.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "src/base/command.h"
#include "src/base/result.h"

namespace hyperslice::runners::agent {

struct RuntimeState {
  std::string status;  // created | running | paused | stopped
  int pid = 0;
};

// Files of one container attempt under its directory (see shim.cc).
struct AttemptFiles {
  static std::string Log(const std::string& dir, int attempt);
  static std::string Started(const std::string& dir, int attempt);
  static std::string Exit(const std::string& dir, int attempt);
};

struct ExitRecord {
  int code = 0;
  int signal = 0;
  std::string reason;  // Completed | Error | StartError
  std::string message;
  int64_t finished_unix = 0;
};
struct StartRecord {
  int64_t started_unix = 0;
  double runtime_ms = 0;  // runc create + start, as the shim measured it
};
std::optional<ExitRecord> ReadExit(const std::string& dir, int attempt);
std::optional<StartRecord> ReadStarted(const std::string& dir, int attempt);

// Thread-safe (each call runs the runtime binary).
class Runtime {
 public:
  // `root`: the runtime's state directory (runc --root), so `list` shows only our containers.
  Runtime(std::string binary, std::string root)
      : binary_(std::move(binary)), root_(std::move(root)) {}
  // nullopt when the runtime does not know the container.
  Result<std::optional<RuntimeState>> State(const std::string& id) const;
  Result<std::vector<std::string>> List() const;
  Status Kill(const std::string& id, const std::string& signal) const;
  // `delete --force`: kills what is left and removes the runtime's state and cgroups.
  Status Delete(const std::string& id) const;
  // argv for `exec` of `command` in container `id`; `tty`: with a new terminal (runc's
  // foreground mode copies between it and runc's own stdio, which must then be a terminal).
  std::vector<std::string> ExecArgv(const std::string& id, const std::vector<std::string>& command,
                                    bool tty) const;
  const std::string& binary() const { return binary_; }
  const std::string& root() const { return root_; }

 private:
  CommandResult Run(std::vector<std::string> args) const;
  std::string binary_;
  std::string root_;
};

struct ShimOptions {
  std::string runtime;  // binary
  std::string root;     // runtime --root
  std::string id;
  std::string bundle;
  std::string dir;  // the container's directory (logs, start and exit records)
  int attempt = 0;
};
// The shim's main (`hyperslice runner-agent shim ...`): creates and starts the container, copies
// its output into the log until it exits, records the exit. Returns the process exit code.
int RunShim(const ShimOptions& options);
// Starts the shim detached (own session, stdio on /dev/null) from `shim_argv` + options.
Status SpawnShim(const std::vector<std::string>& shim_argv, const ShimOptions& options);

}  // namespace hyperslice::runners::agent
