// Internal parts of the Paperspace simulator.
#pragma once

#include <string>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

namespace hyperslice::sim::paperspace::internal {

// A request body's schema, as the v1 reference gives it (machines-create, startupScripts-create).
// Paperspace validates bodies with zod behind tRPC-OpenAPI: a refusal is 400
// {"code":"BAD_REQUEST","message":"Input validation failed","issues":[<zod issues>]}, and a missing
// required field's issue says "Required" (what `pspace machine create` prints, Paperspace/cli
// issue #78). Unknown keys are refused (strict objects).
enum class Type { kString, kNonEmptyString, kNumber, kBoolean, kStringArray, kEnum };
struct Field {
  const char* name;
  Type type;
  bool required = false;
  std::vector<std::string> options;  // kEnum
};

const std::vector<Field>& CreateMachineSchema();
const std::vector<Field>& CreateStartupScriptSchema();

// The zod issues of `body` against `schema`; empty when valid.
boost::json::array Validate(const boost::json::value& body, const std::vector<Field>& schema);

// The region spellings the v1 API takes (codes and display names) -> the code ("ny2").
std::string RegionCode(const std::string& region);

}  // namespace hyperslice::sim::paperspace::internal
