// The seeds' examples as deploy/examples ships them, for tests that apply what a user applies
// (instead of a copy of the seed's YAML in each test).
#pragma once

#include <map>
#include <string>

namespace hyperslice::testenv {

// deploy/examples/<file> with the variables of deploy/examples/<env_file> substituted, as
// `set -a; . <env_file>; envsubst < <file>` prints it (src/base/envsubst.h). `overrides` replace
// values of the .env file (e.g. {"NAMESPACE", "t-1"}). Empty when a file cannot be read or the
// template uses a variable the .env file does not set.
std::string Example(const std::string& file, const std::string& env_file,
                    const std::map<std::string, std::string>& overrides = {});

}  // namespace hyperslice::testenv
