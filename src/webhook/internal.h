// Internals of the webhook shared by its .cc files and unit tests; not part of the module's API.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "src/base/base64.h"
#include "src/tpu/validation.h"
#include "src/webhook/webhook.h"

namespace hyperslice::webhook::internal {

// One admission decision, before it is wrapped in an AdmissionReview response.
struct Decision {
  bool allowed = true;
  int code = 0;  // status.code of a denial
  std::string reason;
  std::string message;
  // The JSONPatch as JSON text (an array of operations, written directly rather than built as a
  // boost::json tree and serialized: the admission hot path); empty: no change.
  std::string patch;
  std::vector<std::string> warnings;
  bool needs_live = false;

  // A refusal: status.code `code`, its reason and message.
  static Decision Denied(int code, std::string reason, std::string message) {
    Decision d;
    d.allowed = false;
    d.code = code;
    d.reason = std::move(reason);
    d.message = std::move(message);
    return d;
  }
};

// Pods on CREATE: the env injection.
Decision MutatePod(const boost::json::object& request, ObjectSource& source,
                   const AdmissionOptions& options, bool allow_live);
// StatefulSets on CREATE/UPDATE (upstream's /mutate, seed 001): TPU_WORKER_HOSTNAMES in the pod
// template's containers. Needs nothing but the StatefulSet itself.
Decision MutateStatefulSet(const boost::json::object& request, const AdmissionOptions& options);

// Shared by both mutations (worker_env.cc).
// Which containers of a pod (template) get the variables, from its labels.
enum class Targets { kNone, kAll, kTpu };
Targets TargetsOf(const boost::json::object* labels);
bool RequestsTpu(const boost::json::object& container);
std::optional<int64_t> ParseNonNegative(std::string_view s);
// How TPU_WORKER_HOSTNAMES spells each worker.
struct HostnameStyle {
  bool fqdn = false;
  std::string port;  // "" or the port number
  std::string ns;
  std::string cluster_domain;
  // Reads the fqdn/port annotations; returns what is wrong with them ("" when nothing).
  std::string Parse(const boost::json::object* annotations);
};
// Appends "<base>-<i>[.<domain>[.<ns>.svc.<cluster domain>]][:<port>]" (no temporaries: one
// admission writes a hostname per replica).
void AppendHostname(std::string& out, std::string_view base, int64_t i, std::string_view domain,
                    const HostnameStyle& style);
// JSONPatch text pieces: `{"name":..,"value":..}`, and `[` or `,` then
// `{"op":..,"path":..,"value":` (the caller writes the value and the closing brace).
void AppendEnvVar(std::string& patch, std::string_view name, std::string_view value);
void OpenPatchOp(std::string& patch, std::string_view op, std::string_view path);
// TPUNodeGroups on CREATE/UPDATE.
Decision ValidateNodeGroup(const boost::json::object& request);
// What is wrong with a TPUNodeGroup spec, one sentence per problem; empty when it is valid.
std::vector<std::string> NodeGroupSpecProblems(const boost::json::object& spec);
// GPUNodePools and GPUNodeClasses (tgp.io) on CREATE/UPDATE: src/gpu/validation.h, plus what needs
// other objects (the pool's class; on a class's new maxHourlyCost, the pools above it). Reads them
// cached first; needs_live when the cache cannot answer or would refuse (a refusal is always
// decided on a live read, so a class created or raised a moment ago is seen).
Decision ValidateTgp(const boost::json::object& request, ObjectSource& source, bool allow_live);

// Pods on CREATE/UPDATE that may land on a sealed control node (runners.hyperslice.dev): its
// WorkloadPolicy's check (src/runners/policy), with the reason in the denial. Always needs_live
// for such pods (signatures are read from registries); others are admitted at once.
Decision ValidateSealedPod(const boost::json::object& request, ObjectSource& source,
                           const AdmissionOptions& options, bool allow_live);

// The project a GCE instance template URI names ("" when it names none).
using tpu::ProjectOfTemplateUri;

// Base64 (RFC 4648, padded) of the response's patch: src/base/base64.h.
using ::hyperslice::AppendBase64;
inline std::string Base64(std::string_view in) { return Base64Encode(in); }
// Appends `s` as a JSON string literal (quotes included; '"', '\\' and control characters escaped,
// as boost::json::serialize does; other bytes as they are, `s` being valid UTF-8 from a parsed
// document or our own text).
void AppendJsonString(std::string& out, std::string_view s);

}  // namespace hyperslice::webhook::internal
