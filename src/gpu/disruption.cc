#include "src/gpu/disruption.h"

#include <algorithm>
#include <cmath>

#include <boost/json.hpp>

#include "src/base/json.h"

namespace hyperslice::gpu {
namespace {

namespace bj = boost::json;
using jsonfield::ObjectField;
using jsonfield::StringField;

bool Annotated(const bj::object& o) {
  const bj::object* meta = ObjectField(o, "metadata");
  const bj::object* ann = meta != nullptr ? ObjectField(*meta, "annotations") : nullptr;
  if (ann == nullptr) return false;
  return StringField(*ann, kAnnotationDoNotDisrupt) == "true" ||
         StringField(*ann, kAnnotationTgpDoNotDisrupt) == "true";
}

// A pod that keeps its Node busy: running or about to, not a DaemonSet's or a mirror pod, not
// being deleted.
bool Counts(const bj::object& pod) {
  const bj::object* status = ObjectField(pod, "status");
  std::string_view phase = status != nullptr ? StringField(*status, "phase") : "";
  if (phase == "Succeeded" || phase == "Failed") return false;
  const bj::object* meta = ObjectField(pod, "metadata");
  if (meta == nullptr) return true;
  if (meta->contains("deletionTimestamp")) return false;
  if (const bj::object* ann = ObjectField(*meta, "annotations");
      ann != nullptr && ann->contains("kubernetes.io/config.mirror"))
    return false;
  if (const auto* owners = meta->if_contains("ownerReferences"); owners && owners->is_array()) {
    for (const auto& o : owners->as_array())
      if (o.is_object() && StringField(o.as_object(), "kind") == "DaemonSet") return false;
  }
  return true;
}

bool AsksForGpu(const bj::object& pod) {
  const bj::object* spec = ObjectField(pod, "spec");
  const auto* containers = spec != nullptr ? spec->if_contains("containers") : nullptr;
  if (containers == nullptr || !containers->is_array()) return false;
  for (const auto& c : containers->as_array()) {
    if (!c.is_object()) continue;
    const bj::object* res = ObjectField(c.as_object(), "resources");
    if (res == nullptr) continue;
    for (const char* kind : {"limits", "requests"}) {
      const bj::object* r = ObjectField(*res, kind);
      if (r != nullptr && r->contains("nvidia.com/gpu")) return true;
    }
  }
  return false;
}

}  // namespace

Result<std::optional<std::chrono::seconds>> ParseDisruptionDuration(const std::string& text) {
  if (text == "Never") return std::optional<std::chrono::seconds>();
  long long total = 0, number = -1;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      number = (number < 0 ? 0 : number) * 10 + (c - '0');
      if (number > 100000000) break;
      continue;
    }
    long long unit = c == 's' ? 1 : c == 'm' ? 60 : c == 'h' ? 3600 : 0;
    if (unit == 0 || number < 0) {
      number = -2;
      break;
    }
    total += number * unit;
    number = -1;
  }
  if (text.empty() || number != -1)
    return Error::Make(Error::Code::kInvalidArgument,
                       "\"" + text + "\" is not a duration such as 30s, 5m or 1h30m, or Never");
  return std::optional<std::chrono::seconds>(std::chrono::seconds(total));
}

Result<DisruptionSpec> ParseDisruption(const bj::object& pool) {
  DisruptionSpec out;
  out.consolidate_after = std::chrono::seconds(30);
  const bj::object* spec = ObjectField(pool, "spec");
  const bj::object* d = spec != nullptr ? ObjectField(*spec, "disruption") : nullptr;
  if (d == nullptr) {
    out.budgets = {"10%"};
    return out;
  }
  std::string_view policy = StringField(*d, "consolidationPolicy");
  if (policy == "WhenIdle") {
    out.policy = ConsolidationPolicy::kWhenIdle;
  } else if (!policy.empty() && policy != "WhenEmpty") {
    return Error::Make(Error::Code::kInvalidArgument, "spec.disruption.consolidationPolicy \"" +
                                                          std::string(policy) +
                                                          "\" is not WhenEmpty or WhenIdle");
  }
  if (std::string after(StringField(*d, "consolidateAfter")); !after.empty()) {
    auto parsed = ParseDisruptionDuration(after);
    if (!parsed.ok())
      return Error::Make(Error::Code::kInvalidArgument,
                         "spec.disruption.consolidateAfter: " + parsed.error().message);
    out.consolidate_after = *parsed;
  }
  if (const auto* budgets = d->if_contains("budgets"); budgets && budgets->is_array()) {
    for (const auto& b : budgets->as_array()) {
      if (!b.is_object()) continue;
      if (b.as_object().contains("schedule")) {
        ++out.scheduled_budgets_ignored;
        continue;
      }
      std::string nodes(StringField(b.as_object(), "nodes"));
      out.budgets.push_back(nodes.empty() ? "10%" : nodes);
    }
  } else {
    out.budgets = {"10%"};
  }
  return out;
}

std::string Consolidatable(ConsolidationPolicy policy, const bj::object& claim,
                           const bj::object* node,
                           const std::vector<const bj::object*>& pods_on_node) {
  if (Annotated(claim) || (node != nullptr && Annotated(*node))) return "";
  bool busy = false;
  for (const bj::object* pod : pods_on_node) {
    if (pod == nullptr) continue;
    if (Annotated(*pod)) return "";
    if (!Counts(*pod)) continue;
    if (policy == ConsolidationPolicy::kWhenEmpty || AsksForGpu(*pod)) busy = true;
  }
  if (busy) return "";
  return policy == ConsolidationPolicy::kWhenEmpty ? "empty" : "idle";
}

int DisruptionsAllowed(const std::vector<std::string>& budgets, int pool_size, int disrupting) {
  int allowed = pool_size;  // no unscheduled budget: nothing beyond the pool
  for (const std::string& b : budgets) {
    int n = 0;
    if (!b.empty() && b.back() == '%') {
      double pct = std::strtod(b.c_str(), nullptr);
      n = static_cast<int>(std::ceil(pct / 100.0 * pool_size));
    } else {
      n = static_cast<int>(std::strtol(b.c_str(), nullptr, 10));
    }
    allowed = std::min(allowed, n);
  }
  return std::max(0, allowed - disrupting);
}

}  // namespace hyperslice::gpu
