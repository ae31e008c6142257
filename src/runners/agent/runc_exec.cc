// Exec in a runc container (runc_runtime.h): `runc exec` with pipes, or with a terminal in
// runc's foreground mode.
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "src/runners/agent/child_stdio.h"
#include "src/runners/agent/runc_runtime.h"

namespace hyperslice::runners::agent {

extern "C" char** environ;  // NOLINT(readability-redundant-declaration): POSIX leaves it undeclared

namespace v1 = ::hyperslice::runners::v1;

namespace {

// Writes all of `data` to `fd` (a pipe or a terminal's master); false when it is closed.
bool WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Starts the runtime's `args` with these descriptors as its stdin, stdout, stderr. Returns its
// pid, or the errno of posix_spawn as a negative number.
pid_t SpawnRuntime(std::vector<std::string> args, int in, int out, int err) {
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ChildStdio stdio;
  stdio.Dup(in, STDIN_FILENO).Dup(out, STDOUT_FILENO).Dup(err, STDERR_FILENO);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], stdio.StdioOnly(), nullptr, argv.data(), environ);
  return rc == 0 ? pid : -rc;
}

// Exec with a terminal (kubectl exec -it): runc's foreground mode with a new terminal — runc
// makes the container's pty and copies between it and its own stdio, which is the slave of a pty
// the agent holds, so the client's bytes go to our master and the command's come back from it.
// (runc takes --console-socket only with --detach, and a detached exec's exit status goes to no
// process of ours: foreground runc exits with the command's status.) Resizes set our pty's size
// and SIGWINCH tells runc to copy it to the container's. stdout only: a terminal merges stderr.
grpc::Status ServeTtyExec(const Runtime& runtime, const std::string& id,
                          const std::vector<std::string>& command, grpc::ServerContext* ctx,
                          grpc::ServerReaderWriter<v1::ExecOutput, v1::ExecInput>* stream) {
  int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) {
    if (master >= 0) ::close(master);
    return ExecFailed(stream, "cannot open a terminal: " + std::string(std::strerror(errno)));
  }
  std::array<char, 128> name{};
  int slave = ::ptsname_r(master, name.data(), name.size()) == 0
                  ? ::open(name.data(), O_RDWR | O_NOCTTY | O_CLOEXEC)
                  : -1;
  if (slave < 0) {
    ::close(master);
    return ExecFailed(stream,
                      "cannot open the terminal's slave: " + std::string(std::strerror(errno)));
  }
  winsize ws{};
  ws.ws_row = 24;
  ws.ws_col = 80;
  ::ioctl(master, TIOCSWINSZ, &ws);
  pid_t pid = SpawnRuntime(runtime.ExecArgv(id, command, /*tty=*/true), slave, slave, slave);
  ::close(slave);
  if (pid < 0) {
    ::close(master);
    return ExecFailed(stream, "cannot run the runtime: " + std::string(std::strerror(-pid)));
  }
  std::atomic<bool> finished{false};
  std::thread input([&] {
    v1::ExecInput msg;
    while (!finished && stream->Read(&msg)) {
      if (msg.has_stdin()) {
        if (!WriteAll(master, msg.stdin())) break;
      } else if (msg.has_resize() && msg.resize().width() > 0 && msg.resize().height() > 0) {
        winsize size{};
        size.ws_col = static_cast<unsigned short>(msg.resize().width());
        size.ws_row = static_cast<unsigned short>(msg.resize().height());
        ::ioctl(master, TIOCSWINSZ, &size);
        ::kill(pid, SIGWINCH);  // runc resizes the container's terminal on it
      } else if (msg.has_close_stdin() && msg.close_stdin()) {
        (void)WriteAll(master, "\x04");  // end of input, as a terminal says it
      }
    }
  });
  std::array<char, 32768> buf{};
  int status = 0;
  bool exited = false;
  // Until the terminal hangs up (EIO once no process holds its slave: runc has exited) or runc
  // has exited and nothing more comes.
  while (true) {
    pollfd pfd{master, POLLIN, 0};
    int n = ::poll(&pfd, 1, exited ? 50 : 200);
    if (n < 0 && errno != EINTR) break;
    if (ctx->IsCancelled() && !exited) ::kill(pid, SIGKILL);
    if (n > 0) {
      ssize_t got = ::read(master, buf.data(), buf.size());
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      v1::ExecOutput o;
      o.set_stdout(std::string(buf.data(), static_cast<size_t>(got)));
      stream->Write(o);
      continue;
    }
    if (exited) break;
    exited = ::waitpid(pid, &status, WNOHANG) == pid;
  }
  while (!exited && ::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  finished = true;
  v1::ExecOutput exit;
  exit.mutable_exit()->set_code(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  stream->Write(exit);
  // A client that never half-closes would keep Read() blocked: end the call for it.
  ctx->TryCancel();
  input.join();
  ::close(master);
  return grpc::Status::OK;
}

}  // namespace

// Exec: `runtime exec` with pipes; output streamed as it comes, the exit code last.
grpc::Status ServeRuncExec(const Runtime& runtime, const std::string& id,
                           const v1::ExecInput::ExecStart& start, grpc::ServerContext* ctx,
                           grpc::ServerReaderWriter<v1::ExecOutput, v1::ExecInput>* stream) {
  if (start.tty()) {
    return ServeTtyExec(runtime, id, {start.command().begin(), start.command().end()}, ctx, stream);
  }
  std::array<int, 2> in{-1, -1}, out{-1, -1}, err{-1, -1};
  if (::pipe2(in.data(), O_CLOEXEC) != 0 || ::pipe2(out.data(), O_CLOEXEC) != 0 ||
      ::pipe2(err.data(), O_CLOEXEC) != 0) {
    return {grpc::StatusCode::INTERNAL, "cannot create pipes"};
  }
  pid_t pid = SpawnRuntime(
      runtime.ExecArgv(id, {start.command().begin(), start.command().end()}, /*tty=*/false), in[0],
      out[1], err[1]);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    return ExecFailed(stream, "cannot run the runtime: " + std::string(std::strerror(-pid)));
  }
  // stdin from the client on its own thread (the only reader of the stream); this thread is the
  // only writer.
  std::atomic<bool> finished{false};
  std::thread stdin_pump;
  if (start.stdin()) {
    stdin_pump = std::thread([&, fd = in[1]] {
      v1::ExecInput msg;
      while (!finished && stream->Read(&msg)) {
        if (msg.has_stdin()) {
          (void)WriteAll(fd, msg.stdin());
        } else if (msg.has_close_stdin() && msg.close_stdin()) {
          break;
        }
      }
      ::close(fd);
    });
  } else {
    ::close(in[1]);
  }
  std::array<char, 32768> buf{};
  std::array<pollfd, 2> fds{pollfd{out[0], POLLIN, 0}, pollfd{err[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    if (::poll(fds.data(), fds.size(), 200) < 0 && errno != EINTR) break;
    if (ctx->IsCancelled()) ::kill(pid, SIGKILL);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      ssize_t n = ::read(fds[i].fd, buf.data(), buf.size());
      if (n > 0) {
        v1::ExecOutput o;
        if (i == 0) {
          o.set_stdout(std::string(buf.data(), static_cast<size_t>(n)));
        } else {
          o.set_stderr(std::string(buf.data(), static_cast<size_t>(n)));
        }
        stream->Write(o);
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  finished = true;
  v1::ExecOutput exit;
  exit.mutable_exit()->set_code(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  stream->Write(exit);
  if (stdin_pump.joinable()) {
    // A client that never half-closes would keep Read() blocked: end the call for it.
    ctx->TryCancel();
    stdin_pump.join();
  }
  return grpc::Status::OK;
}

}  // namespace hyperslice::runners::agent
