// Sealed runners' workload policy (issue 21 §4, ARCHITECTURE.md §9): which workloads may run on a
// sealed control node and its runners. A WorkloadPolicy (runners.hyperslice.dev/v1alpha1,
// cluster-scoped, named by a sealed ControlNode's spec.workloadPolicy) says
//   - which public keys sign the allowed images: every image must be pinned by digest and carry a
//     cosign signature (simple-signing payload naming that digest, stored in the image's registry
//     under the tag sha256-<hex>.sig) that one of those keys verifies;
//   - the launch policy, as Confidential Space's: whether command/args may override the image's,
//     which environment variables the pod may set, which volume types it may mount;
//   - whether logs may be read.
// The same evaluation runs three times: in the admission webhook, in the control node, and in the
// sealed runner agent (which got the policy at start and measures it), so a pod that passes one
// check by mistake or by design (a direct RunPod) still meets the next one.
//
// Refusals are kForbidden errors whose reason is one of the constants below and whose message
// names the policy, the container and what is wrong. Thread-safety: free functions are pure;
// SignatureSource implementations are thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/result.h"
#include "src/runners/attest/attest.h"
#include "src/runners/registry/registry.h"

namespace hyperslice::runners::policy {

// Error::reason of each refusal; the control node uses it as the pod's Refused reason.
inline constexpr char kReasonImageNotByDigest[] = "ImageNotByDigest";
inline constexpr char kReasonImageUnsigned[] = "ImageUnsigned";
inline constexpr char kReasonImageUntrusted[] = "ImageSignatureUntrusted";
inline constexpr char kReasonCommandOverride[] = "CommandOverrideForbidden";
inline constexpr char kReasonEnvOverride[] = "EnvOverrideForbidden";
inline constexpr char kReasonMountType[] = "MountTypeForbidden";
inline constexpr char kReasonAdminAccess[] = "AdministrativeAccessForbidden";
inline constexpr char kReasonLogs[] = "LogsForbidden";

// The volume types a pod may name in spec.launchPolicy.allowedMountTypes (the ones linked
// runners support).
inline constexpr const char* kMountTypes[] = {"emptyDir", "secret", "configMap", "downwardAPI",
                                              "projected"};

struct WorkloadPolicy {
  std::string name;
  std::vector<std::string> trusted_keys_pem;  // spec.trustedKeys[].publicKey
  bool allow_logs = false;                    // spec.allowLogs
  bool allow_command_override = false;        // spec.launchPolicy.allowCommandOverride
  // spec.launchPolicy.allowedEnvOverrides: names a pod may set in env ("*": any); envFrom is
  // allowed only with "*" (its names cannot be known before the Secret/ConfigMap is read).
  std::vector<std::string> allowed_env_overrides;
  // spec.launchPolicy.allowedMountTypes; absent: every type runners support.
  std::optional<std::vector<std::string>> allowed_mount_types;
};

// A WorkloadPolicy object (the CR as JSON, or a file holding it). kInvalidArgument naming the
// field: no trusted key, a key that is not a PEM public key, an unknown mount type.
Result<WorkloadPolicy> ParseWorkloadPolicy(const boost::json::object& obj);

// What the policy looks at in a pod, however it arrived (Pod JSON, RunPodRequest).
struct WorkloadContainer {
  std::string name;
  std::string image;
  bool command_override = false;  // command or args set
  std::vector<std::string> env_names;
  bool env_from = false;
};
// What a runner agent sees of a Secret, ConfigMap, downwardAPI or projected volume: files the
// control node resolved. Allowed when the launch policy allows any of those four types.
inline constexpr char kResolvedFilesVolume[] = "files";
struct Workload {
  std::vector<WorkloadContainer> containers;  // init containers first
  std::vector<std::string> volume_types;      // one per volume ("emptyDir", "secret", …)
};
// From a Pod object (metadata + spec); unknown volume types are named as they appear.
Workload WorkloadFromPod(const boost::json::object& pod);

// Launch-policy checks (no network): command override, env names, mount types.
Status CheckSpec(const WorkloadPolicy& policy, const Workload& workload);

// Where an image's cosign signatures come from. Implementations are thread-safe.
class SignatureSource {
 public:
  virtual ~SignatureSource() = default;
  // The signatures stored for `image` (pinned by digest); an empty list when there are none.
  virtual Result<std::vector<attest::CosignSignature>> Signatures(
      const registry::ImageRef& image) = 0;
};
// Reads `<registry>/v2/<repo>/manifests/sha256-<hex>.sig` and its simple-signing layers, each
// checked against its digest.
std::unique_ptr<SignatureSource> NewRegistrySignatureSource(registry::RegistryOptions options);

// Every image pinned by digest and signed by a trusted key. Errors other than kForbidden (a
// registry that cannot be reached) are returned as they are, for the caller to retry.
Status CheckImages(const WorkloadPolicy& policy, const Workload& workload,
                   SignatureSource& signatures);

// CheckSpec, then CheckImages.
Status Check(const WorkloadPolicy& policy, const Workload& workload, SignatureSource& signatures);

}  // namespace hyperslice::runners::policy
