#include "src/kube/scheduling.h"

#include <algorithm>
#include <charconv>

#include <boost/json.hpp>

#include "src/base/json.h"

namespace hyperslice::kube {

namespace json = boost::json;
using jsonfield::StringValue;

namespace {

std::optional<int64_t> Int(std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

Result<std::map<std::string, Quantity>> QuantitiesOf(const json::value* v, std::string_view where) {
  std::map<std::string, Quantity> out;
  if (!v || !v->is_object()) return out;
  for (const auto& [name, q] : v->get_object()) {
    std::string text;
    if (q.is_string()) {
      text = std::string(q.get_string());
    } else if (q.is_int64()) {
      text = std::to_string(q.get_int64());
    } else if (q.is_uint64()) {
      text = std::to_string(q.get_uint64());
    } else {
      return Error::Make(Error::Code::kInvalidArgument,
                         std::string(where) + "." + std::string(name) + ": not a quantity");
    }
    auto parsed = Quantity::Parse(text);
    if (!parsed.ok()) {
      return Error::Make(
          Error::Code::kInvalidArgument,
          std::string(where) + "." + std::string(name) + ": " + parsed.error().message);
    }
    out.emplace(std::string(name), *parsed);
  }
  return out;
}

// A container's requests, with limits standing in for requests it does not set (the API server's
// defaulting does the same for every resource).
Result<std::map<std::string, Quantity>> ContainerRequests(const json::object& c,
                                                          const std::string& where) {
  std::map<std::string, Quantity> out;
  const auto* res = c.if_contains("resources");
  if (!res || !res->is_object()) return out;
  auto limits = QuantitiesOf(res->get_object().if_contains("limits"), where + ".limits");
  if (!limits.ok()) return limits.error();
  auto requests = QuantitiesOf(res->get_object().if_contains("requests"), where + ".requests");
  if (!requests.ok()) return requests.error();
  out = *limits;
  for (const auto& [k, v] : *requests) out.insert_or_assign(k, v);
  return out;
}

}  // namespace

bool Tolerates(const Toleration& t, const Taint& taint) {
  if (!t.effect.empty() && t.effect != taint.effect) return false;
  if (!t.key.empty() && t.key != taint.key) return false;
  if (t.op == "Exists") return true;
  if (t.op.empty() || t.op == "Equal") return t.key.empty() ? false : t.value == taint.value;
  return false;
}

std::vector<Taint> Untolerated(const std::vector<Toleration>& tolerations,
                               const std::vector<Taint>& taints) {
  std::vector<Taint> out;
  for (const auto& taint : taints) {
    if (taint.effect != "NoSchedule" && taint.effect != "NoExecute") continue;
    bool ok = std::any_of(tolerations.begin(), tolerations.end(),
                          [&](const Toleration& t) { return Tolerates(t, taint); });
    if (!ok) out.push_back(taint);
  }
  return out;
}

bool Matches(const Requirement& r, const Labels& labels) {
  auto it = labels.find(r.key);
  bool has = it != labels.end();
  if (r.op == "In") {
    return has && std::find(r.values.begin(), r.values.end(), it->second) != r.values.end();
  }
  if (r.op == "NotIn") {
    return !has || std::find(r.values.begin(), r.values.end(), it->second) == r.values.end();
  }
  if (r.op == "Exists") return has;
  if (r.op == "DoesNotExist") return !has;
  if (r.op == "Gt" || r.op == "Lt") {
    if (!has || r.values.size() != 1) return false;
    auto a = Int(it->second), b = Int(r.values[0]);
    if (!a || !b) return false;
    return r.op == "Gt" ? *a > *b : *a < *b;
  }
  return false;
}

bool MatchesAll(const std::vector<Requirement>& rs, const Labels& labels) {
  return std::all_of(rs.begin(), rs.end(),
                     [&](const Requirement& r) { return Matches(r, labels); });
}

std::vector<Taint> TaintsFrom(const json::value* v) {
  std::vector<Taint> out;
  if (!v || !v->is_array()) return out;
  for (const auto& t : v->get_array()) {
    if (!t.is_object()) continue;
    const auto& o = t.get_object();
    out.push_back({StringValue(o, "key"), StringValue(o, "value"), StringValue(o, "effect")});
  }
  return out;
}

std::vector<Toleration> TolerationsFrom(const json::value* v) {
  std::vector<Toleration> out;
  if (!v || !v->is_array()) return out;
  for (const auto& t : v->get_array()) {
    if (!t.is_object()) continue;
    const auto& o = t.get_object();
    Toleration tol{StringValue(o, "key"), StringValue(o, "operator"), StringValue(o, "value"),
                   StringValue(o, "effect")};
    if (tol.op.empty()) tol.op = "Equal";
    out.push_back(std::move(tol));
  }
  return out;
}

Result<std::vector<Requirement>> RequirementsFrom(const json::value* v) {
  std::vector<Requirement> out;
  if (!v) return out;
  if (!v->is_array())
    return Error::Make(Error::Code::kInvalidArgument, "matchExpressions: not a list");
  for (const auto& e : v->get_array()) {
    if (!e.is_object()) {
      return Error::Make(Error::Code::kInvalidArgument, "matchExpressions: not an object");
    }
    const auto& o = e.get_object();
    Requirement r{StringValue(o, "key"), StringValue(o, "operator"), {}};
    if (const auto* vals = o.if_contains("values"); vals && vals->is_array()) {
      for (const auto& x : vals->get_array()) {
        if (x.is_string()) r.values.emplace_back(x.get_string());
      }
    }
    static const char* kOps[] = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"};
    if (std::none_of(std::begin(kOps), std::end(kOps),
                     [&](const char* op) { return r.op == op; })) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "matchExpressions: operator \"" + r.op + "\" on key \"" + r.key +
                             "\" is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt");
    }
    out.push_back(std::move(r));
  }
  return out;
}

Result<PodPlacement> PlacementOf(const json::object& pod) {
  PodPlacement p;
  const auto* specv = pod.if_contains("spec");
  if (!specv || !specv->is_object()) return p;
  const auto& spec = specv->get_object();
  if (const auto* ns = spec.if_contains("nodeSelector"); ns && ns->is_object()) {
    for (const auto& [k, v] : ns->get_object()) {
      if (v.is_string()) p.node_selector[std::string(k)] = std::string(v.get_string());
    }
  }
  p.tolerations = TolerationsFrom(spec.if_contains("tolerations"));
  // affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms
  const json::value* terms = nullptr;
  if (const auto* a = spec.if_contains("affinity"); a && a->is_object()) {
    if (const auto* na = a->get_object().if_contains("nodeAffinity"); na && na->is_object()) {
      if (const auto* req =
              na->get_object().if_contains("requiredDuringSchedulingIgnoredDuringExecution");
          req && req->is_object()) {
        terms = req->get_object().if_contains("nodeSelectorTerms");
      }
    }
  }
  if (terms && terms->is_array()) {
    for (const auto& term : terms->get_array()) {
      if (!term.is_object()) continue;
      auto rs = RequirementsFrom(term.get_object().if_contains("matchExpressions"));
      if (!rs.ok()) return rs.error();
      p.required_terms.push_back(std::move(*rs));
    }
  }
  // Effective requests.
  auto add_max = [](std::map<std::string, Quantity>& into,
                    const std::map<std::string, Quantity>& r) {
    for (const auto& [k, v] : r) {
      auto it = into.find(k);
      if (it == into.end() || it->second < v) into.insert_or_assign(k, v);
    }
  };
  std::map<std::string, Quantity> sum;
  if (const auto* cs = spec.if_contains("containers"); cs && cs->is_array()) {
    int i = 0;
    for (const auto& c : cs->get_array()) {
      if (!c.is_object()) continue;
      auto r = ContainerRequests(c.get_object(),
                                 "spec.containers[" + std::to_string(i++) + "].resources");
      if (!r.ok()) return r.error();
      for (const auto& [k, v] : *r) {
        auto it = sum.find(k);
        int64_t prev = it == sum.end() ? 0 : it->second.MilliValue();
        sum.insert_or_assign(k, Quantity::FromMilli(prev + v.MilliValue()));
      }
    }
  }
  p.requests = sum;
  if (const auto* cs = spec.if_contains("initContainers"); cs && cs->is_array()) {
    int i = 0;
    for (const auto& c : cs->get_array()) {
      if (!c.is_object()) continue;
      auto r = ContainerRequests(c.get_object(),
                                 "spec.initContainers[" + std::to_string(i++) + "].resources");
      if (!r.ok()) return r.error();
      add_max(p.requests, *r);
    }
  }
  auto overhead = QuantitiesOf(spec.if_contains("overhead"), "spec.overhead");
  if (!overhead.ok()) return overhead.error();
  for (const auto& [k, v] : *overhead) {
    auto it = p.requests.find(k);
    int64_t prev = it == p.requests.end() ? 0 : it->second.MilliValue();
    p.requests.insert_or_assign(k, Quantity::FromMilli(prev + v.MilliValue()));
  }
  return p;
}

bool NodeMatches(const PodPlacement& p, const Labels& labels) {
  for (const auto& [k, v] : p.node_selector) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  if (p.required_terms.empty()) return true;
  return std::any_of(p.required_terms.begin(), p.required_terms.end(),
                     [&](const std::vector<Requirement>& t) { return MatchesAll(t, labels); });
}

}  // namespace hyperslice::kube
