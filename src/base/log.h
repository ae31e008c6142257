// Structured logging: one JSON object per line on stderr,
//   {"ts":"2026-11-21T13:40:05.123Z","level":"info","msg":"...","key":value,...}
//
// Thread-safe. Values are JSON values, so numbers stay numbers. Fields whose key names a credential
// (token, password, secret, authorization, private key) are replaced by "[redacted]" — a backstop;
// callers must not pass credentials in the first place.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include <boost/json/value.hpp>

namespace hyperslice::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

struct Field {
  Field(std::string_view k, boost::json::value v) : key(k), value(std::move(v)) {}
  Field(std::string_view k, std::string_view v) : key(k), value(boost::json::string(v)) {}
  Field(std::string_view k, const char* v) : key(k), value(boost::json::string(v)) {}
  Field(std::string_view k, const std::string& v) : key(k), value(boost::json::string(v)) {}
  std::string_view key;
  boost::json::value value;
};

void SetLevel(Level level);
Level GetLevel();
// Parses "debug", "info", "warn", "error"; unknown names keep the current level.
bool SetLevel(std::string_view name);

// Replaces the output (default: stderr). Used by tests to capture lines; nullptr restores stderr.
void SetSink(std::function<void(std::string_view line)> sink);

void Write(Level level, std::string_view msg, std::initializer_list<Field> fields);
// Renders one line without writing it (exposed for tests of the format and redaction).
std::string Format(Level level, std::string_view msg, std::initializer_list<Field> fields);

inline void Debug(std::string_view msg, std::initializer_list<Field> f = {}) {
  if (GetLevel() <= Level::kDebug) Write(Level::kDebug, msg, f);
}
inline void Info(std::string_view msg, std::initializer_list<Field> f = {}) {
  if (GetLevel() <= Level::kInfo) Write(Level::kInfo, msg, f);
}
inline void Warn(std::string_view msg, std::initializer_list<Field> f = {}) {
  Write(Level::kWarn, msg, f);
}
inline void Error(std::string_view msg, std::initializer_list<Field> f = {}) {
  Write(Level::kError, msg, f);
}

}  // namespace hyperslice::log
