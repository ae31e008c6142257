// GceSimulator: a Compute Engine v1 stand-in on loopback that speaks the real wire API (same
// paths, bodies, error shapes and asynchronous operations), for tests and `hyperslice dev`.
//
// Three listeners:
//   api      — https-less HTTP on loopback: /compute/v1/projects/{p}/..., plus /token (OAuth2
//              token endpoint: JWT-bearer grant and a static token for tests)
//   metadata — the per-VM metadata server, /computeMetadata/v1/instance/... (which VM is asking
//              is chosen by the X-Sim-Instance header or a per-VM port, see metadata_endpoint())
//   control  — fault injection and observation: /control/... (JSON), never part of GCE's API
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
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
  std::vector<ZoneCapacity> capacity;
  std::vector<Reservation> reservations;
  // How long an operation stays PENDING/RUNNING, and instance PROVISIONING→STAGING→RUNNING.
  std::chrono::milliseconds operation_latency{200};
  std::chrono::milliseconds instance_boot_latency{200};
  std::string address = "127.0.0.1";
  uint16_t api_port = 0, metadata_port = 0, control_port = 0;  // 0 = free port
  // Folder holding compute.proto from the pinned @google-cloud/compute npm package; empty = the
  // default install location (scripts/gce-schema.sh).
  std::string proto_dir;
};

class Simulator {
 public:
  virtual ~Simulator() = default;
  static Result<std::unique_ptr<Simulator>> Start(Options options);

  // "http://127.0.0.1:<port>/compute/v1/" style base (what CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE
  // and the product's --gce-endpoint take).
  virtual std::string api_endpoint() const = 0;
  virtual std::string token_endpoint() const = 0;     // OAuth2 token URL
  virtual std::string metadata_endpoint() const = 0;  // "http://127.0.0.1:<port>"
  virtual std::string control_endpoint() const = 0;
  virtual void Stop() = 0;
};

}  // namespace hyperslice::sim::gce
