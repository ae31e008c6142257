// The RunPod client's response decoders and request encoders (internal: the client, its tests and
// the fuzz target use them). Every decoder takes the whole HTTP body, never throws, and checks
// GraphQL "errors" before "data": RunPod answers failures with HTTP 200 and an errors array.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/result.h"
#include "src/gpu/provider.h"

namespace hyperslice::gpu::providers::runpod {

// The env variable that carries our tags on a pod (RunPod pods have no tags): the tags as
// application/x-www-form-urlencoded pairs ("tgp.io%2Fcluster=c1&tgp.io%2Fclaim=uid").
inline constexpr char kTagsEnv[] = "HYPERSLICE_TAGS";
std::string EncodeTags(const std::map<std::string, std::string>& tags);
// Malformed pairs are skipped (a pod env someone else edited must not break List()).
std::map<std::string, std::string> DecodeTags(std::string_view encoded);

// A string as a GraphQL string literal (quotes included; ", \ and control characters escaped).
std::string GraphQLString(std::string_view s);
// Dollars per hour as a GraphQL Float literal with at most 6 fraction digits ("0.35").
std::string GraphQLUsd(MicroUsd value);

// Classifies a GraphQL errors array (the first error decides) into a typed Error:
//   extensions.code UNAUTHENTICATED, FORBIDDEN              -> kUnauthorized
//   extensions.code GRAPHQL_PARSE_FAILED,
//     GRAPHQL_VALIDATION_FAILED, BAD_USER_INPUT, BAD_REQUEST -> kInvalid
//   extensions.code TOO_MANY_REQUESTS                       -> kRateLimited
//   message "Unauthorized" (RunPod's answer to a key without the permission; no code)
//                                                           -> kUnauthorized
//   message starting "There are no longer any instances available" (RunPod's only signal for no
//     capacity; no code)                                    -> kCapacity
//   anything else                                           -> kInternal
// `http_status` is recorded on the Error (200 for errors in a 200 response).
Error ClassifyErrors(std::string_view body, int http_status);

// The error of a non-2xx answer (the ApiCaller's ErrorDecoder): 401/403 unauthorized, 429 rate
// limited, 5xx transient, other 4xx by the GraphQL errors in the body (kInvalid when none).
Error DecodeHttpError(int status, std::string_view body);

// If the 200 body carries GraphQL errors, the classified error.
std::optional<Error> ErrorsIn(std::string_view body);

struct DataCenter {
  std::string id;        // "US-CA-2"
  std::string location;  // "United States"
};
// {"data":{"dataCenters":[{"id","location"}...]}}
Result<std::vector<DataCenter>> DecodeDataCenters(std::string_view body);

// {"data":{"gpuTypes":[{id, displayName, memoryInGb, secureCloud, communityCloud,
//   lowestPrice{uninterruptablePrice, minimumBidPrice, stockStatus, availableGpuCounts, minVcpu,
//   minMemory}}]}} for one data center -> one offer per GPU count in availableGpuCounts
// (lowestPrice is per GPU for gpuCount 1; whole-pod prices are that times the count). GPU types
// without a lowestPrice or without stock there give no offer. RunPod gives stock as a level
// (attributes["stockStatus"]), not a count, so Offer::available is -1.
Result<std::vector<Offer>> DecodeOffers(std::string_view body, const std::string& data_center_id);

// A Pod object (as selected by the client's pod fields) -> Instance. Errors: kInternal when the
// pod has no id.
Result<Instance> PodToInstance(const boost::json::object& pod);

// {"data":{"pod":{...}|null}} -> the instance, or kNotFound for null.
Result<Instance> DecodePod(std::string_view body, std::string_view field = "pod");
// {"data":{"myself":{"pods":[...]}}}
Result<std::vector<Instance>> DecodePods(std::string_view body);
// {"data":{"myself":{"id":...}}}: ok when the account id is there.
Status DecodeMyself(std::string_view body);

}  // namespace hyperslice::gpu::providers::runpod
