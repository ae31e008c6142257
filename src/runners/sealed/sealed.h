// Sealed runners (issue 21, ARCHITECTURE.md §9): the names the runner agent and the control node
// share for attestation — measurement names, the canonical workload spec both sides hash, the
// workload's token socket — so that what the agent extends into its TPM is exactly what the
// control node expects from the pod it sent. src/runners/README.md ("Sealed runners").
#pragma once

#include <string>
#include <string_view>

#include "src/runners/agent.pb.h"

namespace hyperslice::runners::sealed {

// Measurement names (attest::Measurement::name). PCR 23 (attest::kAgentPcr) holds the agent's,
// PCR 16 (attest::kWorkloadPcr) the workloads'.
inline constexpr char kAgentBinary[] = "agent/binary";
inline constexpr char kAgentConfig[] = "agent/config";
// "workload/<pod uid>/<container>/image": the image digest's own 32 bytes.
std::string WorkloadImageName(std::string_view pod_uid, std::string_view container);
// "workload/<pod uid>/<container>/spec": SHA-256 of CanonicalWorkloadSpec.
std::string WorkloadSpecName(std::string_view pod_uid, std::string_view container);

// The policy-relevant parts of one container of a pod, as JSON with sorted keys and no spaces:
// image, command, args, env (in order, names and values as resolved by the control node),
// workingDir, mounts (volume, path, subPath, readOnly), tty, stdin, and the pod's hostNetwork
// and restartPolicy. Volume contents (Secrets) are not part of it.
std::string CanonicalWorkloadSpec(const v1::RunPodRequest& pod, const v1::Container& container);

// The digest part ("sha256:<hex>") of an image reference "name@sha256:<hex>"; "" for a tag.
std::string ImageDigest(std::string_view image);

// Where a sealed container finds the agent's token server: a unix socket speaking HTTP/1.1,
// `POST /v1/token` with {"audience": "...", "nonces": ["..."]} answered with the JWT as
// text/plain (as Confidential Space's launcher serves /run/container_launcher/teeserver.sock).
inline constexpr char kTeeServerDir[] = "/run/hyperslice";
inline constexpr char kTeeServerSocket[] = "/run/hyperslice/teeserver.sock";

// Error reasons: an agent without --sealed asked to attest; a token the controller refused.
inline constexpr char kReasonNotSealed[] = "NotSealed";
inline constexpr char kReasonAttestationRefused[] = "AttestationRefused";

}  // namespace hyperslice::runners::sealed
