// Small text helpers that several modules need the same way (flags, files, headers).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hyperslice {

// `s` without leading and trailing white space (std::isspace: blanks, tabs, CR, LF).
std::string TrimSpace(std::string_view s);

// "<key>=<value>" split at the first '=' when both sides are non-empty; nullopt otherwise.
std::optional<std::pair<std::string, std::string>> SplitKeyValue(std::string_view s);

// The pieces of `s` between the `sep` bytes, in order, empty ones included: "a//b" -> {"a", "",
// "b"}, "" -> {""}. For paths and names whose empty pieces a caller must see (and refuse).
std::vector<std::string> Split(std::string_view s, char sep);
// The same without the empty pieces: "/a//b/" -> {"a", "b"}, "" -> {} (lists written with a
// separator, URL paths).
std::vector<std::string> SplitNonEmpty(std::string_view s, char sep);

// `s` with its ASCII letters lowered (header names, case-insensitive names); other bytes kept.
std::string AsciiLower(std::string_view s);

// `s` in double quotes for an error message: at most 80 bytes (then "..."), and control, non-ASCII,
// '"' and '\\' bytes written as \xNN, so a refusal can quote what it refused without carrying
// a client's bytes into a status or a log line as they are.
std::string QuoteForMessage(std::string_view s);

}  // namespace hyperslice
