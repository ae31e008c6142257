// Runners with spec.marketplace: the operator rents a container machine for the Runner from a GPU
// marketplace (RunPod pods, Vast containers: offers that boot only a container image with env and
// args, src/gpu BootKind::kContainer) through the providers and credentials of a GPUNodeClass, and
// returns it when the Runner goes (finalizer kMachineFinalizer).
//
// The container runs `hyperslice runner-agent --link-from-env`; its env carries what linking needs
// — the Runner's name, the link server's address, the runners CA bundle and the Runner's one-time
// join token — so the agent links by the same path as any runner (agent-initiated, the address it
// reports recorded in status.address). The token is never logged; it lives in the provider's
// record of the container (as RunPod and Vast keep env).
//
// Level-based, one Runner per call (the runner controller's worker):
//   status.machine.id recorded → Get it (running: ready; gone: forgotten, a new one needs a new
//   token); status.machine.launchAttempt recorded without an id (the operator died or the answer
//   was lost after the create was sent) → list the provider by the Runner's uid tag, adopt what is
//   there, and create again only after `ambiguous_settle`; otherwise the cheapest container offer
//   that fits the class's instanceRequirements and the Runner's spec.marketplace (gpu_count, type,
//   regions, maxHourlyPrice, spot) is bought, launchAttempt written *before* the create. Failures
//   (no offer fits, the provider refused) are recorded in status.machine.lastError with a count and
//   the next launch waits out a doubling backoff.
// Thread-safety: calls for different Runners may run at once; never two for one Runner.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/gpu/class_controller.h"
#include "src/gpu/provider.h"
#include "src/gpu/providers.h"
#include "src/gpu/selection.h"
#include "src/kube/resource.h"
#include "src/runners/controlnode/api.h"
#include "src/runners/controlnode/gce_runner.h"
#include "src/runners/controlnode/provision_store.h"

namespace hyperslice::kube {
class Client;
}  // namespace hyperslice::kube

namespace hyperslice::runners::controlnode {

inline constexpr char kMachineFinalizer[] = "runners.hyperslice.dev/machine";
// The container env `hyperslice runner-agent --link-from-env` reads.
inline constexpr char kEnvRunnerName[] = "HYPERSLICE_RUNNER_NAME";
inline constexpr char kEnvLinkEndpoint[] = "HYPERSLICE_LINK_ENDPOINT";
inline constexpr char kEnvRunnersCa[] = "HYPERSLICE_RUNNERS_CA";
inline constexpr char kEnvJoinToken[] = "HYPERSLICE_JOIN_TOKEN";

// What a GPUNodeClass gives a marketplace Runner: its enabled providers' clients and the class's
// instanceRequirements.
struct MarketClass {
  struct Provider {
    std::shared_ptr<gpu::Provider> client;
    int priority = 100;
    std::vector<std::string> regions;  // providers[].regions (provider spelling); empty: any
  };
  std::vector<Provider> providers;
  gpu::OfferRequirements base;
};
// Looks a class up by name (kNotFound when it does not exist); `read`, when not nullptr, is the
// class as the caller has just read it (ClassProtection::Protect), used instead of a read of its
// own.
using MarketClassSource =
    std::function<Result<MarketClass>(const std::string& gpu_node_class, const kube::Object* read)>;

// The GPUNodeClass through the apiserver: clients built as the GPU operator builds them
// (credentialsRef Secret, endpoint, else `default_endpoints`), kept while their inputs stay.
MarketClassSource GpuNodeClassSource(std::shared_ptr<kube::Client> client,
                                     std::string credentials_namespace,
                                     std::map<std::string, std::string> default_endpoints,
                                     gpu::ProviderFactory factory = nullptr);

struct MarketProvisionerOptions {
  MarketClassSource classes;  // empty: spec.marketplace Runners stay Pending (MarketNotConfigured)
  std::string agent_image;    // the container image whose entrypoint is `hyperslice`
  // The container's command is `runner-agent --link-from-env --listen 0.0.0.0:<agent_port>`, and
  // the provider publishes that port (BootPayload::tcp_ports): control nodes dial the machine's
  // public address and the port the provider maps to it, which the agent reads from its env.
  int agent_port = 7443;
  std::string link_endpoint;  // host:port the container's agent links to
  std::string ca_bundle_pem;  // the runners CA certificate (verifies the link server)
  // After a create whose answer was lost, how long the provider may take to list the machine.
  std::chrono::milliseconds ambiguous_settle{10000};
  std::chrono::milliseconds retry_initial{5000};  // after a failed launch; doubled per failure
  std::chrono::milliseconds retry_max{300000};
  const Clock* clock = nullptr;  // the backoff's and the settle's time; nullptr: RealClock()
};

// The machine name for a Runner (carries the name; the uid is in a tag).
std::string MarketMachineName(std::string_view runner);
// Whether a Runner's status.machine (nullptr: none) still names a machine that is not returned,
// or a create that may have made one (launchAttempt): what keeps its GPUNodeClass.
bool HoldsMachine(const boost::json::object* machine);

class MarketRunnerProvisioner {
 public:
  // Where the provisioner keeps what it must not lose and finds the token (seams for tests).
  using Store = ProvisionStore;  // status.machine
  static Store ApiStore(const std::shared_ptr<kube::Client>& client,
                        const std::shared_ptr<SecretJoinTokens>& tokens) {
    return ApiProvisionStore(client, tokens, "machine");
  }

  MarketRunnerProvisioner(MarketProvisionerOptions options, Store store);
  bool configured() const {
    return options_.classes != nullptr && !options_.agent_image.empty() &&
           !options_.link_endpoint.empty();
  }

  // Rents or observes the Runner's machine; `status` is the Runner's status being built
  // (status.machine is read and written; written through to the API before any create).
  // `read_class`: the Runner's GPUNodeClass as the caller has just read it (nullptr: read it).
  Result<ProvisionOutcome> Reconcile(const kube::Object& runner, const RunnerSpec& spec,
                                     boost::json::object& status,
                                     const kube::Object* read_class = nullptr);
  // The Runner is being deleted: terminates its machine (and any its lost creates left) and
  // waits for the provider to report it gone. true when the finalizer may go.
  Result<bool> Finalize(const kube::Object& runner, boost::json::object& status);

 private:
  Result<ProvisionOutcome> Launch(const kube::Object& runner, const RunnerSpec& spec,
                                  const MarketClass& cls, boost::json::object& machine);
  // A failed launch, recorded (a record that cannot be written is logged: status still carries
  // it when the runner controller writes the Runner's status).
  ProvisionOutcome Failed(const std::string& runner, boost::json::object& machine,
                          const std::string& reason, const std::string& message);

  MarketProvisionerOptions options_;
  ProvisionRecorder recorder_;  // status.machine; its clock also times launchAttempt.sentAt
};

}  // namespace hyperslice::runners::controlnode
