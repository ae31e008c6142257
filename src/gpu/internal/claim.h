// Shared between the provisioner (which writes claims) and the claim controller (which launches
// them): the JSON form of OfferRequirements kept in a claim's annotation, and claim accessors.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/result.h"
#include "src/gpu/selection.h"

namespace hyperslice::gpu::internal {

boost::json::object RequirementsToJson(const OfferRequirements& r);
// Errors: kInvalidArgument for a malformed document (a hand-edited annotation).
Result<OfferRequirements> RequirementsFromJson(std::string_view text);

// The claim's pool as "<namespace>/<name>" (from spec.poolRef).
std::string PoolKeyOf(const boost::json::object& claim);
std::string ClassNameOf(const boost::json::object& claim);
// A metadata field as a string ("" when absent): kube::MetaString, owned.
std::string Meta(const boost::json::object& o, std::string_view field);
// A label or an annotation of `o` ("" when absent or not a string).
std::string Label(const boost::json::object& o, std::string_view key);
std::string Annotation(const boost::json::object& o, std::string_view key);
// A decimal-dollar string field (status.price, limits.maxHourlyCost) as MicroUsd; nullopt when
// absent or malformed.
std::optional<MicroUsd> PriceField(const boost::json::object* o, std::string_view key);
// The uids of the pods a claim was created for (annotation kAnnotationNominatedPods, a JSON array
// of strings), so nominations survive a restart of the operator: without it, pods still waiting
// for a claim that is launching are planned again after a crash and get a second machine each —
// and a new machine whose pods are not bound yet would look empty to the disruption controller.
std::vector<std::string> NominatedPods(const boost::json::object& claim);
// What a claim costs per hour: its billed price once launched, its planned price before.
MicroUsd ClaimHourlyCost(const boost::json::object& claim);

}  // namespace hyperslice::gpu::internal
