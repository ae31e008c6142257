// GPUNodeClass and GPUNodePool validation beyond what the CRDs' schema and CEL rules express — the
// rules the validating webhook (src/webhook, path /validate-tgp) applies at admission, as pure
// functions so the operator can apply the same ones to objects that bypassed admission:
//  - a class's Talos machineConfigTemplate (spec.talosConfig and providers[].talosConfig) parses
//    and uses only the variables of template_vars.h;
//  - a pool's template.spec.requirements on tgp.io/ keys name a label the machines carry, with
//    values they can carry (providers by their four names, normalised regions; an unknown GPU type
//    is only a warning: see PoolSpecFindings);
//  - a pool's maxHourlyPrice fits under its own limits.maxHourlyCost and its class's.
// Every problem is one sentence that names the field and says what to write instead.
//
// Thread-safe: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

namespace hyperslice::gpu {

struct Findings {
  std::vector<std::string> problems;  // refuse the object
  std::vector<std::string> warnings;  // admit it, and tell the user
};

// Everything wrong with a machine config template (`field` names it in the messages): a syntax
// error (unclosed "{{", an action that is not {{.Variable}}) or each unknown variable, with the
// known ones and the nearest one.
std::vector<std::string> TemplateProblems(std::string_view field, std::string_view tmpl);

// A GPUNodeClass spec: its templates.
Findings ClassSpecFindings(const boost::json::object& spec);

// A GPUNodePool spec on its own: requirements on tgp.io/ keys and their values; maxHourlyPrice
// above the pool's own limits.maxHourlyCost. A tgp.io/gpu-type value the normalisation tables do
// not know is a warning, not a problem: a GPU the tables do not know yet keeps the provider's
// spelling as its label value (normalize.h), so such a requirement can still match.
Findings PoolSpecFindings(const boost::json::object& spec);

// A pool against its class (`class_spec` of the GPUNodeClass named `class_name`): maxHourlyPrice
// above the class's limits.maxHourlyCost would let no machine of the pool ever be rented.
std::vector<std::string> PoolClassProblems(const boost::json::object& pool_spec,
                                           std::string_view class_name,
                                           const boost::json::object& class_spec);

// For a class whose limits.maxHourlyCost is being set: one warning per pool (full objects; those
// naming another class are skipped) whose maxHourlyPrice is above it. A warning, not a refusal:
// lowering a budget must always be possible at once (the provisioner never exceeds it; those
// pools simply cannot rent until their price or the budget changes).
std::vector<std::string> PoolsAboveClassCost(std::string_view class_name,
                                             const boost::json::object& class_spec,
                                             const std::vector<const boost::json::object*>& pools);

// The tgp.io/ node label keys a requirement may use (planner.h's constants).
const std::vector<std::string>& KnownLabelKeys();

}  // namespace hyperslice::gpu
