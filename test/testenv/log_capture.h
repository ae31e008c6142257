// Every log line of the test process (the product's code in-process, simulators, machines) at
// debug level, kept for the test to scan (for a token that must never be logged). Header-only.
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/log.h"

namespace hyperslice::testenv {

class LogCapture {
 public:
  LogCapture() {
    log::SetLevel(log::Level::kDebug);
    log::SetSink([this](std::string_view line) {
      std::lock_guard lock(mu_);
      lines_.emplace_back(line);
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

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

}  // namespace hyperslice::testenv
