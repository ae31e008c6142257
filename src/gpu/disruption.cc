#include "src/gpu/disruption.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/gpu/internal/claim.h"

namespace hyperslice::gpu {
namespace {

namespace bj = boost::json;
using jsonfield::ObjectField;
using jsonfield::StringField;

bool Annotated(const bj::object& o) {
  return internal::Annotation(o, kAnnotationDoNotDisrupt) == "true" ||
         internal::Annotation(o, kAnnotationTgpDoNotDisrupt) == "true";
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
    out.budgets = {DisruptionBudget{}};
    return out;
  }
  auto invalid = [](const std::string& field, const std::string& why) {
    return Error::Make(Error::Code::kInvalidArgument, "spec.disruption." + field + ": " + why);
  };
  std::string_view policy = StringField(*d, "consolidationPolicy");
  if (policy == "WhenIdle") {
    out.policy = ConsolidationPolicy::kWhenIdle;
  } else if (!policy.empty() && policy != "WhenEmpty") {
    return invalid("consolidationPolicy",
                   "\"" + std::string(policy) + "\" is not WhenEmpty or WhenIdle");
  }
  for (const char* field : {"consolidateAfter", "expireAfter"}) {
    std::string text(StringField(*d, field));
    if (text.empty()) continue;
    auto parsed = ParseDisruptionDuration(text);
    if (!parsed.ok()) return invalid(field, parsed.error().message);
    (std::string_view(field) == "expireAfter" ? out.expire_after : out.consolidate_after) = *parsed;
  }
  if (std::string_view e = StringField(*d, "expirePolicy"); e == "Return") {
    out.expire_policy = ExpirePolicy::kReturn;
  } else if (!e.empty() && e != "Replace") {
    return invalid("expirePolicy", "\"" + std::string(e) + "\" is not Replace or Return");
  }
  const auto* budgets = d->if_contains("budgets");
  if (budgets == nullptr || !budgets->is_array()) {
    out.budgets = {DisruptionBudget{}};
    return out;
  }
  int index = 0;
  for (const auto& v : budgets->as_array()) {
    std::string at = "budgets[" + std::to_string(index++) + "]";
    if (!v.is_object()) continue;
    const bj::object& b = v.as_object();
    DisruptionBudget budget;
    if (std::string nodes(StringField(b, "nodes")); !nodes.empty()) budget.nodes = nodes;
    if (const auto* reasons = b.if_contains("reasons"); reasons && reasons->is_array()) {
      for (const auto& r : reasons->as_array())
        if (r.is_string()) budget.reasons.emplace_back(r.as_string());
    }
    std::string schedule(StringField(b, "schedule")), duration(StringField(b, "duration"));
    if (schedule.empty() != duration.empty())
      return invalid(at, "schedule and duration go together");
    if (!schedule.empty()) {
      auto cron = CronSchedule::Parse(schedule);
      if (!cron.ok()) return invalid(at + ".schedule", cron.error().message);
      auto length = ParseDisruptionDuration(duration);
      if (!length.ok() || !length->has_value())
        return invalid(at + ".duration", "\"" + duration + "\" is not a duration such as 8h");
      budget.schedule = *cron;
      budget.duration = **length;
    }
    out.budgets.push_back(std::move(budget));
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

bool Expired(const DisruptionSpec& spec, std::chrono::system_clock::time_point created,
             std::chrono::system_clock::time_point now) {
  return spec.expire_after.has_value() && now - created >= *spec.expire_after;
}

int DisruptionsAllowed(const std::vector<DisruptionBudget>& budgets, std::string_view reason,
                       std::chrono::system_clock::time_point now, int pool_size, int disrupting) {
  int allowed = pool_size;  // no budget applies: nothing beyond the pool
  for (const DisruptionBudget& b : budgets) {
    if (!b.reasons.empty()) {
      // The CRD spells reasons Empty, Idle, Expired; the controller "empty", "idle", "expired".
      bool named = std::any_of(b.reasons.begin(), b.reasons.end(), [&](const std::string& r) {
        return r.size() == reason.size() &&
               std::equal(r.begin(), r.end(), reason.begin(), [](char x, char y) {
                 return std::tolower(static_cast<unsigned char>(x)) ==
                        std::tolower(static_cast<unsigned char>(y));
               });
      });
      if (!named) continue;
    }
    if (b.schedule && !b.schedule->ActiveAt(now, b.duration)) continue;
    int n = 0;
    if (!b.nodes.empty() && b.nodes.back() == '%') {
      double pct = std::strtod(b.nodes.c_str(), nullptr);
      n = static_cast<int>(std::ceil(pct / 100.0 * pool_size));
    } else {
      n = static_cast<int>(std::strtol(b.nodes.c_str(), nullptr, 10));
    }
    allowed = std::min(allowed, n);
  }
  return std::max(0, allowed - disrupting);
}

}  // namespace hyperslice::gpu
