// Whole-file reads: the one helper for code that takes a file's content at once (keys, CA
// bundles, tokens, manifests), instead of a stream loop in each module.
#pragma once

#include <string>

#include "src/base/result.h"

namespace hyperslice {

// The bytes of `path` as they are (binary); kNotFound "cannot read <path>" when it cannot be
// opened or read.
Result<std::string> ReadFile(const std::string& path);

// The same, "" when it cannot be read: for a log shown in a message or content compared with
// what it should be, where a missing file and an empty one mean the same.
std::string ReadFileOrEmpty(const std::string& path);

}  // namespace hyperslice
