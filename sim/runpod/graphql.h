// A small GraphQL reader for the RunPod simulator: the subset of the GraphQL language (October 2021
// spec) that runpod-python, runpodctl and our client send — one operation (query or mutation,
// optionally named, with variable definitions), nested selection sets, aliases, arguments whose
// values are strings (with escapes and block strings), numbers, booleans, null, enums, lists, input
// objects and $variables (taken from the request's "variables" object).
//
// Why hand-written: no C++ GraphQL library is packaged for this build (Debian's archive has none,
// and the project adds no third-party dependency without asking), and the simulator only needs to
// read requests, not to execute a schema language. Fragments, directives and subscriptions are
// refused with a parse error naming them, so a client that starts sending them fails loudly.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/value.hpp>

#include "src/base/result.h"

namespace hyperslice::sim::runpod::graphql {

struct NamedValue;

struct Value {
  enum class Kind { kNull, kInt, kFloat, kString, kBool, kEnum, kList, kObject, kVariable };
  Kind kind = Kind::kNull;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;  // string, enum name or variable name
  std::vector<Value> list;
  std::vector<NamedValue> fields;                   // input object, in source order
  const Value* Field(std::string_view name) const;  // input object field or nullptr
};

// An input object field (a struct, not std::pair: Value is incomplete inside its own definition).
struct NamedValue {
  std::string name;
  Value value;
};

struct Location {
  int line = 1, column = 1;
};

struct Selection {
  std::string alias;  // empty: none
  std::string name;
  std::vector<std::pair<std::string, Value>> args;
  std::vector<Selection> selections;
  bool has_selection_set = false;
  Location location;
  const std::string& ResponseKey() const { return alias.empty() ? name : alias; }
  const Value* Arg(std::string_view arg) const;
};

struct Document {
  enum class Operation { kQuery, kMutation };
  Operation operation = Operation::kQuery;
  std::string name;
  std::vector<Selection> selections;
};

// A syntax error: message in graphql-js's words ("Syntax Error: Expected Name, found <EOF>.") with
// the location, which the simulator answers with extensions.code GRAPHQL_PARSE_FAILED.
struct ParseError {
  std::string message;
  Location location;
};

struct ParseResult {
  std::unique_ptr<Document> document;  // null on error
  ParseError error;
};

// Parses `source`; $variables are replaced by their values from `variables` (a JSON object; a
// missing variable becomes null).
ParseResult Parse(std::string_view source, const boost::json::object& variables = {});

// A JSON value as a GraphQL value (variables): objects become input objects, strings strings.
Value FromJson(const boost::json::value& v);

}  // namespace hyperslice::sim::runpod::graphql
