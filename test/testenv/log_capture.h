// Every log line of the test process (the product's code in-process, simulators, machines) at
// debug level, kept for the test to scan (for a token that must never be logged). Header-only.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/log.h"

namespace hyperslice::testenv {

class LogCapture {
 public:
  // `echo`: each line also goes to stderr (a failing test's output shows what happened).
  explicit LogCapture(bool echo = false) {
    log::SetLevel(log::Level::kDebug);
    log::SetSink([this, echo](std::string_view line) {
      std::lock_guard lock(mu_);
      lines_.emplace_back(line);
      if (echo) {
        std::fwrite(line.data(), 1, line.size(), stderr);
        std::fputc('\n', stderr);
      }
    });
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  // Back to the default sink at info level.
  ~LogCapture() {
    log::SetSink(nullptr);
    log::SetLevel(log::Level::kInfo);
  }
  // The lines so far.
  std::vector<std::string> Lines() {
    std::lock_guard lock(mu_);
    return lines_;
  }
  // The lines so far, each ended by a newline.
  std::string Text() {
    std::lock_guard lock(mu_);
    std::string out;
    for (const auto& l : lines_) out.append(l).push_back('\n');
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

}  // namespace hyperslice::testenv
