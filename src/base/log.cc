#include "src/base/log.h"

#include <atomic>
#include <cctype>
#include <chrono>
#include <mutex>

#include <boost/json/serialize.hpp>

#include "src/base/time.h"

namespace hyperslice::log {
namespace {

std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
std::mutex g_mu;
std::function<void(std::string_view)> g_sink;  // guarded by g_mu

const char* LevelName(Level l) {
  switch (l) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
  }
  return "info";
}

bool IsCredentialKey(std::string_view key) {
  std::string lower(key);
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view bad : {"token", "password", "secret", "authorization", "privatekey",
                               "private_key", "bearer", "apikey", "api_key"}) {
    if (lower.find(bad) != std::string::npos) return true;
  }
  return false;
}

std::string Timestamp() { return FormatRfc3339(std::chrono::system_clock::now(), 3); }

}  // namespace

void SetLevel(Level level) { g_level = static_cast<int>(level); }
Level GetLevel() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }
bool SetLevel(std::string_view name) {
  for (Level l : {Level::kDebug, Level::kInfo, Level::kWarn, Level::kError}) {
    if (name == LevelName(l)) {
      SetLevel(l);
      return true;
    }
  }
  return false;
}

void SetSink(std::function<void(std::string_view)> sink) {
  std::lock_guard lock(g_mu);
  g_sink = std::move(sink);
}

std::string Format(Level level, std::string_view msg, std::initializer_list<Field> fields) {
  std::string line = "{\"ts\":\"" + Timestamp() + "\",\"level\":\"" + LevelName(level) +
                     "\",\"msg\":" + boost::json::serialize(boost::json::string(msg));
  for (const auto& f : fields) {
    line += ',';
    line += boost::json::serialize(boost::json::string(f.key));
    line += ':';
    line +=
        IsCredentialKey(f.key) ? std::string("\"[redacted]\"") : boost::json::serialize(f.value);
  }
  line += "}\n";
  return line;
}

void Write(Level level, std::string_view msg, std::initializer_list<Field> fields) {
  if (static_cast<int>(level) < g_level.load(std::memory_order_relaxed)) return;
  std::string line = Format(level, msg, fields);
  std::lock_guard lock(g_mu);
  if (g_sink) {
    g_sink(line);
  } else {
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
}

}  // namespace hyperslice::log
