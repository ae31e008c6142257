// Running a shell command line from a test (the startup script, gcloud-like pipelines). Tests that
// run one program with arguments use RunCommand (command.h), which needs no quoting. Header-only.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "test/testenv/files.h"

namespace hyperslice::testenv {

// Runs `cmd` with /bin/sh; returns {exit code (-1 when it did not exit normally), output}. The
// output is stdout and stderr interleaved as written, or stdout only (stderr then goes to the
// test's own) when `with_stderr` is false.
inline std::pair<int, std::string> Shell(const std::string& cmd, bool with_stderr = true) {
  std::string out;
  FILE* p = popen((with_stderr ? cmd + " 2>&1" : cmd).c_str(), "r");
  if (p == nullptr) return {-1, out};
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int rc = pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

// A command line's exit code (-1 when it did not exit normally), stdout and stderr apart.
struct ShellRun {
  int exit_code = -1;
  std::string out, err;
};

// Runs `cmd` with /bin/sh, its stdout and stderr kept apart through <dir>/out and <dir>/err (a CLI
// that prints JSON on stdout and its complaints on stderr); `dir` must exist.
inline ShellRun ShellApart(const std::string& cmd, const std::string& dir) {
  int rc = std::system((cmd + " >'" + dir + "/out' 2>'" + dir + "/err'").c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, ReadFile(dir + "/out"), ReadFile(dir + "/err")};
}

}  // namespace hyperslice::testenv
