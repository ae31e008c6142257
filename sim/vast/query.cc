// The search query language Vast's /api/v0/bundles/ takes and vast-cli builds
// (vastai/api/query.py parse_query): a JSON object of `field: {op: value}` conditions with
// op in eq, neq, gt, gte, lt, lte, in, notin, plus the special keys order ([[field,
// "asc"|"desc"]]), type ("on-demand"|"bid"|"reserved"), limit, allocated_storage and
// disable_bundling.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "sim/vast/internal.h"

namespace hyperslice::sim::vast::internal {

namespace {

constexpr std::string_view kOps[] = {"eq", "neq", "gt", "gte", "lt", "lte", "in", "notin"};

Error Bad(std::string msg) { return Error::Make(Error::Code::kInvalidArgument, std::move(msg)); }

// vast-cli sends every value it does not recognise as a bool as a string ("num_gpus": {"eq":
// "1"}); Vast compares such strings with numeric fields as numbers.
std::optional<double> Num(const json::value& v) {
  if (const json::string* s = v.if_string()) {
    if (s->empty()) return std::nullopt;
    std::string str(*s);
    char* end = nullptr;
    double d = std::strtod(str.c_str(), &end);
    if (!end || *end != '\0' || !std::isfinite(d)) return std::nullopt;
    return d;
  }
  if (v.is_double()) return v.get_double();
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  if (v.is_bool()) return v.get_bool() ? 1.0 : 0.0;
  return std::nullopt;
}

// "California, US" -> "US": vast-cli documents geolocation filters as two-letter country codes.
std::string_view Country(std::string_view geo) {
  size_t comma = geo.rfind(", ");
  return comma == std::string_view::npos ? geo : geo.substr(comma + 2);
}

bool Equal(std::string_view field, const json::value& have, const json::value& want) {
  if (have.is_null() || want.is_null()) return have.is_null() && want.is_null();
  if (have.is_string() && want.is_string()) {
    std::string_view h = have.get_string(), w = want.get_string();
    if (h == w) return true;
    // openapi.yaml's examples spell GPU names as the CLI takes them: {"eq": "RTX_4090"}.
    if (field == "gpu_name" && h.size() == w.size()) {
      bool same = true;
      for (size_t i = 0; same && i < h.size(); ++i) same = h[i] == (w[i] == '_' ? ' ' : w[i]);
      if (same) return true;
    }
    return field == "geolocation" && w.size() == 2 && Country(h) == w;
  }
  auto h = Num(have), w = Num(want);
  if (h && w) return std::abs(*h - *w) < 1e-9;
  return false;
}

int Compare(const json::value& a, const json::value& b) {
  auto x = Num(a), y = Num(b);
  if (x && y) return *x < *y ? -1 : (*x > *y ? 1 : 0);
  if (a.is_string() && b.is_string()) {
    auto c = a.get_string().compare(b.get_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_null() != b.is_null()) return a.is_null() ? -1 : 1;  // nulls first
  return 0;
}

const json::value& Get(const json::object& row, std::string_view field) {
  static const json::value kNull;
  auto it = row.find(field);
  return it == row.end() ? kNull : it->value();
}

bool Known(const std::vector<std::string>& fields, std::string_view f) {
  return std::find(fields.begin(), fields.end(), f) != fields.end();
}

}  // namespace

Result<Query> ParseQuery(const json::object& q, const std::vector<std::string>& known_fields,
                         bool allow_special_keys) {
  Query out;
  for (const auto& [key, value] : q) {
    std::string_view k = key;
    if (allow_special_keys && k == "order") {
      if (!value.is_array())
        return Bad("Invalid query: order must be a list of [field, direction]");
      for (const auto& e : value.get_array()) {
        const json::array* pair = e.if_array();
        if (!pair || pair->size() != 2 || !(*pair)[0].is_string()) {
          return Bad("Invalid query: order must be a list of [field, direction]");
        }
        std::string field((*pair)[0].get_string());
        if (!Known(known_fields, field)) return Bad("Invalid query: cannot order by " + field);
        const json::string* dir = (*pair)[1].if_string();
        if (!dir || (*dir != "asc" && *dir != "desc")) {
          return Bad("Invalid query: order direction must be asc or desc");
        }
        out.order.emplace_back(std::move(field), *dir == "desc");
      }
      continue;
    }
    if (allow_special_keys && k == "type") {
      const json::string* t = value.if_string();
      // openapi.yaml spells it "ondemand", vast-cli sends "on-demand".
      if (!t || (*t != "on-demand" && *t != "ondemand" && *t != "bid" && *t != "reserved" &&
                 *t != "interruptible")) {
        return Bad("Invalid query: type must be on-demand, bid or reserved");
      }
      out.type = *t == "interruptible" ? "bid" : *t == "ondemand" ? "on-demand" : std::string(*t);
      continue;
    }
    if (allow_special_keys && k == "limit") {
      auto n = Num(value);
      if (!n || value.is_bool() || *n < 1 || *n != std::floor(*n)) {
        return Bad("Invalid query: limit must be a positive integer");
      }
      out.limit = static_cast<int64_t>(std::min(*n, 1.0e9));
      continue;
    }
    if (allow_special_keys && k == "allocated_storage") {
      if (!Num(value) || value.is_bool())
        return Bad("Invalid query: allocated_storage must be a number");
      continue;
    }
    if (allow_special_keys && k == "disable_bundling") {
      if (!value.is_bool()) return Bad("Invalid query: disable_bundling must be a boolean");
      continue;
    }
    if (!Known(known_fields, k)) return Bad("Invalid query: unknown field " + std::string(k));
    const json::object* ops = value.if_object();
    if (!ops) return Bad("Invalid query: must be dict of conditions");
    for (const auto& [op, operand] : *ops) {
      if (std::find(std::begin(kOps), std::end(kOps), std::string_view(op)) == std::end(kOps)) {
        return Bad("Invalid query: unknown operator " + std::string(op) + " for " + std::string(k));
      }
      bool list_op = op == "in" || op == "notin";
      if (list_op != operand.is_array()) {
        return Bad("Invalid query: " + std::string(op) + " for " + std::string(k) +
                   (list_op ? " takes a list" : " takes a single value"));
      }
      if ((op == "gt" || op == "gte" || op == "lt" || op == "lte") && !Num(operand) &&
          !operand.is_string()) {
        return Bad("Invalid query: " + std::string(op) + " for " + std::string(k) +
                   " takes a number");
      }
      out.conditions.push_back({std::string(k), std::string(op), operand});
    }
  }
  return out;
}

bool Matches(const std::vector<Condition>& conditions, const json::object& row) {
  for (const auto& c : conditions) {
    const json::value& have = Get(row, c.field);
    bool ok = false;
    if (c.op == "eq") {
      ok = Equal(c.field, have, c.value);
    } else if (c.op == "neq") {
      ok = !Equal(c.field, have, c.value);
    } else if (c.op == "in" || c.op == "notin") {
      bool found = false;
      for (const auto& w : c.value.get_array()) found = found || Equal(c.field, have, w);
      ok = (c.op == "in") == found;
    } else {
      if (have.is_null()) return false;  // a missing value is neither above nor below
      int cmp = Compare(have, c.value);
      ok = (c.op == "gt" && cmp > 0) || (c.op == "gte" && cmp >= 0) || (c.op == "lt" && cmp < 0) ||
           (c.op == "lte" && cmp <= 0);
    }
    if (!ok) return false;
  }
  return true;
}

void OrderAndLimit(const Query& q, std::vector<json::object>* rows) {
  std::stable_sort(rows->begin(), rows->end(), [&](const json::object& a, const json::object& b) {
    for (const auto& [field, desc] : q.order) {
      int c = Compare(Get(a, field), Get(b, field));
      if (c != 0) return desc ? c > 0 : c < 0;
    }
    return Compare(Get(a, "id"), Get(b, "id")) < 0;
  });
  if (q.limit && rows->size() > static_cast<size_t>(*q.limit)) {
    rows->resize(static_cast<size_t>(*q.limit));
  }
}

std::string ErrorBody(std::string_view code, std::string_view msg, const json::object& extra) {
  json::object o{{"success", false}, {"error", code}, {"msg", msg}};
  for (const auto& [k, v] : extra) o[k] = v;
  return json::serialize(o);
}

}  // namespace hyperslice::sim::vast::internal
