#include "src/runners/controlnode/provision_store.h"

#include <algorithm>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/runners/controlnode/api.h"

namespace hyperslice::runners::controlnode {

namespace json = boost::json;
using Ms = std::chrono::milliseconds;

ProvisionStore ApiProvisionStore(const std::shared_ptr<kube::Client>& client,
                                 const std::shared_ptr<SecretJoinTokens>& tokens,
                                 std::string field) {
  ProvisionStore s;
  s.record = [client, field](const std::string& runner, const json::object& patch) -> Status {
    kube::PatchOptions po;
    po.subresource = "status";
    auto r =
        client->Patch(Runners(), "", runner, kube::PatchType::kMerge,
                      json::serialize(json::object{{"status", json::object{{field, patch}}}}), po);
    if (!r.ok() && r.error().code != Error::Code::kNotFound) return r.error();
    return OkStatus();
  };
  s.join_token = [tokens](const std::string& runner) { return tokens->Token(runner); };
  return s;
}

ProvisionRecorder::ProvisionRecorder(ProvisionStore store, std::string field,
                                     std::vector<std::string> owned, Ms retry_initial, Ms retry_max,
                                     const Clock* clock)
    : store_(std::move(store)),
      field_(std::move(field)),
      owned_(std::move(owned)),
      retry_initial_(retry_initial),
      retry_max_(retry_max),
      wall_(clock) {}

ProvisionRecord ProvisionRecorder::Open(std::string runner, json::object& status) const {
  return ProvisionRecord(*this, std::move(runner), field_, status);
}

Status ProvisionRecorder::Record(const std::string& runner, const json::object& holder) const {
  json::object patch = holder;
  for (const auto& k : owned_) {
    if (!patch.contains(k)) patch[k] = nullptr;
  }
  return store_.record(runner, patch);
}

Ms ProvisionRecorder::Backoff(int64_t failures) const {
  Ms d = retry_initial_;
  for (int64_t i = 1; i < failures && d < retry_max_; ++i) d *= 2;
  return std::min(d, retry_max_);
}

ProvisionOutcome ProvisionRecorder::NoteFailure(json::object& holder, const std::string& reason,
                                                const std::string& message) const {
  int64_t failures = 1;
  if (const json::object* last = jsonfield::ObjectField(holder, "lastError")) {
    failures = jsonfield::IntField(*last, "failures").value_or(0) + 1;
  }
  holder["lastError"] = json::object{{"reason", reason},
                                     {"message", message},
                                     {"failures", failures},
                                     {"time", kube::FormatMicroTime(wall_.Now())}};
  return ProvisionOutcome{
      .reason = reason, .message = message, .warning = true, .requeue_after = Backoff(failures)};
}

std::optional<ProvisionOutcome> ProvisionRecorder::BackingOff(const json::object& holder) const {
  const json::object* last = jsonfield::ObjectField(holder, "lastError");
  if (last == nullptr) return std::nullopt;
  auto when = kube::ParseTime(jsonfield::StringField(*last, "time"));
  auto wait = Backoff(jsonfield::IntField(*last, "failures").value_or(1));
  auto now = wall_.Now();
  if (!when || now >= *when + wait) return std::nullopt;
  return ProvisionOutcome{
      .reason = jsonfield::StringValue(*last, "reason"),
      .message = jsonfield::StringValue(*last, "message"),
      .requeue_after = std::chrono::duration_cast<Ms>(*when + wait - now) + Ms(1)};
}

Result<std::optional<std::string>> ProvisionRecorder::JoinToken(const std::string& runner) const {
  return store_.join_token(runner);
}

ProvisionOutcome ProvisionRecorder::NoJoinToken() const {
  return ProvisionOutcome{.reason = "JoinTokenUnavailable",
                          .message = "no unused join token for the " + field_ +
                                     " (one is minted while the Runner has not linked; remove "
                                     "the " +
                                     std::string(kJoinTokenConsumedAnnotation) +
                                     " annotation to get a new one)",
                          .requeue_after = Ms(5000)};
}

ProvisionRecord::ProvisionRecord(const ProvisionRecorder& recorder, std::string runner,
                                 std::string field, json::object& status)
    : recorder_(recorder), runner_(std::move(runner)), field_(std::move(field)), status_(status) {
  if (const json::object* cur = jsonfield::ObjectField(status_, field_)) before_ = *cur;
  holder_ = before_;
}

void ProvisionRecord::Keep() { status_[field_] = holder_; }

Result<ProvisionOutcome> ProvisionRecord::Finish(ProvisionOutcome outcome) {
  for (const auto& [k, _] : before_) {
    if (!holder_.contains(k)) {
      HS_RETURN_IF_ERROR(recorder_.Record(runner_, holder_));
      break;
    }
  }
  Keep();
  return outcome;
}

}  // namespace hyperslice::runners::controlnode
