// Vast.ai wire shapes, decoded: the /api/v0 and /api/v1 answers the client reads (offers, one
// instance, a page of instances, the create answer, error bodies) and the label that carries our
// name and tags. Internal to the Vast client; here so the fuzz target (test/fuzz/gpu_vast_fuzz.cc)
// and the offer-refresh benchmark call exactly what the client calls.
//
// Sources (cited per function in decode.cc): the Vast.ai docs repository's
// api-reference/openapi.yaml (create instance, destroy/show instance, Error, 429 bodies),
// api-reference/openapi/yaml/auto_get_api_v0_bundles_*.yaml and auto_get_api_v0_instances_*.yaml,
// docs page api-reference/rate-limits-and-errors, and vast-cli 1.9.1 (vastai/api/*.py,
// vastai/data/offer.py, vastai/data/instance.py).
//
// No decoder throws: malformed input is an Error (kInternal) or a field left at its default.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/result.h"
#include "src/gpu/provider.h"
#include "src/net/http.h"

namespace hyperslice::gpu::providers::vast {

// The call an error answer came from: the same status means different things per call
// (a 404 on create is a vanished offer, on delete an instance already gone).
enum class Call { kOffers, kCreate, kGet, kList, kDelete, kUser };

// POST /api/v0/bundles/ -> {"offers":[...]}: every offer, normalised (GPU name by its per-card
// memory, geolocation to region). Unknown names are kept (known = false).
Result<std::vector<Offer>> DecodeOffers(std::string_view body);
// One offer object (exposed for the benchmark's per-offer figure and the fuzz target).
std::optional<Offer> OfferFromJson(const boost::json::object& o);

// GET /api/v0/instances/{id}/ -> {"instances": {...}} or {"instances": null} (not ours / gone).
Result<std::optional<Instance>> DecodeInstance(std::string_view body);

// GET /api/v1/instances/ -> {"instances":[...], "next_token": "..."|null, "total_instances": N}.
struct InstancePage {
  std::vector<Instance> instances;
  std::string next_token;  // empty: last page
};
Result<InstancePage> DecodeInstancePage(std::string_view body);
Instance InstanceFromJson(const boost::json::object& o);

// PUT /api/v0/asks/{id}/ -> {"success": true, "new_contract": N}: the new instance id.
Result<std::string> DecodeCreate(std::string_view body);

// A non-2xx answer as an ErrorKind-carrying Error. Classified by status and the structured
// `error` field ({"success":false,"error":"...","msg":"..."}), never by message text; the
// message keeps Vast's `msg`. 429: retry_after from the Retry-After header, else from the
// body's "endpoint threshold=<seconds>" (Vast's documented hint, rate-limits-and-errors).
Error DecodeError(Call call, const net::Response& response);

// Name and tags in an instance label (Vast's only free-form field stored with an instance and
// returned by every read): "<name> <k>=<v> <k>=<v>...", each part percent-encoded outside
// [A-Za-z0-9._~/:@+-]. Labels are at most kMaxLabel bytes (openapi.yaml, manage instance).
inline constexpr size_t kMaxLabel = 1024;
std::string EncodeLabel(std::string_view name, const std::map<std::string, std::string>& tags);
// Inverse of EncodeLabel. A label that is not ours decodes as a name with no tags.
void DecodeLabel(std::string_view label, std::string* name,
                 std::map<std::string, std::string>* tags);

// Instance state from Vast's three status fields (openapi.yaml Instance; vast-cli show instances
// filters: running, loading, exited, created). `reclaimed` is set for an interruptible instance
// the host stopped while it is meant to run (outbid).
InstanceState StateFrom(std::string_view actual_status, std::string_view intended_status,
                        std::string_view cur_state, bool is_bid, bool* reclaimed);

}  // namespace hyperslice::gpu::providers::vast
