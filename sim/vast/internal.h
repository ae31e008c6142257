// Internals of the Vast.ai simulator shared by its source files: the search query language of
// /api/v0/bundles/ and /api/v1/instances/ (field: {op: value}), Vast's error bodies, and the
// offer/instance JSON it renders from the market. Not part of the module's public surface.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "sim/market/market.h"
#include "src/base/result.h"

namespace hyperslice::sim::vast::internal {

namespace json = boost::json;

// One condition of a search: `field {op: value}` with op one of eq, neq, gt, gte, lt, lte, in,
// notin (openapi.yaml GET /api/v0/bundles/ `q`; vast-cli api/query.py parse_query op_names).
struct Condition {
  std::string field;
  std::string op;
  json::value value;
};

struct Query {
  std::vector<Condition> conditions;
  std::vector<std::pair<std::string, bool>> order;  // field, descending
  std::optional<int64_t> limit;
  std::string type = "on-demand";  // on-demand | bid | reserved
};

// Parses a bundles query object. `known_fields` are the fields a condition or an order may name.
// Errors (kInvalidArgument) carry the message Vast answers in its 400 `msg`.
Result<Query> ParseQuery(const json::object& q, const std::vector<std::string>& known_fields,
                         bool allow_special_keys);
// Whether `row` satisfies every condition. A field missing from `row` is null.
bool Matches(const std::vector<Condition>& conditions, const json::object& row);
// Sorts rows by `order` (ties by "id" ascending) and applies `limit`.
void OrderAndLimit(const Query& q, std::vector<json::object>* rows);

// Vast's error body: {"success":false,"error":code,"msg":msg} (openapi.yaml components Error and
// per-call examples), plus extra members (e.g. ask_id).
std::string ErrorBody(std::string_view code, std::string_view msg, const json::object& extra = {});

// Offer fields of POST /api/v0/bundles/ (vast-cli vastai/data/offer.py) for one listing.
// `available`: machines of it that could start now; `type`: the search's pricing type.
json::object OfferJson(const market::Listing& l, int available, std::string_view type);
// Every offer field name a query may use.
const std::vector<std::string>& OfferFields();
// Instance columns a v1 order_by may name, and the stored ones select_filters may.
const std::vector<std::string>& InstanceFields();
const std::vector<std::string>& FilterableInstanceFields();

}  // namespace hyperslice::sim::vast::internal
