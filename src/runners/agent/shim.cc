// The container shim (runtime.h). One process per container attempt, started by the agent and
// independent of it. What it does is what containerd's shim does and no library here offers:
// subreaper for the container's init (so its exit status is ours to read, not init's), the
// container's stdout/stderr copied line by line into the kubelet's CRI log format, and the start
// and exit written to files — the record an agent restarted later reads.
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <boost/json.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>

#include "src/runners/agent/child_stdio.h"
#include "src/runners/agent/runtime.h"

namespace hyperslice::runners::agent {

extern "C" char** environ;  // NOLINT(readability-redundant-declaration): POSIX leaves it undeclared

namespace {

using Clock = std::chrono::system_clock;

std::string Rfc3339Nano(Clock::time_point t) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(ns % 1000000000));  // NOLINT(google-runtime-int)
  return buf;
}

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

void WriteJsonAtomic(const std::string& path, const boost::json::object& o) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << boost::json::serialize(o);
  }
  std::rename(tmp.c_str(), path.c_str());
}

// One output stream of the container: bytes in, CRI lines out ("<time> <stream> F|P <text>").
// A line longer than 16 KiB is cut into partial ("P") records, as the kubelet does.
struct LogStream {
  const char* name;
  int fd;
  std::string pending;
  void Feed(int log_fd, const char* data, size_t n) {
    pending.append(data, n);
    size_t pos = 0;
    while (true) {
      size_t nl = pending.find('\n', pos);
      if (nl == std::string::npos) break;
      Emit(log_fd, pending.substr(pos, nl - pos), 'F');
      pos = nl + 1;
    }
    pending.erase(0, pos);
    while (pending.size() > 16384) {
      Emit(log_fd, pending.substr(0, 16384), 'P');
      pending.erase(0, 16384);
    }
  }
  void Flush(int log_fd) {
    if (!pending.empty()) Emit(log_fd, pending, 'F');
    pending.clear();
  }
  void Emit(int log_fd, const std::string& text, char tag) const {
    WriteAll(log_fd, Rfc3339Nano(Clock::now()) + " " + name + " " + tag + " " + text + "\n");
  }
};

pid_t Spawn(const std::vector<std::string>& args, int out_fd, int err_fd) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  argv.reserve(copy.size() + 1);
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The runtime (and the container's init it starts) gets stdio only.
  ChildStdio stdio;
  stdio.Open(STDIN_FILENO, "/dev/null", O_RDONLY)
      .Dup(out_fd, STDOUT_FILENO)
      .Dup(err_fd, STDERR_FILENO);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], stdio.StdioOnly(), nullptr, argv.data(), environ);
  return rc == 0 ? pid : -1;
}

int Wait(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int RunShim(const ShimOptions& o) {
  // Detach from the agent: the parent returns at once (SpawnShim waits for it).
  pid_t child = ::fork();
  if (child < 0) return 1;
  if (child > 0) return 0;
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  {
    std::ofstream pidf(o.dir + "/shim.pid", std::ios::trunc);
    pidf << ::getpid();
  }
  const std::string log_path = AttemptFiles::Log(o.dir, o.attempt);
  int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  std::array<int, 2> out{}, err{};
  if (log_fd < 0 || ::pipe2(out.data(), O_CLOEXEC) != 0 || ::pipe2(err.data(), O_CLOEXEC) != 0) {
    return 1;
  }
  LogStream streams[2] = {{"stdout", out[0], {}}, {"stderr", err[0], {}}};
  auto exit_record = [&](int code, int sig, const std::string& reason, const std::string& msg) {
    WriteJsonAtomic(AttemptFiles::Exit(o.dir, o.attempt),
                    {{"code", code},
                     {"signal", sig},
                     {"reason", reason},
                     {"message", msg},
                     {"finished_unix", std::chrono::duration_cast<std::chrono::seconds>(
                                           Clock::now().time_since_epoch())
                                           .count()}});
  };
  const std::vector<std::string> base = {o.runtime, "--root", o.root};
  auto t0 = std::chrono::steady_clock::now();
  const std::string pid_file = o.dir + "/container.pid";
  std::vector<std::string> create = base;
  create.insert(create.end(), {"create", "--bundle", o.bundle, "--pid-file", pid_file, o.id});
  // Runtime errors land in the container's stderr stream: the user sees why it did not start.
  pid_t runc = Spawn(create, out[1], err[1]);
  ::close(out[1]);
  ::close(err[1]);
  int create_rc = runc > 0 ? Wait(runc) : 127;
  std::array<char, 65536> buf{};
  auto drain_now = [&] {
    for (auto& s : streams) {
      if (s.fd < 0) continue;
      ::fcntl(s.fd, F_SETFL, O_NONBLOCK);
      ssize_t n = 0;
      while ((n = ::read(s.fd, buf.data(), buf.size())) > 0) {
        s.Feed(log_fd, buf.data(), static_cast<size_t>(n));
      }
      s.Flush(log_fd);
    }
  };
  if (create_rc != 0) {
    drain_now();
    exit_record(128, 0, "StartError", "runtime create exited " + std::to_string(create_rc));
    return 0;
  }
  pid_t container = 0;
  {
    std::ifstream pf(pid_file);
    pf >> container;
  }
  std::vector<std::string> start = base;
  start.insert(start.end(), {"start", o.id});
  int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  pid_t starter = Spawn(start, devnull, log_fd);
  int start_rc = starter > 0 ? Wait(starter) : 127;
  ::close(devnull);
  double runtime_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (start_rc != 0) {
    if (container > 0) ::kill(container, SIGKILL);
    drain_now();
    exit_record(128, 0, "StartError", "runtime start exited " + std::to_string(start_rc));
    return 0;
  }
  WriteJsonAtomic(
      AttemptFiles::Started(o.dir, o.attempt),
      {{"started_unix",
        std::chrono::duration_cast<std::chrono::seconds>(Clock::now().time_since_epoch()).count()},
       {"runtime_ms", runtime_ms}});
  bool reaped = false;
  int code = 0, sig = 0;
  std::chrono::steady_clock::time_point reaped_at;
  while (true) {
    std::array<pollfd, 2> fds{};
    nfds_t n = 0;
    for (auto& s : streams) {
      if (s.fd >= 0) fds[n++] = pollfd{s.fd, POLLIN, 0};
    }
    if (n == 0 && reaped) break;
    if (reaped && std::chrono::steady_clock::now() - reaped_at > std::chrono::seconds(2)) break;
    if (n > 0)
      ::poll(fds.data(), n, 100);
    else
      ::usleep(100000);
    for (nfds_t i = 0; i < n; ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      for (auto& s : streams) {
        if (s.fd != fds[i].fd) continue;
        ssize_t r = ::read(s.fd, buf.data(), buf.size());
        if (r > 0) {
          s.Feed(log_fd, buf.data(), static_cast<size_t>(r));
        } else if (r == 0 || errno != EINTR) {
          s.Flush(log_fd);
          ::close(s.fd);
          s.fd = -1;
        }
      }
    }
    int status = 0;
    pid_t p = 0;
    while ((p = ::waitpid(-1, &status, WNOHANG)) > 0) {
      if (p == container && !reaped) {
        reaped = true;
        reaped_at = std::chrono::steady_clock::now();
        if (WIFEXITED(status)) {
          code = WEXITSTATUS(status);
        } else if (WIFSIGNALED(status)) {
          sig = WTERMSIG(status);
          code = 128 + sig;
        }
      }
    }
    if (p < 0 && errno == ECHILD && !reaped) {
      // The container was not ours to reap (e.g. reparented elsewhere): its status is unknown.
      reaped = true;
      reaped_at = std::chrono::steady_clock::now();
      code = 255;
    }
  }
  drain_now();
  exit_record(code, sig, code == 0 ? "Completed" : "Error", "");
  ::close(log_fd);
  return 0;
}

}  // namespace hyperslice::runners::agent
