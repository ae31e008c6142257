// A TPUNodeGroup's spec, parsed and checked, and the three child specs derived from it (api.h
// lists their shapes). Everything here is a pure function of the group object (and the cluster
// id for the GCE owner labels), so the TPUNodeGroup reconciler only applies what these return and
// unit tests can pin every field GCE will receive.
//
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "src/base/result.h"
#include "src/kube/resource.h"
#include "src/tpu/topology.h"
#include "src/tpu/validation.h"

namespace hyperslice::tpu::internal {

inline constexpr char kReservationAffinityKey[] = "compute.googleapis.com/reservation-name";
inline constexpr char kDefaultScope[] = "https://www.googleapis.com/auth/cloud-platform";

struct InstanceConfig {
  std::string machine_type;
  std::string provisioning_model = "STANDARD";  // the CRD's default
  std::string reservation;
  std::string image;
  std::string subnetwork;
  int64_t boot_disk_size_gb = 0;  // 0: GCE's default (the image's size)
  std::string disk_type;
  boost::json::array service_accounts;  // [{email, scopes?}] as the user wrote them
  std::vector<std::string> network_tags;
  std::map<std::string, std::string> metadata;
};

struct BootstrapConfig {
  std::string version;
  std::string control_plane_ip;
};

struct NodeGroupSpec {
  std::string ns, name, uid;
  std::string project, zone, region;
  int node_count = 0;
  std::string topology;
  std::string target_size_policy_mode = "BULK";
  Slice slice;
  std::optional<InstanceConfig> instance_config;
  std::string instance_template_uri;  // exclusive with instance_config
  std::optional<BootstrapConfig> bootstrap;

  bool MultiHost() const { return slice.hosts > 1; }
  // A workload policy (ICI placement) is only meaningful for a slice of several hosts.
  bool NeedsResourcePolicy() const { return MultiHost(); }
  bool OwnsInstanceTemplate() const { return instance_config.has_value(); }
  // Bootstrap needs our template (the startup script lives in it).
  bool BootstrapEnabled() const { return bootstrap.has_value() && instance_config.has_value(); }
};

// Validation (validation.h), used here too.
using tpu::IsInstanceTemplateUri;
using tpu::NodeGroupSpecProblems;
using tpu::ProjectOfTemplateUri;

// Parses a TPUNodeGroup object (metadata + spec). kInvalidArgument (reason "InvalidSpec") with
// every problem joined by "; " when the spec is not valid.
Result<NodeGroupSpec> ParseNodeGroup(const kube::Object& group);

// The GCE names of the group's resources (deterministic, api.h GceName).
std::string PolicyGceName(const NodeGroupSpec& s);
std::string TemplateGceName(const NodeGroupSpec& s);
std::string MigGceName(const NodeGroupSpec& s);
// The MIG's baseInstanceName (at most 54 characters, so GCE's 4-character suffix fits its
// 58-character limit... and instance names stay under 63).
std::string BaseInstanceName(const NodeGroupSpec& s);
// The template the MIG uses: spec.instanceTemplateURI, else our template's URL.
std::string TemplateUrlFor(const NodeGroupSpec& s);

// The labels every Node of the group carries (tpu-node-group, gke-tpu-accelerator,
// gke-tpu-topology, gke-accelerator-count).
std::map<std::string, std::string> NodeLabels(const NodeGroupSpec& s);

// Child specs (api.h shapes). The ResourcePolicy only exists for a multi-host slice; the
// InstanceTemplate only with instanceConfig.
boost::json::object ResourcePolicySpec(const NodeGroupSpec& s);
Result<boost::json::object> InstanceTemplateSpec(const NodeGroupSpec& s,
                                                 const std::string& cluster_id);
boost::json::object ManagedInstanceGroupSpec(const NodeGroupSpec& s);
// InstanceProperties exactly as GCE takes them (part of InstanceTemplateSpec).
Result<boost::json::object> InstanceProperties(const NodeGroupSpec& s,
                                               const std::string& cluster_id);

}  // namespace hyperslice::tpu::internal
