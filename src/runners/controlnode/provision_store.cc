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

Ms DoublingBackoff(Ms initial, Ms max, int64_t failures) {
  Ms d = initial;
  for (int64_t i = 1; i < failures && d < max; ++i) d *= 2;
  return std::min(d, max);
}

int64_t NoteFailure(json::object& holder, const std::string& reason, const std::string& message) {
  int64_t failures = 1;
  if (const json::object* last = jsonfield::ObjectField(holder, "lastError")) {
    failures = jsonfield::IntField(*last, "failures").value_or(0) + 1;
  }
  holder["lastError"] =
      json::object{{"reason", reason},
                   {"message", message},
                   {"failures", failures},
                   {"time", kube::FormatMicroTime(std::chrono::system_clock::now())}};
  return failures;
}

std::optional<Ms> BackoffLeft(const json::object& holder, Ms initial, Ms max) {
  const json::object* last = jsonfield::ObjectField(holder, "lastError");
  if (last == nullptr) return std::nullopt;
  auto when = kube::ParseTime(jsonfield::StringField(*last, "time"));
  auto wait = DoublingBackoff(initial, max, jsonfield::IntField(*last, "failures").value_or(1));
  auto now = std::chrono::system_clock::now();
  if (!when || now >= *when + wait) return std::nullopt;
  return std::chrono::duration_cast<Ms>(*when + wait - now) + Ms(1);
}

boost::json::object WithDroppedFields(boost::json::object holder,
                                      std::initializer_list<const char*> fields) {
  for (const char* k : fields) {
    if (!holder.contains(k)) holder[k] = nullptr;
  }
  return holder;
}

}  // namespace hyperslice::runners::controlnode
