// The shared /control endpoint of the GPU marketplace simulators (see market.h).
#include <string>

#include <boost/json.hpp>

#include "sim/market/market.h"
#include "src/base/json.h"

namespace hyperslice::sim::market {

namespace json = boost::json;
using jsonfield::NumberField;
using jsonfield::StringValue;

namespace {

ControlResponse Json(int status, const json::value& v) { return {status, json::serialize(v)}; }

ControlResponse Bad(std::string message) {
  return Json(400, json::object{{"error", std::move(message)}});
}

std::optional<Fault::Kind> ParseKind(std::string_view k) {
  if (k == "server_error") return Fault::Kind::kServerError;
  if (k == "unavailable") return Fault::Kind::kUnavailable;
  if (k == "rate_limited") return Fault::Kind::kRateLimited;
  if (k == "unauthorized") return Fault::Kind::kUnauthorized;
  if (k == "capacity") return Fault::Kind::kCapacity;
  if (k == "swallow") return Fault::Kind::kSwallow;
  if (k == "drop") return Fault::Kind::kDrop;
  return std::nullopt;
}

}  // namespace

std::optional<ControlResponse> HandleControl(Market& market, const std::string& method,
                                             const std::string& path, const std::string& body) {
  constexpr std::string_view kPrefix = "/control/";
  if (path.rfind(kPrefix, 0) != 0) return std::nullopt;
  std::string rest = path.substr(kPrefix.size());
  json::object in;
  if (method == "POST") {
    boost::system::error_code ec;
    auto v = json::parse(body, ec);
    if (ec || !v.is_object()) return Bad("body must be a JSON object");
    in = std::move(v.get_object());
  }
  if (method == "GET" && rest == "counters") {
    json::object o;
    for (const auto& [k, v] : market.Counters()) o[k] = v;
    return Json(200, o);
  }
  if (method == "GET" && rest == "state") return Json(200, market.Dump());
  if (method == "GET" && rest == "ledger") {
    json::array entries;
    double total = 0;
    for (const auto& e : market.Ledger()) {
      total += e.Cost();
      entries.push_back(json::object{{"instanceId", e.instance_id},
                                     {"listingId", e.listing_id},
                                     {"owner", e.owner},
                                     {"priceUsd", static_cast<double>(e.price) / 1e6},
                                     {"spot", e.spot},
                                     {"seconds", e.seconds},
                                     {"costUsd", e.Cost()}});
    }
    return Json(200, json::object{{"entries", std::move(entries)}, {"totalUsd", total}});
  }
  if (method == "POST" && rest == "listings") {
    auto l = ListingFromJson(in);
    if (!l.ok()) return Bad(l.error().message);
    market.SetListing(*l);
    return Json(200, ToJson(*l));
  }
  if (method == "DELETE" && rest.rfind("listings/", 0) == 0) {
    if (!market.RemoveListing(rest.substr(9)))
      return Json(404, json::object{{"error", "no such listing"}});
    return Json(200, json::object{});
  }
  if (method == "POST" && rest == "faults") {
    auto kind = ParseKind(StringValue(in, "kind"));
    if (!kind) {
      return Bad(
          "kind must be one of server_error, unavailable, rate_limited, unauthorized, "
          "capacity, swallow, drop");
    }
    Fault f;
    f.kind = *kind;
    if (auto r = NumberField(in, "rate")) f.rate = *r;
    if (auto c = NumberField(in, "count")) f.count = static_cast<int>(*c);
    std::string m = StringValue(in, "method");
    market.SetFault(m.empty() ? "*" : m, f);
    return Json(200, json::object{});
  }
  if (method == "DELETE" && rest == "faults") {
    market.ClearFaults();
    return Json(200, json::object{});
  }
  if (method == "POST" && rest == "latency") {
    auto ms = NumberField(in, "ms");
    if (!ms || *ms < 0) return Bad("ms (>= 0) is required");
    std::string m = StringValue(in, "method");
    market.SetLatency(m.empty() ? "*" : m, std::chrono::milliseconds(static_cast<int64_t>(*ms)));
    return Json(200, json::object{});
  }
  if (method == "POST" && rest == "api-keys") {
    std::string key = StringValue(in, "key"), account = StringValue(in, "account");
    if (key.empty() || account.empty()) return Bad("key and account are required");
    market.SetApiKey(key, account);
    return Json(200, json::object{});
  }
  if (method == "POST" && rest == "reclaim") {
    if (!market.Reclaim(StringValue(in, "id"))) {
      return Json(409, json::object{{"error", "no running interruptible instance with that id"}});
    }
    return Json(200, json::object{});
  }
  return Json(404, json::object{{"error", "no control route " + method + " " + path}});
}

}  // namespace hyperslice::sim::market
