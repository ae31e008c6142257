// Small text helpers that several modules need the same way (flags, files, headers).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace hyperslice {

// `s` without leading and trailing white space (std::isspace: blanks, tabs, CR, LF).
std::string TrimSpace(std::string_view s);

// "<key>=<value>" split at the first '=' when both sides are non-empty; nullopt otherwise.
std::optional<std::pair<std::string, std::string>> SplitKeyValue(std::string_view s);

}  // namespace hyperslice
