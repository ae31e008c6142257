// GPUNodeClass / GPUNodePool rules beyond the CRDs: templates, tgp.io/ requirements, prices.
#include "src/gpu/validation.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "src/base/json.h"
#include "src/base/strings.h"
#include "src/gpu/normalize.h"
#include "src/gpu/planner.h"
#include "src/gpu/provider.h"
#include "src/gpu/template_vars.h"

namespace hyperslice::gpu {
namespace json = boost::json;
using jsonfield::ArrayField;
using jsonfield::ObjectField;
namespace {

constexpr std::string_view kTgpPrefix = "tgp.io/";

// The string at `key` when it is one ("" included), nullopt when absent or not a string: the rules
// check only what was written, so they tell the two apart (jsonfield::StringField does not).
std::optional<std::string_view> StringAt(const json::object* o, std::string_view key) {
  const json::value* v = o != nullptr ? o->if_contains(key) : nullptr;
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return std::string_view(v->get_string());
}

template <typename Container>
std::string Join(const Container& items) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

// Edit distance, case-insensitive (both strings are short: names and label values).
size_t Distance(std::string_view a, std::string_view b) {
  std::string x = AsciiLower(a), y = AsciiLower(b);
  std::vector<size_t> row(y.size() + 1);
  for (size_t j = 0; j <= y.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= x.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= y.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (x[i - 1] == y[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[y.size()];
}

// The known name nearest to `s` when it is close enough to be a typo or a prefix of it, else "".
template <typename Container>
std::string Nearest(std::string_view s, const Container& known) {
  if (s.size() > 64) return "";
  // A known name beginning with what was written ("lambda" for lambdalabs, "vast" for vastai).
  if (s.size() >= 3) {
    for (const auto& k : known) {
      std::string_view kv(k);
      if (kv.size() > s.size() && AsciiLower(kv.substr(0, s.size())) == AsciiLower(s))
        return std::string(k);
    }
  }
  std::string best;
  size_t best_d = std::max<size_t>(2, s.size() / 3) + 1;
  for (const auto& k : known) {
    size_t d = Distance(s, k);
    if (d < best_d) {
      best_d = d;
      best = std::string(k);
    }
  }
  return best;
}

std::string DidYouMean(const std::string& nearest) {
  return nearest.empty() ? "" : " (did you mean " + QuoteForMessage(nearest) + "?)";
}

const std::vector<std::string>& ProviderNames() {
  static const std::vector<std::string> names = {kRunPod, kLambda, kPaperspace, kVast};
  return names;
}

void TemplateFieldProblems(const json::object* talos, const std::string& field,
                           std::vector<std::string>& problems) {
  std::optional<std::string_view> tmpl = StringAt(talos, "machineConfigTemplate");
  if (!tmpl) return;
  std::vector<std::string> p = TemplateProblems(field + ".machineConfigTemplate", *tmpl);
  problems.insert(problems.end(), p.begin(), p.end());
}

// The values of requirement `req` (index i) on a tgp.io/ key with a closed set of values.
void RequirementValueFindings(const json::object& req, const std::string& at, std::string_view key,
                              Findings& f) {
  std::string_view op = StringAt(&req, "operator").value_or("");
  const bool named =
      key == kLabelGpuType || key == kLabelRegion || key == kLabelProvider || key == kLabelSpot;
  if (named && (op == "Gt" || op == "Lt")) {
    f.problems.push_back(at + ": Gt and Lt compare integers, and " + std::string(key) +
                         " values are names; use In or NotIn");
    return;
  }
  if (op != "In" && op != "NotIn") return;
  const json::array* values = ArrayField(&req, "values");
  if (values == nullptr) return;
  for (size_t j = 0; j < values->size(); ++j) {
    if (!(*values)[j].is_string()) continue;
    std::string_view v = (*values)[j].get_string();
    std::string where = at + ".values[" + std::to_string(j) + "] " + QuoteForMessage(v);
    if (key == kLabelProvider) {
      if (std::find(ProviderNames().begin(), ProviderNames().end(), v) == ProviderNames().end()) {
        f.problems.push_back(where + " is not a provider; use one of " + Join(ProviderNames()) +
                             DidYouMean(Nearest(v, ProviderNames())));
      }
    } else if (key == kLabelRegion) {
      const auto& known = KnownRegions();
      if (std::find(known.begin(), known.end(), v) == known.end()) {
        f.problems.push_back(where +
                             " is not a normalised region (machines are labelled with those, "
                             "not with the provider's own region names); use one of " +
                             Join(known) + DidYouMean(Nearest(v, known)));
      }
    } else if (key == kLabelGpuType) {
      const auto& known = KnownGpuTypes();
      if (std::find(known.begin(), known.end(), v) == known.end()) {
        f.warnings.push_back(where +
                             " is not a GPU type the normalisation tables know; it matches only "
                             "a GPU the tables do not know yet and that a provider spells "
                             "exactly so" +
                             DidYouMean(Nearest(v, known)) + "; known: " + Join(known));
      }
    } else if (key == kLabelSpot) {
      if (v != "true" && v != "false") {
        f.problems.push_back(where + " is not a " + std::string(kLabelSpot) +
                             " value; use \"true\" or \"false\"");
      }
    }
  }
}

}  // namespace

const std::vector<std::string>& KnownLabelKeys() {
  static const std::vector<std::string> keys = {kLabelGpuType, kLabelRegion,   kLabelProvider,
                                                kLabelSpot,    kLabelNodePool, kLabelProvisioned};
  return keys;
}

std::vector<std::string> TemplateProblems(std::string_view field, std::string_view tmpl) {
  std::vector<std::string> problems;
  auto parts = ParseTemplate(tmpl);
  if (!parts.ok()) {
    problems.push_back(std::string(field) + " does not parse, " + parts.error().message);
    return problems;
  }
  // Each unknown variable once, at its first line.
  std::map<std::string_view, int> unknown;
  std::vector<std::string_view> order;
  for (const TemplatePart& p : *parts) {
    if (p.kind != TemplatePart::Kind::kVariable || IsTemplateVar(p.text)) continue;
    if (unknown.emplace(p.text, p.line).second) order.push_back(p.text);
  }
  if (order.empty()) return problems;
  std::string msg = std::string(field) + " uses " +
                    (order.size() == 1 ? "an unknown variable: " : "unknown variables: ");
  for (size_t i = 0; i < order.size() && i < 10; ++i) {
    if (i > 0) msg += ", ";
    msg += "{{." + std::string(order[i]) + "}} (line " + std::to_string(unknown[order[i]]);
    std::string nearest = Nearest(order[i], kTemplateVars);
    if (!nearest.empty()) msg += ", did you mean {{." + nearest + "}}?";
    msg += ")";
  }
  if (order.size() > 10) msg += " and " + std::to_string(order.size() - 10) + " more";
  msg += "; the known variables are " + TemplateVarList();
  problems.push_back(std::move(msg));
  return problems;
}

Findings ClassSpecFindings(const json::object& spec) {
  Findings f;
  TemplateFieldProblems(ObjectField(&spec, "talosConfig"), "spec.talosConfig", f.problems);
  if (const json::array* providers = ArrayField(&spec, "providers")) {
    for (size_t i = 0; i < providers->size(); ++i) {
      const json::object* p = (*providers)[i].if_object();
      TemplateFieldProblems(ObjectField(p, "talosConfig"),
                            "spec.providers[" + std::to_string(i) + "].talosConfig", f.problems);
    }
  }
  return f;
}

Findings PoolSpecFindings(const json::object& spec) {
  Findings f;
  const json::array* reqs =
      ArrayField(ObjectField(ObjectField(&spec, "template"), "spec"), "requirements");
  for (size_t i = 0; reqs != nullptr && i < reqs->size(); ++i) {
    const json::object* req = (*reqs)[i].if_object();
    std::optional<std::string_view> key = StringAt(req, "key");
    if (!key || key->substr(0, kTgpPrefix.size()) != kTgpPrefix) continue;
    std::string at = "spec.template.spec.requirements[" + std::to_string(i) + "]";
    const auto& known = KnownLabelKeys();
    if (std::find(known.begin(), known.end(), *key) == known.end()) {
      f.problems.push_back(at + ".key " + QuoteForMessage(*key) +
                           " is not a tgp.io label hyperslice puts on its machines, so no "
                           "machine could satisfy it; use one of " +
                           Join(known) + DidYouMean(Nearest(*key, known)));
      continue;
    }
    RequirementValueFindings(*req, at, *key, f);
  }
  std::optional<std::string_view> price = StringAt(&spec, "maxHourlyPrice");
  std::optional<std::string_view> cost = StringAt(ObjectField(&spec, "limits"), "maxHourlyCost");
  if (price && cost) {
    auto p = ParseUsd(*price);
    auto c = ParseUsd(*cost);
    if (p.ok() && c.ok() && *p > *c) {
      f.problems.push_back("spec.maxHourlyPrice " + QuoteForMessage(*price) +
                           " is above the pool's own limits.maxHourlyCost " +
                           QuoteForMessage(*cost) +
                           ", so no machine could be rented; lower maxHourlyPrice to at most " +
                           FormatUsd(*c) + " or raise limits.maxHourlyCost");
    }
  }
  return f;
}

std::vector<std::string> PoolClassProblems(const json::object& pool_spec,
                                           std::string_view class_name,
                                           const json::object& class_spec) {
  std::vector<std::string> problems;
  std::optional<std::string_view> price = StringAt(&pool_spec, "maxHourlyPrice");
  std::optional<std::string_view> cost =
      StringAt(ObjectField(&class_spec, "limits"), "maxHourlyCost");
  if (!price || !cost) return problems;
  auto p = ParseUsd(*price);
  auto c = ParseUsd(*cost);
  if (p.ok() && c.ok() && *p > *c) {
    problems.push_back("spec.maxHourlyPrice " + QuoteForMessage(*price) +
                       " is above GPUNodeClass " + QuoteForMessage(class_name) +
                       "'s limits.maxHourlyCost " + QuoteForMessage(*cost) +
                       ", so no machine of this pool could be rented; lower maxHourlyPrice to at "
                       "most " +
                       FormatUsd(*c) + " or raise the class's limits.maxHourlyCost");
  }
  return problems;
}

std::vector<std::string> PoolsAboveClassCost(std::string_view class_name,
                                             const json::object& class_spec,
                                             const std::vector<const json::object*>& pools) {
  std::vector<std::string> warnings;
  std::optional<std::string_view> cost =
      StringAt(ObjectField(&class_spec, "limits"), "maxHourlyCost");
  if (!cost) return warnings;
  auto c = ParseUsd(*cost);
  if (!c.ok()) return warnings;
  for (const json::object* pool : pools) {
    const json::object* spec = ObjectField(pool, "spec");
    if (StringAt(ObjectField(spec, "nodeClassRef"), "name").value_or("") != class_name) continue;
    std::optional<std::string_view> price = StringAt(spec, "maxHourlyPrice");
    if (!price) continue;
    auto p = ParseUsd(*price);
    if (!p.ok() || *p <= *c) continue;
    const json::object* meta = ObjectField(pool, "metadata");
    warnings.push_back("GPUNodePool " + std::string(StringAt(meta, "namespace").value_or("")) +
                       "/" + std::string(StringAt(meta, "name").value_or("")) +
                       " has maxHourlyPrice " + QuoteForMessage(*price) +
                       " above this class's limits.maxHourlyCost " + QuoteForMessage(*cost) +
                       ": it cannot rent a machine until its maxHourlyPrice is at most " +
                       FormatUsd(*c) + " or the class's limit is raised");
  }
  std::sort(warnings.begin(), warnings.end());
  return warnings;
}

}  // namespace hyperslice::gpu
