// The seeds' examples are shell templates: a `.env` file of KEY=VALUE lines and a manifest with
// $VAR / ${VAR} in it, applied with `set -a; . x.env; set +a; envsubst < y.yaml`. These two
// functions do the same for `hyperslice dev` and tests. Pure; thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "src/base/result.h"

namespace hyperslice {

// KEY=VALUE lines (blank lines and # comments skipped; the value is the rest of the line, as
// written).
std::map<std::string, std::string> ParseEnvFile(std::string_view text);

// $VAR and ${VAR} replaced by their values. A variable `vars` does not hold is kInvalidArgument
// naming it (envsubst would print an empty string: in a manifest that is a silent mistake).
Result<std::string> Envsubst(std::string_view text, const std::map<std::string, std::string>& vars);

}  // namespace hyperslice
