// Reading container logs written by the shim in the kubelet's CRI format
// ("<RFC 3339 nano time> <stdout|stderr> <F|P> <text>").
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "src/base/result.h"

namespace hyperslice::runners::agent {

struct LogOptions {
  bool follow = false;
  int64_t tail_lines = -1;  // <0: all
  int64_t since_unix = 0;   // 0: from the start
  bool timestamps = false;  // prefix each line with its time, as `kubectl logs --timestamps`
  int64_t limit_bytes = 0;  // 0: no limit
};

// Sends the log to `sink` (which returns false to stop, e.g. the client went away). With follow,
// keeps reading what is appended until `finished()` is true and the file is read to its end.
Status StreamLog(const std::string& path, const LogOptions& options,
                 const std::function<bool(const std::string&)>& sink,
                 const std::function<bool()>& finished);

}  // namespace hyperslice::runners::agent
