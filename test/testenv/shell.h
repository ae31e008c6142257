// Running a shell command line from a test (the startup script, gcloud-like pipelines). Tests that
// run one program with arguments use RunCommand (command.h), which needs no quoting. Header-only.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>

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

}  // namespace hyperslice::testenv
