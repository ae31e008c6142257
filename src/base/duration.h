// Durations as people write them in flags: Go's time.ParseDuration for the units an operator
// needs, plus days. The one parser for every role's duration flags.
#pragma once

#include <string_view>

#include "src/base/clock.h"
#include "src/base/result.h"

namespace hyperslice {

// "250ms", "45s", "10m", "1h30m", "90d", "0": a sum of non-negative whole numbers, each followed
// by ms, s, m, h or d, or a lone "0". Anything else (no unit, an unknown unit, a sign, a
// fraction, blanks, more than about 290 years) is kInvalidArgument quoting the text.
Result<Clock::Duration> ParseDuration(std::string_view s);

}  // namespace hyperslice
