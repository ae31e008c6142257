// Identity of a Kubernetes resource type and the option structs of the REST verbs.
// Objects themselves are untyped JSON (boost::json::object), like client-go's unstructured: the
// runtime never needs generated types, and controllers read the fields they own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

namespace hyperslice::kube {

using Object = boost::json::object;

struct Resource {
  std::string group;     // "" for the core group
  std::string version;   // "v1"
  std::string resource;  // plural, lower-case: "pods"
  std::string kind;      // "Pod" (used for apiVersion/kind of created objects and Events)
  bool namespaced = true;

  std::string ApiVersion() const { return group.empty() ? version : group + "/" + version; }
  // "/api/v1" or "/apis/<group>/<version>".
  std::string GroupVersionPath() const;
  // Collection path, namespaced when `ns` is set and the resource is namespaced.
  std::string CollectionPath(const std::string& ns) const;
  std::string ObjectPath(const std::string& ns, const std::string& name) const;
  std::string String() const;  // "pods.v1." / "tpunodegroups.v1alpha1.tpu.google.com"
};

// Well-known resources.
namespace resources {
const Resource& Pods();
const Resource& Nodes();
const Resource& Namespaces();
const Resource& Secrets();
const Resource& ConfigMaps();
const Resource& Events();
const Resource& Leases();
const Resource& CustomResourceDefinitions();
const Resource& DaemonSets();
const Resource& StatefulSets();
const Resource& Jobs();
const Resource& CertificateSigningRequests();
const Resource& MutatingWebhookConfigurations();
const Resource& ValidatingWebhookConfigurations();
}  // namespace resources

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  int64_t limit = 0;  // 0: no paging
  std::string continue_token;
  std::string resource_version;
  std::string resource_version_match;  // "NotOlderThan" | "Exact" | ""
  // Watch only.
  std::optional<int64_t> timeout_seconds;
  bool allow_watch_bookmarks = false;
  bool send_initial_events = false;  // WatchList; requires resource_version_match=NotOlderThan
};

struct ObjectList {
  std::vector<Object> items;
  std::string resource_version;  // of the list (metadata.resourceVersion)
  std::string continue_token;    // empty on the last page
};

enum class PatchType {
  kMerge,           // application/merge-patch+json
  kJson,            // application/json-patch+json
  kStrategicMerge,  // application/strategic-merge-patch+json (built-in types only)
  kApply,           // application/apply-patch+yaml (server-side apply; JSON is valid YAML)
};

struct PatchOptions {
  std::string field_manager;  // required for kApply
  bool force = false;         // kApply only: take ownership of conflicting fields
  std::string subresource;    // "" or "status"
};

struct DeleteOptions {
  std::string propagation_policy;  // "Foreground" | "Background" | "Orphan" | ""
  std::optional<int64_t> grace_period_seconds;
  std::optional<std::string> precondition_uid;
  std::optional<std::string> precondition_resource_version;
};

struct WatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark, kError };
  Type type = Type::kAdded;
  Object object;  // for kError: the metav1.Status
};

const char* WatchEventTypeName(WatchEvent::Type t);

}  // namespace hyperslice::kube
