#include "src/localcluster/internal/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

namespace hyperslice::localcluster::internal {
namespace {

// Runs fork() on a thread that never exits (see process.h for why).
class Spawner {
 public:
  static Spawner& Get() {
    // Leaked on purpose: the thread must outlive every static destructor that may stop children.
    static Spawner* spawner = new Spawner();
    return *spawner;
  }

  Result<pid_t> Spawn(const ProcessSpec& spec) {
    std::packaged_task<Result<pid_t>()> task([&spec] { return ForkExec(spec); });
    auto done = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
    return done.get();
  }

 private:
  Spawner() {
    std::thread([this] { Loop(); }).detach();
  }

  void Loop() {
    for (;;) {
      std::packaged_task<Result<pid_t>()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  static Result<pid_t> ForkExec(const ProcessSpec& spec) {
    // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
    std::vector<std::string> argv_store;
    argv_store.push_back(spec.path);
    argv_store.insert(argv_store.end(), spec.args.begin(), spec.args.end());
    std::vector<char*> argv;
    argv.reserve(argv_store.size() + 1);
    for (auto& a : argv_store) argv.push_back(a.data());
    argv.push_back(nullptr);

    int log_fd = open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0)
      return Error::Make(Error::Code::kInternal,
                         "opening " + spec.log_path + ": " + std::strerror(errno));
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
      int err = errno;
      close(log_fd);
      if (null_fd >= 0) close(null_fd);
      return Error::Make(Error::Code::kInternal, std::string("fork: ") + std::strerror(err));
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the owner died before prctl took effect
      setpgid(0, 0);
      sigset_t all;
      sigemptyset(&all);
      sigprocmask(SIG_SETMASK, &all, nullptr);
      if (null_fd >= 0) dup2(null_fd, 0);
      dup2(log_fd, 1);
      dup2(log_fd, 2);
      // Descriptors of other threads (sockets, pipes) must not leak into the child.
      if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
        for (int fd = 3; fd < 4096; ++fd) close(fd);
      }
      execv(argv[0], argv.data());
      const char msg[] = "exec failed\n";
      ssize_t ignored = write(2, msg, sizeof msg - 1);
      (void)ignored;
      _exit(127);
    }
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
    setpgid(pid, pid);  // also from the parent, so killpg works even before the child ran
    return pid;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<Result<pid_t>()>> queue_;
};

}  // namespace

Process::~Process() {
  if (pid_ > 0) Stop(std::chrono::seconds(5));
}

Status Process::Start(const ProcessSpec& spec) {
  if (pid_ > 0 && Running())
    return Error::Make(Error::Code::kInternal, spec.path + " is already running");
  if (access(spec.path.c_str(), X_OK) != 0)
    return Error::Make(Error::Code::kNotFound, spec.path + " is not an executable file");
  spec_ = spec;
  exited_ = false;
  wait_status_ = 0;
  HS_ASSIGN_OR_RETURN(pid_, Spawner::Get().Spawn(spec));
  return OkStatus();
}

bool Process::Running() {
  if (pid_ <= 0 || exited_) return false;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_ || (r < 0 && errno == ECHILD)) {
    exited_ = true;
    wait_status_ = status;
    return false;
  }
  return true;
}

void Process::Stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return;
  if (Running()) {
    killpg(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + grace;
    while (Running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (Running()) {
      killpg(pid_, SIGKILL);
      int status = 0;
      if (waitpid(pid_, &status, 0) == pid_) wait_status_ = status;
      exited_ = true;
    }
  }
  pid_ = -1;
}

std::string Process::ExitDescription() const {
  if (!exited_) return "running";
  if (WIFEXITED(wait_status_)) return "exit " + std::to_string(WEXITSTATUS(wait_status_));
  if (WIFSIGNALED(wait_status_)) return "signal " + std::to_string(WTERMSIG(wait_status_));
  return "stopped";
}

std::string Process::LogTail(int lines) const { return TailFile(spec_.log_path, lines); }

std::string TailFile(const std::string& path, int lines) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::deque<std::string> last;
  std::string line;
  while (std::getline(in, line)) {
    last.push_back(std::move(line));
    if (static_cast<int>(last.size()) > lines) last.pop_front();
  }
  std::ostringstream out;
  for (const auto& l : last) out << l << '\n';
  return out.str();
}

}  // namespace hyperslice::localcluster::internal
