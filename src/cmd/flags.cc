#include "src/cmd/flags.h"

#include "src/base/duration.h"
#include "src/base/strings.h"

namespace hyperslice::cmd {

Result<Clock::Duration> DurationFlag(const char* flag, const std::string& value) {
  auto d = ParseDuration(value);
  if (!d.ok()) {
    return Error::Make(Error::Code::kInvalidArgument,
                       std::string(flag) + " " + value + ": " + d.error().message);
  }
  return *d;
}

Result<std::vector<std::pair<std::string, std::string>>> KeyValueFlag(
    const char* flag, const std::vector<std::string>& entries, const char* want) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& e : entries) {
    auto kv = SplitKeyValue(e);
    if (!kv) {
      return Error::Make(Error::Code::kInvalidArgument,
                         std::string(flag) + " " + e + ": want " + want);
    }
    out.push_back(std::move(*kv));
  }
  return out;
}

}  // namespace hyperslice::cmd
