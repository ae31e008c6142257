// The tpu.google.com/v1alpha1 API of hyperslice's TPU operator: resources, names, labels,
// finalizers and conditions shared by the TPUNodeGroup controller, its three child controllers,
// the webhook and the tests. ARCHITECTURE.md §5 is the design; deploy/crds/ holds the schemas.
//
// Kinds (all namespaced):
//   TPUNodeGroup          what the user applies (seed 000's fields).
//   ResourcePolicy        one GCE resourcePolicy (workload policy), regional.
//   InstanceTemplate      one GCE instanceTemplate, global.
//   ManagedInstanceGroup  one GCE instanceGroupManager, zonal.
// Each child is named like its TPUNodeGroup (one child of each kind per group), carries a
// controller owner reference to it, and names its GCE resource in spec.name (GceName below).
//
// Child specs, written by the TPUNodeGroup controller (server-side apply, field manager
// kParentFieldManager) and read by the child controllers:
//   ResourcePolicy.spec       {project, region, name, description,
//                              workloadPolicy{type: HIGH_THROUGHPUT, acceleratorTopology}}
//   InstanceTemplate.spec     {project, name, description,
//                              properties: <GCE InstanceProperties, exactly as GCE takes them>}
//   ManagedInstanceGroup.spec {project, zone, name, description, baseInstanceName,
//                              instanceTemplate: <template URL>, targetSize,
//                              targetSizePolicy{mode: BULK|INDIVIDUAL},
//                              resourcePolicies{workloadPolicy: <policy URL>}?,
//                              instanceLifecyclePolicy{...}?}
// Child status, written by the child controller:
//   {observedGeneration, selfLink, operation (the pending operation's selfLink, or absent),
//    conditions[Ready] with GCE's reason and message, driftDetected (bool),
//    adopted (bool: the GCE resource existed before this CR asked for it; additive),
//    and for ManagedInstanceGroup: targetSize, instances[{name, zone, instanceStatus,
//    currentAction, providerID, lastAttempt{code, message}}], bulkInstanceOperation{inProgress,
//    lastError{code, message}}}
//
// GCE resources carry owner labels (kGceLabel*; resourcePolicies have no labels, so their
// description carries the same facts as "hyperslice owner=<ns>/<name> uid=<uid> cluster=<id>").
// instanceGroupManagers have no labels either: their description carries the same marker; an
// instanceTemplate carries the labels on properties.labels (so its VMs do too) and the marker.
// The marker ends the description ("<spec.description>; hyperslice owner=...").
//
// Thread-safe: constants and pure functions.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "src/base/result.h"
#include "src/kube/resource.h"

namespace hyperslice::tpu {

inline constexpr char kGroup[] = "tpu.google.com";
inline constexpr char kVersion[] = "v1alpha1";
inline constexpr char kApiVersion[] = "tpu.google.com/v1alpha1";

const kube::Resource& TPUNodeGroups();          // tpunodegroups, kind TPUNodeGroup
const kube::Resource& ResourcePolicies();       // resourcepolicies, kind ResourcePolicy
const kube::Resource& InstanceTemplates();      // instancetemplates, kind InstanceTemplate
const kube::Resource& ManagedInstanceGroups();  // managedinstancegroups, kind ManagedInstanceGroup

// Finalizers. The group's runs the ordered teardown; each child's deletes its GCE resource and
// waits for the delete operation before letting the child go.
inline constexpr char kNodeGroupFinalizer[] = "tpu.google.com/teardown";
inline constexpr char kGceResourceFinalizer[] = "tpu.google.com/gce-resource";

// Field managers for server-side apply.
inline constexpr char kParentFieldManager[] = "hyperslice-tpunodegroup";
inline constexpr char kChildFieldManager[] = "hyperslice-gce";

// Conditions on TPUNodeGroup.
inline constexpr char kCondReady[] = "Ready";
inline constexpr char kCondResourcePolicyReady[] = "ResourcePolicyReady";
inline constexpr char kCondInstanceTemplateReady[] = "InstanceTemplateReady";
inline constexpr char kCondManagedInstanceGroupReady[] = "ManagedInstanceGroupReady";
inline constexpr char kCondNodesReady[] = "NodesReady";
// Children have one condition, kCondReady.

// Node labels and taint (seed 000).
inline constexpr char kLabelNodeGroup[] = "cloud.google.com/tpu-node-group";  // "<ns>-<name>"
inline constexpr char kLabelAccelerator[] = "cloud.google.com/gke-tpu-accelerator";
inline constexpr char kLabelTopology[] = "cloud.google.com/gke-tpu-topology";
inline constexpr char kLabelAcceleratorCount[] = "cloud.google.com/gke-accelerator-count";
inline constexpr char kTaintKey[] = "google.com/tpu";
inline constexpr char kTaintValue[] = "present";
inline constexpr char kTaintEffect[] = "NoSchedule";
inline constexpr char kTpuResourceName[] = "google.com/tpu";

// Instance metadata keys.
inline constexpr char kMetaKubeLabels[] = "kube-labels";
inline constexpr char kMetaJoinToken[] = "kubeadm-join-token";
inline constexpr char kMetaCaHash[] = "kubeadm-ca-hash";
inline constexpr char kMetaControlPlane[] = "kubeadm-control-plane-ip";
inline constexpr char kMetaStartupScript[] = "startup-script";
inline constexpr char kMetaTopology[] = "accelerator_topology_id";  // seed 000: for the plugin

// Owner labels on GCE resources (keys and values obey GCE's label syntax).
inline constexpr char kGceLabelManaged[] = "hyperslice-managed";     // "true"
inline constexpr char kGceLabelCluster[] = "hyperslice-cluster";     // cluster id
inline constexpr char kGceLabelGroupUid[] = "hyperslice-group-uid";  // TPUNodeGroup uid
inline constexpr char kGceLabelGroup[] = "hyperslice-group";         // GceLabelValue(ns-name)

// Labels on the bootstrap token Secrets the operator creates in kube-system.
inline constexpr char kSecretLabelGroupUid[] = "tpu.google.com/tpu-node-group-uid";
inline constexpr char kSecretLabelInstance[] = "tpu.google.com/instance";

// Roles in GCE names.
inline constexpr char kRolePolicy[] = "wp";
inline constexpr char kRoleTemplate[] = "it";
inline constexpr char kRoleMig[] = "mig";

// Deterministic GCE name "<group>-<role>-<8 hex of sha256(uid)>", fitted to GCE's
// [a-z]([-a-z0-9]*[a-z0-9])? of at most 63 characters: lower-cased, characters other than
// [a-z0-9-] become '-', a leading non-letter gets a "t" prefix, the group part is cut to fit.
std::string GceName(std::string_view group_name, std::string_view role, std::string_view uid);

// A value for a GCE label (at most 63 of [a-z0-9_-], lower case) or a Kubernetes label value (at
// most 63 of [A-Za-z0-9._-], alphanumeric at both ends): kept as is when it fits, else cut and
// suffixed with 8 hex of its sha256 so distinct inputs stay distinct.
std::string GceLabelValue(std::string_view s);
std::string KubeLabelValue(std::string_view s);

// The node label value cloud.google.com/tpu-node-group: KubeLabelValue("<ns>-<name>").
std::string NodeGroupLabelValue(std::string_view ns, std::string_view name);

// "us-central1-c" → "us-central1". Errors on a string that is not a zone.
Result<std::string> RegionOfZone(std::string_view zone);

// "gce://<project>/<zone>/<instance>" (the kubelet's providerID on GCE) and back.
std::string ProviderId(std::string_view project, std::string_view zone, std::string_view instance);
struct InstanceRef {
  std::string project, zone, name;
};
Result<InstanceRef> ParseProviderId(std::string_view provider_id);

// The kube-labels metadata value: "k=v,k=v" sorted by key. Keys and values that are not valid
// Kubernetes label keys/values are rejected (kInvalidArgument naming the first), so nothing
// reaches a VM's kubelet flags that the kubelet would refuse or that could inject a flag.
Result<std::string> RenderKubeLabels(const std::map<std::string, std::string>& labels);
// Kubernetes label syntax (apimachinery's IsQualifiedName / IsValidLabelValue).
bool IsValidLabelKey(std::string_view key);
bool IsValidLabelValue(std::string_view value);

// Compute URLs, partial form ("projects/p/regions/r/resourcePolicies/n"), as GCE accepts them in
// request bodies.
std::string ResourcePolicyUrl(std::string_view project, std::string_view region,
                              std::string_view name);
std::string InstanceTemplateUrl(std::string_view project, std::string_view name);
std::string InstanceGroupManagerUrl(std::string_view project, std::string_view zone,
                                    std::string_view name);

}  // namespace hyperslice::tpu
