// What the process benchmarks (tpu_scale_bench, gpu_provisioning_bench) measure of the operator
// they run as a child process and of the calls it makes: its memory and CPU from /proc, counter
// deltas per method, and kube-apiserver's own request counter. Header-only: each benchmark is one
// .cc file (bench/CMakeLists.txt).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "src/kube/client.h"

namespace hyperslice::bench {

// A process's memory (KiB: peak, resident, anonymous, file-backed) and CPU (utime+stime, s).
struct ProcStats {
  int64_t hwm_kib = 0, rss_kib = 0, anon_kib = 0, file_kib = 0;
  double cpu_s = 0;
};

// VmHWM/VmRSS/RssAnon/RssFile of /proc/<pid>/status and utime+stime of /proc/<pid>/stat.
inline ProcStats ReadProc(pid_t pid) {
  ProcStats s;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) s.hwm_kib = std::stoll(line.substr(6));
    if (line.rfind("VmRSS:", 0) == 0) s.rss_kib = std::stoll(line.substr(6));
    if (line.rfind("RssAnon:", 0) == 0) s.anon_kib = std::stoll(line.substr(8));
    if (line.rfind("RssFile:", 0) == 0) s.file_kib = std::stoll(line.substr(8));
  }
  std::ifstream statf("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(statf)), std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis; utime and stime are fields 14 and 15.
  size_t p = stat.rfind(')');
  if (p != std::string::npos) {
    std::istringstream in(stat.substr(p + 2));
    std::string f;
    std::vector<std::string> fields;
    while (in >> f) fields.push_back(f);
    if (fields.size() > 12) {
      auto ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
      s.cpu_s = (std::stod(fields[11]) + std::stod(fields[12])) / ticks;
    }
  }
  return s;
}

inline double Mib(int64_t kib) { return static_cast<double>(kib) / 1024.0; }

inline double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Calls per method (or per "VERB resource").
using Counts = std::map<std::string, int64_t>;

// b - a per key, the keys that changed only.
inline Counts Delta(const Counts& a, const Counts& b) {
  Counts d;
  for (const auto& [k, n] : b) {
    auto it = a.find(k);
    int64_t v = n - (it == a.end() ? 0 : it->second);
    if (v != 0) d[k] = v;
  }
  return d;
}
inline int64_t Sum(const Counts& m) {
  int64_t s = 0;
  for (const auto& [k, n] : m) s += n;
  return s;
}
// The total and each method, also divided by `n` `unit`s ("slice", "claim"); method names padded
// to `width`.
inline void PrintCalls(const char* title, const Counts& d, int n, const char* unit, int width) {
  std::printf("%s: %lld calls, %.2f per %s\n", title, static_cast<long long>(Sum(d)),
              static_cast<double>(Sum(d)) / n, unit);
  for (const auto& [k, v] : d) {
    std::printf("    %-*s %7lld  (%.2f/%s)\n", width, k.c_str(), static_cast<long long>(v),
                static_cast<double>(v) / n, unit);
  }
}

// kube-apiserver's own request counter (apiserver_request_total), summed by "VERB resource[/sub]"
// over codes. It counts every client, the benchmark's own requests too.
inline Counts ApiserverRequests(kube::Client& c) {
  Counts out;
  auto r = c.Raw("GET", "/metrics");
  if (!r.ok()) return out;
  std::istringstream in(r->body);
  std::string line;
  auto label = [](const std::string& l, const std::string& name) {
    size_t p = l.find("," + name + "=\"");
    if (p == std::string::npos) p = l.find("{" + name + "=\"");
    if (p == std::string::npos) return std::string();
    p += name.size() + 3;
    return l.substr(p, l.find('"', p) - p);
  };
  while (std::getline(in, line)) {
    if (line.rfind("apiserver_request_total{", 0) != 0) continue;
    std::string sub = label(line, "subresource");
    std::string key =
        label(line, "verb") + " " + label(line, "resource") + (sub.empty() ? "" : "/" + sub);
    out[key] += std::llround(std::stod(line.substr(line.rfind(' ') + 1)));
  }
  return out;
}

}  // namespace hyperslice::bench
