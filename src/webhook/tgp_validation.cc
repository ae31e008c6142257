// /validate-tgp: GPUNodePools and GPUNodeClasses (tgp.io/v1) beyond their CRDs' schema and CEL.
// The rules on one object are src/gpu/validation.h's; this file adds the ones that read other
// objects through the ObjectSource:
//  - a pool's nodeClassRef names a GPUNodeClass that exists (CEL already pins kind and group) and
//    is not being deleted, and whose limits.maxHourlyCost is not below the pool's maxHourlyPrice;
//  - a class whose limits.maxHourlyCost is set or lowered warns about each pool now priced above it
//    (a warning: see gpu::PoolsAboveClassCost).
// Cached reads first; a refusal is only ever decided on a live read (needs_live), so a class
// created or raised a moment ago is never refused from a stale cache.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "src/base/json.h"
#include "src/gpu/api.h"
#include "src/gpu/provider.h"
#include "src/gpu/validation.h"
#include "src/webhook/internal.h"

namespace hyperslice::webhook::internal {
namespace json = boost::json;
using jsonfield::ObjectField;
using jsonfield::StringField;

namespace {

constexpr size_t kMaxNamesListed = 10;

Decision Refuse(std::string_view what, const std::vector<std::string>& problems) {
  Decision d;
  d.allowed = false;
  d.code = 422;
  d.reason = "Invalid";
  d.message = std::string(what) + " is invalid: ";
  for (size_t i = 0; i < problems.size(); ++i) {
    if (i > 0) d.message += "; ";
    d.message += problems[i];
  }
  return d;
}

std::string NameOf(const json::object& request, const json::object* obj) {
  std::string_view name = StringField(ObjectField(obj, "metadata"), "name");
  if (name.empty()) name = StringField(&request, "name");
  return std::string(name);
}

// ", existing classes: a, b" (from the same read mode), or "" when they cannot be listed.
std::string ExistingClasses(ObjectSource& source, ObjectSource::Mode mode) {
  auto classes = source.List(gpu::GPUNodeClasses(), mode);
  if (!classes.ok()) return "";
  std::vector<std::string> names;
  for (const ObjectPtr& c : *classes) {
    std::string_view n = StringField(ObjectField(c.get(), "metadata"), "name");
    if (!n.empty()) names.emplace_back(n);
  }
  if (names.empty()) return "; there is no GPUNodeClass yet";
  std::sort(names.begin(), names.end());
  std::string out = "; existing classes: ";
  for (size_t i = 0; i < names.size() && i < kMaxNamesListed; ++i) {
    if (i > 0) out += ", ";
    out += names[i];
  }
  if (names.size() > kMaxNamesListed) {
    out += " and " + std::to_string(names.size() - kMaxNamesListed) + " more";
  }
  return out;
}

// What the pool's class says against the pool, read in `mode`.
struct ClassCheck {
  bool not_cached = false;     // kCachedOnly could not answer
  std::optional<Error> error;  // the class could not be read (not NotFound)
  std::vector<std::string> problems;
};

ClassCheck CheckClass(const json::object& spec, const std::string& class_name, bool ref_changed,
                      ObjectSource& source, ObjectSource::Mode mode) {
  ClassCheck c;
  auto cls = source.Get(gpu::GPUNodeClasses(), "", class_name, mode);
  if (!cls.ok()) {
    if (cls.error().reason == ObjectSource::kNotCached) {
      c.not_cached = true;
    } else if (cls.error().code == Error::Code::kNotFound) {
      // An update that keeps the class is not refused for the class being gone: the pool's
      // status says so, and refusing would block every edit of the pool.
      if (ref_changed) {
        c.problems.push_back("spec.nodeClassRef.name \"" + class_name +
                             "\" names no GPUNodeClass; create GPUNodeClass \"" + class_name +
                             "\" first or name an existing one" + ExistingClasses(source, mode));
      }
    } else if (ref_changed) {
      c.error = cls.error();
    }
    return c;
  }
  const json::object* meta = ObjectField(cls->get(), "metadata");
  if (ref_changed && meta != nullptr && meta->contains("deletionTimestamp")) {
    c.problems.push_back("spec.nodeClassRef.name \"" + class_name +
                         "\" names a GPUNodeClass that is being deleted; name another class");
  }
  if (const json::object* cspec = ObjectField(cls->get(), "spec")) {
    std::vector<std::string> more = gpu::PoolClassProblems(spec, class_name, *cspec);
    c.problems.insert(c.problems.end(), more.begin(), more.end());
  }
  return c;
}

Decision ValidatePool(const json::object& request, const json::object& spec, bool create,
                      ObjectSource& source, bool allow_live) {
  Decision d;
  const json::object* obj = ObjectField(&request, "object");
  std::string what =
      "GPUNodePool " + std::string(StringField(&request, "namespace")) + "/" + NameOf(request, obj);
  gpu::Findings f = gpu::PoolSpecFindings(spec);
  d.warnings = std::move(f.warnings);

  std::string class_name(StringField(ObjectField(&spec, "nodeClassRef"), "name"));
  const json::object* old_spec = ObjectField(ObjectField(&request, "oldObject"), "spec");
  bool ref_changed =
      create || StringField(ObjectField(old_spec, "nodeClassRef"), "name") != class_name;
  if (!class_name.empty()) {
    ClassCheck c =
        CheckClass(spec, class_name, ref_changed, source, ObjectSource::Mode::kCachedOnly);
    // Not cached, or a refusal read from the cache: decided on a live read.
    if (c.not_cached || !c.problems.empty()) {
      if (!allow_live) {
        d.needs_live = true;
        return d;
      }
      c = CheckClass(spec, class_name, ref_changed, source, ObjectSource::Mode::kLive);
    }
    if (c.error) {
      d.allowed = false;
      d.code = 503;
      d.reason = "ServiceUnavailable";
      d.message = what + ": could not read GPUNodeClass \"" + class_name +
                  "\" to check the pool against it (" + c.error->message + "); try again";
      return d;
    }
    f.problems.insert(f.problems.end(), c.problems.begin(), c.problems.end());
  }
  if (f.problems.empty()) return d;
  Decision refused = Refuse(what, f.problems);
  refused.warnings = std::move(d.warnings);
  return refused;
}

Decision ValidateClass(const json::object& request, const json::object& spec, bool create,
                       ObjectSource& source, bool allow_live) {
  Decision d;
  const json::object* obj = ObjectField(&request, "object");
  std::string what = "GPUNodeClass " + NameOf(request, obj);
  gpu::Findings f = gpu::ClassSpecFindings(spec);
  if (!f.problems.empty()) {
    Decision refused = Refuse(what, f.problems);
    refused.warnings = std::move(f.warnings);
    return refused;
  }
  d.warnings = std::move(f.warnings);

  // A new or lower maxHourlyCost: warn about the pools it leaves priced above it.
  std::string_view cost = StringField(ObjectField(&spec, "limits"), "maxHourlyCost");
  if (cost.empty()) return d;
  if (!create) {
    std::string_view old_cost =
        StringField(ObjectField(ObjectField(ObjectField(&request, "oldObject"), "spec"), "limits"),
                    "maxHourlyCost");
    auto now = gpu::ParseUsd(cost);
    auto before = gpu::ParseUsd(old_cost);
    if (!old_cost.empty() && now.ok() && before.ok() && *now >= *before) return d;
  }
  // Warnings only: the cache, however stale, is good enough; unsynced means a live list.
  auto pools = source.List(gpu::GPUNodePools(), ObjectSource::Mode::kCachedOnly);
  if (!pools.ok() && pools.error().reason == ObjectSource::kNotCached) {
    if (!allow_live) {
      d.needs_live = true;
      return d;
    }
    pools = source.List(gpu::GPUNodePools(), ObjectSource::Mode::kLive);
  }
  if (!pools.ok()) {
    d.warnings.push_back(
        "could not list the GPUNodePools to check them against the new "
        "limits.maxHourlyCost (" +
        pools.error().message + ")");
    return d;
  }
  std::vector<const json::object*> views;
  views.reserve(pools->size());
  for (const ObjectPtr& p : *pools) views.push_back(p.get());
  std::vector<std::string> w = gpu::PoolsAboveClassCost(NameOf(request, obj), spec, views);
  d.warnings.insert(d.warnings.end(), w.begin(), w.end());
  return d;
}

}  // namespace

Decision ValidateTgp(const json::object& request, ObjectSource& source, bool allow_live) {
  Decision d;
  std::string_view op = StringField(&request, "operation");
  const json::object* kind = ObjectField(&request, "kind");
  std::string_view k = StringField(kind, "kind");
  if ((op != "CREATE" && op != "UPDATE") || StringField(kind, "group") != "tgp.io" ||
      (k != "GPUNodePool" && k != "GPUNodeClass") ||
      !StringField(&request, "subResource").empty()) {
    return d;
  }
  const json::object* spec = ObjectField(ObjectField(&request, "object"), "spec");
  if (spec == nullptr) {
    d.allowed = false;
    d.code = 400;
    d.reason = "BadRequest";
    d.message = std::string(k) + " has no spec";
    return d;
  }
  if (op == "UPDATE") {
    // Metadata-only updates (finalizers during deletion) pass even for an object that predates a
    // stricter rule.
    const json::object* old_spec = ObjectField(ObjectField(&request, "oldObject"), "spec");
    if (old_spec != nullptr && *old_spec == *spec) return d;
  }
  if (k == "GPUNodePool") return ValidatePool(request, *spec, op == "CREATE", source, allow_live);
  return ValidateClass(request, *spec, op == "CREATE", source, allow_live);
}

}  // namespace hyperslice::webhook::internal
