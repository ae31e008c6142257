// Shared between the provisioner (which writes claims) and the claim controller (which launches
// them): the JSON form of OfferRequirements kept in a claim's annotation, and claim accessors.
#pragma once

#include <optional>
#include <string>

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
// A decimal-dollar string field (status.price, limits.maxHourlyCost) as MicroUsd; nullopt when
// absent or malformed.
std::optional<MicroUsd> PriceField(const boost::json::object* o, std::string_view key);
// What a claim costs per hour: its billed price once launched, its planned price before.
MicroUsd ClaimHourlyCost(const boost::json::object& claim);

}  // namespace hyperslice::gpu::internal
