#include "src/runners/agent/logs.h"

#include <ctime>
#include <deque>
#include <fstream>
#include <thread>

namespace hyperslice::runners::agent {
namespace {

struct Record {
  std::string time;
  bool partial = false;
  std::string text;
};

bool Parse(const std::string& line, Record& r) {
  auto s1 = line.find(' ');
  if (s1 == std::string::npos) return false;
  auto s2 = line.find(' ', s1 + 1);
  if (s2 == std::string::npos) return false;
  auto s3 = line.find(' ', s2 + 1);
  r.time = line.substr(0, s1);
  std::string tag =
      s3 == std::string::npos ? line.substr(s2 + 1) : line.substr(s2 + 1, s3 - s2 - 1);
  r.partial = tag == "P";
  r.text = s3 == std::string::npos ? "" : line.substr(s3 + 1);
  return true;
}

int64_t UnixOf(const std::string& rfc3339) {
  std::tm tm{};
  if (strptime(rfc3339.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

// Turns records into output, tracking line starts (for timestamps) and the byte limit.
class Renderer {
 public:
  Renderer(const LogOptions& o, const std::function<bool(const std::string&)>& sink)
      : o_(o), sink_(sink) {}
  // false: stop (limit reached or sink refused).
  bool Put(const Record& r) {
    if (o_.since_unix > 0 && UnixOf(r.time) < o_.since_unix) return true;
    std::string out;
    if (o_.timestamps && at_line_start_) out = r.time + " ";
    out += r.text;
    if (!r.partial) out += "\n";
    at_line_start_ = !r.partial;
    if (o_.limit_bytes > 0) {
      int64_t left = o_.limit_bytes - sent_;
      if (left <= 0) return false;
      if (static_cast<int64_t>(out.size()) > left) out.resize(static_cast<size_t>(left));
    }
    sent_ += static_cast<int64_t>(out.size());
    if (!sink_(out)) return false;
    return o_.limit_bytes == 0 || sent_ < o_.limit_bytes;
  }

 private:
  const LogOptions& o_;
  const std::function<bool(const std::string&)>& sink_;
  bool at_line_start_ = true;
  int64_t sent_ = 0;
};

}  // namespace

Status StreamLog(const std::string& path, const LogOptions& options,
                 const std::function<bool(const std::string&)>& sink,
                 const std::function<bool()>& finished) {
  std::ifstream in(path, std::ios::binary);
  if (!in && !options.follow) return OkStatus();  // nothing written yet
  Renderer out(options, sink);
  std::string line;
  // The first pass honours tail: the last N complete lines (with their partial pieces).
  {
    std::deque<Record> kept;
    int64_t complete = 0;
    Record r;
    while (in && std::getline(in, line)) {
      if (in.eof()) {  // an unterminated last line is still being written
        in.clear();
        in.seekg(-static_cast<std::streamoff>(line.size()), std::ios::cur);
        break;
      }
      if (!Parse(line, r)) continue;
      kept.push_back(r);
      if (!r.partial) ++complete;
      if (options.tail_lines >= 0) {
        while (complete > options.tail_lines && !kept.empty()) {
          if (!kept.front().partial) --complete;
          kept.pop_front();
        }
      }
    }
    for (const auto& k : kept) {
      if (!out.Put(k)) return OkStatus();
    }
  }
  if (!options.follow) return OkStatus();
  std::string carry;
  while (true) {
    bool done = finished();  // read before the last pass, so nothing written before is missed
    if (!in.is_open()) in.open(path, std::ios::binary);
    if (in.is_open()) {
      in.clear();
      char buf[8192];
      while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
        carry.append(buf, static_cast<size_t>(in.gcount()));
        if (in.eof()) break;
      }
      size_t pos = 0, nl = 0;
      Record r;
      while ((nl = carry.find('\n', pos)) != std::string::npos) {
        if (Parse(carry.substr(pos, nl - pos), r) && !out.Put(r)) return OkStatus();
        pos = nl + 1;
      }
      carry.erase(0, pos);
    }
    if (done) return OkStatus();
    if (!sink("")) return OkStatus();  // lets the caller notice a cancelled client
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace hyperslice::runners::agent
