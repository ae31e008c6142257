#include "src/kube/node_conditions.h"

#include <map>
#include <string>

#include "src/base/json.h"
#include "src/kube/object_helpers.h"

namespace hyperslice::kube {

namespace json = boost::json;
using jsonfield::StringField;

NodeConditionsUpdate KubeletNodeConditions(const Object& node,
                                           const std::vector<NodeCondition>& want,
                                           std::chrono::system_clock::time_point now,
                                           std::chrono::system_clock::duration report_interval) {
  std::map<std::string, const json::object*, std::less<>> posted;
  const json::object* status = jsonfield::ObjectField(node, "status");
  if (const json::array* cs = status ? jsonfield::ArrayField(*status, "conditions") : nullptr) {
    for (const auto& c : *cs) {
      if (c.is_object()) posted[std::string(StringField(c.as_object(), "type"))] = &c.as_object();
    }
  }
  const std::string now_s = FormatTime(now);
  NodeConditionsUpdate out;
  for (const NodeCondition& c : want) {
    auto it = posted.find(c.type);
    const json::object* had = it == posted.end() ? nullptr : it->second;
    const bool same = had != nullptr && StringField(*had, "status") == c.status &&
                      StringField(*had, "reason") == c.reason;
    out.changed = out.changed || !same;
    if (same && std::string_view(c.type) == "Ready") {
      auto heartbeat = ParseTime(StringField(*had, "lastHeartbeatTime"));
      if (!heartbeat || now - *heartbeat >= report_interval) out.changed = true;
    }
    out.conditions.push_back(
        json::object{{"type", c.type},
                     {"status", c.status},
                     {"reason", c.reason},
                     {"message", c.message},
                     {"lastHeartbeatTime", now_s},
                     {"lastTransitionTime",
                      same ? std::string(StringField(*had, "lastTransitionTime")) : now_s}});
  }
  return out;
}

}  // namespace hyperslice::kube
