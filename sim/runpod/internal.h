// The RunPod simulator's parts: the schema subset it serves (schema.cc), request validation
// against it, and the /graphql handler over the market (api.cc).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "sim/market/simulator.h"
#include "sim/runpod/graphql.h"

namespace hyperslice::sim::runpod {

// A field's or argument's type: `name` is a scalar, enum, object or input type.
struct TypeRef {
  std::string name;
  bool non_null = false;
  bool list = false;
  bool item_non_null = false;
  std::string Spelling() const;  // "String!", "[EnvironmentVariableInput]"
};

struct FieldDef {
  TypeRef type;
  std::map<std::string, TypeRef> args;
};

// The part of RunPod's GraphQL schema (graphql-spec.runpod.io) the simulator serves: the fields
// runpod-python 1.12.0, runpodctl and hyperslice's client select, and the input fields they send.
struct Schema {
  std::map<std::string, std::map<std::string, FieldDef>> objects;  // Query, Mutation, Pod, ...
  std::map<std::string, std::map<std::string, TypeRef>> inputs;
  std::map<std::string, std::set<std::string>> enums;
  std::set<std::string> scalars;
  const FieldDef* Field(const std::string& type, const std::string& field) const;
};
const Schema& RunPodSchema();

// One GraphQL error as RunPod (Apollo Server) answers it.
struct GqlError {
  std::string message;
  std::string code;  // extensions.code
  std::vector<graphql::Location> locations;
  std::vector<std::string> path;
  boost::json::object ToJson() const;
};

// Validates a document against the schema the way graphql-js does (unknown fields and arguments,
// missing or superfluous selections, argument values of the wrong type, unknown input fields,
// required arguments and input fields); every error has code GRAPHQL_VALIDATION_FAILED.
std::vector<GqlError> Validate(const graphql::Document& doc, const Schema& schema);

std::unique_ptr<market::ProviderApi> NewApi(market::Market& market);

}  // namespace hyperslice::sim::runpod
