// What the runners' machine provisioners (gce_runner.h, market_runner.h) share: where they keep
// their part of a Runner's status and find its join token, and the doubling backoff after a
// failed create recorded as {failures, time} in that status.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include <boost/json/object.hpp>

#include "src/base/result.h"
#include "src/runners/controlnode/join_tokens.h"

namespace hyperslice::kube {
class Client;
}  // namespace hyperslice::kube

namespace hyperslice::runners::controlnode {

struct ProvisionStore {
  // Merge-patches status.<field> of the Runner (null drops a field).
  std::function<Status(const std::string& runner, const boost::json::object& patch)> record;
  // The Runner's unused join token, nullopt when there is none (SecretJoinTokens::Token).
  std::function<Result<std::optional<std::string>>(const std::string& runner)> join_token;
};
// The Runners' status subresource (status.<field>) and their token Secrets.
ProvisionStore ApiProvisionStore(const std::shared_ptr<kube::Client>& client,
                                 const std::shared_ptr<SecretJoinTokens>& tokens,
                                 std::string field);

// `record` is a merge patch: `holder` with null for each of `fields` it lacks, so that a field the
// provisioner no longer has leaves the status too.
boost::json::object WithDroppedFields(boost::json::object holder,
                                      std::initializer_list<const char*> fields);

// `initial` doubled per failure after the first, at most `max`.
std::chrono::milliseconds DoublingBackoff(std::chrono::milliseconds initial,
                                          std::chrono::milliseconds max, int64_t failures);
// Sets holder.lastError to {reason, message, failures (one more than before), time: now};
// returns the failure count.
int64_t NoteFailure(boost::json::object& holder, const std::string& reason,
                    const std::string& message);
// What is left of the backoff `holder.lastError` ({failures, time}) asks for; nullopt when there
// is none or it is over.
std::optional<std::chrono::milliseconds> BackoffLeft(const boost::json::object& holder,
                                                     std::chrono::milliseconds initial,
                                                     std::chrono::milliseconds max);

}  // namespace hyperslice::runners::controlnode
