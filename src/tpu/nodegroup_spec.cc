// TPUNodeGroup spec parsing and the child specs derived from it (internal/nodegroup_spec.h).
#include "src/tpu/internal/nodegroup_spec.h"

#include <algorithm>
#include <utility>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/strings.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/bootstrap.h"
#include "src/tpu/internal/gce_child.h"

namespace hyperslice::tpu {

using jsonfield::ObjectField;
using jsonfield::StringValue;

namespace {

namespace json = boost::json;

bool IsGceName(std::string_view n) {
  if (n.empty() || n.size() > 63 || n.front() < 'a' || n.front() > 'z') return false;
  for (char c : n) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return n.back() != '-';
}

}  // namespace

std::string ProjectOfTemplateUri(std::string_view uri) {
  size_t p = uri.rfind("projects/");
  if (p == std::string_view::npos || (p > 0 && uri[p - 1] != '/')) return "";
  std::string_view rest = uri.substr(p + 9);
  return std::string(rest.substr(0, rest.find('/')));
}

bool IsInstanceTemplateUri(std::string_view uri) {
  // Strip a scheme+host+"/compute/<version>/" prefix, if any.
  if (uri.rfind("https://", 0) == 0 || uri.rfind("http://", 0) == 0) {
    size_t p = uri.find("/projects/");
    if (p == std::string_view::npos) return false;
    uri = uri.substr(p + 1);
  }
  const std::vector<std::string> parts = Split(uri, '/');
  for (const auto& p : parts) {
    if (p.empty()) return false;
  }
  size_t i = 0;
  if (parts.size() >= 2 && parts[0] == "projects") i = 2;
  if (i + 3 <= parts.size() && parts[i] == "global" && parts[i + 1] == "instanceTemplates") {
    return i + 3 == parts.size() && IsGceName(parts[i + 2]);
  }
  if (i + 4 <= parts.size() && parts[i] == "regions" && parts[i + 2] == "instanceTemplates") {
    return i + 4 == parts.size() && IsGceName(parts[i + 3]);
  }
  return false;
}

std::vector<std::string> NodeGroupSpecProblems(const json::object& spec) {
  std::vector<std::string> problems;
  const std::string project = StringValue(spec, "project");
  const std::string zone = StringValue(spec, "nodeLocation");
  const std::string topology = StringValue(spec, "topology");
  const int64_t node_count = jsonfield::IntField(spec, "nodeCount").value_or(0);
  const json::object* ic = ObjectField(spec, "instanceConfig");
  const std::string machine = ic ? StringValue(*ic, "machineType") : "";
  const std::string template_uri = StringValue(spec, "instanceTemplateURI");
  std::string mode = StringValue(spec, "targetSizePolicyMode");
  if (mode.empty()) mode = "BULK";  // the CRD's default

  if (project.empty()) problems.push_back("set spec.project to the GCE project of the slice");
  if (!RegionOfZone(zone).ok()) {
    problems.push_back("spec.nodeLocation must be a GCE zone such as us-central1-c; got \"" + zone +
                       "\"");
  }
  if (mode != "BULK" && mode != "INDIVIDUAL") {
    problems.push_back("spec.targetSizePolicyMode must be BULK or INDIVIDUAL; got " + mode);
  }
  if (ic != nullptr && !template_uri.empty()) {
    problems.push_back(
        "set only one of spec.instanceConfig (hyperslice builds the instance template) and "
        "spec.instanceTemplateURI (bring your own)");
  }
  if (ic != nullptr) {
    if (machine.empty()) {
      problems.push_back("set spec.instanceConfig.machineType");
    } else if (auto slice = MakeSlice(machine, topology); !slice.ok()) {
      problems.push_back("spec.topology/spec.instanceConfig.machineType: " + slice.error().message);
    } else {
      std::string shape = "topology " + topology + " on " + machine;
      if (node_count != slice->hosts) {
        problems.push_back(shape + " needs nodeCount " + std::to_string(slice->hosts) + " (" +
                           std::to_string(slice->chips) + " chips / " +
                           std::to_string(slice->machine_type.chips_per_host) + " per host); got " +
                           std::to_string(node_count));
      }
      if (slice->hosts > 1 && mode != "BULK") {
        problems.push_back(shape + " spans " + std::to_string(slice->hosts) +
                           " hosts that must be provisioned together: set "
                           "spec.targetSizePolicyMode to BULK; got " +
                           mode);
      }
    }
    std::string model = StringValue(*ic, "provisioningModel");
    if (model == "RESERVATION_BOUND" && StringValue(*ic, "reservation").empty()) {
      problems.push_back(
          "spec.instanceConfig.provisioningModel RESERVATION_BOUND needs "
          "spec.instanceConfig.reservation");
    }
    if (const auto* md = ObjectField(*ic, "metadata")) {
      for (const auto& [k, v] : *md) {
        if (k == kMetaKubeLabels || k == kMetaStartupScript || k == kMetaJoinToken ||
            k == kMetaCaHash || k == kMetaControlPlane) {
          problems.push_back("remove spec.instanceConfig.metadata[" + std::string(k) +
                             "]: hyperslice manages that key");
        } else if (!v.is_string()) {
          problems.push_back("spec.instanceConfig.metadata[" + std::string(k) +
                             "] must be a string");
        }
      }
    }
  } else if (!template_uri.empty()) {
    if (!IsInstanceTemplateUri(template_uri)) {
      problems.push_back(
          "spec.instanceTemplateURI must name an instance template, e.g. "
          "projects/<project>/global/instanceTemplates/<name>; got \"" +
          template_uri + "\"");
    }
    auto slice = InferSlice(topology, static_cast<int>(node_count));
    if (!slice.ok()) {
      problems.push_back("spec.topology/spec.nodeCount: " + slice.error().message +
                         "; set nodeCount to chips ÷ chips per host of the template's machine "
                         "type");
    } else if (slice->hosts > 1 && mode != "BULK") {
      problems.push_back("topology " + topology + " with nodeCount " + std::to_string(node_count) +
                         " spans several hosts that must be provisioned together: set "
                         "spec.targetSizePolicyMode to BULK; got " +
                         mode);
    }
    std::string uri_project = ProjectOfTemplateUri(template_uri);
    if (!uri_project.empty() && uri_project != project) {
      problems.push_back("spec.instanceTemplateURI is in project " + uri_project +
                         " but spec.project is " + project + "; use a template from project " +
                         project + " or change spec.project");
    }
  } else {
    problems.push_back("set spec.instanceConfig (with machineType) or spec.instanceTemplateURI");
  }
  if (const auto* b = ObjectField(spec, "bootstrapKubernetes")) {
    if (StringValue(*b, "version").empty() || StringValue(*b, "controlPlaneIP").empty()) {
      problems.push_back(
          "spec.bootstrapKubernetes needs version (e.g. \"1.31\") and controlPlaneIP");
    }
  }
  return problems;
}

}  // namespace hyperslice::tpu

namespace hyperslice::tpu::internal {
namespace {

namespace json = boost::json;

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

}  // namespace

Result<NodeGroupSpec> ParseNodeGroup(const kube::Object& group) {
  const json::object* meta = ObjectField(group, "metadata");
  const json::object* spec = ObjectField(group, "spec");
  if (meta == nullptr || spec == nullptr) {
    return Error::Make(Error::Code::kInvalidArgument, "TPUNodeGroup has no metadata or spec",
                       "InvalidSpec");
  }
  if (auto problems = NodeGroupSpecProblems(*spec); !problems.empty()) {
    return Error::Make(Error::Code::kInvalidArgument, Join(problems, "; "), "InvalidSpec");
  }
  NodeGroupSpec s;
  s.ns = StringValue(*meta, "namespace");
  s.name = StringValue(*meta, "name");
  s.uid = StringValue(*meta, "uid");
  s.project = StringValue(*spec, "project");
  s.zone = StringValue(*spec, "nodeLocation");
  HS_ASSIGN_OR_RETURN(s.region, RegionOfZone(s.zone));
  s.node_count = static_cast<int>(jsonfield::IntField(*spec, "nodeCount").value_or(0));
  s.topology = StringValue(*spec, "topology");
  if (std::string mode = StringValue(*spec, "targetSizePolicyMode"); !mode.empty()) {
    s.target_size_policy_mode = mode;
  }
  if (const auto* ic = ObjectField(*spec, "instanceConfig")) {
    InstanceConfig c;
    c.machine_type = StringValue(*ic, "machineType");
    if (std::string m = StringValue(*ic, "provisioningModel"); !m.empty()) c.provisioning_model = m;
    c.reservation = StringValue(*ic, "reservation");
    c.image = StringValue(*ic, "image");
    c.subnetwork = StringValue(*ic, "subnetwork");
    c.boot_disk_size_gb = jsonfield::IntField(*ic, "bootDiskSizeGB").value_or(0);
    c.disk_type = StringValue(*ic, "diskType");
    if (const auto* sa = ic->if_contains("serviceAccounts"); sa && sa->is_array()) {
      c.service_accounts = sa->as_array();
    }
    if (const auto* tags = ic->if_contains("networkTags"); tags && tags->is_array()) {
      for (const auto& t : tags->as_array()) {
        if (t.is_string()) c.network_tags.emplace_back(t.as_string());
      }
    }
    if (const auto* md = ObjectField(*ic, "metadata")) {
      for (const auto& [k, v] : *md) c.metadata[std::string(k)] = std::string(v.as_string());
    }
    HS_ASSIGN_OR_RETURN(s.slice, MakeSlice(c.machine_type, s.topology));
    s.instance_config = std::move(c);
  } else {
    s.instance_template_uri = StringValue(*spec, "instanceTemplateURI");
    HS_ASSIGN_OR_RETURN(s.slice, InferSlice(s.topology, s.node_count));
  }
  if (const auto* b = ObjectField(*spec, "bootstrapKubernetes")) {
    s.bootstrap = BootstrapConfig{StringValue(*b, "version"), StringValue(*b, "controlPlaneIP")};
  }
  return s;
}

std::string PolicyGceName(const NodeGroupSpec& s) { return GceName(s.name, kRolePolicy, s.uid); }
std::string TemplateGceName(const NodeGroupSpec& s) {
  return GceName(s.name, kRoleTemplate, s.uid);
}
std::string MigGceName(const NodeGroupSpec& s) { return GceName(s.name, kRoleMig, s.uid); }

std::string BaseInstanceName(const NodeGroupSpec& s) {
  // "<name cut to 40>-vm-<8 hex>": at most 53 characters (a "t" prefix included).
  std::string_view name = s.name;
  if (name.size() > 40) name = name.substr(0, 40);
  return GceName(name, "vm", s.uid);
}

std::string TemplateUrlFor(const NodeGroupSpec& s) {
  if (!s.instance_template_uri.empty()) return s.instance_template_uri;
  return InstanceTemplateUrl(s.project, TemplateGceName(s));
}

std::map<std::string, std::string> NodeLabels(const NodeGroupSpec& s) {
  return {{kLabelNodeGroup, NodeGroupLabelValue(s.ns, s.name)},
          {kLabelAccelerator, AcceleratorLabel(s.slice.machine_type.generation)},
          {kLabelTopology, s.topology},
          {kLabelAcceleratorCount, std::to_string(s.slice.machine_type.chips_per_host)}};
}

json::object ResourcePolicySpec(const NodeGroupSpec& s) {
  return json::object{{"project", s.project},
                      {"region", s.region},
                      {"name", PolicyGceName(s)},
                      {"description", "TPU slice placement of TPUNodeGroup " + s.ns + "/" + s.name},
                      {"workloadPolicy", json::object{{"type", "HIGH_THROUGHPUT"},
                                                      {"acceleratorTopology", s.topology}}}};
}

Result<json::object> InstanceProperties(const NodeGroupSpec& s, const std::string& cluster_id) {
  if (!s.instance_config) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "TPUNodeGroup " + s.ns + "/" + s.name + " has no instanceConfig");
  }
  const InstanceConfig& c = *s.instance_config;
  json::object props;
  props["machineType"] = c.machine_type;

  json::object init;
  if (!c.image.empty()) init["sourceImage"] = c.image;
  if (c.boot_disk_size_gb > 0) init["diskSizeGb"] = std::to_string(c.boot_disk_size_gb);
  if (!c.disk_type.empty()) init["diskType"] = c.disk_type;
  json::object disk{{"boot", true}, {"autoDelete", true}, {"type", "PERSISTENT"}};
  if (!init.empty()) disk["initializeParams"] = std::move(init);
  props["disks"] = json::array{std::move(disk)};

  json::object nic;
  if (!c.subnetwork.empty()) {
    nic["subnetwork"] = c.subnetwork;
  } else {
    nic["network"] = "global/networks/default";
  }
  props["networkInterfaces"] = json::array{std::move(nic)};

  // TPU VMs cannot live-migrate: GCE requires TERMINATE on host maintenance.
  json::object scheduling{{"provisioningModel", c.provisioning_model},
                          {"onHostMaintenance", "TERMINATE"}};
  if (c.provisioning_model == "SPOT" || c.provisioning_model == "FLEX_START") {
    scheduling["instanceTerminationAction"] = "DELETE";
    scheduling["automaticRestart"] = false;
  } else {
    scheduling["automaticRestart"] = true;
  }
  props["scheduling"] = std::move(scheduling);

  if (!c.reservation.empty()) {
    props["reservationAffinity"] =
        json::object{{"consumeReservationType", "SPECIFIC_RESERVATION"},
                     {"key", kReservationAffinityKey},
                     {"values", json::array{json::string(c.reservation)}}};
  }

  json::array accounts;
  for (const auto& sa : c.service_accounts) {
    if (!sa.is_object()) continue;
    json::object a{{"email", StringValue(sa.as_object(), "email")}};
    json::array scopes;
    if (const auto* sc = sa.as_object().if_contains("scopes"); sc && sc->is_array()) {
      scopes = sc->as_array();
    }
    if (scopes.empty()) scopes.push_back(json::string(kDefaultScope));
    a["scopes"] = std::move(scopes);
    accounts.push_back(std::move(a));
  }
  if (!accounts.empty()) props["serviceAccounts"] = std::move(accounts);

  if (!c.network_tags.empty()) {
    json::array items;
    for (const auto& t : c.network_tags) items.push_back(json::string(t));
    props["tags"] = json::object{{"items", std::move(items)}};
  }

  GceOwner owner{s.ns, s.name, s.uid, cluster_id};
  json::object labels;
  for (const auto& [k, v] : OwnerLabels(owner)) labels[k] = v;
  props["labels"] = std::move(labels);

  // Metadata: user items first (sorted by key), then ours (the user cannot set those keys).
  HS_ASSIGN_OR_RETURN(std::string kube_labels, RenderKubeLabels(NodeLabels(s)));
  json::array items;
  for (const auto& [k, v] : c.metadata) items.push_back(json::object{{"key", k}, {"value", v}});
  items.push_back(json::object{{"key", kMetaKubeLabels}, {"value", kube_labels}});
  items.push_back(json::object{{"key", kMetaTopology}, {"value", s.topology}});
  if (s.BootstrapEnabled()) {
    items.push_back(
        json::object{{"key", kMetaStartupScript}, {"value", StartupScript(s.bootstrap->version)}});
  }
  props["metadata"] = json::object{{"items", std::move(items)}};
  return props;
}

Result<json::object> InstanceTemplateSpec(const NodeGroupSpec& s, const std::string& cluster_id) {
  HS_ASSIGN_OR_RETURN(json::object props, InstanceProperties(s, cluster_id));
  return json::object{{"project", s.project},
                      {"name", TemplateGceName(s)},
                      {"description", "TPU slice VMs of TPUNodeGroup " + s.ns + "/" + s.name},
                      {"properties", std::move(props)}};
}

json::object ManagedInstanceGroupSpec(const NodeGroupSpec& s) {
  json::object spec{{"project", s.project},
                    {"zone", s.zone},
                    {"name", MigGceName(s)},
                    {"description", "TPU slice of TPUNodeGroup " + s.ns + "/" + s.name},
                    {"baseInstanceName", BaseInstanceName(s)},
                    {"instanceTemplate", TemplateUrlFor(s)},
                    {"targetSize", s.node_count},
                    {"targetSizePolicy", json::object{{"mode", s.target_size_policy_mode}}}};
  if (s.NeedsResourcePolicy()) {
    spec["resourcePolicies"] =
        json::object{{"workloadPolicy", ResourcePolicyUrl(s.project, s.region, PolicyGceName(s))}};
  }
  return spec;
}

}  // namespace hyperslice::tpu::internal
