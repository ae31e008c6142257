#include "test/testenv/runner_agent.h"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <boost/json.hpp>

#include "src/base/command.h"
#include "src/base/json.h"
#include "test/testenv/files.h"

namespace hyperslice::testenv {

namespace fs = std::filesystem;
namespace json = boost::json;

RunnerAgent::RunnerAgent(std::string name, const std::string& ip, const std::string& dir,
                         StopWith stop)
    : name_(std::move(name)), stop_(stop) {
  state_dir_ = dir + "/" + name_;
  fs::create_directories(state_dir_);
  token_file_ = dir + "/" + name_ + ".token";
  log_file_ = dir + "/" + name_ + ".log";
  // Port 0 when none is free: the agent's start then fails visibly.
  auto port = FreeLoopbackPort(ip);
  address_ = ip + ":" + std::to_string(port.ok() ? *port : 0);
}

RunnerAgent::~RunnerAgent() {
  if (stop_ == StopWith::kSigterm) {
    Terminate();
  } else {
    Kill9();
  }
}

void RunnerAgent::SetToken(const std::string& token) const {
  std::ofstream(token_file_) << token << "\n";
}

bool RunnerAgent::Start(int link_port, const std::string& ca_file,
                        const std::vector<std::string>& flags) {
  std::vector<std::string> args = {HS_BINARY,
                                   "runner-agent",
                                   "--name",
                                   name_,
                                   "--state-dir",
                                   state_dir_,
                                   "--listen",
                                   address_,
                                   "--link-endpoint",
                                   "127.0.0.1:" + std::to_string(link_port),
                                   "--join-token-file",
                                   token_file_,
                                   "--link-ca-file",
                                   ca_file};
  args.insert(args.end(), flags.begin(), flags.end());
  auto pid = StartBackground(args, log_file_);
  if (!pid.ok()) return false;
  pid_ = *pid;
  return true;
}

void RunnerAgent::Kill9() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void RunnerAgent::Terminate() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) != 0) {  // reaped (or not ours): nothing to kill
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  Kill9();
}

std::string RunnerAgent::Log() const { return ReadFile(log_file_); }

bool RunnerAgent::HoldsPods() const {
  std::error_code ec;
  return fs::exists(state_dir_ + "/pods", ec) && !fs::is_empty(state_dir_ + "/pods", ec);
}

bool RunnerAgent::Exited() {
  if (pid_ <= 0) return true;
  if (::waitpid(pid_, nullptr, WNOHANG) != pid_) return false;
  pid_ = -1;
  return true;
}

std::vector<std::string> RuncContainers(const std::string& root, bool live_only) {
  std::vector<std::string> ids;
  auto r = RunCommand({"runc", "--root", root, "list", "--format", "json"});
  if (r.exit_code != 0) return ids;
  boost::system::error_code ec;
  auto v = json::parse(r.output, ec);
  if (ec || !v.is_array()) return ids;
  for (const auto& c : v.as_array()) {
    if (!c.is_object()) continue;
    if (live_only && jsonfield::StringField(c.as_object(), "status") == "stopped") continue;
    ids.emplace_back(jsonfield::StringField(c.as_object(), "id"));
  }
  return ids;
}

void RemoveMachineRemains(const std::string& state_dir) {
  const std::string root = state_dir + "/runtime";
  for (const auto& id : RuncContainers(root)) {
    (void)RunCommand({"runc", "--root", root, "delete", "--force", id});
  }
  std::error_code ec;
  for (const auto& pod : std::filesystem::directory_iterator(state_dir + "/pods", ec)) {
    (void)RunCommand({"ip", "netns", "delete", "hs-" + pod.path().filename().string()});
  }
}

}  // namespace hyperslice::testenv
