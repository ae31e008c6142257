// src/base/command.h: background children and free loopback ports (used by the local registry,
// `hyperslice dev` and the runner tests).
#include "src/base/command.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace hyperslice {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(StartBackground, WritesBothStreamsToTheLogInItsOwnProcessGroup) {
  char tmpl[] = "/tmp/hs-command-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string log = std::string(tmpl) + "/child.log";
  // The parent blocks SIGTERM here, as a sigwait-ing owner does; the child must not inherit it.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, &old), 0);
  auto pid = StartBackground({"sh", "-c", "echo out; echo err >&2; exec sleep 30"}, log);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(pid.ok()) << pid.error().message;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((Read(log).find("out\n") == std::string::npos ||
          Read(log).find("err\n") == std::string::npos) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string out = Read(log);
  EXPECT_NE(out.find("out\n"), std::string::npos) << out;
  EXPECT_NE(out.find("err\n"), std::string::npos) << out;
  EXPECT_EQ(::getpgid(*pid), *pid) << "not in a process group of its own";
  ASSERT_EQ(::kill(*pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(*pid, &status, 0), *pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "SIGTERM stayed blocked";
  (void)std::system((std::string("rm -rf ") + tmpl).c_str());
}

// A descriptor opened without close-on-exec (as Asio opens its sockets) must not reach the
// child: a long-lived child (a container shim) would keep a listener of the parent's bound.
TEST(RunCommand, TheChildGetsStdioOnly) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);  // no O_CLOEXEC on purpose
  const std::string probe = "/proc/self/fd/" + std::to_string(pipe_fds[1]);
  CommandResult r = RunCommand(
      {"/bin/sh", "-c", "if [ -e " + probe + " ]; then echo inherited; else echo closed; fi"});
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_EQ(r.output, "closed\n");
}

TEST(StartBackground, AMissingProgramIsAnError) {
  auto pid = StartBackground({"/nonexistent/hs-no-such-program"}, "/dev/null");
  EXPECT_FALSE(pid.ok());
  EXPECT_FALSE(StartBackground({}, "/dev/null").ok());
}

TEST(FreeLoopbackPort, GivesABindablePortOnTheAddressAskedFor) {
  for (const char* ip : {"127.0.0.1", "127.0.0.2"}) {
    auto port = FreeLoopbackPort(ip);
    ASSERT_TRUE(port.ok()) << port.error().message;
    EXPECT_GT(*port, 0);
    EXPECT_LT(*port, 65536);
  }
  EXPECT_FALSE(FreeLoopbackPort("not-an-ip").ok());
}

}  // namespace
}  // namespace hyperslice
