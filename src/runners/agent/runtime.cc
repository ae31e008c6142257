// Runtime CLI calls and the shim's files (runtime.h).
#include "src/runners/agent/runtime.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "src/runners/agent/child_stdio.h"

namespace hyperslice::runners::agent {
namespace json = boost::json;

extern "C" char** environ;  // NOLINT(readability-redundant-declaration): POSIX leaves it undeclared

std::string AttemptFiles::Log(const std::string& dir, int attempt) {
  return dir + "/" + std::to_string(attempt) + ".log";
}
std::string AttemptFiles::Started(const std::string& dir, int attempt) {
  return dir + "/started." + std::to_string(attempt);
}
std::string AttemptFiles::Exit(const std::string& dir, int attempt) {
  return dir + "/exit." + std::to_string(attempt);
}

namespace {
std::optional<json::object> ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  boost::system::error_code ec;
  json::value v = json::parse(ss.str(), ec);
  if (ec || !v.is_object()) return std::nullopt;
  return v.as_object();
}
int64_t Int(const json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  return (v != nullptr && v->is_int64()) ? v->as_int64() : 0;
}
std::string Str(const json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  return (v != nullptr && v->is_string()) ? std::string(v->as_string()) : "";
}
}  // namespace

std::optional<ExitRecord> ReadExit(const std::string& dir, int attempt) {
  auto o = ReadJson(AttemptFiles::Exit(dir, attempt));
  if (!o) return std::nullopt;
  ExitRecord r;
  r.code = static_cast<int>(Int(*o, "code"));
  r.signal = static_cast<int>(Int(*o, "signal"));
  r.reason = Str(*o, "reason");
  r.message = Str(*o, "message");
  r.finished_unix = Int(*o, "finished_unix");
  return r;
}

std::optional<StartRecord> ReadStarted(const std::string& dir, int attempt) {
  auto o = ReadJson(AttemptFiles::Started(dir, attempt));
  if (!o) return std::nullopt;
  StartRecord r;
  r.started_unix = Int(*o, "started_unix");
  if (const auto* v = o->if_contains("runtime_ms"); v && v->is_double())
    r.runtime_ms = v->as_double();
  return r;
}

CommandResult Runtime::Run(std::vector<std::string> args) const {
  std::vector<std::string> argv = {binary_, "--root", root_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

Result<std::optional<RuntimeState>> Runtime::State(const std::string& id) const {
  auto r = Run({"state", id});
  if (r.exit_code != 0) {
    if (r.errors.find("does not exist") != std::string::npos ||
        r.errors.find("not exist") != std::string::npos) {
      return std::optional<RuntimeState>();
    }
    return Error::Make(Error::Code::kUnavailable, "runtime state " + id + ": " + r.errors);
  }
  boost::system::error_code ec;
  json::value v = json::parse(r.output, ec);
  if (ec || !v.is_object()) {
    return Error::Make(Error::Code::kInternal, "runtime state " + id + " is not JSON");
  }
  RuntimeState s;
  s.status = Str(v.as_object(), "status");
  s.pid = static_cast<int>(Int(v.as_object(), "pid"));
  return std::optional<RuntimeState>(s);
}

Result<std::vector<std::string>> Runtime::List() const {
  auto r = Run({"list", "--format", "json"});
  if (r.exit_code != 0) return Error::Make(Error::Code::kUnavailable, "runtime list: " + r.errors);
  std::vector<std::string> ids;
  boost::system::error_code ec;
  json::value v = json::parse(r.output, ec);
  if (ec || !v.is_array()) return ids;  // runc prints "null" when there is none
  for (const auto& c : v.as_array()) {
    if (c.is_object()) ids.push_back(Str(c.as_object(), "id"));
  }
  return ids;
}

Status Runtime::Kill(const std::string& id, const std::string& signal) const {
  auto r = Run({"kill", id, signal});
  if (r.exit_code != 0) {
    return Error::Make(Error::Code::kUnavailable, "runtime kill " + id + ": " + r.errors);
  }
  return OkStatus();
}

Status Runtime::Delete(const std::string& id) const {
  auto r = Run({"delete", "--force", id});
  if (r.exit_code != 0 && r.errors.find("not exist") == std::string::npos) {
    return Error::Make(Error::Code::kUnavailable, "runtime delete " + id + ": " + r.errors);
  }
  return OkStatus();
}

std::vector<std::string> Runtime::ExecArgv(const std::string& id,
                                           const std::vector<std::string>& command,
                                           bool tty) const {
  std::vector<std::string> argv = {binary_, "--root", root_, "exec"};
  if (tty) argv.emplace_back("--tty");
  argv.push_back(id);
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

Status SpawnShim(const std::vector<std::string>& shim_argv, const ShimOptions& o) {
  std::vector<std::string> args = shim_argv;
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, std::string>>{{"--runtime", o.runtime},
                                                        {"--root", o.root},
                                                        {"--id", o.id},
                                                        {"--bundle", o.bundle},
                                                        {"--dir", o.dir},
                                                        {"--attempt", std::to_string(o.attempt)}}) {
    args.push_back(flag);
    args.push_back(value);
  }
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string shim_log = o.dir + "/shim.log";
  ChildStdio stdio;  // the shim outlives the agent: stdio only
  stdio.Open(STDIN_FILENO, "/dev/null", O_RDONLY)
      .Open(STDOUT_FILENO, shim_log, O_WRONLY | O_CREAT | O_APPEND, 0600)
      .Dup(STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own session: the shim outlives the agent (kill -9, restart) and keeps no controlling
  // terminal. The agent reaps it while it runs; after an agent restart init does.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], stdio.StdioOnly(), &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return Error::Make(Error::Code::kInternal,
                       "cannot start the container shim " + args[0] + ": " + std::strerror(rc));
  }
  // The shim forks at once and this first process exits: its child belongs to init, so it is
  // nobody's zombie whether or not the agent is still there.
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Error::Make(Error::Code::kInternal,
                       "the container shim failed to start; see " + shim_log);
  }
  return OkStatus();
}

}  // namespace hyperslice::runners::agent
