// What every role does with its flag values the same way: a duration or a "<key>=<value>" list
// that, when malformed, is refused with the flag's name in the message.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "src/base/clock.h"
#include "src/base/result.h"

namespace hyperslice::cmd {

// `value` of `flag` as a duration (src/base/duration.h); kInvalidArgument "<flag> <value>: ...".
Result<Clock::Duration> DurationFlag(const char* flag, const std::string& value);

// Each entry of a repeatable "<key>=<value>" flag, split at its first '='; an entry without a
// key or a value is kInvalidArgument "<flag> <entry>: want <want>".
Result<std::vector<std::pair<std::string, std::string>>> KeyValueFlag(
    const char* flag, const std::vector<std::string>& entries, const char* want);

}  // namespace hyperslice::cmd
