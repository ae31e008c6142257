// GceSimulator: a Compute Engine v1 stand-in on loopback that speaks the real wire API (same
// paths, bodies, error shapes and asynchronous operations), for tests and `hyperslice dev`.
//
// Three listeners:
//   api      — https-less HTTP on loopback: /compute/v1/projects/{p}/..., plus /token (OAuth2
//              token endpoint: JWT-bearer grant and a static token for tests)
//   metadata — the per-VM metadata server, /computeMetadata/v1/instance/... (which VM is asking
//              is chosen by a per-VM path prefix or the X-Sim-Instance header, see below)
//   control  — fault injection and observation: /control/... (JSON), never part of GCE's API
// Thread-safe.
//
// How a simulated VM reaches its own metadata. The metadata listener is shared by every VM; the
// VM is named by a path prefix, so a startup script written for GCE runs unchanged when it builds
// its URLs the way Google's client libraries do, from GCE_METADATA_HOST:
//
//   export GCE_METADATA_HOST=$(metadata_host(project, zone, name))
//     # e.g. "127.0.0.1:40123/sim/instances/my-gcp-project/us-central1-c/slice-w-ab12"
//   curl -sf -H 'Metadata-Flavor: Google'
//     "http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance/attributes/kubeadm-join-token"
//   (one command line)
//
// The same VM is also reachable without the prefix with the header
// `X-Sim-Instance: <project>/<zone>/<name>` (for clients that cannot change their path).
// Each instance resource's metadata host is also listed in the control endpoint's state dump.
//
// Control endpoint (JSON in and out, on control_endpoint()):
//   GET  /control/counters                 per-method call counters {"compute.x.y": N}
//   GET  /control/state                    full state dump
//   POST /control/reset                    back to the start-up state (Options)
//   POST /control/capacity                 {"zone","machineType","instances"}
//   POST /control/reservations             {"project"?,"zone","name","machineType","count"}
//   POST /control/stockout                 {"zone","machineType"?,"enabled"}
//   POST /control/faults                   {"method","rate","code","reason"?,"count"?}
//   DELETE /control/faults                 clears injected faults
//   POST /control/latency                  {"method"?,"apiMs"?,"operationMs"?,"instanceBootMs"?}
//   POST /control/operation-failures       {"method","code","message"?,"count"?}
//   POST /control/instances/kill           {"project"?,"zone","name","mode":"stop"|"vanish"}
//   POST /control/instances/restore        {"project"?,"zone","name"}
//   POST /control/service-account-keys     {"email"?} -> a service-account JSON key file
//   POST /control/tokens                   -> {"access_token",...} valid for the API
//   POST /control/seed                     {"seed"} re-seeds the fault-injection RNG
// Method names are GCE's: "compute.instanceGroupManagers.insert", "compute.zoneOperations.wait".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::sim::gce {

struct ZoneCapacity {
  std::string zone;          // "us-central1-c"
  std::string machine_type;  // "tpu7x-standard-4t"
  int64_t instances = 0;     // VMs of this type that can run at once outside reservations
};

struct Reservation {
  std::string project;
  std::string zone;
  std::string name;
  std::string machine_type;
  int64_t count = 0;  // specificReservation.count
};

struct Options {
  std::vector<std::string> projects = {"my-gcp-project"};
  std::vector<std::string> regions = {"us-central1"};  // zones are <region>-{a,b,c,f}
  // Zone × machine type limits. A pair not listed here has no limit.
  std::vector<ZoneCapacity> capacity;
  std::vector<Reservation> reservations;
  // How long an operation stays PENDING/RUNNING, and instance PROVISIONING→STAGING→RUNNING.
  std::chrono::milliseconds operation_latency{200};
  std::chrono::milliseconds instance_boot_latency{200};
  // How often a MIG that could not create its VMs (stockout) tries again.
  std::chrono::milliseconds mig_retry_interval{500};
  // operations/{op}/wait returns the operation's current state after this long at the latest
  // (GCE: 2 minutes).
  std::chrono::milliseconds operation_wait_max{120000};
  std::string address = "127.0.0.1";
  uint16_t api_port = 0, metadata_port = 0, control_port = 0;  // 0 = free port
  int api_threads = 2;
  // Folder holding google/cloud/compute/v1/compute.proto from the pinned @google-cloud/compute npm
  // package; empty = $HYPERSLICE_GCE_PROTO_DIR, else the default install location of
  // scripts/gce-schema.sh. Start fails when it cannot be read and validate_requests is set.
  std::string proto_dir;
  bool validate_requests = true;
  // API calls need `Authorization: Bearer <token>` with a token issued by /token (or the metadata
  // server), or one of these static tokens (for gcloud's --access-token-file).
  bool require_auth = true;
  std::vector<std::string> static_tokens;
  // Seed of the RNG behind error rates and generated names/ids (deterministic runs).
  uint64_t seed = 1;
  // The identity shown as an operation's `user` and by the metadata server's default account.
  std::string service_account_email = "sim-sa@my-gcp-project.iam.gserviceaccount.com";
};

// One change of an instance, as SubscribeInstances reports it.
struct InstanceEvent {
  std::string project, zone, name;
  std::string id;            // the instance resource's id (a re-created VM gets a new one)
  std::string machine_type;  // "tpu7x-standard-4t"
  // PROVISIONING, STAGING, RUNNING, STOPPING, TERMINATED; "" when the instance no longer exists.
  std::string status;
};
using InstanceObserver = std::function<void(const InstanceEvent&)>;

class Simulator {
 public:
  virtual ~Simulator() = default;
  static Result<std::unique_ptr<Simulator>> Start(Options options);

  // "http://127.0.0.1:<port>/compute/v1/" style base (what CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE
  // and the product's --gce-endpoint take).
  virtual std::string api_endpoint() const = 0;
  virtual std::string token_endpoint() const = 0;     // OAuth2 token URL
  virtual std::string metadata_endpoint() const = 0;  // "http://127.0.0.1:<port>"
  virtual std::string control_endpoint() const = 0;   // "http://127.0.0.1:<port>"
  // The GCE_METADATA_HOST value for one VM (see the top of this file): "127.0.0.1:<port>/sim/
  // instances/<project>/<zone>/<name>". The VM need not exist yet.
  virtual std::string metadata_host(const std::string& project, const std::string& zone,
                                    const std::string& instance) const = 0;
  virtual void Stop() = 0;

  // Metadata requests parked in ?wait_for_change=true, waiting for their value to change (or their
  // timeout_sec). A test that checks a wait does not return early waits until it is parked here:
  // once parked, only a change, its timeout or Stop() answers it.
  virtual size_t metadata_waiters() const = 0;

  // Instance observation, for simulated VM agents (sim/kubelet). The observer is first called once
  // per existing instance, then for each status change, creation and deletion (kill/restore, MIG
  // reconciliation, API deletes, reset), in order. Calls come from one simulator thread, outside
  // the simulator's lock, within about one tick (10 ms) of the change; the observer must return
  // quickly and must not call UnsubscribeInstances. Returns a subscription id.
  virtual uint64_t SubscribeInstances(InstanceObserver observer) = 0;
  // No call of that observer starts after this returns (waits for one in progress).
  virtual void UnsubscribeInstances(uint64_t subscription) = 0;
};

}  // namespace hyperslice::sim::gce
