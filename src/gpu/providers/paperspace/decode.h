// Decoders of Paperspace v1 API responses (https://api.paperspace.com/v1, the "Paperspace OpenAPI"
// published in DigitalOcean's Paperspace API reference, whose request and error types the
// Paperspace CLI (Paperspace/cli, api/openapi.ts, errors.ts) generates from). Internal: the client
// and the fuzz target (test/fuzz/gpu_paperspace_fuzz.cc) use them. None throws; every malformed
// input is an Error (kInternal) or, for error bodies, a best-effort ApiError.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"
#include "src/gpu/provider.h"

namespace hyperslice::gpu::providers::paperspace {

// A machine as GET /machines/{id} returns it, and as `items[]` of GET /machines and `data` of
// POST /machines and DELETE /machines/{id}.
struct Machine {
  std::string id;
  std::string name;
  std::string state;  // off|provisioning|starting|ready|stopping|restarting|serviceready|upgrading
  std::string machine_type;
  std::string region;
  std::string public_ip;
  std::string private_ip;
  std::optional<double> usage_rate;  // USD per hour, when the API reports one
};

struct MachinePage {
  std::vector<Machine> items;
  bool has_more = false;
  std::string next_page;  // cursor for ?after=; empty when none
};

// A startup script (POST/GET /startup-scripts). The API never returns the script text.
struct StartupScript {
  std::string id;
  std::string name;
  bool is_run_once = false;
  std::vector<std::string> assigned_machine_ids;
};

struct StartupScriptPage {
  std::vector<StartupScript> items;
  bool has_more = false;
  std::string next_page;
};

// The error body of every v1 route (components.responses.error):
// {"code": "<tRPC code>", "message": "...", "issues"?: [{"message": "..."}]}.
struct ApiError {
  std::string code;     // BAD_REQUEST, UNAUTHORIZED, NOT_FOUND, TOO_MANY_REQUESTS, ...
  std::string message;  // the provider's message; issues appended ("...: Required (name)")
};

Result<Machine> DecodeMachine(std::string_view body);       // GET /machines/{id}
Result<Machine> DecodeMachineEvent(std::string_view body);  // {"event":{...},"data":{machine}}
Result<MachinePage> DecodeMachineList(std::string_view body);
Result<StartupScript> DecodeStartupScript(std::string_view body);
Result<StartupScriptPage> DecodeStartupScriptList(std::string_view body);
// Never fails: a body that is not the documented shape gives the HTTP status text.
ApiError DecodeError(int http_status, std::string_view body);

// The Error a non-2xx answer stands for. `create`: the answer is to POST /machines, where
// Paperspace's out-of-capacity refusal is a 400 whose message says so (the error body has no
// capacity code; see README.md "Errors").
Error ClassifyError(int http_status, std::string_view body, bool create);

InstanceState StateFromPaperspace(std::string_view state);

// Tags travel in the machine's startup-script name (v1 machines have no tags or labels):
// "hyperslice:" + "k=v,k=v" with '%', ',', '=' percent-encoded, keys sorted.
inline constexpr std::string_view kScriptNamePrefix = "hyperslice:";
std::string EncodeTags(const std::map<std::string, std::string>& tags);
// nullopt when `script_name` is not one of ours or is malformed.
std::optional<std::map<std::string, std::string>> DecodeTags(std::string_view script_name);

}  // namespace hyperslice::gpu::providers::paperspace
