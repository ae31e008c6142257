// Runners with spec.gce: the operator creates their Compute Engine instance (src/gce), in any
// project/zone, and deletes it when the Runner goes (finalizer kInstanceFinalizer).
//
// The instance boots the agent from its own metadata (`hyperslice runner-agent --gce-metadata`):
// its metadata items carry what linking needs — the link server's address, the runners CA
// bundle that verifies it, the Runner's name and its one-time join token (the Runner's token
// Secret, join_tokens.h). The agent then dials the link server and reports the address control
// nodes dial (agent_address); the instance's private networkIP is recorded for people only.
// Once the token is consumed (the Runner carries kJoinTokenConsumedAnnotation) the item is
// removed from the running instance's metadata (setMetadata, fingerprint-checked), so nothing
// that reads the metadata later finds it.
//
// Level-based, one Runner per call (the runner controller's worker):
//   recorded operation → wait for it (bounded) → GET by the deterministic name → ours (labels
//   name the Runner's uid) → record selfLink/id/status; missing → insert with a fresh token,
//   record the operation in status.instance.operation *before* waiting, so a restarted operator
//   resumes waiting instead of inserting again. A failed insert (ZONE_RESOURCE_POOL_EXHAUSTED,
//   QUOTA_EXCEEDED, invalid machine type...) is recorded with its time and count in
//   status.instance.lastError; the next insert waits out a doubling backoff, however often the
//   Runner is reconciled meanwhile.
// Thread-safety: calls for different Runners may run at once; never two for one Runner.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/gce/compute.h"
#include "src/kube/resource.h"
#include "src/runners/controlnode/api.h"
#include "src/runners/controlnode/join_tokens.h"
#include "src/runners/controlnode/provision_store.h"

namespace hyperslice::kube {
class Client;
}  // namespace hyperslice::kube

namespace hyperslice::runners::controlnode {

// Instance metadata keys the agent reads at boot (runner-agent --gce-metadata).
inline constexpr char kMetadataRunnerName[] = "hyperslice-runner-name";
inline constexpr char kMetadataLinkEndpoint[] = "hyperslice-link-endpoint";
inline constexpr char kMetadataRunnersCa[] = "hyperslice-runners-ca";
inline constexpr char kMetadataJoinToken[] = "hyperslice-join-token";
// GCE labels on the instance.
inline constexpr char kLabelRunner[] = "hyperslice-runner";
inline constexpr char kLabelRunnerUid[] = "hyperslice-runner-uid";
inline constexpr char kLabelManagedBy[] = "hyperslice-managed-by";

struct GceProvisionerOptions {
  // nullptr: spec.gce Runners stay Pending with reason GceNotConfigured.
  std::shared_ptr<gce::Compute> compute;
  std::string link_endpoint;  // host:port the instance's agent links to; required with compute
  std::string ca_bundle_pem;  // the runners CA certificate (verifies the link server)
  std::string boot_image = "projects/debian-cloud/global/images/family/debian-12";
  int64_t boot_disk_gb = 20;
  std::string network = "global/networks/default";
  std::string startup_script;  // the instance's `startup-script` item; empty: none
  // One bounded operations.wait per reconcile; longer operations are requeued.
  std::chrono::milliseconds operation_wait{2000};
  std::chrono::milliseconds retry_initial{5000};  // after a failed insert; doubled per failure
  std::chrono::milliseconds retry_max{300000};
  const Clock* clock = nullptr;  // the backoff's time; nullptr: RealClock()
};

// The instance name for a Runner: "hs-runner-<name>" with dots as dashes; a name that would pass
// 63 characters keeps its first 54 and ends in "-<8 hex of a hash of the whole name>". GCE's
// rule [a-z]([-a-z0-9]{0,61}[a-z0-9])? holds for every Runner name.
std::string GceInstanceName(std::string_view runner);
// A GCE label value for any Runner name (dots as underscores, same 63-character rule).
std::string GceLabelValue(std::string_view value);

// What the instance's agent needs to link.
struct GceBoot {
  std::string runner_name;
  std::string runner_uid;
  std::string link_endpoint;
  std::string ca_bundle_pem;
  std::string join_token;
};
// The instances.insert body for a Runner (see the README for every field).
boost::json::object GceInstanceBody(const RunnerSpec::Gce& spec, const GceBoot& boot,
                                    const GceProvisionerOptions& options);

class GceRunnerProvisioner {
 public:
  // Where the provisioner keeps what it must not lose and finds the token (seams for tests).
  using Store = ProvisionStore;  // status.instance
  static Store ApiStore(const std::shared_ptr<kube::Client>& client,
                        const std::shared_ptr<SecretJoinTokens>& tokens) {
    return ApiProvisionStore(client, tokens, "instance");
  }

  GceRunnerProvisioner(GceProvisionerOptions options, Store store);
  // A client and a link endpoint to give instances.
  bool configured() const { return options_.compute != nullptr && !options_.link_endpoint.empty(); }

  // Creates or observes the Runner's instance; `status` is the Runner's status being built
  // (status.instance is read and written; written through to the API before any wait).
  Result<ProvisionOutcome> Reconcile(const kube::Object& runner, const RunnerSpec& spec,
                                     boost::json::object& status);
  // The Runner is being deleted: deletes its instance (not one someone else owns) and waits for
  // it. true when no instance of the Runner is left and the finalizer may go.
  Result<bool> Finalize(const kube::Object& runner, boost::json::object& status);

 private:
  // Waits for status.instance.operation, if any. nullopt: none pending (or it ended and is
  // cleared); an outcome: still running, or it failed (recorded in lastError).
  Result<std::optional<ProvisionOutcome>> WaitRecorded(const std::string& runner,
                                                       boost::json::object& instance);
  // Drops the consumed join token from the running instance's metadata (setMetadata with the
  // fingerprint read, its operation recorded and waited for like any other). nullopt: done.
  Result<std::optional<ProvisionOutcome>> RemoveJoinToken(const std::string& runner,
                                                          const RunnerSpec::Gce& g,
                                                          boost::json::object& instance);

  GceProvisionerOptions options_;
  ProvisionRecorder recorder_;  // status.instance
};

}  // namespace hyperslice::runners::controlnode
